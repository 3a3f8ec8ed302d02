// The CUDA backend of BC1: one kernel launch per batch over the blocks of all its surfaces.
// The per-block logic is bc1_block.h, the same code the CPU backend runs. `high` gives each
// block a warp: the lanes split the texel sort, the 32 candidate groups of the coarse search
// (lane g computes group g's winner, exactly the CPU's bc1_group_winner) and the endpoint
// moves of the local search, and every reduction picks the lowest error with ties to the
// lowest candidate, as the CPU loops do. For all-opaque blocks the exact scoring of a
// candidate and of a move uses a GPU-only nearest-entry search (__dp4a on packed texels)
// that computes the same integers as bc1_assign_span. `fast` and `medium` run one thread
// per block.
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/bc1/bc1.h"
#include "kernels/bc1/bc1_block.h"
}
#include "kernels/cuda_util.cuh"

#define FULL_MASK 0xffffffffu
#define HIGH_WARPS 8        // warps (blocks in flight) per CTA of the high kernel
#define SIMPLE_THREADS 128  // threads per CTA of the fast/medium kernel
#define HIGH_MIN_CTAS 4     // high-kernel CTAs per SM: caps it at 64 registers (50% occupancy);
                            // 5 (48 registers) spilled and ran 3% slower on the H100

// Per-warp scratch of the high kernel: the sorted prefix sums (rows read as float4) and
// the block.
struct __align__(16) high_scratch {
	bc1_sorted s;
	__align__(16) bc1_block blk; // texels read as uint4 by the all-opaque fast path
};

// Texel i of block (bx, by), clamped to the surface as bc1_block_load does; word loads
// where the rows allow them.
__device__ static uint32_t load_texel(const bc1_batch_surface *d, uint32_t bx, uint32_t by, int i)
{
	uint32_t x = 4 * bx + (uint32_t)(i & 3), y = 4 * by + (uint32_t)(i >> 2);
	x = x < d->width ? x : d->width - 1;
	y = y < d->height ? y : d->height - 1;
	const uint8_t *p = d->rgba + (uint64_t)y * d->stride + (uint64_t)x * 4;
	if (d->aligned4)
		return __ldg((const uint32_t *)p);
	return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8 | (uint32_t)__ldg(p + 2) << 16 |
	       (uint32_t)__ldg(p + 3) << 24;
}

__device__ static void store_block(uint8_t *dst, const uint32_t out[2])
{
	if (((uintptr_t)dst & 7) == 0)
		*(uint2 *)dst = make_uint2(out[0], out[1]);
	else
		bc1_store(dst, out);
}

// Locates block b of the batch: its surface and position.
__device__ static const bc1_batch_surface *locate(const bc1_batch_surface *surf, uint32_t count,
						  uint64_t b, uint32_t *bx, uint32_t *by, uint8_t **dst)
{
	const bc1_batch_surface *d = &surf[kiln_find_first_block(surf, count, b)];
	uint32_t local = (uint32_t)(b - d->first_block); // bc1_describe: < 2^32 blocks a surface
	*bx = local % d->blocks_x;
	*by = local / d->blocks_x;
	*dst = d->dst + (uint64_t)local * KILN_BC1_BLOCK_BYTES;
	return d;
}

template <int quality>
__global__ void __launch_bounds__(SIMPLE_THREADS)
bc1_simple_kernel(const bc1_batch_surface *surf, uint32_t count, uint64_t total)
{
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < total; b += step) {
		uint32_t bx, by;
		uint8_t *dst;
		const bc1_batch_surface *d = locate(surf, count, b, &bx, &by, &dst);
		bc1_block blk;
		blk.opaque = 0;
#pragma unroll
		for (int i = 0; i < 16; i++) {
			blk.rgba[i] = load_texel(d, bx, by, i);
			blk.opaque |= (uint32_t)((blk.rgba[i] >> 24) >= d->cutoff) << i;
		}
		uint32_t out[2];
		if (quality == KILN_QUALITY_FAST)
			bc1_encode_fast(&blk, out);
		else
			bc1_encode_medium(&blk, out);
		store_block(dst, out);
	}
}

// Lexicographic minimum of (err, id) over the warp; every lane gets the result.
__device__ static void warp_argmin(uint32_t *err, uint32_t *id)
{
#pragma unroll
	for (int off = 16; off > 0; off >>= 1) {
		uint32_t e = __shfl_xor_sync(FULL_MASK, *err, off);
		uint32_t i = __shfl_xor_sync(FULL_MASK, *id, off);
		if (e < *err || (e == *err && i < *id)) {
			*err = e;
			*id = i;
		}
	}
}

