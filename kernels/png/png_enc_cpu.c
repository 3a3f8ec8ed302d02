/* The CPU backend of the PNG encoder, and the host-side planning both backends share.
 * Strips of every valid image of a batch form one sequence; each pool thread owns a slot
 * of the caller's scratch and takes strips from an atomic counter (png_strip_job, the
 * same function the GPU runs), so a batch of small images and one large image keep every
 * thread busy alike. Which thread runs a strip never changes its bytes. Then each image
 * is assembled in strip order (png_enc_shared.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/image.h"
#include "kernels/find_last.h"
#include "kernels/png/png_enc.h"
#include "kernels/png/png_enc_shared.h"

/* Images planned per pool run: their plans live on the stack. */
#define PNGENC_CPU_CHUNK 64

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++)
		crc_table[i] = kiln_crc32_table_entry(i);
}

const uint32_t *png_enc_crc_table(void)
{
	pthread_once(&crc_once, crc_init);
	return crc_table;
}

void kiln_pngenc_params_default(kiln_pngenc_params *params)
{
	params->quality = KILN_QUALITY_MEDIUM;
	params->rows_per_strip = 0;
	params->single_strip = 0;
	params->filter = KILN_PNGENC_FILTER_ADAPTIVE;
}

void kiln_pngenc_image_from_surface(const kiln_surface *s, kiln_pngenc_image *img)
{
	memset(img, 0, sizeof *img);
	img->pixels = s->rgba;
	img->width = s->width;
	img->height = s->height;
	img->stride = s->stride;
	img->color_type = s->has_alpha ? KILN_PNG_COLOR_RGBA : KILN_PNG_COLOR_RGB;
	img->bit_depth = 8;
	img->from_rgba8 = 1;
}

static uint32_t channels_of(uint8_t color_type)
{
	switch (color_type) {
	case KILN_PNG_COLOR_GRAY:
	case KILN_PNG_COLOR_PALETTE:
		return 1;
	case KILN_PNG_COLOR_GRAY_ALPHA:
		return 2;
	case KILN_PNG_COLOR_RGB:
		return 3;
	case KILN_PNG_COLOR_RGBA:
		return 4;
	default:
		return 0;
	}
}

static int depth_valid(uint8_t color_type, uint8_t depth)
{
	switch (color_type) {
	case KILN_PNG_COLOR_GRAY:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
	case KILN_PNG_COLOR_PALETTE:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8;
	case KILN_PNG_COLOR_RGB:
	case KILN_PNG_COLOR_GRAY_ALPHA:
	case KILN_PNG_COLOR_RGBA:
		return depth == 8 || depth == 16;
	default:
		return 0;
	}
}

static int type_is(const char t[4], const char *name)
{
	return memcmp(t, name, 4) == 0;
}

static int type_letters(const char t[4])
{
	for (int k = 0; k < 4; k++)
		if (!((t[k] >= 'A' && t[k] <= 'Z') || (t[k] >= 'a' && t[k] <= 'z')))
			return 0;
	return 1;
}

/* 0: before PLTE, 1: PLTE, 2: after PLTE, 3: dropped (kiSt), -1: refused. */
static int chunk_phase(const kiln_png_chunk *c)
{
	static const char *const before[] = {"cHRM", "gAMA", "iCCP", "sBIT", "sRGB", "cICP", "mDCv", "cLLI"};
	if (!type_letters(c->type) || c->length > 0x7FFFFFFFu || (c->length && !c->data))
		return -1;
	if (type_is(c->type, "IHDR") || type_is(c->type, "IDAT") || type_is(c->type, "IEND"))
		return -1;
	if (type_is(c->type, "kiSt"))
		return 3;
	if (type_is(c->type, "PLTE"))
		return 1;
	for (size_t k = 0; k < sizeof before / sizeof before[0]; k++)
		if (type_is(c->type, before[k]))
			return 0;
	return 2;
}

