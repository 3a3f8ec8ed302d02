// The CUDA backend of ASTC: one kernel launch per batch over the blocks of all its surfaces,
// one thread per block running the stages of astc_encode_block (astc_enc.h), the functions
// the CPU backend runs, on the texels astc_enc_load gives it: same input, same bytes.
//
// Most blocks want only the first stage (one partition, one plane) and some want the
// later ones (second plane; 2-4 partitions), which cost as much again each: run block by
// block, a warp would wait on its slowest block at every stage. The grid therefore runs
// the first stage over every block of the batch, lists in global memory the blocks that
// want the next stage, runs that stage over the list with every thread, and so on: the
// threads of a stage all do that stage's work, and a stage that few blocks want is still
// spread over every SM (a later stage runs one block a thread at most, so its time is
// that of its slowest block: per CTA, as this kernel ran before, most threads of an SM
// waited for a few).
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

// the codec's most indexed tables read from shared memory (astc_tables.h)
#define ASTC_TABLES_SHARED
extern "C" {
#include "kernels/astc/astc.h"
#include "kernels/astc/astc_block.h"
#include "kernels/astc/astc_enc.h"
}
#include "kernels/cuda_util.cuh"

#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Threads (blocks of texels in flight) per CTA, and the CTAs an SM must hold (0: no
// bound), which caps the registers: 640 x 1 gives 96 (65536 / 640, rounded down to 8 and
// to what ptxas allocates). Fewer registers (the encoder's calls spill a few) let more
// threads hide the local-memory waits, more registers spill less: measured on an H100
// (batch of 32 Kodak images, kernel only, docs/PERFORMANCE.md), in Mpix/s at 4x4 / 6x6 /
// 8x8, fast then medium: with the later stages listed per CTA (2026-11-23), 64 threads
// and no bound (128 registers) 605 / 432 / 328 and 92.6 / 61.5 / 37.9, 768 x 1 (80) 788 /
// 501 / 437 and 117.1 / 68.3 / 45.5, the best of 256 x 3 and 384 x 2 (80), 256 x 4, 512
// and 1024 (64), 256 and 512 x 1 (128), 32 and 128; with the lists global (2026-11-24),
// 768 x 1 858 / 579 / 417 and 134.5 / 84.7 / 58.3, 640 x 1 (96) 908 / 607 / 422 and
// 137.0 / 88.4 / 59.2, the best of 512 (128), 576 (96) and 672 x 1 (80) (256 x 3 and
// 1024 x 1, with the lists unsorted, 2-12% slower than 768 x 1).
#ifndef ASTC_GPU_THREADS
#define ASTC_GPU_THREADS 640
#endif
// The first stage in runs (the kernel, below): ASTC_GPU_RUN blocks a CTA at a time, the
// next run open once ASTC_GPU_RUN_QUORUM per cent of its threads are done, at footprints
// of at most ASTC_GPU_RUN_TEXELS texels; the last ASTC_GPU_TAIL blocks a thread of the
// grid are left to be taken a thread at a time. Measured on an H100 (batch of 32 Kodak
// images, kernel only, docs/PERFORMANCE.md, 2026-11-24): at 4x4, runs of 640 blocks with
// a tail of 1 and a barrier between runs took fast 917 -> 1,123 and medium 137 -> 144
// Mpix/s (runs of 320 or 1,280, or a tail of 2 or 3, less); the next run open at 90% of
// the threads instead of the barrier, 1,145 and 145.7 (75%: 1,126, 50%: 986); at 5x4,
// 5x5 and 6x5 fast 825 -> 999, 790 -> 865, 712 -> 716 and medium 117.7 -> 126.0, 106.2 ->
// 111.0, 93.1 -> 93.9. At 6x6 and 8x8 runs cost 3-12% (a block's cost varies more there,
// and a run's start waits for most of its blocks), so those take every block a thread at
// a time.
#ifndef ASTC_GPU_RUN
#define ASTC_GPU_RUN ASTC_GPU_THREADS
#endif
#ifndef ASTC_GPU_RUN_TEXELS
#define ASTC_GPU_RUN_TEXELS 30
#endif
#ifndef ASTC_GPU_RUN_QUORUM
#define ASTC_GPU_RUN_QUORUM 90
#endif
#ifndef ASTC_GPU_TAIL
#define ASTC_GPU_TAIL 1
#endif
#ifndef ASTC_GPU_MIN_CTAS
#define ASTC_GPU_MIN_CTAS 1
#endif
#define ASTC_MAX_DEVICES 64