__device__ static void broadcast_fit(bc1_fit *fit, int src)
{
	fit->c0 = __shfl_sync(FULL_MASK, fit->c0, src);
	fit->c1 = __shfl_sync(FULL_MASK, fit->c1, src);
	fit->indices = __shfl_sync(FULL_MASK, fit->indices, src);
	fit->error = __shfl_sync(FULL_MASK, fit->error, src);
	fit->four = __shfl_sync(FULL_MASK, fit->four, src);
}

// bc1_sort with the lanes: lane i ranks texel i by shuffles, then a warp scan builds the
// prefix rows. The integer sums are the same as the CPU's running sums, so the rows are.
__device__ static void sort_warp(high_scratch *w, uint32_t texel, const float axis[3], int lane)
{
	uint32_t opaque = w->blk.opaque;
	float key = bc1_key(texel, axis);
	int rank = 0;
#pragma unroll
	for (int j = 0; j < 16; j++) {
		float kj = __shfl_sync(FULL_MASK, key, j);
		rank += (int)((opaque >> j & 1u) && bc1_before(kj, j, key, lane));
	}
	if (lane < 16 && (opaque >> lane & 1u))
		w->s.order[rank] = (uint8_t)lane;
	__syncwarp();
	int n = __popc(opaque);
	uint32_t t = lane < n ? w->blk.rgba[w->s.order[lane]] : 0;
	int32_t sum[3];
#pragma unroll
	for (int c = 0; c < 3; c++) {
		sum[c] = (int32_t)bc1_channel(t, c);
#pragma unroll
		for (int off = 1; off < 16; off <<= 1) {
			int32_t v = __shfl_up_sync(FULL_MASK, sum[c], off);
			if (lane >= off)
				sum[c] += v;
		}
	}
	if (lane < n)
		bc1_prefix_row(&w->s, lane + 1, sum);
	if (lane == 0) {
		const int32_t zero[3] = {0, 0, 0};
		bc1_prefix_row(&w->s, 0, zero);
	}
	__syncwarp();
	if (lane == 0)
		bc1_prefix_finish(&w->s, n);
	__syncwarp();
}

// bc1_group_winner for group g, with the rows and the candidate table read as float4 from
// shared memory: the same candidates in the same order, scored by the same function.
__device__ static int group_winner_warp(const high_scratch *w, const float4 *table, int g)
{
	const float4 *rows = (const float4 *)w->s.prefixf;
	int n = w->s.n;
	float4 t4 = rows[n];
	const float t[3] = {t4.x, t4.y, t4.z};
	float total_sq = w->s.total_sq;
	int winner = -1;
	float best = 0.0f;
	for (int i = g; i < BC1_CANDIDATES; i += BC1_GROUPS) {
		float4 e = table[i];
		bc1_candidate k = {e.x, e.y, e.z, __float_as_uint(e.w)};
		if (n != 16 && !bc1_candidate_make(k.code, n, &k))
			continue;
		float4 a = rows[k.code & 31u], b = rows[k.code >> 5 & 31u], c = rows[k.code >> 10 & 31u];
		const float p0[3] = {a.x, a.y, a.z}, p1[3] = {b.x, b.y, b.z}, p2[3] = {c.x, c.y, c.z};
		float gain = bc1_candidate_gain(p0, p1, p2, t, total_sq, &k);
		if (winner < 0 || gain > best) {
			winner = i;
			best = gain;
		}
	}
	return winner;
}

// ---- Fully opaque blocks (every Kodak block that is not solid): GPU-only forms of the
// shared functions that compute exactly the same integers with fewer instructions. ----

// The palette of (c0, c1, four) for fast_assign: entry k as packed RGB bytes (alpha 0) and
// q[k] = 4 * |p_k|^2 + k. For a texel t, |t - p_k|^2 = |t|^2 + |p_k|^2 - 2 t.p_k, so
// q[k] - 8 t.p_k = 4 (|t - p_k|^2 - |t|^2) + k: its minimum over k is the nearest entry,
// ties to the lowest k, exactly bc1_assign_span's choice. A 3-colour palette's index 3
// (never given to an opaque texel) gets a key no texel reaches.
struct fast_pal {
	uint32_t p[4];
	int32_t q[4];
};