/* Checks the chunks; *len gets the bytes they take in the file. */
static kiln_status check_chunks(const kiln_pngenc_image *img, uint64_t *len)
{
	int plte = 0;
	*len = 0;
	if (img->chunk_count && !img->chunks)
		return KILN_ERR_INVALID_ARG;
	for (size_t i = 0; i < img->chunk_count; i++) {
		const kiln_png_chunk *c = &img->chunks[i];
		int phase = chunk_phase(c);
		if (phase < 0)
			return KILN_ERR_INVALID_ARG;
		if (phase == 3)
			continue;
		if (phase == 1) {
			if (plte++ || c->length == 0 || c->length % 3 || c->length > 768 ||
			    img->color_type == KILN_PNG_COLOR_GRAY || img->color_type == KILN_PNG_COLOR_GRAY_ALPHA)
				return KILN_ERR_INVALID_ARG;
			if (img->color_type == KILN_PNG_COLOR_PALETTE && c->length / 3 > (1u << img->bit_depth))
				return KILN_ERR_INVALID_ARG;
		}
		*len += 12 + (uint64_t)c->length;
	}
	if (img->color_type == KILN_PNG_COLOR_PALETTE && !plte)
		return KILN_ERR_INVALID_ARG;
	return KILN_OK;
}

int png_enc_put_chunks(const kiln_pngenc_image *img, png_enc_put_fn put, void *ctx)
{
	const uint32_t *table = png_enc_crc_table();
	uint64_t off = PNG_ENC_HEAD;
	for (int phase = 0; phase < 3; phase++) {
		for (size_t i = 0; i < img->chunk_count; i++) {
			const kiln_png_chunk *c = &img->chunks[i];
			if (chunk_phase(c) != phase)
				continue;
			uint8_t head[8], tail[4];
			png_put_be32(head, c->length);
			memcpy(head + 4, c->type, 4);
			uint32_t crc = kiln_crc32_update_table(table, 0, head + 4, 4);
			crc = kiln_crc32_update_table(table, crc, c->data, c->length);
			png_put_be32(tail, crc);
			if (put(ctx, off, head, 8) || (c->length && put(ctx, off + 8, c->data, c->length)) ||
			    put(ctx, off + 8 + c->length, tail, 4))
				return -1;
			off += 12 + (uint64_t)c->length;
		}
	}
	return 0;
}

static uint32_t auto_rows(uint64_t rowlen, int quality)
{
	uint64_t rows = PNG_ENC_STRIP_TARGET(quality) / rowlen;
	return rows ? (uint32_t)rows : 1;
}

