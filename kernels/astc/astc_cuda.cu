// The CUDA backend of ASTC: one kernel launch per batch over the blocks of all its surfaces,
// one thread per block running the stages of astc_encode_block (astc_enc.h), the functions
// the CPU backend runs, on the texels astc_enc_load gives it: same input, same bytes.
//
// Most blocks want only the first stage (one partition, one plane) and some want the
// later ones (second plane; 2-4 partitions), which cost as much again each: run block by
// block, a warp would wait on its slowest block at every stage. Each CTA therefore takes
// a run of blocks (ASTC_GPU_CHUNK at most), runs the first stage over all of them, lists
// in shared memory the blocks that want the next stage, runs that stage over the list
// with every thread, and so on: the threads of a stage all do that stage's work.
//
// The per-footprint encoder context (astc_enc_ctx: block modes, infill taps, partition
// patterns, ~200 KB) is built on the host by astc_enc_ctx_init and copied once per device
// and footprint into a static device array; the kernel reads it through a const
// __restrict__ pointer (read-only data path). A device reset (kiln_gpu_reset after a CUDA
// error) loses that copy: the CUDA context's unique id, read through the driver entry
// points, tells us the context is new and the copy is made again.
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/astc/astc.h"
#include "kernels/astc/astc_block.h"
#include "kernels/astc/astc_enc.h"
}
#include "kernels/cuda_util.cuh"

// Threads (blocks of texels in flight) per CTA, and the CTAs an SM must hold (0: no
// bound), which caps the registers: 768 x 1 gives 80 (65536 / 768, rounded down to 8).
// Large CTAs pool more blocks into each later stage's list (below), so that the threads
// of a warp run the same stage's code on blocks of like cost; fewer registers (the
// encoder's calls spill a few) let more threads hide the local-memory waits. Measured on
// an H100 (batch of 32 Kodak images, kernel only, 2026-11-23, docs/PERFORMANCE.md), in
// Mpix/s at 4x4 / 6x6 / 8x8: fast 605 / 432 / 328 and medium 92.6 / 61.5 / 37.9 with 64
// threads and no bound (128 registers); 768 x 1 (80): fast 788 / 501 / 437 and medium
// 117.1 / 68.3 / 45.5, the best of 256 x 3 and 384 x 2 (80), 256 x 4, 512 and 1024
// (64), 256 and 512 x 1 (128), 32 and 128.
#ifndef ASTC_GPU_THREADS
#define ASTC_GPU_THREADS 768
#endif
#ifndef ASTC_GPU_MIN_CTAS
#define ASTC_GPU_MIN_CTAS 1
#endif
// The most blocks a CTA takes (2 a thread): enough for a later stage's list to keep most
// threads busy. At 768 x 1, 1 a thread ran 4x4 fast 20% and medium 12% slower; with
// 256 x 3, 3 a thread ran every row 2-16% slower. A batch of fewer blocks than the SMs
// can hold at this length takes shorter runs (kiln_astc_encode_gpu), so that it still
// spreads over every SM.
#ifndef ASTC_GPU_CHUNK
#define ASTC_GPU_CHUNK (2 * ASTC_GPU_THREADS)
#endif
#define ASTC_FOOTPRINTS 14
#define ASTC_MAX_DEVICES 64

static const uint8_t footprints[ASTC_FOOTPRINTS][2] = {
	{4, 4}, {5, 4}, {5, 5}, {6, 5}, {6, 6}, {8, 5}, {8, 6},
	{8, 8}, {10, 5}, {10, 6}, {10, 8}, {10, 10}, {12, 10}, {12, 12},
};

// One valid surface of a batch and where its blocks start in the batch's sequence.
struct astc_gpu_surface {
	kiln_surface surf;
	uint8_t *dst;
	uint64_t first_block;
	uint32_t blocks_x;
	uint32_t pad;
};

// The contexts on each device (static device memory: nothing is allocated per call).
__device__ astc_enc_ctx astc_gpu_contexts[ASTC_FOOTPRINTS];

// Host side: the contexts built once, and which device contexts hold a copy of which.
static astc_enc_ctx host_contexts[ASTC_FOOTPRINTS];
static int host_ready[ASTC_FOOTPRINTS];
static struct {
	unsigned long long ctx_id; // CUDA context the copies were made in; 0: none
	uint16_t copied;           // bit f: footprint f is on the device
} device_state[ASTC_MAX_DEVICES];
static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*ctx_get_current_fn)(CUcontext *);
typedef CUresult (*ctx_get_id_fn)(CUcontext, unsigned long long *);
static ctx_get_current_fn ctx_get_current;
static ctx_get_id_fn ctx_get_id;
static int entry_points_tried;

