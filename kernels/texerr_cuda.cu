// kiln_texerr on the GPU (kernels/texerr.h): the per-block step of texerr_block.h, a
// grid of TE_CHUNKS CTAs a job, each thread a block at a time, sums reduced in the warp
// and added to the job's entry.
#include <cuda_runtime.h>

extern "C" {
#include "kernels/texerr.h"
}
#include "kernels/texerr_block.h"

#define TE_THREADS 256
#define TE_CHUNKS 16 // CTAs a job: a batch of 32 Kodak-size levels gives 512 CTAs

__global__ void __launch_bounds__(TE_THREADS) texerr_kernel(const kiln_texerr_job *jobs, kiln_texerr *out)
{
	const kiln_texerr_job j = jobs[blockIdx.y];
	uint64_t blocks = kiln_texerr_blocks(&j), sse = 0, n = 0;
	for (uint64_t b = (uint64_t)blockIdx.x * TE_THREADS + threadIdx.x; b < blocks; b += (uint64_t)TE_CHUNKS * TE_THREADS)
		kiln_texerr_block(&j, b, &sse, &n);
	for (int d = 16; d > 0; d >>= 1) {
		sse += __shfl_down_sync(0xFFFFFFFFu, sse, d);
		n += __shfl_down_sync(0xFFFFFFFFu, n, d);
	}
	if ((threadIdx.x & 31) == 0 && n) {
		atomicAdd((unsigned long long *)&out[blockIdx.y].sse, (unsigned long long)sse);
		atomicAdd((unsigned long long *)&out[blockIdx.y].texels, (unsigned long long)n);
	}
}

extern "C" size_t kiln_texerr_temp_size(size_t count)
{
	return count * sizeof(kiln_texerr_job) + 256;
}

extern "C" kiln_status kiln_texerr_gpu(const kiln_texerr_job *jobs, size_t count, kiln_texerr *d_out, void *d_temp,
				       size_t temp_size, kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!jobs || !d_out || !d_temp || temp_size < kiln_texerr_temp_size(count) || count > 65535)
		return KILN_ERR_INVALID_ARG;
	cudaStream_t s = (cudaStream_t)stream;
	kiln_texerr_job *d_jobs = (kiln_texerr_job *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);
	// a pageable copy is staged before cudaMemcpyAsync returns: jobs may go at once
	if (cudaMemcpyAsync(d_jobs, jobs, count * sizeof *jobs, cudaMemcpyHostToDevice, s) != cudaSuccess ||
	    cudaMemsetAsync(d_out, 0, count * sizeof *d_out, s) != cudaSuccess)
		return KILN_ERR_CUDA;
	cudaGetLastError(); // so that the check below sees this launch, not an older error
	texerr_kernel<<<dim3(TE_CHUNKS, (unsigned)count), TE_THREADS, 0, s>>>(d_jobs, d_out);
	return cudaGetLastError() == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}