__device__ __forceinline__ static void fast_palette(uint32_t c0, uint32_t c1, int four, fast_pal *fp)
{
	int pal[4][3];
	bc1_palette(c0, c1, four, pal);
#pragma unroll
	for (int k = 0; k < 4; k++) {
		fp->p[k] = (uint32_t)pal[k][0] | (uint32_t)pal[k][1] << 8 | (uint32_t)pal[k][2] << 16;
		fp->q[k] = 4 * (pal[k][0] * pal[k][0] + pal[k][1] * pal[k][1] + pal[k][2] * pal[k][2]) + k;
	}
	if (!four) {
		fp->p[3] = 0;
		fp->q[3] = INT32_MAX;
	}
}

// Nearest entry of texel t (any alpha: the palette's alpha bytes are 0): the packed key
// 4 (d_k - |t|^2) + k of the winner.
__device__ __forceinline__ static int32_t fast_key(uint32_t t, const fast_pal *fp)
{
	int32_t k0 = fp->q[0] - 8 * (int32_t)__dp4a(t, fp->p[0], 0u);
	int32_t k1 = fp->q[1] - 8 * (int32_t)__dp4a(t, fp->p[1], 0u);
	int32_t k2 = fp->q[2] - 8 * (int32_t)__dp4a(t, fp->p[2], 0u);
	int32_t k3 = fp->q[3] - 8 * (int32_t)__dp4a(t, fp->p[3], 0u);
	return min(min(k0, k1), min(k2, k3));
}

// bc1_assign over QUADS * 4 consecutive texels of an all-opaque block, read as uint4
// quads; tt = sum of |t|^2 over them. Indices come back from bit 0.
template <int QUADS>
__device__ __forceinline__ static uint32_t fast_assign_quads(const uint4 *v, uint32_t c0, uint32_t c1,
							     int four, int32_t tt, uint32_t *indices)
{
	fast_pal fp;
	fast_palette(c0, c1, four, &fp);
	int32_t err = tt;
	uint32_t idx = 0;
#pragma unroll
	for (int q = 0; q < QUADS; q++) {
		uint4 t = v[q];
		const uint32_t tq[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int32_t key = fast_key(tq[j], &fp);
			err += key >> 2;
			idx |= (uint32_t)(key & 3) << (2 * (4 * q + j));
		}
	}
	*indices = idx;
	return (uint32_t)err;
}

// bc1_assign over all 16 texels of an all-opaque block; tt16 = sum of |t|^2 over them.
__device__ __forceinline__ static uint32_t fast_assign16(const uint32_t *rgba, uint32_t c0, uint32_t c1,
							 int four, int32_t tt16, uint32_t *indices)
{
	return fast_assign_quads<4>((const uint4 *)rgba, c0, c1, four, tt16, indices);
}

// bc1_assign_span over texels [8 * half, 8 * half + 8) of an all-opaque block; tt8 = sum
// of |t|^2 over them. The indices come back in place (shifted by 16 * half).
__device__ __forceinline__ static uint32_t fast_assign8(const uint32_t *rgba, int half, uint32_t c0,
							uint32_t c1, int four, int32_t tt8, uint32_t *indices)
{
	uint32_t err = fast_assign_quads<2>((const uint4 *)rgba + 2 * half, c0, c1, four, tt8, indices);
	*indices <<= 16 * half;
	return err;
}

// group_winner_warp for n == 16 (every candidate applies): the same gains in the same
// order, without the per-candidate applicability test.
__device__ static int group_winner16(const high_scratch *w, const float4 *table, int g)
{
	const float4 *rows = (const float4 *)w->s.prefixf;
	float4 t4 = rows[16];
	const float t[3] = {t4.x, t4.y, t4.z};
	float total_sq = w->s.total_sq;
	int winner = g;
	float best = 0.0f;
	{
		float4 e = table[g];
		bc1_candidate k = {e.x, e.y, e.z, __float_as_uint(e.w)};
		float4 a = rows[k.code & 31u], b = rows[k.code >> 5 & 31u], c = rows[k.code >> 10 & 31u];
		const float p0[3] = {a.x, a.y, a.z}, p1[3] = {b.x, b.y, b.z}, p2[3] = {c.x, c.y, c.z};
		best = bc1_candidate_gain(p0, p1, p2, t, total_sq, &k);
	}
#pragma unroll 4
	for (int i = g + BC1_GROUPS; i < BC1_CANDIDATES; i += BC1_GROUPS) {
		float4 e = table[i];
		bc1_candidate k = {e.x, e.y, e.z, __float_as_uint(e.w)};
		float4 a = rows[k.code & 31u], b = rows[k.code >> 5 & 31u], c = rows[k.code >> 10 & 31u];
		const float p0[3] = {a.x, a.y, a.z}, p1[3] = {b.x, b.y, b.z}, p2[3] = {c.x, c.y, c.z};
		float gain = bc1_candidate_gain(p0, p1, p2, t, total_sq, &k);
		if (gain > best) {
			winner = i;
			best = gain;
		}
	}
	return winner;
}

