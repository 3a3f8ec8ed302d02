/* The CPU backend of BC1, and the decoder. The encoder checks every surface of the batch,
 * then runs the per-block functions of bc1_block.h over the blocks of all valid surfaces
 * as one sequence through the thread pool, so small mip levels leave no thread idle. */
#include <pthread.h>
#include <string.h>

#include "kernels/bc1/bc1.h"
#include "kernels/bc1/bc1_block.h"

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
	size_t count;
	uint64_t total;
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

/* The last surface whose first block is <= block. */
static size_t find_surface(const bc1_cpu_job *job, uint64_t block)
{
	size_t lo = 0, hi = job->count;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (job->surf[mid].first_block <= block)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void encode_range(void *ctx, size_t begin, size_t end)
{
	const bc1_cpu_job *job = ctx;
	size_t si = find_surface(job, begin);
	for (uint64_t b = begin; b < end; b++) {
		while (si + 1 < job->count && job->surf[si + 1].first_block <= b)
			si++;
		const bc1_batch_surface *s = &job->surf[si];
		uint64_t local = b - s->first_block;
		uint32_t bx = (uint32_t)(local % s->blocks_x), by = (uint32_t)(local / s->blocks_x);
		kiln_surface surf = {s->rgba, s->width, s->height, s->stride, s->cutoff != 0};
		bc1_block blk;
		uint32_t out[2];
		bc1_block_load(&surf, bx, by, s->cutoff, &blk);
		bc1_encode_block(&blk, job->quality, candidates16, out);
		bc1_store(s->dst + local * KILN_BC1_BLOCK_BYTES, out);
	}
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
	for (size_t base = 0; base < count; base += BC1_CPU_CHUNK) {
		size_t n = count - base < BC1_CPU_CHUNK ? count - base : BC1_CPU_CHUNK;
		bc1_cpu_job job = {desc, 0, 0, (int)params->quality};
		for (size_t i = base; i < base + n; i++) {
			if (!bc1_describe(&src[i], dst[i], params->alpha_cutoff, &desc[job.count])) {
				status[i] = KILN_ERR_INVALID_ARG;
				continue;
			}
			status[i] = KILN_OK;
			desc[job.count].first_block = job.total;
			job.total += bc1_surface_blocks(&desc[job.count]);
			job.count++;
		}
		if (job.count)
			kiln_pool_for(pool, (size_t)job.total, 0, encode_range, &job);
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