// One valid surface of a batch and where its blocks start in the batch's sequence.
struct astc_gpu_surface {
	kiln_surface surf;
	uint8_t *dst;
	uint64_t first_block;
	uint32_t blocks_x;
	uint32_t pad;
};

// The contexts on each device (static device memory: nothing is allocated per call).
__device__ astc_enc_ctx astc_gpu_contexts[KILN_ASTC_FOOTPRINTS];

// Host side: which device contexts hold a copy of which footprint's context (built once by
// the CPU backend: astc_enc_context).
static struct {
	unsigned long long ctx_id; // CUDA context the copies were made in; 0: none
	uint16_t copied;           // bit f: footprint f is on the device
	unsigned ctas;             // the kernel's cooperative grid on the device; 0: not asked yet
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
		if (cudaMemcpyToSymbolAsync(astc_gpu_contexts, astc_enc_context(fp), sizeof(astc_enc_ctx),
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

// Where block b of the batch comes from (its texels into blk) and goes to.
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

// The blocks of the window that want a later stage (ASTC_ENC_STAGE_ONE + 1 ...): each
// entry a block's index in the window and its error so far; a stage's list is sorted
// into `sorted` before the stage runs. The lists and the counters the threads take work
// from live in the caller's scratch (kiln_astc_temp_size); the counters start at 0.
struct astc_gpu_entry {
	uint32_t at;
	uint32_t err;
};
#define ASTC_GPU_BUCKETS 64
struct astc_gpu_counters {
	uint32_t taken[ASTC_ENC_STAGES]; // next item of each stage's work
	uint32_t listed[ASTC_ENC_STAGES - 1];
	uint32_t hist[ASTC_ENC_STAGES - 1][ASTC_GPU_BUCKETS];
	uint32_t cursor[ASTC_ENC_STAGES - 1][ASTC_GPU_BUCKETS];
};
struct astc_gpu_queue {
	astc_gpu_counters c;
	uint32_t pad[(1024 - sizeof(astc_gpu_counters) % 1024) / 4];
	astc_gpu_entry list[ASTC_ENC_STAGES - 1][ASTC_GPU_WINDOW];
	astc_gpu_entry sorted[ASTC_GPU_WINDOW];
	// a split PARTS stage (encode_split): per sorted entry the key of the item whose
	// encoding the block holds
	unsigned long long key[ASTC_GPU_WINDOW];
};
static_assert(ASTC_GPU_RUN < 2048 && ASTC_GPU_WINDOW <= (1u << 21), "a run's first block and length fit run_ticket's high word");
static_assert(sizeof(astc_gpu_queue) <= ASTC_GPU_QUEUE_BYTES, "kiln_astc_temp_size leaves room for the queue");

// The next item of a counter's work for each calling lane: the lanes of a warp that ask
// at once for the same counter take consecutive items with one atomic. The same counter,
// not just at once: where this function is not inlined, lanes that call it from different
// places (taking a stage's work, listing a block for the next stage) can run it together,
// and grouped by the active mask alone they took items of one lane's counter for all
// (wrong bytes, or a fault, whenever a stage's item was moved out of line).
__device__ static uint32_t take_next(uint32_t *counter)
{
	unsigned mask = __match_any_sync(__activemask(), (unsigned long long)(uintptr_t)counter);
	int lane = threadIdx.x & 31, leader = __ffs(mask) - 1;
	uint32_t base = 0;
	if (lane == leader)
		base = atomicAdd(counter, (uint32_t)__popc(mask));
	base = __shfl_sync(mask, base, leader);
	return base + (uint32_t)__popc(mask & ((1u << lane) - 1u));
}

// Puts block `at` of the window on the list of the first stage after `done` that it wants.
__device__ static void want_next(astc_gpu_queue *q, const astc_enc_effort *ef, int done, int n, uint32_t at,
				 uint32_t err, const uint32_t *resid)
{
	for (int stage = done + 1; stage < ASTC_ENC_STAGES; stage++) {
		if (astc_enc_stage_wanted(ef, stage, n, err, resid)) {
			uint32_t k = take_next(&q->c.listed[stage - 1]);
			q->list[stage - 1][k].at = at;
			q->list[stage - 1][k].err = err;
			return;
		}
	}
}

// The first stage for block `at` of the window that starts at block `first`, and the
// block listed for the next stage it wants. Out of line: the kernel takes the first
// stage's blocks in two ways (below) and the encoder's code stays one copy.
__device__ __noinline__ static void encode_first(const astc_enc_ctx *__restrict__ ctx,
						 const astc_gpu_surface *__restrict__ surf, uint32_t count,
						 uint64_t first, int srgb, const astc_enc_effort *ef,
						 astc_gpu_queue *q, uint32_t at)
{
	astc_enc_block blk;
	uint8_t *dst = locate_block(ctx, surf, count, first + at, srgb, &blk);
	uint8_t out[16];
	uint32_t err, resid[4];
	astc_encode_stage(ctx, &blk, ef, ASTC_ENC_STAGE_ONE, -1, NULL, out, &err, resid);
	store_block(dst, out);
	want_next(q, ef, ASTC_ENC_STAGE_ONE, blk.n, at, err, resid);
}

// The PARTS stage of a split effort (astc_enc_effort.split): every item of every listed
// block (astc_enc_parts_items) is a unit of work, each from the block's error before the
// stage, so that a block's items run side by side instead of one after the other on one
// thread (the last stage's list is about one round of the grid's threads: its blocks'
// time was the stage's). Items are taken kind by kind (every listed block's last item,
// then the one before: the 3- and 4-partition searches first, so that the warps' lanes
// run the same search). An item that improves its block writes its encoding to the
// block's output if its key (error, item) is below the block's key, and sets the key:
// the block ends with the closest, the first of equal errors, as astc_encode_later does
// on the CPU. The key's top bit holds the block while an item compares and writes. The
// keys were set to SPLIT_NONE by sort_by_error.
#define SPLIT_NONE (~0ull >> 1)
#define SPLIT_BUSY (1ull << 63)
static_assert(ASTC_ENC_STAGE_PARTS == ASTC_ENC_STAGES - 1, "a split stage lists no block for a later one");
static_assert(ASTC_ENC_SPLIT_MAX <= 255, "a key names its item in 8 bits");
__device__ static void encode_split(const astc_enc_ctx *__restrict__ ctx, const astc_gpu_surface *__restrict__ surf,
				    uint32_t count, uint64_t first, int srgb, const astc_enc_effort *ef,
				    astc_gpu_queue *q, const astc_gpu_entry *l, uint32_t listed)
{
	int items = astc_enc_parts_items(ef);
	uint32_t ctas = gridDim.x, round = ctas * blockDim.x, work = (uint32_t)items * listed;
	for (uint32_t w = threadIdx.x * ctas + blockIdx.x; w < work; w = round + take_next(&q->c.taken[ASTC_ENC_STAGE_PARTS])) {
		int item = items - 1 - (int)(w / listed);
		uint32_t k = w % listed, err = l[k].err, e = err;
		// (a split item starts from the stage's encoding: none of its own)
		if (!astc_enc_parts_open(ef, item, ctx->bw * ctx->bh, err, NULL))
			continue;
		astc_enc_block blk;
		uint8_t *dst = locate_block(ctx, surf, count, first + l[k].at, srgb, &blk);
		uint8_t cand[16];
		uint32_t resid[4];
		astc_encode_stage(ctx, &blk, ef, ASTC_ENC_STAGE_PARTS, item, NULL, cand, &e, resid);
		unsigned long long key = (unsigned long long)e << 8 | (unsigned)item;
		while (e < err) {
			unsigned long long held = *(volatile unsigned long long *)&q->key[k];
			if (key >= (held & ~SPLIT_BUSY))
				break;
			if (!(held & SPLIT_BUSY) && atomicCAS(&q->key[k], held, held | SPLIT_BUSY) == held) {
				// (the fences order this write after the last holder's, and before the
				// next one's)
				__threadfence();
				store_block(dst, cand);
				__threadfence();
				atomicExch(&q->key[k], key);
				break;
			}
		}
	}
}

// An error's bucket, larger errors in lower buckets: its bit length and the bit below the
// top one.
__device__ static uint32_t error_bucket(uint32_t e)
{
	if (e < 2)
		return ASTC_GPU_BUCKETS - 1 - e;
	int top = 31 - __clz(e);
	return ASTC_GPU_BUCKETS - 1 - (uint32_t)(2 * top + ((e >> (top - 1)) & 1u));
}

// A later stage's list of n entries into q->sorted by error bucket, largest first (a
// counting sort; order within a bucket by timing): the gates of a later stage's search
// depend on the error, so blocks of like error take like paths through it, and a warp
// takes 32 of them at once (with the lists per CTA, sorting them gave medium 4-10%;
// here, against the lists unsorted, fast 0-6% and medium 4-10%). For a split stage
// (encode_split) also sets its first n keys to SPLIT_NONE. Ends with the grid's wait.
__device__ static void sort_by_error(cg::grid_group &grid, astc_gpu_queue *q, int li, uint32_t n, int split)
{
	__shared__ uint32_t counts[ASTC_GPU_BUCKETS], start[ASTC_GPU_BUCKETS];
	const astc_gpu_entry *l = q->list[li];
	uint32_t tid = (uint32_t)(blockIdx.x * blockDim.x + threadIdx.x), all = gridDim.x * blockDim.x;
	if (threadIdx.x < ASTC_GPU_BUCKETS)
		counts[threadIdx.x] = 0;
	__syncthreads();
	for (uint32_t k = tid; k < n; k += all)
		atomicAdd(&counts[error_bucket(l[k].err)], 1u);
	__syncthreads();
	if (threadIdx.x < ASTC_GPU_BUCKETS && counts[threadIdx.x])
		atomicAdd(&q->c.hist[li][threadIdx.x], counts[threadIdx.x]);
	grid.sync();
	if (threadIdx.x == 0) {
		uint32_t at = 0;
		for (int b = 0; b < ASTC_GPU_BUCKETS; b++) {
			start[b] = at;
			at += *(volatile uint32_t *)&q->c.hist[li][b];
		}
	}
	__syncthreads();
	for (uint32_t k = tid; k < n; k += all) {
		astc_gpu_entry e = l[k];
		uint32_t b = error_bucket(e.err);
		q->sorted[start[b] + atomicAdd(&q->c.cursor[li][b], 1u)] = e;
		if (split)
			q->key[k] = SPLIT_NONE;
	}
	grid.sync();
}

// With -DASTC_GPU_STAGE_TIMES (for profiling, e.g. NVEXTRA=-DASTC_GPU_STAGE_TIMES
// tools/astc-variant.sh), each launch prints when each stage started, when its first and
// its last thread ran out of work (the stage's tail) and how many blocks it listed, in
// microseconds from the kernel's start; over several windows the figures span them all.
// Without it the marks are empty.
#ifdef ASTC_GPU_STAGE_TIMES
static_assert(ASTC_ENC_STAGES == 3, "stage_first_idle starts at ~0 for every stage");
__device__ unsigned long long stage_start[ASTC_ENC_STAGES], stage_first_idle[ASTC_ENC_STAGES] = {~0ull, ~0ull, ~0ull},
	stage_last_idle[ASTC_ENC_STAGES];
__device__ uint32_t stage_listed[ASTC_ENC_STAGES];
__device__ static unsigned long long global_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
__device__ static void mark_start(int stage, uint32_t listed)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		stage_start[stage] = global_ns();
		stage_listed[stage] = listed;
	}
}
__device__ static void mark_idle(int stage)
{
	unsigned long long t = global_ns();
	atomicMin(&stage_first_idle[stage], t);
	atomicMax(&stage_last_idle[stage], t);
}
__device__ static void report_stages(int quality, const astc_enc_ctx *ctx)
{
	if (blockIdx.x != 0 || threadIdx.x != 0)
		return;
	unsigned long long t0 = stage_start[0], end = global_ns();
	printf("stagetimes q%d fp%dx%d total %.1f us", quality, ctx->bw, ctx->bh, (double)(end - t0) / 1e3);
	for (int k = 0; k < ASTC_ENC_STAGES; k++) {
		printf(" | s%d start %.1f first idle %.1f last idle %.1f listed %u", k, (double)(stage_start[k] - t0) / 1e3,
		       (double)(stage_first_idle[k] - t0) / 1e3, (double)(stage_last_idle[k] - t0) / 1e3,
		       stage_listed[k]);
		stage_first_idle[k] = ~0ull;
		stage_last_idle[k] = 0;
	}
	printf("\n");
}
#else
#define mark_start(stage, listed) ((void)0)
#define mark_idle(stage) ((void)0)
#define report_stages(quality, ctx) ((void)0)
#endif

// The batch in windows of ASTC_GPU_WINDOW blocks, each stage by stage over the whole grid:
// a thread takes the stage's next item when it is done with one (the cost of a block
// varies a lot; at small footprints the first stage's bulk goes in CTA runs, and a later
// stage's first round is dealt evenly over the CTAs, below), and
// the grid waits for the stage to end before the next begins (a block's later stage
// starts from the encoding and error of its earlier one). The grid is as large as the
// device holds at once (a cooperative launch: grid.sync). The order of a list depends on
// timing; each block's stages do not.
// One kernel for every quality, an argument: a kernel per quality had tripled the
// compile time for no measured gain.
__global__ void ASTC_GPU_BOUNDS
astc_encode_kernel(const astc_enc_ctx *__restrict__ ctx, const astc_gpu_surface *__restrict__ surf,
		   uint32_t count, uint64_t total, int srgb, int quality, astc_gpu_queue *q)
{
	__shared__ unsigned long long run_ticket;
	__shared__ volatile int run_over;
	cg::grid_group grid = cg::this_grid();
	astc_enc_effort ef;
	astc_enc_effort_of(quality, ctx->bw * ctx->bh, &ef);
#ifdef __CUDA_ARCH__
	astc_tables_to_shared();
#endif
	mark_start(ASTC_ENC_STAGE_ONE, (uint32_t)total);
	for (uint64_t first = 0; first < total; first += ASTC_GPU_WINDOW) {
		uint32_t blocks = (uint32_t)(total - first < ASTC_GPU_WINDOW ? total - first : ASTC_GPU_WINDOW);
		// The bulk of the first stage in runs: a CTA takes ASTC_GPU_RUN blocks at once and
		// its threads take them one by one; the next run opens once ASTC_GPU_RUN_QUORUM per
		// cent of the threads are done (the rest join it as they finish). Taken a thread at
		// a time from the whole window, the warps of an SM drift apart in the encoder's code
		// (~150 KB of it runs in this stage) and wait for instructions a third of the time
		// (ncu, 4x4 fast); a run starts most of them together. The runs stop where
		// ASTC_GPU_TAIL blocks a thread of the grid are left: those go a thread at a time,
		// so that the threads' costs even out before the grid's wait.
		// run_ticket holds the open run (its first block << 11 | its length) in the high
		// word and the tickets taken from it in the low one: a ticket below the length is
		// a block of the run, the others are the threads done with it, and the quorum's
		// last opens the next run.
		uint32_t reserve = ASTC_GPU_TAIL * gridDim.x * blockDim.x;
		uint32_t bulk = ctx->bw * ctx->bh <= ASTC_GPU_RUN_TEXELS && blocks > reserve ? blocks - reserve : 0;
		uint32_t quorum = blockDim.x * ASTC_GPU_RUN_QUORUM / 100;
		// (every thread is past the last window's runs: its closing grid.sync)
		if (threadIdx.x == 0) {
			run_ticket = 0;
			run_over = bulk == 0;
		}
		__syncthreads();
		for (;;) {
			unsigned long long t = atomicAdd(&run_ticket, 1ull);
			uint32_t open = (uint32_t)(t >> 32), i = (uint32_t)t, len = open & 2047u;
			if (i < len) {
				encode_first(ctx, surf, count, first, srgb, &ef, q, (open >> 11) + i);
				continue;
			}
			if (run_over)
				break;
			if (i == len + quorum - 1) {
				uint32_t from = *(volatile uint32_t *)&q->c.taken[0] < bulk
							? atomicAdd(&q->c.taken[0], (uint32_t)ASTC_GPU_RUN)
							: UINT32_MAX;
				unsigned long long next = 0;
				if (from >= blocks)
					run_over = 1;
				else
					next = (unsigned long long)(from << 11 | (blocks - from > ASTC_GPU_RUN ? ASTC_GPU_RUN : blocks - from)) << 32;
				__threadfence_block();
				atomicExch(&run_ticket, next);
			} else {
				while ((uint32_t)(*(volatile unsigned long long *)&run_ticket >> 32) == open && !run_over)
					__nanosleep(64);
			}
		}
		for (uint32_t at = take_next(&q->c.taken[0]); at < blocks; at = take_next(&q->c.taken[0]))
			encode_first(ctx, surf, count, first, srgb, &ef, q, at);
		mark_idle(ASTC_ENC_STAGE_ONE);
		for (int stage = ASTC_ENC_STAGE_ONE + 1; stage < ASTC_ENC_STAGES; stage++) {
			grid.sync();
			uint32_t listed = *(volatile uint32_t *)&q->c.listed[stage - 1];
			mark_start(stage, listed);
			int split = stage == ASTC_ENC_STAGE_PARTS && ef.split;
			sort_by_error(grid, q, stage - 1, listed, split);
			const astc_gpu_entry *l = q->sorted;
			// The list's first round, a block for each thread of the grid, is dealt: block k
			// to thread k / CTAs of CTA k % CTAs, so that every SM gets an even share of it,
			// in full warps of neighbouring errors (the list is sorted); the rest is taken as
			// threads finish. Where a list is no longer than that round (fast's later stages,
			// medium's second plane from 6x6 on), the stage lasts as long as its slowest SM:
			// taken as threads came for it, such a list went to whichever warps asked first,
			// unevenly over the SMs (fast 8x8: the 9,895 blocks of 2 partitions up to 480 a
			// CTA, 47 of the 132 CTAs none; dealt, 74-75 each). Measured on an H100 (batch of
			// 32 Kodak images, kernel only, docs/PERFORMANCE.md, session 23): fast 4x4 / 6x6 /
			// 8x8 1,149 -> 1,164, 618 -> 655, 422 -> 489 Mpix/s, medium 8x8 58.6 -> 60.2, 4x4
			// and 6x6 within 1%; spread over every warp instead (a few lanes each, every SM's
			// warps busy) 13% slower at fast 8x8 (more threads' local memory in use on each
			// SM).
			uint32_t ctas = gridDim.x, round = ctas * blockDim.x;
			if (split) {
				encode_split(ctx, surf, count, first, srgb, &ef, q, l, listed);
				mark_idle(stage);
				continue;
			}
			for (uint32_t k = threadIdx.x * ctas + blockIdx.x; k < listed; k = round + take_next(&q->c.taken[stage])) {
				uint32_t at = l[k].at, err = l[k].err;
				astc_enc_block blk;
				uint8_t *dst = locate_block(ctx, surf, count, first + at, srgb, &blk);
				uint8_t out[16];
				load_block(dst, out);
				uint32_t resid[4];
				astc_encode_stage(ctx, &blk, &ef, stage, -1, NULL, out, &err, resid);
				store_block(dst, out);
				want_next(q, &ef, stage, blk.n, at, err, resid);
			}
			mark_idle(stage);
		}
		// the counters start again at 0 for the next window, once every thread is past them
		grid.sync();
		if (blockIdx.x == 0)
			for (uint32_t i = threadIdx.x; i < sizeof q->c / 4; i += blockDim.x)
				((uint32_t *)&q->c)[i] = 0;
		grid.sync();
	}
	report_stages(quality, ctx);
}

// The CTAs of the kernel the current device holds at once, asked of the driver once per
// device (three queries: a few microseconds a batch otherwise).
static kiln_status cooperative_grid(unsigned *ctas)
{
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess)
		return KILN_ERR_CUDA;
	int slot = dev >= 0 && dev < ASTC_MAX_DEVICES ? dev : -1;
	pthread_mutex_lock(&contexts_lock);
	*ctas = slot >= 0 ? device_state[slot].ctas : 0;
	pthread_mutex_unlock(&contexts_lock);
	if (*ctas)
		return KILN_OK;
	int sms = 0, coop = 0, per_sm = 0;
	if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0 ||
	    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || !coop ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, astc_encode_kernel, ASTC_GPU_THREADS, 0) !=
		    cudaSuccess ||
	    per_sm <= 0)
		return KILN_ERR_CUDA;
	*ctas = (unsigned)(sms * per_sm);
	if (slot >= 0) {
		pthread_mutex_lock(&contexts_lock);
		device_state[slot].ctas = *ctas;
		pthread_mutex_unlock(&contexts_lock);
	}
	return KILN_OK;
}