kiln_status png_enc_plan(const kiln_pngenc_params *params, const kiln_pngenc_image *img, png_plan *pl)
{
	memset(pl, 0, sizeof *pl);
	if (!params || !img || !img->pixels)
		return KILN_ERR_INVALID_ARG;
	if (params->quality != KILN_QUALITY_FAST && params->quality != KILN_QUALITY_MEDIUM &&
	    params->quality != KILN_QUALITY_HIGH)
		return KILN_ERR_INVALID_ARG;
	if (params->filter < KILN_PNGENC_FILTER_ADAPTIVE || params->filter > PNG_FILTER_PAETH)
		return KILN_ERR_INVALID_ARG;
	if (img->width == 0 || img->height == 0 || img->width > 0x7FFFFFFFu || img->height > 0x7FFFFFFFu)
		return KILN_ERR_INVALID_ARG;
	if (!depth_valid(img->color_type, img->bit_depth))
		return KILN_ERR_INVALID_ARG;
	if (img->from_rgba8 && (img->bit_depth != 8 || (img->color_type != KILN_PNG_COLOR_RGB &&
							 img->color_type != KILN_PNG_COLOR_RGBA)))
		return KILN_ERR_INVALID_ARG;
	uint64_t bits = (uint64_t)img->width * channels_of(img->color_type) * img->bit_depth;
	uint64_t rowbytes = (bits + 7) / 8;
	uint64_t src_row = img->from_rgba8 ? (uint64_t)img->width * 4 : rowbytes;
	if (img->stride < src_row)
		return KILN_ERR_INVALID_ARG;
	if (rowbytes + 1 > PNG_ENC_STRIP_MAX / 2)
		return KILN_ERR_TOO_LARGE;
	uint64_t chunks_len;
	kiln_status st = check_chunks(img, &chunks_len);
	if (st != KILN_OK)
		return st;

	uint64_t rowlen = rowbytes + 1;
	uint64_t rps = params->single_strip ? img->height
		     : params->rows_per_strip ? params->rows_per_strip : auto_rows(rowlen, params->quality);
	if (rps > img->height)
		rps = img->height;
	if (rps * rowlen > PNG_ENC_STRIP_MAX)
		return KILN_ERR_TOO_LARGE;
	pl->pixels = img->pixels;
	pl->stride = img->stride;
	pl->width = img->width;
	pl->height = img->height;
	pl->rowbytes = (uint32_t)rowbytes;
	pl->bpp = (uint32_t)(bits / img->width / 8) ? (uint32_t)(bits / img->width / 8) : 1;
	pl->color_type = img->color_type;
	pl->bit_depth = img->bit_depth;
	pl->from_rgba8 = img->from_rgba8 ? 1 : 0;
	pl->none_only = img->color_type == KILN_PNG_COLOR_PALETTE || img->bit_depth < 8;
	pl->filter = params->filter;
	pl->quality = (int32_t)params->quality;
	pl->rows_per_strip = (uint32_t)rps;
	pl->strip_count = (uint32_t)((img->height + rps - 1) / rps);
	pl->kist = pl->strip_count > 1;
	pl->chunks_len = chunks_len;
	pl->kist_off = PNG_ENC_HEAD + chunks_len;
	pl->idat_off = pl->kist_off + (pl->kist ? 12 + 20 + 4 * (uint64_t)pl->strip_count : 0);
	uint32_t last_rows = img->height - (pl->strip_count - 1) * (uint32_t)rps;
	pl->strip_cap = png_deflate_strip_bound(rps * rowlen);
	pl->last_cap = png_deflate_strip_bound(last_rows * rowlen);
	pl->bound = pl->idat_off + 2 + 4 + (uint64_t)(pl->strip_count - 1) * (pl->strip_cap + 12) +
		    pl->last_cap + 12 + 12;
	if (pl->bound > SIZE_MAX / 2)
		return KILN_ERR_TOO_LARGE;
	return KILN_OK;
}

size_t kiln_pngenc_source_row_bytes(const kiln_pngenc_image *img)
{
	if (img->from_rgba8)
		return (size_t)img->width * 4;
	uint32_t ch = channels_of(img->color_type);
	return ch ? (size_t)(((uint64_t)img->width * ch * img->bit_depth + 7) / 8) : 0;
}

kiln_status kiln_pngenc_check(const kiln_pngenc_params *params, const kiln_pngenc_image *img)
{
	png_plan pl;
	return png_enc_plan(params, img, &pl);
}

uint32_t kiln_pngenc_rows_per_strip(const kiln_pngenc_params *params, const kiln_pngenc_image *img)
{
	png_plan pl;
	return png_enc_plan(params, img, &pl) == KILN_OK ? pl.rows_per_strip : 0;
}

size_t kiln_pngenc_bound(const kiln_pngenc_params *params, const kiln_pngenc_image *img)
{
	png_plan pl;
	return png_enc_plan(params, img, &pl) == KILN_OK ? (size_t)pl.bound : 0;
}

