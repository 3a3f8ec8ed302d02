// GPU backend of the mip chains. Per level index, one launch covers that level of every
// chain in the batch: one thread per destination texel, running kiln_mip_texel, the same
// function as the CPU backend. The launches queue on the caller's stream in level order,
// so each level reads the one the previous launch wrote. The per-level job descriptors
// are built on the host and copied into d_temp ahead of the first launch; nothing is
// allocated here.
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/mip/mip.h"
#include "kernels/mip/mip_batch.h"
#include "kernels/mip/mip_texel.h"
}
#include "kernels/cuda_util.cuh"

// Descriptors are staged on the host stack and copied in pieces of this many; a batch of
// 32 chains of 14 levels fits in one copy.
#define STAGE_JOBS 512
// kiln_mip_count() of a uint32 size is at most 32.
#define MAX_LEVELS 33

// One texel's RGBA in a single 32-bit store where the address allows it: consecutive
// threads write consecutive texels, so a warp writes 128 contiguous bytes.
__device__ static void store_texel(uint8_t *p, const uint8_t v[4])
{
	if (((uintptr_t)p & 3) == 0) {
		*(uint32_t *)p = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
				 (uint32_t)v[3] << 24;
	} else {
		for (int c = 0; c < 4; c++)
			p[c] = v[c];
	}
}

__global__ void __launch_bounds__(KILN_MIP_GPU_THREADS)
mip_level_kernel(const kiln_mip_job *__restrict__ jobs, uint32_t njobs)
{
	__shared__ uint32_t job_index;
	if (threadIdx.x == 0)
		job_index = kiln_find_first_block(jobs, njobs, blockIdx.x);
	__syncthreads();

	const kiln_mip_job *job = &jobs[job_index];
	kiln_surface src = job->src;
	uint32_t dst_w = kiln_mip_next_size(src.width);
	uint32_t dst_h = kiln_mip_next_size(src.height);
	// the launcher checked that dst_w * dst_h, rounded up to whole blocks, fits in 32 bits
	uint32_t t = (blockIdx.x - job->first_block) * KILN_MIP_GPU_THREADS + threadIdx.x;
	if (t >= dst_w * dst_h)
		return;
	uint32_t y = t / dst_w;
	uint32_t x = t - y * dst_w;
	uint8_t texel[4];
	kiln_mip_texel(&src, x, y, job->srgb, texel);
	store_texel(job->dst + (size_t)y * job->dst_stride + (size_t)x * 4, texel);
}

// Where one launch's jobs lie in d_temp and how many blocks it runs.
typedef struct level_launch {
	size_t first_job;
	uint32_t njobs;
	uint32_t blocks;
} level_launch;

// Pageable host memory: cudaMemcpyAsync has copied (staged) the source by the time it
// returns, so the stack buffer may be refilled right after.
static kiln_status flush(kiln_mip_job *d_jobs, const kiln_mip_job *stage, size_t *staged,
			 size_t *copied, cudaStream_t stream)
{
	if (*staged == 0)
		return KILN_OK;
	cudaError_t err = cudaMemcpyAsync(d_jobs + *copied, stage, *staged * sizeof *stage,
					  cudaMemcpyHostToDevice, stream);
	*copied += *staged;
	*staged = 0;
	return err == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}

// Appends level `level` of every chain that has it; fills in that level's launch.
static kiln_status stage_level(const kiln_mip_chain *chains, size_t nchains, uint32_t level,
			       kiln_mip_job *d_jobs, kiln_mip_job *stage, size_t *staged,
			       size_t *copied, cudaStream_t stream, level_launch *launch)
{
	uint64_t blocks = 0;
	launch->first_job = *copied + *staged;
	launch->njobs = 0;
	for (size_t c = 0; c < nchains; c++) {
		const kiln_mip_chain *chain = &chains[c];
		if (chain->count <= level)
			continue;
		const kiln_surface *dst = &chain->levels[level];
		uint64_t texels = (uint64_t)dst->width * dst->height;
		if (texels > UINT32_MAX - KILN_MIP_GPU_THREADS)  // the kernel's 32-bit texel index
			return KILN_ERR_TOO_LARGE;
		kiln_mip_job *job = &stage[(*staged)++];
		job->src = chain->levels[level - 1];
		job->dst = (uint8_t *)dst->rgba;
		job->dst_stride = dst->stride;
		job->srgb = chain->srgb ? 1 : 0;
		job->first_block = (uint32_t)blocks;
		blocks += (texels + KILN_MIP_GPU_THREADS - 1) / KILN_MIP_GPU_THREADS;
		if (blocks > INT32_MAX)  // the grid's x limit
			return KILN_ERR_TOO_LARGE;
		launch->njobs++;
		if (*staged == STAGE_JOBS) {
			kiln_status st = flush(d_jobs, stage, staged, copied, stream);
			if (st != KILN_OK)
				return st;
		}
	}
	launch->blocks = (uint32_t)blocks;
	return KILN_OK;
}

extern "C" kiln_status kiln_mip_build_gpu(const kiln_mip_chain *chains, size_t nchains,
					  void *d_temp, size_t temp_size, kiln_stream stream)
{
	kiln_status st = kiln_mip_check(chains, nchains);
	if (st != KILN_OK)
		return st;
	uint32_t max_count = 0;
	size_t total_jobs = 0;
	for (size_t c = 0; c < nchains; c++) {
		max_count = chains[c].count > max_count ? chains[c].count : max_count;
		total_jobs += chains[c].count - 1;
	}
	if (total_jobs == 0)
		return KILN_OK;
	if (!d_temp || temp_size / sizeof(kiln_mip_job) < total_jobs ||
	    (uintptr_t)d_temp % alignof(kiln_mip_job) != 0)
		return KILN_ERR_INVALID_ARG;

	// Every descriptor is copied before the first launch, so the copies and the level
	// launches need no interleaving.
	kiln_mip_job *d_jobs = (kiln_mip_job *)d_temp;
	kiln_mip_job stage[STAGE_JOBS];
	level_launch launches[MAX_LEVELS];
	size_t staged = 0, copied = 0;
	for (uint32_t level = 1; level < max_count; level++) {
		st = stage_level(chains, nchains, level, d_jobs, stage, &staged, &copied, stream,
				 &launches[level]);
		if (st != KILN_OK)
			return st;
	}
	st = flush(d_jobs, stage, &staged, &copied, stream);
	if (st != KILN_OK)
		return st;

	for (uint32_t level = 1; level < max_count; level++) {
		const level_launch *l = &launches[level];
		mip_level_kernel<<<l->blocks, KILN_MIP_GPU_THREADS, 0, stream>>>(d_jobs + l->first_job,
										 l->njobs);
		if (cudaGetLastError() != cudaSuccess)
			return KILN_ERR_CUDA;
	}
	return KILN_OK;
}
