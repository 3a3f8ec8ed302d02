/* Texture encoder front end: plans the levels of each image of a batch, then runs mip
 * generation and the codec on the CPU backend or on one GPU (one H2D, one mip launch per
 * level, one codec launch for every level of every image, one D2H). */
#include "kernels/texenc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "kernels/bc1/bc1.h"
#include "kernels/mip/mip.h"

#define ARENA_ALIGN 256 /* keeps every surface's rows aligned for wide device loads */

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
} gpu_buffers;

struct kiln_texenc {
	kiln_device device;
	kiln_texenc_opts opts;
	kiln_pool *pool;
	gpu_buffers gpu;
	char last_error[256];
};

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

void kiln_texenc_opts_default(kiln_texenc_opts *opts)
{
	opts->format = KILN_TEXFMT_BC1_RGB;
	opts->quality = KILN_QUALITY_HIGH;
	opts->alpha_cutoff = 128;
	opts->mipmaps = false;
	opts->colorspace = KILN_COLORSPACE_AUTO;
}

static size_t align_up(size_t v)
{
	return (v + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

static kiln_status check_opts(const kiln_texenc_opts *opts)
{
	if (opts->format != KILN_TEXFMT_BC1_RGB && opts->format != KILN_TEXFMT_BC1_RGBA)
		return KILN_ERR_UNSUPPORTED;
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
		if (st == KILN_OK)
			st = kiln_gpu_stream_create(&enc->gpu.stream);
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
	kiln_gpu_stream_destroy(g->stream);
	memset(g, 0, sizeof *g);
}

void kiln_texenc_destroy(kiln_texenc *enc)
{
	if (!enc)
		return;
	if (enc->device.kind == KILN_DEVICE_GPU) {
		kiln_gpu_use(enc->device.index);
		gpu_buffers_release(&enc->gpu);
	}
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

/* Validates image i and fills its texture header and level sizes (no level data yet). */
static kiln_status plan_texture(const kiln_texenc *enc, const kiln_image *img, kiln_texture *tex)
{
	if (!img->pixels || img->stride < (size_t)img->width * 4)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = kiln_image_check_size(img->width, img->height, NULL);
	if (st != KILN_OK)
		return st;
	bool alpha = img->has_alpha && enc->opts.alpha_cutoff > 0;
	st = kiln_texture_init(tex, alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB, 4, 4,
			       image_srgb(enc, img));
	if (st != KILN_OK)
		return st;
	tex->num_levels = enc->opts.mipmaps ? kiln_mip_count(img->width, img->height) : 1;
	for (uint32_t l = 0; l < tex->num_levels; l++) {
		kiln_level *lv = &tex->levels[l];
		lv->width = img->width >> l ? img->width >> l : 1;
		lv->height = img->height >> l ? img->height >> l : 1;
		lv->size = kiln_bc1_bound(lv->width, lv->height);
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
static kiln_status plan_batch(const kiln_texture *tex, const kiln_status *status, size_t count,
			      batch_plan *plan)
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
				p->surface.has_alpha = tex[i].format == KILN_TEXFMT_BC1_RGBA;
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

static void copy_base_levels(const batch_plan *plan, const kiln_image *images, uint8_t *arena)
{
	for (size_t n = 0; n < plan->nlevels; n++) {
		const level_plan *p = &plan->levels[n];
		if (p->level != 0)
			continue;
		const kiln_image *img = &images[p->image];
		uint8_t *dst = arena + p->pixel_offset;
		for (uint32_t y = 0; y < img->height; y++)
			memcpy(dst + (size_t)y * p->surface.stride, kiln_image_row(img, y), (size_t)img->width * 4);
	}
}

/* Gives each accepted texture its level storage and copies blocks out of the arena. */
static void collect_output(const batch_plan *plan, const uint8_t *blocks, kiln_texture *tex,
			   kiln_status *status)
{
	for (size_t n = 0; n < plan->nlevels; n++) {
		const level_plan *p = &plan->levels[n];
		if (status[p->image] != KILN_OK)
			continue;
		kiln_level *lv = &tex[p->image].levels[p->level];
		lv->data = kiln_malloc(lv->size);
		if (!lv->data) {
			status[p->image] = KILN_ERR_NOMEM;
			continue;
		}
		memcpy(lv->data, blocks + p->block_offset, lv->size);
	}
}

/* The codec's view of a batch: one surface, destination and status per level. */
typedef struct level_arrays {
	kiln_surface *src;
	uint8_t **dst;
	kiln_status *status;
} level_arrays;

static void level_arrays_free(level_arrays *a)
{
	free(a->src);
	free(a->dst);
	free(a->status);
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

static kiln_status run_cpu(kiln_texenc *enc, const kiln_image *images, size_t count,
			   batch_plan *plan, kiln_texture *tex, kiln_status *status)
{
	kiln_status st = KILN_OK;
	uint8_t *pixels = kiln_malloc(plan->pixel_bytes);
	uint8_t *blocks = kiln_malloc(plan->block_bytes);
	if (!pixels || !blocks) {
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	bind_plan(plan, tex, pixels, count);
	copy_base_levels(plan, images, pixels);
	if (plan->nchains) {
		st = kiln_mip_build_cpu(plan->chains, plan->nchains, enc->pool);
		if (st != KILN_OK)
			goto fail;
	}
	level_arrays la;
	if ((st = level_arrays_make(plan, blocks, &la)) != KILN_OK)
		goto fail;
	kiln_bc1_params params;
	bc1_params_of(enc, &params);
	st = kiln_bc1_encode_cpu(&params, la.src, la.dst, plan->nlevels, la.status, enc->pool);
	if (st == KILN_OK) {
		merge_level_status(plan, &la, status);
		collect_output(plan, blocks, tex, status);
	}
	level_arrays_free(&la);
fail:
	free(pixels);
	free(blocks);
	return st;
}

/* Grows a device (or pinned host) buffer to at least `need` bytes; contents are not kept. */
static kiln_status ensure_device(void **ptr, size_t *cap, size_t need, bool pinned)
{
	if (*cap >= need && *ptr)
		return KILN_OK;
	if (pinned)
		kiln_gpu_host_free(*ptr);
	else
		kiln_gpu_free(*ptr);
	*ptr = NULL;
	*cap = 0;
	kiln_status st = pinned ? kiln_gpu_host_alloc(ptr, need) : kiln_gpu_malloc(ptr, need);
	if (st == KILN_OK)
		*cap = need;
	return st;
}

/* Records which step of a GPU batch failed and why, for kiln_texenc_last_error. */
static kiln_status gpu_step(kiln_texenc *enc, kiln_status st, const char *step)
{
	if (st != KILN_OK)
		snprintf(enc->last_error, sizeof enc->last_error, "%s: %s%s%s", step, kiln_strerror(st),
			 st == KILN_ERR_CUDA ? ": " : "", st == KILN_ERR_CUDA ? kiln_gpu_last_error() : "");
	return st;
}

static kiln_status run_gpu(kiln_texenc *enc, const kiln_image *images, size_t count,
			   batch_plan *plan, kiln_texture *tex, kiln_status *status)
{
	gpu_buffers *g = &enc->gpu;
	kiln_status st = gpu_step(enc, kiln_gpu_use(enc->device.index), "select device");
	if (st != KILN_OK)
		return st;
	if (!g->stream && (st = gpu_step(enc, kiln_gpu_stream_create(&g->stream), "create stream")) != KILN_OK)
		return st;
	/* one scratch buffer: mip descriptors first, then the codec's */
	size_t mip_temp = align_up(kiln_mip_temp_size(plan->nchains ? plan->nchains : 1, plan->max_levels));
	size_t temp = mip_temp + kiln_bc1_temp_size(plan->nlevels);
	if ((st = ensure_device((void **)&g->d_pixels, &g->d_pixels_cap, plan->pixel_bytes, false)) ||
	    (st = ensure_device((void **)&g->d_blocks, &g->d_blocks_cap, plan->block_bytes, false)) ||
	    (st = ensure_device(&g->d_temp, &g->d_temp_cap, temp, false)) ||
	    (st = ensure_device((void **)&g->h_pixels, &g->h_pixels_cap, plan->base_bytes, true)) ||
	    (st = ensure_device((void **)&g->h_blocks, &g->h_blocks_cap, plan->block_bytes, true)))
		return gpu_step(enc, st, "allocate buffers");

	/* Base levels are staged in pinned memory, laid out as in the device arena. */
	bind_plan(plan, tex, g->h_pixels, count);
	copy_base_levels(plan, images, g->h_pixels);
	bind_plan(plan, tex, g->d_pixels, count);
	st = gpu_step(enc, kiln_gpu_h2d(g->d_pixels, g->h_pixels, plan->base_bytes, g->stream), "upload");
	if (st != KILN_OK)
		return st;
	if (plan->nchains) {
		st = kiln_mip_build_gpu(plan->chains, plan->nchains, g->d_temp, mip_temp, g->stream);
		if (gpu_step(enc, st, "mipmaps") != KILN_OK)
			return st;
	}

	level_arrays la;
	if ((st = level_arrays_make(plan, g->d_blocks, &la)) != KILN_OK)
		return gpu_step(enc, st, "plan");
	kiln_bc1_params params;
	bc1_params_of(enc, &params);
	st = gpu_step(enc, kiln_bc1_encode_gpu(&params, la.src, la.dst, plan->nlevels, la.status,
					       (uint8_t *)g->d_temp + mip_temp, temp - mip_temp, g->stream),
		      "encode");
	if (st == KILN_OK)
		st = gpu_step(enc, kiln_gpu_d2h(g->h_blocks, g->d_blocks, plan->block_bytes, g->stream), "download");
	if (st == KILN_OK)
		st = gpu_step(enc, kiln_gpu_stream_sync(g->stream), "synchronize");
	if (st == KILN_OK) {
		merge_level_status(plan, &la, status);
		collect_output(plan, g->h_blocks, tex, status);
	}
	level_arrays_free(&la);
	return st;
}

kiln_status kiln_texenc_encode(kiln_texenc *enc, const kiln_image *images, size_t count,
			       kiln_texture *out, kiln_status *status)
{
	batch_plan plan;
	enc->last_error[0] = '\0';
	for (size_t i = 0; i < count; i++) {
		memset(&out[i], 0, sizeof out[i]);
		status[i] = plan_texture(enc, &images[i], &out[i]);
	}
	kiln_status st = plan_batch(out, status, count, &plan);
	if (st != KILN_OK)
		goto fail;
	if (enc->device.kind == KILN_DEVICE_GPU) {
		st = run_gpu(enc, images, count, &plan, out, status);
		if (st == KILN_ERR_CUDA) {
			/* A sticky error poisons the context: drop every buffer (a reset frees
			 * them) and reset, so the next batch starts on a clean device. */
			memset(&enc->gpu, 0, sizeof enc->gpu);
			kiln_gpu_reset();
		}
	} else {
		st = run_cpu(enc, images, count, &plan, out, status);
	}
fail:
	plan_free(&plan);
	for (size_t i = 0; i < count; i++) {
		if (st != KILN_OK && status[i] == KILN_OK)
			status[i] = st;
		if (status[i] != KILN_OK)
			kiln_texture_free_levels(&out[i]);
	}
	return st;
}