/* ---- CPU scratch --------------------------------------------------------------------- */

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* One slot, in order: the filtered strip, two converted rows, the tokens (fast, medium: a
 * block's; high: a parse choice per position), and for chain searches the hash head, the
 * chains and (high) the candidates of every position and a filter-trial key per row. */
typedef struct slot_dims {
	uint64_t strip, rowbytes, rows;  /* the largest strip (bytes), row and rows a strip */
} slot_dims;

typedef struct slot_layout {
	size_t rowbuf, tokens, head, prev, cands, keys, total;
} slot_layout;

static slot_layout slot_layout_of(const slot_dims *dim, int quality)
{
	png_defl_level lv = png_defl_level_for(quality);
	slot_layout l;
	l.rowbuf = align64(dim->strip);
	l.tokens = l.rowbuf + align64(2 * dim->rowbytes);
	l.head = l.tokens + align64((lv.optimal ? dim->strip : PNG_DEFL_BLOCK_TOKENS) * sizeof(uint32_t));
	l.prev = l.head + (lv.chain ? align64(PNG_DEFL_HASH_SIZE * sizeof(uint32_t)) : 0);
	l.cands = l.prev + (lv.chain ? align64(dim->strip * sizeof(uint32_t)) : 0);
	l.keys = l.cands + (lv.optimal ? align64(dim->strip * PNG_OPT_CANDS * sizeof(uint32_t)) : 0);
	l.total = l.keys + (lv.optimal ? align64(dim->rows * sizeof(uint64_t)) : 0);
	return l;
}

static void slot_dims_add(slot_dims *dim, const png_plan *pl)
{
	uint64_t n = (uint64_t)pl->rows_per_strip * png_plan_rowlen(pl);
	dim->strip = n > dim->strip ? n : dim->strip;
	dim->rowbytes = pl->rowbytes > dim->rowbytes ? pl->rowbytes : dim->rowbytes;
	dim->rows = pl->rows_per_strip > dim->rows ? pl->rows_per_strip : dim->rows;
}

static unsigned slots_for(const kiln_pool *pool)
{
	return pool ? kiln_pool_threads(pool) : 1;
}

/* Scratch needs of a batch: the slot size and the strip-result bytes. */
static void batch_needs(const kiln_pngenc_params *params, const kiln_pngenc_image *images, size_t count,
			size_t *slot, size_t *results)
{
	slot_dims dim = {0, 0, 0};
	uint64_t strips = 0;
	for (size_t i = 0; i < count; i++) {
		png_plan pl;
		if (png_enc_plan(params, &images[i], &pl) != KILN_OK)
			continue;
		slot_dims_add(&dim, &pl);
		strips += pl.strip_count;
	}
	*slot = strips && params ? slot_layout_of(&dim, (int)params->quality).total : 0;
	*results = align64(strips * sizeof(png_strip_result));
}

size_t kiln_pngenc_cpu_temp_size(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				 size_t count, const kiln_pool *pool)
{
	size_t slot, results;
	batch_needs(params, images, count, &slot, &results);
	return results + slot * slots_for(pool) + 64;
}

/* ---- the batch ----------------------------------------------------------------------- */

typedef struct cpu_run {
	png_plan *plans;
	size_t nplans;
	uint64_t strips;
	png_strip_result *results;
	uint8_t *slots;
	size_t slot_bytes;
	slot_dims dim;
	int quality;
	atomic_uint_fast64_t next;
	const uint32_t *table;
	const kiln_pngenc_params *params;
} cpu_run;

/* The plan holding batch strip k (plans[j].first_strip ascending, plans[0]'s 0). */
static size_t plan_of_strip(const cpu_run *run, uint64_t k)
{
	return kiln_find_last_le(&run->plans[0].first_strip, sizeof run->plans[0], run->nplans, k);
}

static void slot_worker(void *ctx, size_t begin, size_t end)
{
	cpu_run *run = ctx;
	for (size_t slot = begin; slot < end; slot++) {
		uint8_t *filt = run->slots + slot * run->slot_bytes;
		slot_layout l = slot_layout_of(&run->dim, run->quality);
		png_defl_level lv = png_defl_level_for(run->quality);
		uint8_t *rowbuf = filt + l.rowbuf;
		png_defl_scratch s;
		s.tokens = (uint32_t *)(filt + l.tokens);
		s.head = lv.chain ? (uint32_t *)(filt + l.head) : NULL;
		s.prev = lv.chain ? (uint32_t *)(filt + l.prev) : NULL;
		s.cands = lv.optimal ? (uint32_t *)(filt + l.cands) : NULL;
		s.best = NULL;
		uint64_t *keys = lv.optimal ? (uint64_t *)(filt + l.keys) : NULL;
		for (;;) {
			uint64_t k = atomic_fetch_add(&run->next, 1);
			if (k >= run->strips)
				break;
			const png_plan *pl = &run->plans[plan_of_strip(run, k)];
			if (s.head)
				memset(s.head, 0xFF, PNG_DEFL_HASH_SIZE * sizeof(uint32_t));
			png_strip_job(pl, (uint32_t)(k - pl->first_strip), filt, rowbuf, &s, keys, run->table,
				      &run->results[k]);
		}
	}
}

typedef struct cpu_asm {
	cpu_run *run;
	size_t *sizes;  /* per plan */
} cpu_asm;

static int put_host(void *ctx, uint64_t off, const void *p, size_t n)
{
	memcpy((uint8_t *)ctx + off, p, n);
	return 0;
}

static void asm_worker(void *ctx, size_t begin, size_t end)
{
	cpu_asm *a = ctx;
	for (size_t i = begin; i < end; i++) {
		const png_plan *pl = &a->run->plans[i];
		const png_strip_result *res = &a->run->results[pl->first_strip];
		a->sizes[i] = 0;
		int ok = 1;
		for (uint32_t k = 0; k < pl->strip_count; k++)
			ok &= res[k].ok != 0;
		if (!ok)
			continue;
		png_write_head(pl, a->run->table);
		png_asm state;
		png_asm_init(pl, &state);
		for (uint32_t k = 0; k < pl->strip_count; k++) {
			memmove(pl->dst + png_asm_data_off(&state, k), pl->dst + png_plan_work_off(pl, k), res[k].size);
			png_asm_strip(pl, &state, k, &res[k], a->run->table);
		}
		a->sizes[i] = (size_t)png_asm_finish(pl, &state, a->run->table);
	}
}

kiln_status kiln_pngenc_encode_cpu(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				   uint8_t *const *dst, const size_t *dst_caps, size_t *out_sizes,
				   size_t count, kiln_status *status, void *temp, size_t temp_size,
				   kiln_pool *pool)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !images || !dst || !dst_caps || !out_sizes || !status)
		return KILN_ERR_INVALID_ARG;
	size_t slot, results;
	batch_needs(params, images, count, &slot, &results);
	unsigned nslots = slots_for(pool);
	if (!temp || temp_size < results + slot * nslots + 64)
		return KILN_ERR_INVALID_ARG;
	uint8_t *base = (uint8_t *)(((uintptr_t)temp + 63) & ~(uintptr_t)63);

	png_plan plans[PNGENC_CPU_CHUNK];
	size_t index[PNGENC_CPU_CHUNK], sizes[PNGENC_CPU_CHUNK];
	cpu_run run;
	memset(&run, 0, sizeof run);
	run.plans = plans;
	run.results = (png_strip_result *)base;
	run.slots = base + results;
	run.slot_bytes = slot;
	run.quality = (int)params->quality;
	run.table = png_enc_crc_table();
	run.params = params;
	for (size_t at = 0; at < count; at += PNGENC_CPU_CHUNK) {
		size_t n = count - at < PNGENC_CPU_CHUNK ? count - at : PNGENC_CPU_CHUNK;
		run.nplans = 0;
		run.strips = 0;
		memset(&run.dim, 0, sizeof run.dim);
		for (size_t i = at; i < at + n; i++) {
			png_plan *pl = &plans[run.nplans];
			out_sizes[i] = 0;
			status[i] = png_enc_plan(params, &images[i], pl);
			if (status[i] != KILN_OK)
				continue;
			if (!dst[i] || dst_caps[i] < pl->bound) {
				status[i] = KILN_ERR_INVALID_ARG;
				continue;
			}
			pl->dst = dst[i];
			pl->first_strip = run.strips;
			run.strips += pl->strip_count;
			slot_dims_add(&run.dim, pl);
			index[run.nplans++] = i;
			png_enc_put_chunks(&images[i], put_host, dst[i]);
		}
		if (run.nplans == 0)
			continue;
		/* slots laid out for this chunk's largest strip: never more than the batch's */
		run.slot_bytes = slot_layout_of(&run.dim, run.quality).total;
		atomic_store(&run.next, 0);
		unsigned use = nslots;
		if ((uint64_t)use > run.strips)
			use = (unsigned)run.strips;
		kiln_pool_for(pool, use, 1, slot_worker, &run);
		cpu_asm a = {&run, sizes};
		kiln_pool_for(pool, run.nplans, 1, asm_worker, &a);
		for (size_t k = 0; k < run.nplans; k++) {
			out_sizes[index[k]] = sizes[k];
			if (sizes[k] == 0)
				status[index[k]] = KILN_ERR_CORRUPT; /* an overflow: never with the bound */
		}
	}
	return KILN_OK;
}