// bc1_candidate_fit for n == 16 with fast_assign16.
__device__ __forceinline__ static int candidate_fit16(const high_scratch *w, uint32_t code, int32_t tt16,
						       bc1_fit *fit)
{
	int32_t A, B, AB;
	if (!bc1_candidate_system(code, 16, &A, &B, &AB))
		return 0;
	int four = !(code >> 15);
	int32_t wt = four ? 3 : 2, Ax[3], Bx[3];
	int4 r0 = ((const int4 *)w->s.prefix)[code & 31u], r1 = ((const int4 *)w->s.prefix)[code >> 5 & 31u];
	int4 r2 = ((const int4 *)w->s.prefix)[code >> 10 & 31u], rt = ((const int4 *)w->s.prefix)[16];
	Ax[0] = r0.x + r1.x + r2.x;
	Ax[1] = r0.y + r1.y + r2.y;
	Ax[2] = r0.z + r1.z + r2.z;
	Bx[0] = wt * rt.x - Ax[0];
	Bx[1] = wt * rt.y - Ax[1];
	Bx[2] = wt * rt.z - Ax[2];
	uint32_t ca, cb;
	bc1_solve(A, B, AB, wt, Ax, Bx, &ca, &cb);
	fit->c0 = ca;
	fit->c1 = cb;
	fit->four = four;
	fit->error = fast_assign16(w->blk.rgba, ca, cb, four, tt16, &fit->indices);
	return 1;
}

// bc1_polish with the lanes: lane m (and lane m + 16 for the second half of the texels)
// scores move m; the best move, ties to the lowest, is taken while it lowers the error.
// fast: the block is all opaque and a half is scored with fast_assign8, tt8 being |t|^2
// summed over this lane's half of the texels; otherwise bc1_assign_span (tt8 unused).
template <bool fast>
__device__ static void polish_warp(const high_scratch *w, bc1_fit *fit, int rounds, int lane, int32_t tt8)
{
	int m = lane & 15, half = lane >> 4;
	for (int r = 0; r < rounds; r++) {
		uint32_t n0 = 0, n1 = 0, idx = 0, err = UINT32_MAX;
		int ok = m < BC1_MOVES && bc1_move(fit->c0, fit->c1, m, &n0, &n1);
		if (ok) {
			if constexpr (fast)
				err = fast_assign8(w->blk.rgba, half, n0, n1, fit->four, tt8, &idx);
			else
				err = bc1_assign_span(&w->blk, n0, n1, fit->four, 8 * half, 8 * half + 8, &idx);
		}
		uint32_t err_hi = __shfl_down_sync(FULL_MASK, err, 16);
		uint32_t idx_hi = __shfl_down_sync(FULL_MASK, idx, 16);
		if (ok && half == 0) {
			err += err_hi;
			idx |= idx_hi;
		}
		if (half)
			err = UINT32_MAX;
		uint32_t move = (uint32_t)lane;
		warp_argmin(&err, &move);
		if (err >= fit->error)
			return;
		fit->indices = __shfl_sync(FULL_MASK, idx, (int)move);
		fit->error = err;
		bc1_move(fit->c0, fit->c1, (int)move, &n0, &n1);
		fit->c0 = n0;
		fit->c1 = n1;
	}
}

// |t|^2 summed over the texels of the lane's group of 8 (lanes 8j..8j+7 and 16+8j.. get
// texels 8j..8j+7), for the all-opaque fast path.
__device__ __forceinline__ static int32_t group8_tt(const high_scratch *w, int lane)
{
	uint32_t tm = w->blk.rgba[lane & 15] & 0xffffffu;
	int32_t tt = (int32_t)__dp4a(tm, tm, 0u);
#pragma unroll
	for (int off = 4; off > 0; off >>= 1)
		tt += __shfl_xor_sync(FULL_MASK, tt, off);
	return tt;
}

