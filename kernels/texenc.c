/* Texture encoder front end: plans the levels of each image of a batch, then runs mip
 * generation and the codec on the CPU backend or on one GPU (one H2D, one mip launch per
 * level, one codec launch for every level of every image, one D2H, all queued on the
 * stream of the batch's slot). Up to KILN_TEXENC_MAX_INFLIGHT batches are in flight, each
 * in a slot with its own stream and buffers, so consecutive batches overlap on the GPU. */
#include "kernels/texenc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "kernels/astc/astc.h"
#include "kernels/bc1/bc1.h"
#include "kernels/mip/mip.h"
#include "kernels/png/png_dec.h"
#include "kernels/texerr.h"

#define ARENA_ALIGN 256 /* keeps every surface's rows aligned for wide device loads */
/* Threads (the caller among them) that copy a GPU batch's inputs into pinned staging and its
 * blocks out of it: one thread copying 20 MB of PNG files in and 6 MB of BC1 blocks out
 * per batch of 32 Kodak images spent more time on the host than the GPU spent on the batch
 * with three in flight (docs/PERFORMANCE.md, worker). 7 against 3 (worker bench, BC1 fast,
 * H100, two runs each): Kodak strip files 8,402 / 8,490 against 8,247 / 8,375 images/s,
 * 2048x2048 strip files 631 / 614 against 583 / 572, where the copies are most of the
 * encode thread's time; ordinary Kodak files, which wait for the GPU, the same. */
#define GPU_COPY_THREADS 7

/* Device-side buffers of one GPU, grown to the largest batch seen. */
typedef struct gpu_buffers {
	kiln_stream stream;
	uint8_t *d_pixels;   /* every level of every image, RGBA8 packed */
	size_t d_pixels_cap;
	uint8_t *d_blocks;   /* encoded output of every level */
	size_t d_blocks_cap;
	void *d_temp;        /* descriptors for the launches */
	size_t d_temp_cap;
	uint8_t *h_pixels;   /* pinned staging of the base levels */
	size_t h_pixels_cap;
	uint8_t *h_blocks;   /* pinned staging of the output */
	size_t h_blocks_cap;
	kiln_texerr *h_err;  /* pinned staging of the level-0 errors (opts.measure) */
	size_t h_err_cap;
	uint8_t *d_png;      /* PNG files decoded on the device, as uploaded */
	size_t d_png_cap;
	uint8_t *h_png;      /* pinned staging of those files */
	size_t h_png_cap;
	void *d_png_temp;    /* the PNG decoder's scratch */
	size_t d_png_temp_cap;
} gpu_buffers;

/* The PNG files of a batch that the GPU decodes into the pixel arena (kiln_texenc_submit_png),
 * kept until collect reads their statuses back. */
typedef struct png_batch {
	kiln_pngdec_gpu_file *files;
	size_t *image;       /* the batch image each file becomes */
	size_t *offset;      /* where each file is staged */
	kiln_status *status;
	size_t count;
	size_t temp_size;
} png_batch;


/* Where one level of one image lives during a batch. */
typedef struct level_plan {
	size_t image;
	uint32_t level;
	kiln_surface surface;  /* rgba is an offset into the pixel arena until bound */
	size_t pixel_offset;
	size_t block_offset;
} level_plan;

typedef struct batch_plan {
	level_plan *levels;
	size_t nlevels;
	size_t pixel_bytes;   /* whole pixel arena: all levels */
	size_t base_bytes;    /* the part holding level 0 of each image (uploaded) */
	size_t block_bytes;
	kiln_mip_chain *chains;
	kiln_surface *chain_surfaces;
	size_t nchains;
	uint32_t max_levels;
} batch_plan;

/* The codec's view of a batch: one surface, destination and status per level. */
typedef struct level_arrays {
	kiln_surface *src;
	uint8_t **dst;
	kiln_status *status;
} level_arrays;

typedef enum slot_state {
	SLOT_FREE,    /* no batch */
	SLOT_QUEUED,  /* GPU work queued on the slot's stream */
	SLOT_DONE,    /* result ready in tex/status (CPU batch, or a batch that failed) */
} slot_state;

/* One batch in flight and the buffers it runs in. */
typedef struct batch_slot {
	slot_state state;
	uint64_t ticket;
	size_t count;
	kiln_texture *tex;     /* the batch's textures: planned at submit, filled by collect */
	kiln_status *status;
	kiln_texerr *err;      /* level 0's error against its pixels (opts.measure), else zeros */
	size_t *err_image;     /* GPU: the image of each measurement queued (gpu_measure) ... */
	size_t nerr;           /* ... and how many */
	size_t cap;            /* entries of tex, status and err */
	batch_plan plan;
	level_arrays la;
	png_batch png;
	kiln_status result;    /* the whole batch: KILN_OK or why it failed */
	char error[256];       /* why it failed, for kiln_texenc_last_error */
	gpu_buffers gpu;
} batch_slot;

struct kiln_texenc {
	kiln_device device;
	kiln_texenc_opts opts;
	kiln_pool *pool;      /* the CPU backend's (borrowed) */
	kiln_pool *copy_pool; /* a GPU's staging copies (owned) */
	batch_slot slots[KILN_TEXENC_MAX_INFLIGHT];
	uint64_t next_ticket;
	uint64_t device_wait_ns; /* in gpu_collect's stream syncs */
	char last_error[256];
};

void kiln_texenc_opts_default(kiln_texenc_opts *opts)
{
	opts->format = KILN_TEXFMT_BC1_RGB;
	opts->quality = KILN_QUALITY_HIGH;
	opts->alpha_cutoff = 128;
	opts->block_w = 4;
	opts->block_h = 4;
	opts->mipmaps = false;
	opts->colorspace = KILN_COLORSPACE_AUTO;
	opts->measure = false;
}