extern "C" kiln_status kiln_astc_encode_gpu(const kiln_astc_params *params, const kiln_surface *src,
					    uint8_t *const *dst, size_t count, kiln_status *status,
					    void *d_temp, size_t temp_size, kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !src || !dst || !status || !d_temp || temp_size < kiln_astc_temp_size(count) ||
	    temp_size < 2 * 255 + count * sizeof(astc_gpu_surface) + sizeof(astc_gpu_queue) ||
	    (params->quality != KILN_QUALITY_FAST && params->quality != KILN_QUALITY_MEDIUM &&
	     params->quality != KILN_QUALITY_HIGH) || count > UINT32_MAX)
		return KILN_ERR_INVALID_ARG;
	int fp = kiln_astc_footprint_index(params->block_w, params->block_h);
	if (fp < 0)
		return KILN_ERR_INVALID_ARG;
	cudaStream_t s = (cudaStream_t)stream;
	astc_gpu_surface *d_surf = (astc_gpu_surface *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);
	astc_gpu_queue *d_queue = (astc_gpu_queue *)(((uintptr_t)(d_surf + count) + 255) & ~(uintptr_t)255);

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

	// One cooperative launch of as many CTAs as the device holds at once (the kernel
	// waits for every CTA at each stage's end); its counters start at 0.
	unsigned ctas = 0;
	st = cooperative_grid(&ctas);
	if (st != KILN_OK)
		return st;
	if (cudaMemsetAsync(d_queue, 0, sizeof(astc_gpu_counters), s) != cudaSuccess)
		return KILN_ERR_CUDA;
	int srgb = params->srgb != 0;
	int q = (int)params->quality;
	uint32_t nsurf = valid;
	void *args[] = {(void *)&d_ctx, (void *)&d_surf, (void *)&nsurf, (void *)&total, (void *)&srgb, (void *)&q,
			(void *)&d_queue};
	cudaGetLastError(); // so that the check below sees this launch, not an older error
	if (cudaLaunchCooperativeKernel((const void *)astc_encode_kernel, dim3(ctas),
					dim3(ASTC_GPU_THREADS), args, 0, s) != cudaSuccess)
		return KILN_ERR_CUDA;
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
