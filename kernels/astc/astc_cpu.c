/* The CPU backend of ASTC, and the decoder. The encoder checks every surface of the batch,
 * then runs the per-block functions of astc_enc.h over the blocks of all valid surfaces
 * as one sequence through the thread pool (kernels/blockbatch.h, as bc1_cpu.c does). */
#include <pthread.h>
#include <string.h>

#include "kernels/astc/astc.h"
#include "kernels/astc/astc_block.h"
#include "kernels/astc/astc_enc.h"
#include "kernels/blockbatch.h"

/* Surfaces handled per pool run: their descriptors live on the stack (no allocation). */
#define ASTC_CPU_CHUNK 256

const uint8_t kiln_astc_footprints[KILN_ASTC_FOOTPRINTS][2] = {
	{4, 4}, {5, 4}, {5, 5}, {6, 5}, {6, 6}, {8, 5}, {8, 6},
	{8, 8}, {10, 5}, {10, 6}, {10, 8}, {10, 10}, {12, 10}, {12, 12},
};

/* The encoder's per-footprint tables, built on first use and read-only afterwards. */
static astc_enc_ctx contexts[KILN_ASTC_FOOTPRINTS];
static int contexts_ready[KILN_ASTC_FOOTPRINTS];
static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;

int kiln_astc_footprint_index(uint32_t block_w, uint32_t block_h)
{
	for (int i = 0; i < KILN_ASTC_FOOTPRINTS; i++)
		if (kiln_astc_footprints[i][0] == block_w && kiln_astc_footprints[i][1] == block_h)
			return i;
	return -1;
}

const astc_enc_ctx *astc_enc_context(int fp)
{
	pthread_mutex_lock(&contexts_lock);
	if (!contexts_ready[fp]) {
		astc_enc_ctx_init(&contexts[fp], kiln_astc_footprints[fp][0], kiln_astc_footprints[fp][1]);
		contexts_ready[fp] = 1;
	}
	pthread_mutex_unlock(&contexts_lock);
	return &contexts[fp];
}

/* One surface of a batch; its blocks' place in the batch is a kiln_block_span. */
typedef struct astc_cpu_surface {
	kiln_surface surf;
	uint8_t *dst;
} astc_cpu_surface;

typedef struct astc_cpu_job {
	const astc_enc_ctx *ctx;
	const astc_cpu_surface *surf;
	int quality, srgb;
} astc_cpu_job;

static void encode_block(const void *arg, size_t surface, uint64_t local, uint32_t bx, uint32_t by)
{
	const astc_cpu_job *job = arg;
	const astc_cpu_surface *s = &job->surf[surface];
	astc_enc_block blk;
	astc_enc_load(&s->surf, bx, by, job->ctx->bw, job->ctx->bh, job->srgb, &blk);
	astc_encode_block(job->ctx, &blk, job->quality, s->dst + local * KILN_ASTC_BLOCK_BYTES);
}

static int quality_valid(kiln_quality q)
{
	return q == KILN_QUALITY_FAST || q == KILN_QUALITY_MEDIUM || q == KILN_QUALITY_HIGH;
}

size_t kiln_astc_temp_size(size_t count)
{
	/* the descriptors with their spans and the per-footprint tables, the GPU's lists of
	 * blocks for the later stages, plus room to align */
	return (count ? count : 1) * (sizeof(astc_cpu_surface) + sizeof(kiln_block_span)) +
	       sizeof(astc_enc_ctx) + ASTC_GPU_QUEUE_BYTES + 512;
}