// The id of the current CUDA context, unique for the life of the process; 0 when the
// driver cannot tell (then the context copy is made on every call).
static unsigned long long current_context_id(void)
{
	if (!entry_points_tried) {
		entry_points_tried = 1;
		void *a = NULL, *b = NULL;
		cudaDriverEntryPointQueryResult qa, qb;
		if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &a, 12000, cudaEnableDefault, &qa) ==
			    cudaSuccess &&
		    qa == cudaDriverEntryPointSuccess &&
		    cudaGetDriverEntryPointByVersion("cuCtxGetId", &b, 12000, cudaEnableDefault, &qb) ==
			    cudaSuccess &&
		    qb == cudaDriverEntryPointSuccess) {
			ctx_get_current = (ctx_get_current_fn)a;
			ctx_get_id = (ctx_get_id_fn)b;
		}
		cudaGetLastError();
	}
	CUcontext c = NULL;
	unsigned long long id = 0;
	if (!ctx_get_current || !ctx_get_id || ctx_get_current(&c) != CUDA_SUCCESS || !c ||
	    ctx_get_id(c, &id) != CUDA_SUCCESS)
		return 0;
	return id;
}

static int footprint_index(uint32_t bw, uint32_t bh)
{
	for (int i = 0; i < ASTC_FOOTPRINTS; i++)
		if (footprints[i][0] == bw && footprints[i][1] == bh)
			return i;
	return -1;
}

// The device address of footprint fp's context on the current device, copying it there
// first when this CUDA context does not hold it yet. The copy is synchronous (first use
// only): a launch from another thread that finds the bit set must see the data.
static kiln_status context_on_device(int fp, cudaStream_t stream, const astc_enc_ctx **out)
{
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess)
		return KILN_ERR_CUDA;
	void *base = NULL;
	if (cudaGetSymbolAddress(&base, astc_gpu_contexts) != cudaSuccess)
		return KILN_ERR_CUDA;
	*out = (const astc_enc_ctx *)base + fp;
	kiln_status st = KILN_OK;
	pthread_mutex_lock(&contexts_lock);
	unsigned long long id = current_context_id();
	int slot = dev >= 0 && dev < ASTC_MAX_DEVICES ? dev : -1;
	if (slot >= 0 && device_state[slot].ctx_id != id) {
		device_state[slot].ctx_id = id;
		device_state[slot].copied = 0;
	}
	if (slot < 0 || id == 0 || !(device_state[slot].copied >> fp & 1u)) {
		if (!host_ready[fp]) {
			astc_enc_ctx_init(&host_contexts[fp], footprints[fp][0], footprints[fp][1]);
			host_ready[fp] = 1;
		}
		if (cudaMemcpyToSymbolAsync(astc_gpu_contexts, &host_contexts[fp], sizeof(astc_enc_ctx),
					    (size_t)fp * sizeof(astc_enc_ctx), cudaMemcpyHostToDevice,
					    stream) != cudaSuccess ||
		    cudaStreamSynchronize(stream) != cudaSuccess)
			st = KILN_ERR_CUDA;
		else if (slot >= 0)
			device_state[slot].copied |= (uint16_t)(1u << fp);
	}
	pthread_mutex_unlock(&contexts_lock);
	return st;
}

__device__ static void store_block(uint8_t *dst, const uint8_t out[16])
{
	if (((uintptr_t)dst & 15) == 0) {
		uint4 v;
		memcpy(&v, out, 16);
		*(uint4 *)dst = v;
	} else {
		for (int i = 0; i < 16; i++)
			dst[i] = out[i];
	}
}

#if ASTC_GPU_MIN_CTAS > 0
#define ASTC_GPU_BOUNDS __launch_bounds__(ASTC_GPU_THREADS, ASTC_GPU_MIN_CTAS)
#else
#define ASTC_GPU_BOUNDS __launch_bounds__(ASTC_GPU_THREADS)
#endif

// Where block b of the batch comes from and goes to.
__device__ static uint8_t *locate_block(const astc_enc_ctx *ctx, const astc_gpu_surface *surf, uint32_t count,
					uint64_t b, int srgb, astc_enc_block *blk)
{
	const astc_gpu_surface *d = &surf[kiln_find_first_block(surf, count, b)];
	uint64_t local = b - d->first_block;
	uint32_t bx = (uint32_t)(local % d->blocks_x), by = (uint32_t)(local / d->blocks_x);
	kiln_surface s = d->surf;
	astc_enc_load(&s, bx, by, ctx->bw, ctx->bh, srgb, blk);
	return d->dst + local * KILN_ASTC_BLOCK_BYTES;
}

__device__ static void load_block(const uint8_t *src, uint8_t out[16])
{
	if (((uintptr_t)src & 15) == 0) {
		uint4 v = *(const uint4 *)src;
		memcpy(out, &v, 16);
	} else {
		for (int i = 0; i < 16; i++)
			out[i] = src[i];
	}
}