// The rest of bc1_encode_high once the texels are sorted: bc1_cluster_fit (lane g owns
// candidate group g), then the local search. fast: the block is all opaque.
template <bool fast>
__device__ static void high_tail(const high_scratch *w, const float4 *table, int lane, uint8_t *dst)
{
	bc1_fit fit;
	uint32_t out[2];
	uint32_t err = UINT32_MAX, cand = UINT32_MAX;
	if (fast) {
		int winner = group_winner16(w, table, lane);
		int32_t tt8 = group8_tt(w, lane);
		int32_t tt16 = tt8 + __shfl_xor_sync(FULL_MASK, tt8, 8);
		if (candidate_fit16(w, __float_as_uint(table[winner].w), tt16, &fit)) {
			err = fit.error;
			cand = (uint32_t)winner;
		}
	} else {
		int winner = group_winner_warp(w, table, lane);
		if (winner >= 0 && bc1_candidate_fit(&w->blk, &w->s, __float_as_uint(table[winner].w), &fit)) {
			err = fit.error;
			cand = (uint32_t)winner;
		}
	}
	warp_argmin(&err, &cand);
	if (cand == UINT32_MAX) {
		// bc1_encode_high's unreachable fallback
		if (lane == 0) {
			bc1_encode_solid(&w->blk, w->blk.rgba[w->s.order[0]] & 0xffffffu, out);
			store_block(dst, out);
		}
		__syncwarp();
		return;
	}
	broadcast_fit(&fit, (int)(cand % BC1_GROUPS));
	if (fast) {
		int32_t tt8 = group8_tt(w, lane);
		polish_warp<true>(w, &fit, 8, lane, __shfl_sync(FULL_MASK, tt8, 8 * (lane >> 4)));
	} else {
		polish_warp<false>(w, &fit, 8, lane, 0);
	}
	if (lane == 0) {
		bc1_pack(&fit, out);
		store_block(dst, out);
	}
	__syncwarp();
}

// bc1_encode_high for block b, by the whole warp.
__device__ static void encode_high_warp(const bc1_batch_surface *surf, uint32_t count, uint64_t b,
					high_scratch *w, const float4 *table, int lane)
{
	uint32_t bx, by;
	uint8_t *dst;
	const bc1_batch_surface *d = locate(surf, count, b, &bx, &by, &dst);
	uint32_t texel = load_texel(d, bx, by, lane & 15);
	uint32_t opaque = __ballot_sync(FULL_MASK, lane < 16 && (texel >> 24) >= d->cutoff) & 0xffffu;
	if (lane < 16)
		w->blk.rgba[lane] = texel;
	if (lane == 0)
		w->blk.opaque = opaque;
	__syncwarp();

	uint32_t out[2];
	// bc1_encode_trivial's cases: no opaque texel, or all opaque texels of one colour
	uint32_t ref = __shfl_sync(FULL_MASK, texel, opaque ? __ffs(opaque) - 1 : 0);
	if (!__any_sync(FULL_MASK, (opaque >> lane & 1u) && ((texel ^ ref) & 0xffffffu))) {
		if (lane == 0) {
			bc1_encode_trivial(&w->blk, out);
			store_block(dst, out);
		}
		__syncwarp();
		return;
	}

	// bc1_stats: integer moments summed over the warp (any order gives the same sums), so
	// every lane holds the same covariance and axis. Lanes 16-31 hold the texels of lanes
	// 0-15 again, so summing within each half of the warp gives every lane the block's sums.
	int32_t m[9], sum[3], cov[6];
	bc1_moments(texel, m);
	int lane_opaque = opaque >> (lane & 15) & 1u;
#pragma unroll
	for (int k = 0; k < 9; k++) {
		m[k] = lane_opaque ? m[k] : 0;
#pragma unroll
		for (int off = 8; off > 0; off >>= 1)
			m[k] += __shfl_xor_sync(FULL_MASK, m[k], off);
	}
	bc1_covariance(__popc(opaque), m, sum, cov);
	float axis[3];
	bc1_axis(cov, 8, axis);
	sort_warp(w, texel, axis, lane);

	if (opaque == 0xffffu)
		high_tail<true>(w, table, lane, dst);
	else
		high_tail<false>(w, table, lane, dst);
}

