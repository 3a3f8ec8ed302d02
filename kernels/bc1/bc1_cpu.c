/* The CPU backend of BC1, and the decoder. The encoder checks every surface of the batch,
 * then runs the per-block functions of bc1_block.h over the blocks of all valid surfaces
 * as one sequence through the thread pool (kernels/blockbatch.h), so small mip levels
 * leave no thread idle. */
#include <pthread.h>
#include <string.h>

#include "kernels/bc1/bc1.h"
#include "kernels/bc1/bc1_block.h"
#include "kernels/blockbatch.h"

/* Surfaces handled per pool run: their descriptors live on the stack (no allocation). */
#define BC1_CPU_CHUNK 256

/* The cluster-fit candidates for 16 texels with their coefficients, computed once. */
static bc1_candidate candidates16[BC1_CANDIDATES];
static pthread_once_t candidates16_once = PTHREAD_ONCE_INIT;

static void candidates16_init(void)
{
	for (int i = 0; i < BC1_CANDIDATES; i++)
		bc1_candidate_make(bc1_candidates[i], 16, &candidates16[i]);
}

typedef struct bc1_cpu_job {
	const bc1_batch_surface *surf;
	int quality;
} bc1_cpu_job;

void kiln_bc1_params_default(kiln_bc1_params *params)
{
	params->quality = KILN_QUALITY_HIGH;
	params->alpha_cutoff = 128;
}

size_t kiln_bc1_bound(uint32_t width, uint32_t height)
{
	return (size_t)(((uint64_t)width + 3) / 4 * (((uint64_t)height + 3) / 4) * KILN_BC1_BLOCK_BYTES);
}

size_t kiln_bc1_temp_size(size_t count)
{
	/* the descriptors, plus room to align their start */
	return (count ? count : 1) * sizeof(bc1_batch_surface) + 256;
}

static void encode_block(const void *ctx, size_t surface, uint64_t local, uint32_t bx, uint32_t by)
{
	const bc1_cpu_job *job = ctx;
	const bc1_batch_surface *s = &job->surf[surface];
	kiln_surface surf = {s->rgba, s->width, s->height, s->stride, s->cutoff != 0};
	bc1_block blk;
	uint32_t out[2];
	bc1_block_load(&surf, bx, by, s->cutoff, &blk);
	bc1_encode_block(&blk, job->quality, candidates16, out);
	bc1_store(s->dst + local * KILN_BC1_BLOCK_BYTES, out);
}

static int quality_valid(kiln_quality q)
{
	return q == KILN_QUALITY_FAST || q == KILN_QUALITY_MEDIUM || q == KILN_QUALITY_HIGH;
}

kiln_status kiln_bc1_encode_cpu(const kiln_bc1_params *params, const kiln_surface *src,
				uint8_t *const *dst, size_t count, kiln_status *status,
				kiln_pool *pool)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !src || !dst || !status || !quality_valid(params->quality))
		return KILN_ERR_INVALID_ARG;
	pthread_once(&candidates16_once, candidates16_init);
	bc1_batch_surface desc[BC1_CPU_CHUNK];
	kiln_block_span span[BC1_CPU_CHUNK];
	bc1_cpu_job job = {desc, (int)params->quality};
	kiln_blockbatch batch;
	kiln_blockbatch_init(&batch, span, encode_block, &job);
	for (size_t base = 0; base < count; base += BC1_CPU_CHUNK) {
		size_t n = count - base < BC1_CPU_CHUNK ? count - base : BC1_CPU_CHUNK;
		for (size_t i = base; i < base + n; i++) {
			bc1_batch_surface *d = &desc[batch.count];
			if (!bc1_describe(&src[i], dst[i], params->alpha_cutoff, d)) {
				status[i] = KILN_ERR_INVALID_ARG;
				continue;
			}
			status[i] = KILN_OK;
			d->first_block = batch.total;
			kiln_blockbatch_add(&batch, d->blocks_x, bc1_surface_blocks(d));
		}
		kiln_blockbatch_run(&batch, pool);
	}
	return KILN_OK;
}

kiln_status kiln_bc1_decode(const uint8_t *blocks, size_t size, uint32_t width, uint32_t height,
			    int punch_through, uint8_t *rgba, size_t stride)
{
	if (!blocks || !rgba || width == 0 || height == 0 || stride / 4 < width)
		return KILN_ERR_INVALID_ARG;
	if (size < kiln_bc1_bound(width, height))
		return KILN_ERR_TRUNCATED;
	size_t bw = ((size_t)width + 3) / 4, bh = ((size_t)height + 3) / 4;
	for (size_t by = 0; by < bh; by++) {
		size_t rows = height - 4 * by < 4 ? height - 4 * by : 4;
		for (size_t bx = 0; bx < bw; bx++) {
			uint8_t texels[64];
			size_t cols = width - 4 * bx < 4 ? width - 4 * bx : 4;
			bc1_decode_block(blocks + (by * bw + bx) * KILN_BC1_BLOCK_BYTES, punch_through, texels);
			for (size_t y = 0; y < rows; y++)
				memcpy(rgba + (4 * by + y) * stride + bx * 16, texels + 16 * y, 4 * cols);
		}
	}
	return KILN_OK;
}