kiln_status kiln_astc_encode_cpu(const kiln_astc_params *params, const kiln_surface *src,
				 uint8_t *const *dst, size_t count, kiln_status *status,
				 kiln_pool *pool)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !src || !dst || !status || !quality_valid(params->quality))
		return KILN_ERR_INVALID_ARG;
	int fp = kiln_astc_footprint_index(params->block_w, params->block_h);
	if (fp < 0)
		return KILN_ERR_INVALID_ARG;
	const astc_enc_ctx *ctx = astc_enc_context(fp);
	astc_cpu_surface desc[ASTC_CPU_CHUNK];
	kiln_block_span span[ASTC_CPU_CHUNK];
	astc_cpu_job job = {ctx, desc, (int)params->quality, params->srgb != 0};
	kiln_blockbatch batch;
	kiln_blockbatch_init(&batch, span, encode_block, &job);
	for (size_t base = 0; base < count; base += ASTC_CPU_CHUNK) {
		size_t n = count - base < ASTC_CPU_CHUNK ? count - base : ASTC_CPU_CHUNK;
		for (size_t i = base; i < base + n; i++) {
			const kiln_surface *s = &src[i];
			uint64_t bx = ((uint64_t)s->width + params->block_w - 1) / params->block_w;
			uint64_t by = ((uint64_t)s->height + params->block_h - 1) / params->block_h;
			if (!s->rgba || !dst[i] || s->width == 0 || s->height == 0 ||
			    (uint64_t)s->stride < 4 * (uint64_t)s->width || bx * by > UINT32_MAX) {
				status[i] = KILN_ERR_INVALID_ARG;
				continue;
			}
			status[i] = KILN_OK;
			desc[batch.count].surf = *s;
			desc[batch.count].dst = dst[i];
			kiln_blockbatch_add(&batch, (uint32_t)bx, bx * by);
		}
		kiln_blockbatch_run(&batch, pool);
	}
	return KILN_OK;
}

void kiln_astc_params_default(kiln_astc_params *params)
{
	params->quality = KILN_QUALITY_MEDIUM;
	params->block_w = 6;
	params->block_h = 6;
	params->srgb = 0;
}

int kiln_astc_footprint_valid(uint32_t block_w, uint32_t block_h)
{
	return kiln_astc_footprint_index(block_w, block_h) >= 0;
}

size_t kiln_astc_bound(uint32_t width, uint32_t height, uint32_t block_w, uint32_t block_h)
{
	if (!kiln_astc_footprint_valid(block_w, block_h))
		return 0;
	uint64_t bx = ((uint64_t)width + block_w - 1) / block_w;
	uint64_t by = ((uint64_t)height + block_h - 1) / block_h;
	uint64_t bytes = bx * by * KILN_ASTC_BLOCK_BYTES; /* < 2^32 * 2^32 / 16 * 16: no wrap */
	if (bytes > SIZE_MAX)
		return 0;
	return (size_t)bytes;
}

kiln_status kiln_astc_decode(const uint8_t *blocks, size_t size, uint32_t width, uint32_t height,
			     uint32_t block_w, uint32_t block_h, int srgb, uint8_t *rgba,
			     size_t stride)
{
	if (!blocks || !rgba || width == 0 || height == 0 || stride / 4 < width ||
	    !kiln_astc_footprint_valid(block_w, block_h))
		return KILN_ERR_INVALID_ARG;
	size_t need = kiln_astc_bound(width, height, block_w, block_h);
	if (need == 0)
		return KILN_ERR_OVERFLOW;
	if (size < need)
		return KILN_ERR_TRUNCATED;
	size_t bw = ((size_t)width + block_w - 1) / block_w, bh = ((size_t)height + block_h - 1) / block_h;
	for (size_t by = 0; by < bh; by++) {
		size_t y0 = by * block_h;
		size_t rows = height - y0 < block_h ? height - y0 : block_h;
		for (size_t bx = 0; bx < bw; bx++) {
			uint8_t texels[ASTC_MAX_TEXELS * 4];
			size_t x0 = bx * block_w;
			size_t cols = width - x0 < block_w ? width - x0 : block_w;
			astc_decode_block(blocks + (by * bw + bx) * KILN_ASTC_BLOCK_BYTES, (int)block_w,
					  (int)block_h, srgb != 0, texels);
			for (size_t y = 0; y < rows; y++)
				memcpy(rgba + (y0 + y) * stride + x0 * 4, texels + 4 * block_w * y, 4 * cols);
		}
	}
	return KILN_OK;
}