static size_t align_up(size_t v)
{
	return (v + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

bool kiln_texenc_gpu_supported(kiln_texfmt format)
{
	return format == KILN_TEXFMT_BC1_RGB || format == KILN_TEXFMT_BC1_RGBA || format == KILN_TEXFMT_ASTC;
}

static bool is_astc(const kiln_texenc *enc)
{
	return enc->opts.format == KILN_TEXFMT_ASTC;
}

static kiln_status check_opts(const kiln_texenc_opts *opts)
{
	if (opts->format == KILN_TEXFMT_ASTC) {
		if (!kiln_astc_footprint_valid(opts->block_w, opts->block_h))
			return KILN_ERR_INVALID_ARG;
	} else if (opts->format != KILN_TEXFMT_BC1_RGB && opts->format != KILN_TEXFMT_BC1_RGBA) {
		return KILN_ERR_UNSUPPORTED;
	}
	if (opts->alpha_cutoff < 0 || opts->alpha_cutoff > 255 ||
	    (unsigned)opts->quality > KILN_QUALITY_HIGH)
		return KILN_ERR_INVALID_ARG;
	return KILN_OK;
}

kiln_status kiln_texenc_set_opts(kiln_texenc *enc, const kiln_texenc_opts *opts)
{
	kiln_status st = check_opts(opts);
	if (st == KILN_OK)
		enc->opts = *opts;
	return st;
}

const char *kiln_texenc_last_error(const kiln_texenc *enc)
{
	return enc->last_error;
}

uint64_t kiln_texenc_device_wait_ns(const kiln_texenc *enc)
{
	return enc->device_wait_ns;
}

kiln_status kiln_texenc_create(const kiln_device *device, const kiln_texenc_opts *opts,
			       kiln_pool *pool, kiln_texenc **out)
{
	*out = NULL;
	if (device->kind == KILN_DEVICE_AUTO)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = check_opts(opts);
	if (st != KILN_OK)
		return st;
	kiln_texenc *enc = kiln_calloc(1, sizeof *enc);
	if (!enc)
		return KILN_ERR_NOMEM;
	enc->device = *device;
	enc->opts = *opts;
	enc->pool = pool;
	if (device->kind == KILN_DEVICE_GPU) {
		st = kiln_gpu_use(device->index);
		if (st == KILN_OK) /* the first slot's stream now: a device that cannot run fails here */
			st = kiln_gpu_stream_create(&enc->slots[0].gpu.stream);
		if (st == KILN_OK)
			st = kiln_pool_create(GPU_COPY_THREADS, &enc->copy_pool);
		kiln_pool_set_name(enc->copy_pool, "kiln-copy");
		if (st != KILN_OK)
			goto fail;
	}
	*out = enc;
	return KILN_OK;
fail:
	kiln_texenc_destroy(enc);
	return st;
}

static void gpu_buffers_release(gpu_buffers *g)
{
	kiln_gpu_free(g->d_pixels);
	kiln_gpu_free(g->d_blocks);
	kiln_gpu_free(g->d_temp);
	kiln_gpu_host_free(g->h_pixels);
	kiln_gpu_host_free(g->h_blocks);
	kiln_gpu_host_free(g->h_err);
	kiln_gpu_free(g->d_png);
	kiln_gpu_host_free(g->h_png);
	kiln_gpu_free(g->d_png_temp);
	kiln_gpu_stream_destroy(g->stream);
	memset(g, 0, sizeof *g);
}

static void slot_release(kiln_texenc *enc, batch_slot *s);

void kiln_texenc_destroy(kiln_texenc *enc)
{
	if (!enc)
		return;
	if (enc->device.kind == KILN_DEVICE_GPU)
		kiln_gpu_use(enc->device.index);
	for (size_t i = 0; i < KILN_TEXENC_MAX_INFLIGHT; i++)
		slot_release(enc, &enc->slots[i]);
	kiln_pool_destroy(enc->copy_pool);
	free(enc);
}

static bool image_srgb(const kiln_texenc *enc, const kiln_image *img)
{
	switch (enc->opts.colorspace) {
	case KILN_COLORSPACE_SRGB: return true;
	case KILN_COLORSPACE_LINEAR: return false;
	default: return img->srgb;
	}
}

/* Validates image i and fills its texture header and level sizes (no level data yet). An
 * image the GPU decodes (on_device) has no host pixels yet, only its size and flags. */
static kiln_status plan_texture(const kiln_texenc *enc, const kiln_image *img, bool on_device,
				kiln_texture *tex)
{
	if (!on_device && (!img->pixels || img->stride < (size_t)img->width * 4))
		return KILN_ERR_INVALID_ARG;
	kiln_status st = kiln_image_check_size(img->width, img->height, NULL);
	if (st != KILN_OK)
		return st;
	if (is_astc(enc)) {
		st = kiln_texture_init(tex, KILN_TEXFMT_ASTC, enc->opts.block_w, enc->opts.block_h,
				       image_srgb(enc, img));
	} else {
		bool alpha = img->has_alpha && enc->opts.alpha_cutoff > 0;
		st = kiln_texture_init(tex, alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB, 4, 4,
				       image_srgb(enc, img));
	}
	if (st != KILN_OK)
		return st;
	tex->num_levels = enc->opts.mipmaps ? kiln_mip_count(img->width, img->height) : 1;
	for (uint32_t l = 0; l < tex->num_levels; l++) {
		kiln_level *lv = &tex->levels[l];
		lv->width = img->width >> l ? img->width >> l : 1;
		lv->height = img->height >> l ? img->height >> l : 1;
		lv->size = kiln_texture_level_size(tex, lv->width, lv->height);
		if (lv->size == 0)
			return KILN_ERR_OVERFLOW;
	}
	return KILN_OK;
}

static void plan_free(batch_plan *plan)
{
	free(plan->levels);
	free(plan->chains);
	free(plan->chain_surfaces);
	memset(plan, 0, sizeof *plan);
}

/* Lays out every level of every accepted image: base levels first (so one contiguous
 * upload covers them), then the generated levels; output blocks in the same order. */
static kiln_status plan_batch(const kiln_texture *tex, const kiln_image *images,
			      const kiln_status *status, size_t count, batch_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	size_t nlevels = 0, nchains = 0;
	for (size_t i = 0; i < count; i++) {
		if (status[i] != KILN_OK)
			continue;
		nlevels += tex[i].num_levels;
		nchains += tex[i].num_levels > 1;
		if (tex[i].num_levels > plan->max_levels)
			plan->max_levels = tex[i].num_levels;
	}
	plan->levels = kiln_calloc(nlevels ? nlevels : 1, sizeof *plan->levels);
	plan->chains = kiln_calloc(nchains ? nchains : 1, sizeof *plan->chains);
	plan->chain_surfaces = kiln_calloc(nlevels ? nlevels : 1, sizeof *plan->chain_surfaces);
	if (!plan->levels || !plan->chains || !plan->chain_surfaces)
		goto nomem;

	size_t pix = 0, blk = 0, n = 0;
	for (int pass = 0; pass < 2; pass++) { /* pass 0: base levels, pass 1: mips */
		for (size_t i = 0; i < count; i++) {
			if (status[i] != KILN_OK)
				continue;
			uint32_t first = pass ? 1 : 0, last = pass ? tex[i].num_levels : 1;
			for (uint32_t l = first; l < last; l++) {
				const kiln_level *lv = &tex[i].levels[l];
				level_plan *p = &plan->levels[n++];
				p->image = i;
				p->level = l;
				p->surface.width = lv->width;
				p->surface.height = lv->height;
				p->surface.stride = lv->width * 4;
				/* BC1 keeps alpha only as punch-through; ASTC keeps the channel */
				p->surface.has_alpha = tex[i].format == KILN_TEXFMT_BC1_RGBA ||
						       (tex[i].format == KILN_TEXFMT_ASTC && images[i].has_alpha);
				p->pixel_offset = pix;
				p->block_offset = blk;
				size_t bytes;
				if (!kiln_size_mul3(lv->width, lv->height, 4, &bytes) ||
				    !kiln_size_add(pix, align_up(bytes), &pix) ||
				    !kiln_size_add(blk, align_up(lv->size), &blk))
					goto overflow;
			}
		}
		if (pass == 0)
			plan->base_bytes = pix;
	}
	plan->nlevels = n;
	plan->nchains = nchains; /* bind_plan fills them; the GPU sizes its scratch by the count first */
	plan->pixel_bytes = pix;
	plan->block_bytes = blk;
	return KILN_OK;
overflow:
	plan_free(plan);
	return KILN_ERR_OVERFLOW;
nomem:
	plan_free(plan);
	return KILN_ERR_NOMEM;
}

/* Points surfaces into an arena and builds the mip chains over them. */
static void bind_plan(batch_plan *plan, const kiln_texture *tex, const uint8_t *arena, size_t count)
{
	for (size_t n = 0; n < plan->nlevels; n++)
		plan->levels[n].surface.rgba = arena + plan->levels[n].pixel_offset;
	/* Chains want their levels contiguous: gather them per image. */
	size_t used = 0;
	plan->nchains = 0;
	for (size_t i = 0; i < count; i++) {
		if (tex[i].num_levels < 2)
			continue;
		kiln_surface *levels = plan->chain_surfaces + used;
		uint32_t found = 0;
		for (size_t n = 0; n < plan->nlevels; n++)
			if (plan->levels[n].image == i)
				levels[plan->levels[n].level] = plan->levels[n].surface, found++;
		if (found != tex[i].num_levels)
			continue; /* image was rejected during planning */
		kiln_mip_chain *c = &plan->chains[plan->nchains++];
		c->levels = levels;
		c->count = tex[i].num_levels;
		c->srgb = tex[i].srgb;
		used += found;
	}
}

/* A batch's host copies, levels (or files) spread over a pool: base levels into the
 * staging arena, PNG files into it, blocks out of it, each job with its own context. */
typedef struct base_copy {
	const batch_plan *plan;
	const kiln_image *images;
	uint8_t *arena;
} base_copy;

static void copy_base_range(void *ctx, size_t begin, size_t end)
{
	const base_copy *r = ctx;
	for (size_t n = begin; n < end; n++) {
		const level_plan *p = &r->plan->levels[n];
		const kiln_image *img = &r->images[p->image];
		if (p->level != 0 || !img->pixels)
			continue;
		uint8_t *dst = r->arena + p->pixel_offset;
		for (uint32_t y = 0; y < img->height; y++)
			memcpy(dst + (size_t)y * p->surface.stride, kiln_image_row(img, y), (size_t)img->width * 4);
	}
}

/* Copies the host pixels of every base level (images the GPU decodes have none). */
static void copy_base_levels(kiln_pool *pool, const batch_plan *plan, const kiln_image *images, uint8_t *arena)
{
	base_copy r = {.plan = plan, .images = images, .arena = arena};
	kiln_pool_for(pool, plan->nlevels, 1, copy_base_range, &r);
}

typedef struct png_copy {
	const kiln_texenc_png *files; /* into arena, at png's offsets */
	const png_batch *png;
	uint8_t *arena;
} png_copy;

static void copy_png_range(void *ctx, size_t begin, size_t end)
{
	const png_copy *r = ctx;
	const png_batch *pb = r->png;
	for (size_t k = begin; k < end; k++)
		memcpy(r->arena + pb->offset[k], r->files[pb->image[k]].data, pb->files[k].size);
}

typedef struct out_copy {
	const batch_plan *plan;
	const uint8_t *blocks;
	kiln_texture *tex;
} out_copy;

static void copy_out_range(void *ctx, size_t begin, size_t end)
{
	const out_copy *r = ctx;
	for (size_t n = begin; n < end; n++) {
		const level_plan *p = &r->plan->levels[n];
		kiln_level *lv = &r->tex[p->image].levels[p->level];
		if (lv->data)
			memcpy(lv->data, r->blocks + p->block_offset, lv->size);
	}
}

/* Gives each accepted texture its level storage and copies blocks out of the arena. */
static void collect_output(kiln_pool *pool, const batch_plan *plan, const uint8_t *blocks, kiln_texture *tex,
			   kiln_status *status)
{
	for (size_t n = 0; n < plan->nlevels; n++) {
		const level_plan *p = &plan->levels[n];
		if (status[p->image] != KILN_OK)
			continue;
		kiln_level *lv = &tex[p->image].levels[p->level];
		lv->data = kiln_malloc(lv->size);
		if (!lv->data)
			status[p->image] = KILN_ERR_NOMEM;
	}
	/* a level of an image that failed meanwhile keeps its storage: slot_finish frees it */
	out_copy r = {.plan = plan, .blocks = blocks, .tex = tex};
	kiln_pool_for(pool, plan->nlevels, 1, copy_out_range, &r);
}

static void level_arrays_free(level_arrays *a)
{
	free(a->src);
	free(a->dst);
	free(a->status);
	memset(a, 0, sizeof *a);
}

static kiln_status level_arrays_make(const batch_plan *plan, uint8_t *blocks, level_arrays *a)
{
	size_t n = plan->nlevels ? plan->nlevels : 1;
	a->src = kiln_calloc(n, sizeof *a->src);
	a->dst = kiln_calloc(n, sizeof *a->dst);
	a->status = kiln_calloc(n, sizeof *a->status);
	if (!a->src || !a->dst || !a->status) {
		level_arrays_free(a);
		return KILN_ERR_NOMEM;
	}
	for (size_t i = 0; i < plan->nlevels; i++) {
		a->src[i] = plan->levels[i].surface;
		a->dst[i] = blocks + plan->levels[i].block_offset;
	}
	return KILN_OK;
}

/* A level that failed fails its image. */
static void merge_level_status(const batch_plan *plan, const level_arrays *a, kiln_status *status)
{
	for (size_t n = 0; n < plan->nlevels; n++)
		if (a->status[n] != KILN_OK && status[plan->levels[n].image] == KILN_OK)
			status[plan->levels[n].image] = a->status[n];
}

static void bc1_params_of(const kiln_texenc *enc, kiln_bc1_params *params)
{
	kiln_bc1_params_default(params);
	params->quality = enc->opts.quality;
	params->alpha_cutoff = enc->opts.alpha_cutoff;
}

/* Where an ASTC call runs: the CPU pool, or a GPU stream with its scratch. */
typedef struct astc_backend {
	bool gpu;
	kiln_pool *pool;
	void *d_temp;
	size_t temp_size;
	kiln_stream stream;
} astc_backend;

static kiln_status astc_run(const kiln_astc_params *params, const kiln_surface *src, uint8_t *const *dst,
			    size_t count, kiln_status *status, const astc_backend *be)
{
	if (be->gpu)
		return kiln_astc_encode_gpu(params, src, dst, count, status, be->d_temp, be->temp_size,
					    be->stream);
	return kiln_astc_encode_cpu(params, src, dst, count, status, be->pool);
}

/* Encodes the levels of the batch whose texture has the given colour space (ASTC scores
 * sRGB and linear texels differently, and takes one colour space per call). */
static kiln_status astc_encode_subset(kiln_astc_params *params, const batch_plan *plan,
				      const kiln_texture *tex, level_arrays *la, bool srgb,
				      const astc_backend *be)
{
	level_arrays sub = {
		kiln_calloc(plan->nlevels, sizeof *sub.src),
		kiln_calloc(plan->nlevels, sizeof *sub.dst),
		kiln_calloc(plan->nlevels, sizeof *sub.status),
	};
	if (!sub.src || !sub.dst || !sub.status) {
		level_arrays_free(&sub);
		return KILN_ERR_NOMEM;
	}
	size_t n = 0;
	for (size_t i = 0; i < plan->nlevels; i++)
		if (tex[plan->levels[i].image].srgb == srgb) {
			sub.src[n] = la->src[i];
			sub.dst[n] = la->dst[i];
			n++;
		}
	kiln_status st = astc_run(params, sub.src, sub.dst, n, sub.status, be);
	n = 0;
	for (size_t i = 0; i < plan->nlevels && st == KILN_OK; i++)
		if (tex[plan->levels[i].image].srgb == srgb)
			la->status[i] = sub.status[n++];
	level_arrays_free(&sub);
	return st;
}

/* Every level of the batch, one call per colour space present (the same calls on both
 * backends, so the GPU writes the CPU's bytes). */
static kiln_status astc_encode_levels(const kiln_texenc *enc, const batch_plan *plan,
				      const kiln_texture *tex, level_arrays *la, const astc_backend *be)
{
	kiln_status st = KILN_OK;
	kiln_astc_params params;
	kiln_astc_params_default(&params);
	params.quality = enc->opts.quality;
	params.block_w = enc->opts.block_w;
	params.block_h = enc->opts.block_h;
	/* one colour space per batch is all the codec takes: split by it */
	for (int srgb = 0; srgb < 2 && st == KILN_OK; srgb++) {
		params.srgb = srgb;
		size_t n = 0;
		for (size_t i = 0; i < plan->nlevels; i++)
			if (tex[plan->levels[i].image].srgb == (srgb != 0))
				n++;
		if (n == plan->nlevels) /* the usual case: no copies */
			return astc_run(&params, la->src, la->dst, n, la->status, be);
		if (n)
			st = astc_encode_subset(&params, plan, tex, la, srgb != 0, be);
	}
	return st;
}

/* The error measurements of a batch (opts.measure): a job per image's level 0 that was
 * encoded, in the plan's order, with the image it is for (image[k]); returns how many.
 * jobs and image hold plan->nlevels entries. */
static size_t texerr_jobs(const kiln_texenc *enc, const batch_plan *plan, const kiln_texture *tex,
			  const level_arrays *la, const kiln_status *status, kiln_texerr_job *jobs, size_t *image)
{
	size_t n = 0;
	const bool astc = is_astc(enc);
	for (size_t l = 0; l < plan->nlevels; l++) {
		const level_plan *lp = &plan->levels[l];
		if (lp->level != 0 || status[lp->image] != KILN_OK || la->status[l] != KILN_OK)
			continue;
		const kiln_texture *t = &tex[lp->image];
		jobs[n] = (kiln_texerr_job){.src = la->src[l], .blocks = la->dst[l],
					    .block_w = astc ? enc->opts.block_w : 4, .block_h = astc ? enc->opts.block_h : 4,
					    .astc = astc, .srgb = t->srgb, .punch = t->format == KILN_TEXFMT_BC1_RGBA,
					    .alpha_cutoff = (uint8_t)enc->opts.alpha_cutoff};
		image[n++] = lp->image;
	}
	return n;
}

/* run_cpu's error measurements into err[image] (opts.measure). */
static kiln_status measure_cpu(const kiln_texenc *enc, kiln_pool *pool, const batch_plan *plan,
			       const kiln_texture *tex, const level_arrays *la, const kiln_status *status,
			       kiln_texerr *err)
{
	kiln_texerr_job *jobs = kiln_malloc_array(plan->nlevels, sizeof *jobs);
	kiln_texerr *out = kiln_malloc_array(plan->nlevels, sizeof *out);
	size_t *image = kiln_malloc_array(plan->nlevels, sizeof *image);
	kiln_status st = KILN_ERR_NOMEM;
	if (jobs && out && image) {
		size_t n = texerr_jobs(enc, plan, tex, la, status, jobs, image);
		st = kiln_texerr_cpu(jobs, n, out, pool);
		for (size_t k = 0; k < n && st == KILN_OK; k++)
			err[image[k]] = out[k];
	}
	free(jobs);
	free(out);
	free(image);
	return st;
}

/* The CPU backend over a planned batch (pool: the encoder's, or the copy pool for a GPU
 * batch's file that came back to the CPU); err (opts.measure; may be NULL otherwise) gets
 * level 0's error of each encoded image. */
static kiln_status run_cpu(kiln_texenc *enc, kiln_pool *pool, const kiln_image *images, size_t count,
			   batch_plan *plan, kiln_texture *tex, kiln_status *status, kiln_texerr *err)
{
	kiln_status st = KILN_OK;
	uint8_t *pixels = kiln_malloc(plan->pixel_bytes);
	uint8_t *blocks = kiln_malloc(plan->block_bytes);
	if (!pixels || !blocks) {
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	bind_plan(plan, tex, pixels, count);
	copy_base_levels(pool, plan, images, pixels);
	if (plan->nchains) {
		st = kiln_mip_build_cpu(plan->chains, plan->nchains, pool);
		if (st != KILN_OK)
			goto fail;
	}
	level_arrays la;
	if ((st = level_arrays_make(plan, blocks, &la)) != KILN_OK)
		goto fail;
	if (is_astc(enc)) {
		astc_backend be = {.gpu = false, .pool = pool};
		st = astc_encode_levels(enc, plan, tex, &la, &be);
	} else {
		kiln_bc1_params params;
		bc1_params_of(enc, &params);
		st = kiln_bc1_encode_cpu(&params, la.src, la.dst, plan->nlevels, la.status, pool);
	}
	if (st == KILN_OK) {
		merge_level_status(plan, &la, status);
		if (enc->opts.measure && err)
			st = measure_cpu(enc, pool, plan, tex, &la, status, err);
	}
	if (st == KILN_OK)
		collect_output(pool, plan, blocks, tex, status);
	level_arrays_free(&la);
fail:
	free(pixels);
	free(blocks);
	return st;
}

/* Records which step of a GPU batch failed and why, for kiln_texenc_last_error. */
static kiln_status gpu_step(batch_slot *s, kiln_status st, const char *step)
{
	if (st != KILN_OK)
		snprintf(s->error, sizeof s->error, "%s: %s%s%s", step, kiln_strerror(st),
			 st == KILN_ERR_CUDA ? ": " : "", st == KILN_ERR_CUDA ? kiln_gpu_last_error() : "");
	return st;
}

static void png_batch_free(png_batch *pb)
{
	free(pb->files);
	free(pb->image);
	free(pb->status);
	free(pb->offset);
	memset(pb, 0, sizeof *pb);
}

/* Queues the upload of the batch's PNG files that the GPU decodes (on_device) and their
 * decode straight into the base levels of the device arena (bound already). A file the
 * decoder refuses at once fails its image; the rest are known after the stream's sync. */
static kiln_status gpu_png_decode(kiln_pool *copy_pool, batch_slot *s, const kiln_texenc_png *files,
				  const bool *on_device)
{
	gpu_buffers *g = &s->gpu;
	png_batch *pb = &s->png;
	size_t n = 0, bytes = 0;
	for (size_t i = 0; i < s->count; i++) {
		if (!on_device[i] || s->status[i] != KILN_OK)
			continue;
		if (!kiln_size_add(bytes, align_up(files[i].size), &bytes))
			return gpu_step(s, KILN_ERR_OVERFLOW, "plan PNG upload");
		n++;
	}
	if (n == 0)
		return KILN_OK;
	pb->files = kiln_calloc(n, sizeof *pb->files);
	pb->image = kiln_calloc(n, sizeof *pb->image);
	pb->status = kiln_calloc(n, sizeof *pb->status);
	pb->offset = kiln_calloc(n, sizeof *pb->offset);
	if (!pb->files || !pb->image || !pb->status || !pb->offset)
		return gpu_step(s, KILN_ERR_NOMEM, "plan PNG upload");
	kiln_status st;
	if ((st = kiln_gpu_grow((void **)&g->d_png, &g->d_png_cap, bytes, false)) ||
	    (st = kiln_gpu_grow((void **)&g->h_png, &g->h_png_cap, bytes, true)))
		return gpu_step(s, st, "allocate PNG buffers");
	size_t off = 0;
	for (size_t l = 0; l < s->plan.nlevels; l++) {
		const level_plan *lp = &s->plan.levels[l];
		size_t i = lp->image;
		if (lp->level != 0 || !on_device[i] || s->status[i] != KILN_OK)
			continue;
		kiln_pngdec_gpu_file *f = &pb->files[pb->count];
		f->data = g->d_png + off;
		f->size = files[i].size;
		f->info = files[i].info;
		f->rgba = (uint8_t *)lp->surface.rgba;
		f->stride = lp->surface.stride;
		pb->image[pb->count] = i;
		pb->offset[pb->count++] = off;
		off += align_up(files[i].size);
	}
	png_copy r = {.files = files, .png = pb, .arena = g->h_png};
	kiln_pool_for(copy_pool, pb->count, 1, copy_png_range, &r);
	pb->temp_size = kiln_pngdec_temp_size(pb->files, pb->count);
	if ((st = kiln_gpu_grow(&g->d_png_temp, &g->d_png_temp_cap, pb->temp_size ? pb->temp_size : 1, false)))
		return gpu_step(s, st, "allocate PNG buffers");
	st = gpu_step(s, kiln_gpu_h2d(g->d_png, g->h_png, off, g->stream), "upload PNG files");
	if (st == KILN_OK)
		st = gpu_step(s, kiln_pngdec_decode_gpu(pb->files, pb->count, pb->status, g->d_png_temp,
							pb->temp_size, g->stream),
			      "decode PNG");
	for (size_t k = 0; k < pb->count && st == KILN_OK; k++)
		if (pb->status[k] != KILN_OK)
			s->status[pb->image[k]] = pb->status[k];
	return st;
}

/* After the stream's sync: the device's verdict on each PNG file fails its image (a file
 * sent back to the CPU path too, for now: gpu_png_redo gives it its texture). */
static kiln_status gpu_png_collect(batch_slot *s)
{
	png_batch *pb = &s->png;
	if (!pb->count)
		return KILN_OK;
	kiln_status st = gpu_step(s, kiln_pngdec_gpu_status(pb->files, pb->count, pb->status, s->gpu.d_png_temp,
							     pb->temp_size),
				  "read PNG status");
	for (size_t k = 0; k < pb->count && st == KILN_OK; k++)
		if (pb->status[k] != KILN_OK && s->status[pb->image[k]] == KILN_OK)
			s->status[pb->image[k]] = pb->status[k];
	return st;
}

/* The texture of one PNG file on the CPU: the CPU decoder on the file's bytes, then the
 * CPU backend of the codec over every level, into tex as submit planned it (the same
 * options; the backends write the same bytes). Returns the image's status. */
static kiln_status png_cpu_texture(kiln_texenc *enc, kiln_pool *pool, const uint8_t *data,
				   const kiln_pngdec_info *info, kiln_texture *tex, kiln_texerr *err)
{
	kiln_image img;
	kiln_status st = kiln_pngdec_decode_probed_image(data, info, NULL, &img, pool, NULL, 0);
	if (st != KILN_OK)
		return st;
	batch_plan plan;
	kiln_status img_st = KILN_OK;
	st = plan_batch(tex, &img, &img_st, 1, &plan);
	if (st == KILN_OK) {
		st = run_cpu(enc, pool, &img, 1, &plan, tex, &img_st, err);
		plan_free(&plan);
	}
	kiln_image_free(&img);
	return st != KILN_OK ? st : img_st;
}

/* After gpu_png_collect and the GPU's output: the files the GPU decoder sent to the CPU
 * path (KILN_ERR_UNSUPPORTED, png_dec.h: a stream whose end only libpng's rules decide)
 * are decoded and encoded on the CPU from their bytes still in the slot's pinned staging,
 * one after another (such files are rare), each over a pool. */
static void gpu_png_redo(kiln_texenc *enc, batch_slot *s)
{
	png_batch *pb = &s->png;
	kiln_pool *pool = enc->pool ? enc->pool : enc->copy_pool;
	for (size_t k = 0; k < pb->count; k++) {
		size_t i = pb->image[k];
		if (pb->status[k] == KILN_ERR_UNSUPPORTED && s->status[i] == KILN_ERR_UNSUPPORTED)
			s->status[i] = png_cpu_texture(enc, pool, s->gpu.h_png + pb->offset[k], &pb->files[k].info,
						       &s->tex[i], &s->err[i]);
	}
}

/* Queues the error measurements of a batch (opts.measure) after its codec launch: the
 * jobs' sums land in the scratch after the jobs and come down into the pinned h_err,
 * in texerr_jobs' order (gpu_collect hands them to their images). The statuses are those
 * known at submit: an image that fails on the device gets no measurement at collect. */
static kiln_status gpu_measure(const kiln_texenc *enc, batch_slot *s, uint8_t *d_temp, size_t temp_size)
{
	const batch_plan *plan = &s->plan;
	kiln_texerr_job *jobs = kiln_malloc_array(plan->nlevels, sizeof *jobs);
	s->err_image = kiln_malloc_array(plan->nlevels, sizeof *s->err_image);
	kiln_status st = KILN_ERR_NOMEM;
	if (jobs && s->err_image) {
		size_t n = texerr_jobs(enc, plan, s->tex, &s->la, s->status, jobs, s->err_image);
		kiln_texerr *d_err = (kiln_texerr *)(d_temp + temp_size);
		st = gpu_step(s, kiln_texerr_gpu(jobs, n, d_err, d_temp, temp_size, s->gpu.stream), "measure");
		if (st == KILN_OK && n)
			st = gpu_step(s, kiln_gpu_d2h(s->gpu.h_err, d_err, n * sizeof *d_err, s->gpu.stream),
				      "download errors");
		s->nerr = n;
	}
	free(jobs);
	return st;
}

/* Queues a planned batch on its slot's stream: staging copy into pinned memory, one H2D
 * of the base levels (or of the PNG files the GPU decodes into them), the mip launches,
 * one codec launch, one D2H. Nothing waits for the device; kiln_gpu_stream_sync on the
 * slot's stream ends the batch. */
static kiln_status gpu_submit(kiln_texenc *enc, batch_slot *s, const kiln_image *images,
			      const kiln_texenc_png *files, const bool *on_device)
{
	gpu_buffers *g = &s->gpu;
	batch_plan *plan = &s->plan;
	kiln_status st = gpu_step(s, kiln_gpu_use(enc->device.index), "select device");
	if (st != KILN_OK)
		return st;
	if (!g->stream && (st = gpu_step(s, kiln_gpu_stream_create(&g->stream), "create stream")) != KILN_OK)
		return st;
	/* one scratch buffer: mip descriptors first, then the codec's */
	size_t mip_temp = align_up(kiln_mip_temp_size(plan->nchains ? plan->nchains : 1, plan->max_levels));
	size_t codec_temp = align_up(is_astc(enc) ? kiln_astc_temp_size(plan->nlevels) : kiln_bc1_temp_size(plan->nlevels));
	/* then, measuring: the error jobs and their sums */
	size_t err_temp = enc->opts.measure ? align_up(kiln_texerr_temp_size(plan->nlevels)) : 0;
	size_t err_bytes = enc->opts.measure ? plan->nlevels * sizeof(kiln_texerr) : 0;
	size_t temp = mip_temp + codec_temp + err_temp + err_bytes;
	if ((st = kiln_gpu_grow((void **)&g->d_pixels, &g->d_pixels_cap, plan->pixel_bytes, false)) ||
	    (st = kiln_gpu_grow((void **)&g->d_blocks, &g->d_blocks_cap, plan->block_bytes, false)) ||
	    (st = kiln_gpu_grow(&g->d_temp, &g->d_temp_cap, temp, false)) ||
	    (st = kiln_gpu_grow((void **)&g->h_pixels, &g->h_pixels_cap, plan->base_bytes, true)) ||
	    (st = kiln_gpu_grow((void **)&g->h_blocks, &g->h_blocks_cap, plan->block_bytes, true)) ||
	    (err_bytes && (st = kiln_gpu_grow((void **)&g->h_err, &g->h_err_cap, err_bytes, true))))
		return gpu_step(s, st, "allocate buffers");

	/* Base levels are staged in pinned memory, laid out as in the device arena; the slot's
	 * previous batch was collected, so nothing is still reading the staging buffer. */
	bool host_pixels = false;
	for (size_t i = 0; i < s->count; i++)
		host_pixels |= s->status[i] == KILN_OK && !(on_device && on_device[i]);
	if (host_pixels) {
		bind_plan(plan, s->tex, g->h_pixels, s->count);
		copy_base_levels(enc->copy_pool, plan, images, g->h_pixels);
	}
	bind_plan(plan, s->tex, g->d_pixels, s->count);
	if (host_pixels) {
		st = gpu_step(s, kiln_gpu_h2d(g->d_pixels, g->h_pixels, plan->base_bytes, g->stream), "upload");
		if (st != KILN_OK)
			return st;
	}
	if (on_device && (st = gpu_png_decode(enc->copy_pool, s, files, on_device)) != KILN_OK)
		return st;
	if (plan->nchains) {
		st = kiln_mip_build_gpu(plan->chains, plan->nchains, g->d_temp, mip_temp, g->stream);
		if (gpu_step(s, st, "mipmaps") != KILN_OK)
			return st;
	}
	if ((st = level_arrays_make(plan, g->d_blocks, &s->la)) != KILN_OK)
		return gpu_step(s, st, "plan");
	if (is_astc(enc)) {
		astc_backend be = {.gpu = true, .d_temp = (uint8_t *)g->d_temp + mip_temp,
				   .temp_size = codec_temp, .stream = g->stream};
		st = gpu_step(s, astc_encode_levels(enc, plan, s->tex, &s->la, &be), "encode");
	} else {
		kiln_bc1_params params;
		bc1_params_of(enc, &params);
		st = gpu_step(s, kiln_bc1_encode_gpu(&params, s->la.src, s->la.dst, plan->nlevels, s->la.status,
						     (uint8_t *)g->d_temp + mip_temp, codec_temp, g->stream),
			      "encode");
	}
	if (st == KILN_OK && err_bytes)
		st = gpu_measure(enc, s, (uint8_t *)g->d_temp + mip_temp + codec_temp, err_temp);
	if (st == KILN_OK)
		st = gpu_step(s, kiln_gpu_d2h(g->h_blocks, g->d_blocks, plan->block_bytes, g->stream), "download");
	return st;
}

/* Waits for a queued batch and copies its blocks out of the pinned buffer. */
static kiln_status gpu_collect(kiln_texenc *enc, batch_slot *s)
{
	kiln_status st = gpu_step(s, kiln_gpu_use(enc->device.index), "select device");
	uint64_t t0 = kiln_now_ns();
	if (st == KILN_OK)
		st = gpu_step(s, kiln_gpu_stream_sync(s->gpu.stream), "synchronize");
	enc->device_wait_ns += kiln_now_ns() - t0;
	if (st == KILN_OK)
		st = gpu_png_collect(s);
	for (size_t k = 0; st == KILN_OK && k < s->nerr; k++)
		s->err[s->err_image[k]] = s->gpu.h_err[k];
	if (st == KILN_OK) {
		merge_level_status(&s->plan, &s->la, s->status);
		collect_output(enc->copy_pool, &s->plan, s->gpu.h_blocks, s->tex, s->status);
		gpu_png_redo(enc, s);
	}
	return st;
}

/* Ends a batch: a whole-batch error goes to every image still fine, failed images lose
 * their levels, and the plan is freed. The result waits in the slot for collect. */
static void slot_finish(batch_slot *s, kiln_status st)
{
	plan_free(&s->plan);
	level_arrays_free(&s->la);
	png_batch_free(&s->png);
	free(s->err_image);
	s->err_image = NULL;
	s->nerr = 0;
	s->result = st;
	for (size_t i = 0; i < s->count; i++) {
		if (st != KILN_OK && s->status[i] == KILN_OK)
			s->status[i] = st;
		if (s->status[i] != KILN_OK) {
			kiln_texture_free_levels(&s->tex[i]);
			s->err[i] = (kiln_texerr){0, 0};
		}
	}
	s->state = SLOT_DONE;
}

/* A CUDA error poisons the context: every batch in flight on it fails with the error
 * that was seen, every buffer is dropped (the reset frees them) and the device is reset,
 * so the next batch starts on a clean one. The caller finishes the batch that saw the
 * error if it is not queued yet. */
static void gpu_poison(kiln_texenc *enc, const char *why)
{
	char text[sizeof enc->last_error];
	snprintf(text, sizeof text, "%s", why);
	for (size_t i = 0; i < KILN_TEXENC_MAX_INFLIGHT; i++) {
		batch_slot *s = &enc->slots[i];
		if (s->state == SLOT_QUEUED) {
			snprintf(s->error, sizeof s->error, "%s", text);
			slot_finish(s, KILN_ERR_CUDA);
		}
		memset(&s->gpu, 0, sizeof s->gpu);
	}
	kiln_gpu_reset();
}

/* Frees everything a slot holds (encoder teardown); a queued batch is waited for first. */
static void slot_release(kiln_texenc *enc, batch_slot *s)
{
	if (s->state == SLOT_QUEUED) {
		kiln_gpu_stream_sync(s->gpu.stream);
		slot_finish(s, KILN_ERR_CANCELLED);
	}
	if (s->state != SLOT_FREE)
		for (size_t i = 0; i < s->count; i++)
			kiln_texture_free_levels(&s->tex[i]);
	if (enc->device.kind == KILN_DEVICE_GPU)
		gpu_buffers_release(&s->gpu);
	free(s->tex);
	free(s->status);
	free(s->err);
	memset(s, 0, sizeof *s);
}

unsigned kiln_texenc_depth(const kiln_texenc *enc)
{
	return enc->device.kind == KILN_DEVICE_GPU ? KILN_TEXENC_MAX_INFLIGHT : 1;
}

unsigned kiln_texenc_inflight(const kiln_texenc *enc)
{
	unsigned n = 0;
	for (size_t i = 0; i < KILN_TEXENC_MAX_INFLIGHT; i++)
		n += enc->slots[i].state != SLOT_FREE;
	return n;
}

/* Plans and queues (GPU) or runs (CPU) a batch. images[i] describes every image; those
 * with on_device[i] (GPU only; on_device may be NULL) have no host pixels and are decoded
 * on the device from files[i]. pre (may be NULL) holds failures found before the batch. */
static kiln_status submit_batch(kiln_texenc *enc, const kiln_image *images, const kiln_texenc_png *files,
				const bool *on_device, const kiln_status *pre, size_t count, uint64_t *ticket)
{
	*ticket = 0;
	batch_slot *s = NULL;
	for (size_t i = 0; i < KILN_TEXENC_MAX_INFLIGHT && !s; i++)
		if (enc->slots[i].state == SLOT_FREE)
			s = &enc->slots[i];
	if (!s || (count && !images))
		return KILN_ERR_INVALID_ARG;
	if (count > s->cap) {
		kiln_texture *tex = kiln_malloc_array(count, sizeof *tex);
		kiln_status *status = kiln_malloc_array(count, sizeof *status);
		kiln_texerr *err = kiln_malloc_array(count, sizeof *err);
		if (!tex || !status || !err) {
			free(tex);
			free(status);
			free(err);
			return KILN_ERR_NOMEM;
		}
		free(s->tex);
		free(s->status);
		free(s->err);
		s->tex = tex;
		s->status = status;
		s->err = err;
		s->cap = count;
	}
	s->count = count;
	s->error[0] = '\0';
	for (size_t i = 0; i < count; i++) {
		memset(&s->tex[i], 0, sizeof s->tex[i]);
		s->err[i] = (kiln_texerr){0, 0};
		s->status[i] = pre && pre[i] != KILN_OK ? pre[i]
			     : plan_texture(enc, &images[i], on_device && on_device[i], &s->tex[i]);
	}
	kiln_status st = plan_batch(s->tex, images, s->status, count, &s->plan);
	if (st == KILN_OK && s->plan.nlevels == 0) {
		/* every image was refused: nothing to run */
	} else if (st == KILN_OK && enc->device.kind == KILN_DEVICE_GPU) {
		st = gpu_submit(enc, s, images, files, on_device);
		if (st == KILN_OK) {
			s->state = SLOT_QUEUED;
			goto queued;
		}
		if (st != KILN_ERR_CUDA && s->gpu.stream) {
			/* part of the batch may be queued: let it drain before the buffers are reused */
			kiln_status ss = kiln_gpu_stream_sync(s->gpu.stream);
			if (ss == KILN_ERR_CUDA)
				st = gpu_step(s, ss, "synchronize");
		}
		if (st == KILN_ERR_CUDA)
			gpu_poison(enc, s->error);
	} else if (st == KILN_OK) {
		st = run_cpu(enc, enc->pool, images, count, &s->plan, s->tex, s->status, s->err);
	}
	slot_finish(s, st);
queued:
	s->ticket = ++enc->next_ticket;
	*ticket = s->ticket;
	return KILN_OK;
}

kiln_status kiln_texenc_submit(kiln_texenc *enc, const kiln_image *images, size_t count,
			       uint64_t *ticket)
{
	return submit_batch(enc, images, NULL, NULL, NULL, count, ticket);
}

bool kiln_texenc_png_gpu_decodes(const kiln_pngdec_info *info)
{
	return info->gpu_ok && (info->strips == 1 || info->strips >= KILN_TEXENC_GPU_DECODE_MIN_STRIPS);
}

/* The files of a PNG batch that the host decodes. */
typedef struct host_decode {
	const kiln_texenc_png *files;
	const bool *on_device;
	kiln_image *images;
	kiln_status *pre;
	kiln_pool *inner; /* for a file's strips, when the files are not spread over it */
} host_decode;

static void host_decode_range(void *p, size_t begin, size_t end)
{
	host_decode *job = p;
	for (size_t i = begin; i < end; i++)
		if (!job->on_device[i])
			job->pre[i] = kiln_pngdec_decode_probed_image(job->files[i].data, &job->files[i].info, NULL,
								      &job->images[i], job->inner, NULL, 0);
}

kiln_status kiln_texenc_submit_png(kiln_texenc *enc, const kiln_texenc_png *files, size_t count,
				   uint64_t *ticket)
{
	*ticket = 0;
	if (count > KILN_TEXENC_MAX_PNG_BATCH || (count && !files))
		return KILN_ERR_INVALID_ARG;
	if (count == 0)
		return submit_batch(enc, NULL, NULL, NULL, NULL, 0, ticket);
	kiln_image images[KILN_TEXENC_MAX_PNG_BATCH];
	bool on_device[KILN_TEXENC_MAX_PNG_BATCH];
	kiln_status pre[KILN_TEXENC_MAX_PNG_BATCH];
	bool gpu = enc->device.kind == KILN_DEVICE_GPU;
	size_t on_host = 0;
	for (size_t i = 0; i < count; i++) {
		const kiln_pngdec_info *info = &files[i].info;
		on_device[i] = gpu && info->gpu_ok;
		pre[i] = KILN_OK;
		if (on_device[i])
			images[i] = (kiln_image){.width = info->width, .height = info->height,
						 .has_alpha = info->has_alpha != 0, .srgb = info->srgb != 0};
		else
			on_host++;
	}
	host_decode job = {files, on_device, images, pre, on_host == 1 ? enc->pool : NULL};
	if (on_host > 1 && enc->pool)
		kiln_pool_for(enc->pool, count, 1, host_decode_range, &job);
	else
		host_decode_range(&job, 0, count);
	kiln_status st = submit_batch(enc, images, files, on_device, pre, count, ticket);
	/* submit has copied (GPU) or encoded (CPU) the host pixels: they can go */
	for (size_t i = 0; i < count; i++)
		if (!on_device[i])
			kiln_image_free(&images[i]);
	return st;
}

kiln_status kiln_texenc_collect(kiln_texenc *enc, uint64_t ticket, kiln_texture *out,
				kiln_status *status)
{
	return kiln_texenc_collect_measured(enc, ticket, out, status, NULL);
}

kiln_status kiln_texenc_collect_measured(kiln_texenc *enc, uint64_t ticket, kiln_texture *out,
					 kiln_status *status, kiln_texerr *err)
{
	batch_slot *s = NULL;
	for (size_t i = 0; i < KILN_TEXENC_MAX_INFLIGHT && !s; i++)
		if (enc->slots[i].state != SLOT_FREE && enc->slots[i].ticket == ticket)
			s = &enc->slots[i];
	if (!s || !ticket)
		return KILN_ERR_INVALID_ARG;
	if (s->state == SLOT_QUEUED) {
		kiln_status st = gpu_collect(enc, s);
		if (st == KILN_ERR_CUDA)
			gpu_poison(enc, s->error); /* finishes this batch too: it is still queued */
		else
			slot_finish(s, st);
	}
	if (s->count) {
		memcpy(out, s->tex, s->count * sizeof *out);
		memcpy(status, s->status, s->count * sizeof *status);
		if (err)
			memcpy(err, s->err, s->count * sizeof *err);
	}
	snprintf(enc->last_error, sizeof enc->last_error, "%s", s->error);
	s->state = SLOT_FREE;
	s->ticket = 0;
	s->count = 0;
	return s->result;
}

kiln_status kiln_texenc_encode(kiln_texenc *enc, const kiln_image *images, size_t count,
			       kiln_texture *out, kiln_status *status)
{
	uint64_t ticket;
	kiln_status st = kiln_texenc_submit(enc, images, count, &ticket);
	if (st != KILN_OK) {
		enc->last_error[0] = '\0';
		for (size_t i = 0; i < count; i++) {
			memset(&out[i], 0, sizeof out[i]);
			status[i] = st;
		}
		return st;
	}
	return kiln_texenc_collect(enc, ticket, out, status);
}