// The blocks of one CTA that want a stage: their index in the CTA's run and their error.
struct astc_gpu_list {
	uint32_t count;
	uint16_t at[ASTC_GPU_CHUNK];
	uint32_t err[ASTC_GPU_CHUNK];
};

// Puts block `at` of the run on the list of the first stage after `done` that it wants.
__device__ static void want_next(astc_gpu_list *lists, const astc_enc_effort *ef, int done, int n, uint32_t at,
				 uint32_t err, const uint32_t *resid)
{
	for (int stage = done + 1; stage < ASTC_ENC_STAGES; stage++) {
		if (astc_enc_stage_wanted(ef, stage, n, err, resid)) {
			astc_gpu_list *l = &lists[stage - 1];
			uint32_t k = atomicAdd(&l->count, 1u);
			l->at[k] = (uint16_t)at;
			l->err[k] = err;
			return;
		}
	}
}

// A stage's list in order of error, largest first (ties in list order), into *out: the
// gates of a later stage's search depend on the error, so blocks of like error take like
// paths through it, and a warp takes 32 of them at once (medium 4-10% faster than in the
// order the blocks were listed; fast the same; smallest first, 3% less).
__device__ static void sort_by_error(const astc_gpu_list *l, astc_gpu_list *out)
{
	uint32_t n = l->count;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		uint32_t e = l->err[i], rank = 0;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t f = l->err[j];
			rank += f > e || (f == e && j < i);
		}
		out->at[rank] = l->at[i];
		out->err[rank] = e;
	}
	if (threadIdx.x == 0)
		out->count = n;
}

// Blocks [blockIdx.x * run_len, + run_len) of the batch (run_len <= ASTC_GPU_CHUNK), stage
// by stage.
// A thread takes the stage's next block when it is done with one (taken[stage]): the cost
// of a block varies a lot, and a fixed share per thread left the others waiting at the
// stage's barrier. The order of a list depends on timing (before its sort, on ties);
// each block's stages do not.
// One kernel for every quality, an argument: a kernel per quality had tripled the
// compile time for no measured gain.
__global__ void ASTC_GPU_BOUNDS
astc_encode_kernel(const astc_enc_ctx *__restrict__ ctx, const astc_gpu_surface *__restrict__ surf,
		   uint32_t count, uint64_t total, uint32_t run_len, int srgb, int quality)
{
	__shared__ astc_gpu_list lists[ASTC_ENC_STAGES - 1];
	__shared__ astc_gpu_list order;
	__shared__ uint32_t taken[ASTC_ENC_STAGES];
	astc_enc_effort ef;
	astc_enc_effort_of(quality, &ef);
	uint64_t first = (uint64_t)blockIdx.x * run_len;
	uint32_t run = (uint32_t)(total - first < run_len ? total - first : run_len);
	if (threadIdx.x < ASTC_ENC_STAGES - 1)
		lists[threadIdx.x].count = 0;
	if (threadIdx.x < ASTC_ENC_STAGES)
		taken[threadIdx.x] = 0;
	__syncthreads();
	for (uint32_t at = atomicAdd(&taken[0], 1u); at < run; at = atomicAdd(&taken[0], 1u)) {
		astc_enc_block blk;
		uint8_t *dst = locate_block(ctx, surf, count, first + at, srgb, &blk);
		uint8_t out[16];
		uint32_t err, resid[4];
		astc_encode_stage(ctx, &blk, &ef, ASTC_ENC_STAGE_ONE, NULL, out, &err, resid);
		store_block(dst, out);
		want_next(lists, &ef, ASTC_ENC_STAGE_ONE, blk.n, at, err, resid);
	}
	for (int stage = ASTC_ENC_STAGE_ONE + 1; stage < ASTC_ENC_STAGES; stage++) {
		__syncthreads();
		sort_by_error(&lists[stage - 1], &order);
		__syncthreads();
		const astc_gpu_list *l = &order;
		for (uint32_t k = atomicAdd(&taken[stage], 1u); k < l->count; k = atomicAdd(&taken[stage], 1u)) {
			uint32_t at = l->at[k], err = l->err[k];
			astc_enc_block blk;
			uint8_t *dst = locate_block(ctx, surf, count, first + at, srgb, &blk);
			uint8_t out[16];
			load_block(dst, out);
			uint32_t resid[4];
			astc_encode_stage(ctx, &blk, &ef, stage, NULL, out, &err, resid);
			store_block(dst, out);
			want_next(lists, &ef, stage, blk.n, at, err, resid);
		}
	}
}

