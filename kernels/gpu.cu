// CUDA runtime wrappers behind kernels/gpu.h, so host C never includes cuda_runtime.h.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "kernels/gpu.h"
}

static thread_local char last_error[256];

static kiln_status check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return KILN_OK;
	snprintf(last_error, sizeof last_error, "%s: %s", what, cudaGetErrorString(err));
	if (err == cudaErrorMemoryAllocation)
		return KILN_ERR_NOMEM;
	if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
		return KILN_ERR_NO_GPU;
	return KILN_ERR_CUDA;
}

extern "C" bool kiln_gpu_built(void) { return true; }

extern "C" int kiln_gpu_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError(); /* no driver or no device: not sticky, clear it */
		return 0;
	}
	return n;
}

extern "C" kiln_status kiln_gpu_describe(int index, char *name, size_t name_cap, size_t *total_mem)
{
	cudaDeviceProp prop;
	kiln_status st = check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
	if (st != KILN_OK)
		return st;
	if (name && name_cap)
		snprintf(name, name_cap, "%s", prop.name);
	if (total_mem)
		*total_mem = prop.totalGlobalMem;
	return KILN_OK;
}

extern "C" kiln_status kiln_gpu_use(int index) { return check(cudaSetDevice(index), "cudaSetDevice"); }
extern "C" const char *kiln_gpu_last_error(void) { return last_error; }

extern "C" kiln_status kiln_gpu_malloc(void **ptr, size_t size)
{
	*ptr = NULL;
	return check(cudaMalloc(ptr, size ? size : 1), "cudaMalloc");
}
extern "C" void kiln_gpu_free(void *ptr) { if (ptr) cudaFree(ptr); }
extern "C" kiln_status kiln_gpu_host_alloc(void **ptr, size_t size)
{
	*ptr = NULL;
	return check(cudaMallocHost(ptr, size ? size : 1), "cudaMallocHost");
}
extern "C" void kiln_gpu_host_free(void *ptr) { if (ptr) cudaFreeHost(ptr); }
extern "C" kiln_status kiln_gpu_h2d(void *dst, const void *src, size_t size, kiln_stream stream)
{
	return check(cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(H2D)");
}
extern "C" kiln_status kiln_gpu_d2h(void *dst, const void *src, size_t size, kiln_stream stream)
{
	return check(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(D2H)");
}
extern "C" kiln_status kiln_gpu_memset(void *dst, int value, size_t size, kiln_stream stream)
{
	return check(cudaMemsetAsync(dst, value, size, stream), "cudaMemsetAsync");
}
extern "C" kiln_status kiln_gpu_stream_create(kiln_stream *stream)
{
	return check(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking), "cudaStreamCreate");
}
extern "C" void kiln_gpu_stream_destroy(kiln_stream stream) { if (stream) cudaStreamDestroy(stream); }
extern "C" kiln_status kiln_gpu_stream_sync(kiln_stream stream)
{
	return check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}
extern "C" kiln_status kiln_gpu_reset(void) { return check(cudaDeviceReset(), "cudaDeviceReset"); }

extern "C" kiln_status kiln_gpu_event_create(kiln_event *ev) { return check(cudaEventCreate(ev), "cudaEventCreate"); }
extern "C" void kiln_gpu_event_destroy(kiln_event ev) { if (ev) cudaEventDestroy(ev); }
extern "C" kiln_status kiln_gpu_event_record(kiln_event ev, kiln_stream stream)
{
	return check(cudaEventRecord(ev, stream), "cudaEventRecord");
}
extern "C" kiln_status kiln_gpu_event_elapsed(kiln_event start, kiln_event end, float *ms)
{
	kiln_status st = check(cudaEventSynchronize(end), "cudaEventSynchronize");
	if (st != KILN_OK)
		return st;
	return check(cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime");
}