__global__ void __launch_bounds__(32 * HIGH_WARPS, HIGH_MIN_CTAS)
bc1_high_kernel(const bc1_batch_surface *surf, uint32_t count, uint64_t total)
{
	__shared__ float4 table[BC1_CANDIDATES]; // bc1_candidate as {aa, at, tt, code bits}
	__shared__ high_scratch scratch[HIGH_WARPS];
	for (int i = threadIdx.x; i < BC1_CANDIDATES; i += blockDim.x) {
		bc1_candidate k;
		bc1_candidate_make(bc1_candidates[i], 16, &k);
		table[i] = make_float4(k.aa, k.at, k.tt, __uint_as_float(k.code));
	}
	__syncthreads();
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	uint64_t step = (uint64_t)gridDim.x * HIGH_WARPS;
	for (uint64_t b = (uint64_t)blockIdx.x * HIGH_WARPS + warp; b < total; b += step)
		encode_high_warp(surf, count, b, &scratch[warp], table, lane);
}

// CTAs for `items` work items of per_cta each, capped at what the GPU holds at once:
// the kernels loop over the rest, so the high kernel builds its table once per CTA.
template <typename Kernel>
static unsigned grid_for(Kernel kernel, uint64_t items, unsigned per_cta, int threads)
{
	int dev = 0, sms = 0, per_sm = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
		sms = 1;
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess ||
	    per_sm <= 0)
		per_sm = 1;
	uint64_t need = (items + per_cta - 1) / per_cta;
	uint64_t cap = (uint64_t)sms * (uint64_t)per_sm;
	return (unsigned)(need < cap ? need : cap);
}

extern "C" kiln_status kiln_bc1_encode_gpu(const kiln_bc1_params *params, const kiln_surface *src,
					   uint8_t *const *dst, size_t count, kiln_status *status,
					   void *d_temp, size_t temp_size, kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !src || !dst || !status || !d_temp || temp_size < kiln_bc1_temp_size(count) ||
	    (params->quality != KILN_QUALITY_FAST && params->quality != KILN_QUALITY_MEDIUM &&
	     params->quality != KILN_QUALITY_HIGH) || count > UINT32_MAX)
		return KILN_ERR_INVALID_ARG;
	bc1_batch_surface *d_surf = (bc1_batch_surface *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);

	// Descriptors of the valid surfaces go up in stack-sized chunks: a pageable copy is
	// staged before cudaMemcpyAsync returns, so the chunk can be refilled at once.
	enum { CHUNK = 64 };
	bc1_batch_surface chunk[CHUNK];
	uint32_t valid = 0, filled = 0;
	uint64_t total = 0;
	cudaStream_t s = (cudaStream_t)stream;
	for (size_t i = 0; i < count; i++) {
		bc1_batch_surface *desc = &chunk[filled];
		if (!bc1_describe(&src[i], dst[i], params->alpha_cutoff, desc)) {
			status[i] = KILN_ERR_INVALID_ARG;
			continue;
		}
		status[i] = KILN_OK;
		desc->first_block = total;
		total += bc1_surface_blocks(desc);
		if (++filled == CHUNK) {
			if (cudaMemcpyAsync(d_surf + valid, chunk, filled * sizeof *chunk,
					    cudaMemcpyHostToDevice, s) != cudaSuccess)
				return KILN_ERR_CUDA;
			valid += filled;
			filled = 0;
		}
	}
	if (filled) {
		if (cudaMemcpyAsync(d_surf + valid, chunk, filled * sizeof *chunk, cudaMemcpyHostToDevice,
				    s) != cudaSuccess)
			return KILN_ERR_CUDA;
		valid += filled;
	}
	if (total == 0)
		return KILN_OK;

	cudaGetLastError(); // so that the check below sees this launch, not an older error
	if (params->quality == KILN_QUALITY_HIGH) {
		unsigned grid = grid_for(bc1_high_kernel, total, HIGH_WARPS, 32 * HIGH_WARPS);
		bc1_high_kernel<<<grid, 32 * HIGH_WARPS, 0, s>>>(d_surf, valid, total);
	} else if (params->quality == KILN_QUALITY_MEDIUM) {
		unsigned grid = grid_for(bc1_simple_kernel<KILN_QUALITY_MEDIUM>, total, SIMPLE_THREADS,
					 SIMPLE_THREADS);
		bc1_simple_kernel<KILN_QUALITY_MEDIUM><<<grid, SIMPLE_THREADS, 0, s>>>(d_surf, valid, total);
	} else {
		unsigned grid = grid_for(bc1_simple_kernel<KILN_QUALITY_FAST>, total, SIMPLE_THREADS,
					 SIMPLE_THREADS);
		bc1_simple_kernel<KILN_QUALITY_FAST><<<grid, SIMPLE_THREADS, 0, s>>>(d_surf, valid, total);
	}
	return cudaGetLastError() == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}