extern "C" kiln_status kiln_astc_encode_gpu(const kiln_astc_params *params, const kiln_surface *src,
					    uint8_t *const *dst, size_t count, kiln_status *status,
					    void *d_temp, size_t temp_size, kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !src || !dst || !status || !d_temp || temp_size < kiln_astc_temp_size(count) ||
	    temp_size < 255 + count * sizeof(astc_gpu_surface) ||
	    (params->quality != KILN_QUALITY_FAST && params->quality != KILN_QUALITY_MEDIUM &&
	     params->quality != KILN_QUALITY_HIGH) || count > UINT32_MAX)
		return KILN_ERR_INVALID_ARG;
	int fp = footprint_index(params->block_w, params->block_h);
	if (fp < 0)
		return KILN_ERR_INVALID_ARG;
	cudaStream_t s = (cudaStream_t)stream;
	astc_gpu_surface *d_surf = (astc_gpu_surface *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);

	// Descriptors of the valid surfaces go up in stack-sized chunks (a pageable copy this
	// small is staged before cudaMemcpyAsync returns, so the chunk can be refilled at once).
	enum { CHUNK = 64 };
	astc_gpu_surface chunk[CHUNK];
	uint32_t valid = 0, filled = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < count; i++) {
		const kiln_surface *sf = &src[i];
		uint64_t bx = ((uint64_t)sf->width + params->block_w - 1) / params->block_w;
		uint64_t by = ((uint64_t)sf->height + params->block_h - 1) / params->block_h;
		if (!sf->rgba || !dst[i] || sf->width == 0 || sf->height == 0 ||
		    (uint64_t)sf->stride < 4 * (uint64_t)sf->width || bx * by > UINT32_MAX) {
			status[i] = KILN_ERR_INVALID_ARG;
			continue;
		}
		status[i] = KILN_OK;
		astc_gpu_surface *desc = &chunk[filled];
		memset(desc, 0, sizeof *desc);
		desc->surf = *sf;
		desc->dst = dst[i];
		desc->first_block = total;
		desc->blocks_x = (uint32_t)bx;
		total += bx * by;
		if (++filled == CHUNK) {
			if (cudaMemcpyAsync(d_surf + valid, chunk, filled * sizeof *chunk, cudaMemcpyHostToDevice,
					    s) != cudaSuccess)
				return KILN_ERR_CUDA;
			valid += filled;
			filled = 0;
		}
	}
	if (filled) {
		if (cudaMemcpyAsync(d_surf + valid, chunk, filled * sizeof *chunk, cudaMemcpyHostToDevice, s) !=
		    cudaSuccess)
			return KILN_ERR_CUDA;
		valid += filled;
	}
	if (total == 0)
		return KILN_OK;
	const astc_enc_ctx *d_ctx;
	kiln_status st = context_on_device(fp, s, &d_ctx);
	if (st != KILN_OK)
		return st;

	// A CTA per run of blocks and no grid-stride loop: the cost of a run varies a lot,
	// and the hardware scheduler balances many short CTAs better than a loop would. The
	// grid's limit (2^31 - 1 CTAs, 2.7e11 blocks, 4.4 TB of output) is past any batch
	// that fits a device; a larger one is refused rather than left partly unencoded.
	// Runs of ASTC_GPU_CHUNK blocks, or as many as spread the batch over every SM where
	// it is smaller than that.
	int dev = 0, sms = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
		return KILN_ERR_CUDA;
	uint64_t per_sm = (total + (uint64_t)sms - 1) / (uint64_t)sms;
	uint32_t run_len = per_sm < ASTC_GPU_CHUNK ? (uint32_t)per_sm : ASTC_GPU_CHUNK;
	uint64_t need = (total + run_len - 1) / run_len;
	if (need > 0x7fffffffu)
		return KILN_ERR_INVALID_ARG;
	unsigned grid = (unsigned)need;
	int srgb = params->srgb != 0;
	int q = (int)params->quality;
	cudaGetLastError(); // so that the check below sees this launch, not an older error
	astc_encode_kernel<<<grid, ASTC_GPU_THREADS, 0, s>>>(d_ctx, d_surf, valid, total, run_len, srgb, q);
	return cudaGetLastError() == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}

// For the benchmark's report: registers, local memory and occupancy of the kernel
// (declared in astc.h).
extern "C" kiln_status kiln_astc_gpu_kernel_info(int *threads, int *regs, size_t *local_bytes, int *ctas_per_sm)
{
	cudaFuncAttributes a;
	int per_sm = 0;
	if (cudaFuncGetAttributes(&a, astc_encode_kernel) != cudaSuccess ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, astc_encode_kernel, ASTC_GPU_THREADS, 0) !=
		    cudaSuccess)
		return KILN_ERR_CUDA;
	*threads = ASTC_GPU_THREADS;
	*regs = a.numRegs;
	*local_bytes = a.localSizeBytes;
	*ctas_per_sm = per_sm;
	return KILN_OK;
}
