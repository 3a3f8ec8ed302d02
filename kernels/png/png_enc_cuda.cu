// The CUDA backend of the PNG encoder: a batch of images, pixels and files in device
// memory, six kernels in sequence on the caller's stream. Strips are the unit of
// parallelism (each an independent deflate run, see png_enc_shared.h); within a strip the
// lanes of a warp share what does not depend on the parse:
//   1. filter  : a warp per row (all rows of the batch at once); lanes split its bytes for the
//                five filter costs (integer sums: any order gives the CPU's values) and
//                for writing the filtered row;
//   2. chains  : (medium, high) a warp per strip puts 32 positions at a time into the hash
//                table; lanes with equal hashes are ordered by __match_any_sync, so every
//                prev[p] is what the CPU's one-at-a-time insertion gives;
//   3. matches : a thread per position runs png_match_at (high: png_match_cands), the CPU's
//                own search: with the chains complete it depends on the data and the
//                position alone;
//   4. deflate : a warp per strip (warp_deflate_strip): the parse 32 positions a round
//                (match starts by ballot, block boundaries where the CPU puts them), each
//                block's histogram by shared atomics, its Huffman lengths ranked by the
//                lanes and finished by the shared png_huff_from_sorted, the choice and
//                header by the shared functions on lane 0, the tokens written at once at
//                bit positions from a warp scan (bits ORed into zeroed words); the lanes
//                also split the Adler-32 and CRC-32 (partial sums combined in order);
//                high (pngenc_opt_kernel): png_deflate_strip_opt's steps on the
//                candidates, each parse by the warp (warp_opt_parse: the lanes cost a
//                position's lengths, the serial loop's choice), the walks, code lengths
//                and block writer on lane 0;
//   5. copy    : a CTA per slice of a strip's data: from scratch to its final place;
//   6. assemble: a thread per image writes the headers, checksums, kiSt and IEND.
// Same functions, same integers: the files equal the CPU backend's byte for byte.
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_util.cuh"

extern "C" {
#include "kernels/png/png_enc.h"
#include "kernels/png/png_enc_shared.h"
}

#define FULL_MASK 0xffffffffu

__host__ __device__ static uint64_t align256(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

// Scratch of one strip on the GPU, in order: the filtered bytes; the search area (the hash
// head while the chains are built, then the matches of every position: one for fast and
// medium and high's filter trials, PNG_OPT_CANDS for high's parse); the tokens (fast,
// medium: one block's); the deflate output; the chains (medium, high), whose room holds
// high's parse choices once the candidates are found; (high) a filter-trial key per row.
// A function of the strip's size, rows and quality alone, so the host sizes it and the
// device finds it alike.
struct strip_layout {
	uint64_t search, tokens, out, prev, keys, total;
};

__host__ __device__ static strip_layout strip_layout_of(uint64_t n, uint64_t rows, int quality)
{
	png_defl_level lv = png_defl_level_for(quality);
	uint64_t matches = lv.optimal ? n * PNG_OPT_CANDS * 4 : n * 4;
	uint64_t head = lv.chain ? (uint64_t)PNG_DEFL_HASH_SIZE * 4 : 0;
	strip_layout l;
	l.search = align256(n);
	l.tokens = l.search + align256(matches > head ? matches : head);
	l.out = l.tokens + (lv.optimal ? 0 : align256(PNG_DEFL_BLOCK_TOKENS * 4));
	l.prev = l.out + align256(png_deflate_strip_bound(n));
	l.keys = l.prev + (lv.chain ? align256(n * 4) : 0);
	l.total = l.keys + (lv.optimal ? align256(rows * 8) : 0);
	return l;
}

static size_t gpu_strip_scratch(const png_plan *pl)
{
	uint64_t n = (uint64_t)pl->rows_per_strip * png_plan_rowlen(pl);
	return (size_t)strip_layout_of(n, pl->rows_per_strip, pl->quality).total;
}

struct strip_ptrs {
	uint8_t *filt;
	uint32_t *best;    // png_match_at of every position (high: png_match_cands, or the trials')
	uint32_t *tokens;  // fast, medium: a block's tokens; high: the parse choices (over prev)
	uint32_t *head, *prev;
	uint64_t *keys;    // high: the filter trials' key of each row (png_trial_row)
	uint8_t *out;  // the strip's deflate data, 4-byte words, zeroed before writing
	uint64_t out_cap;
};

__device__ static strip_ptrs strip_scratch(uint8_t *scratch, const png_plan *pl, uint32_t i)
{
	uint64_t n = (uint64_t)pl->rows_per_strip * png_plan_rowlen(pl);
	strip_layout l = strip_layout_of(n, pl->rows_per_strip, pl->quality);
	uint8_t *b = scratch + pl->scratch_off + (uint64_t)i * pl->strip_scratch;
	png_defl_level lv = png_defl_level_for(pl->quality);
	strip_ptrs p;
	p.filt = b;
	p.best = (uint32_t *)(b + l.search);
	p.head = lv.chain ? (uint32_t *)(b + l.search) : NULL;
	p.out = b + l.out;
	p.out_cap = png_deflate_strip_bound(n);
	p.prev = lv.chain ? (uint32_t *)(b + l.prev) : NULL;
	p.tokens = (uint32_t *)(b + (lv.optimal ? l.prev : l.tokens));
	p.keys = lv.optimal ? (uint64_t *)(b + l.keys) : NULL;
	return p;
}

// The plan holding batch strip k (plans[j].first_strip ascending, plans[0]'s 0).
__device__ static uint32_t plan_of(const png_plan *plans, uint32_t count, uint64_t k)
{
	return kiln_find_last_le(plans, count, &png_plan::first_strip, k);
}

// Byte i of row y as PNG samples (RGBA8 sources written as RGB8 skip every 4th byte).
__device__ __forceinline__ static uint32_t src_byte(const png_plan *pl, const uint8_t *row, uint32_t i)
{
	if (pl->from_rgba8 && pl->color_type == KILN_PNG_COLOR_RGB)
		return row[(i / 3) * 4 + i % 3];
	return row[i];
}

// ---- 1. filter --------------------------------------------------------------------------

// force >= 0: that filter throughout (high's trials, for the images that take them); else
// each row's own: forced by the plan, high's trial winner, or libpng's heuristic.
__global__ void pngenc_filter_kernel(const png_plan *plans, uint32_t count, uint64_t strips, uint8_t *scratch,
				     int force)
{
	// a warp per row: rows depend on the source pixels only (row r - 1 of the strip is
	// read unfiltered), so all rows of the batch run at once
	int lane = threadIdx.x & 31;
	uint32_t wpc = blockDim.x / 32;
	for (uint64_t k = blockIdx.y; k < strips; k += gridDim.y) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		strip_ptrs sp = strip_scratch(scratch, pl, i);
		uint32_t y0, rows = png_plan_strip_rows(pl, i, &y0);
		uint32_t rb = pl->rowbytes, bpp = pl->bpp, rowlen = rb + 1;
		int trials = png_plan_trials(pl);
		if (force >= 0 && !trials)
			continue;
		int mode = force >= 0 ? force : pl->filter;
		for (uint32_t r = blockIdx.x * wpc + threadIdx.x / 32; r < rows; r += gridDim.x * wpc) {
			const uint8_t *row = pl->pixels + (uint64_t)(y0 + r) * pl->stride;
			const uint8_t *prev = r ? row - pl->stride : NULL;
			int type;
			if (mode != PNG_FILTER_ADAPTIVE) {
				type = prev ? mode : png_filter_first_row(mode);
			} else if (trials) {
				type = (int)(sp.keys[r] & 7u);
			} else if (pl->none_only) {
				type = PNG_FILTER_NONE;
			} else {
				uint32_t c[5] = {0, 0, 0, 0, 0};
				for (uint32_t b = lane; b < rb; b += 32) {
					uint32_t x = src_byte(pl, row, b);
					uint32_t a = b >= bpp ? src_byte(pl, row, b - bpp) : 0;
					c[0] += png_filter_cost_byte((uint8_t)x);
					c[1] += png_filter_cost_byte((uint8_t)(x - a));
					if (prev) {
						uint32_t up = src_byte(pl, prev, b);
						uint32_t ul = b >= bpp ? src_byte(pl, prev, b - bpp) : 0;
						c[2] += png_filter_cost_byte((uint8_t)(x - up));
						c[3] += png_filter_cost_byte((uint8_t)(x - ((a + up) >> 1)));
						c[4] += png_filter_cost_byte((uint8_t)(x - kiln_png_paeth(a, up, ul)));
					}
				}
				uint32_t cost[5];
#pragma unroll
				for (int t = 0; t < 5; t++)
					cost[t] = __reduce_add_sync(FULL_MASK, c[t]);
				if (!prev)
					cost[2] = cost[3] = cost[4] = UINT32_MAX;
				type = png_filter_pick(cost);
			}
			uint8_t *out = sp.filt + (uint64_t)r * rowlen;
			if (lane == 0)
				out[0] = (uint8_t)type;
			for (uint32_t b = lane; b < rb; b += 32) {
				uint32_t x = src_byte(pl, row, b);
				uint32_t a = b >= bpp ? src_byte(pl, row, b - bpp) : 0;
				uint32_t up = prev ? src_byte(pl, prev, b) : 0;
				uint32_t ul = prev && b >= bpp ? src_byte(pl, prev, b - bpp) : 0;
				uint32_t pred = type == PNG_FILTER_SUB ? a : type == PNG_FILTER_UP ? up
					      : type == PNG_FILTER_AVG ? (a + up) >> 1
					      : type == PNG_FILTER_PAETH ? kiln_png_paeth(a, up, ul) : 0;
				out[1 + b] = (uint8_t)(x - pred);
			}
		}
	}
}

// ---- 2. hash chains -----------------------------------------------------------------------

__global__ void pngenc_chain_kernel(const png_plan *plans, uint32_t count, uint64_t strips, uint8_t *scratch)
{
	int lane = threadIdx.x & 31;
	uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
	for (uint64_t k = (uint64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; k < strips; k += warps) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		strip_ptrs sp = strip_scratch(scratch, pl, i);
		uint32_t y0, n = png_plan_strip_rows(pl, i, &y0) * png_plan_rowlen(pl);
		for (uint32_t h = lane; h < PNG_DEFL_HASH_SIZE; h += 32)
			sp.head[h] = PNG_DEFL_NONE;
		__syncwarp();
		uint32_t lim = n > 3 ? n - 3 : 0;
		for (uint32_t p0 = 0; p0 < lim; p0 += 32) {
			uint32_t p = p0 + (uint32_t)lane;
			bool valid = p < lim;
			uint32_t h = valid ? png_hash4(sp.filt + p) : 0;
			uint32_t grp = __match_any_sync(FULL_MASK, valid ? h : (0x80000000u | (uint32_t)lane));
			uint32_t lower = grp & ((1u << lane) - 1u);
			if (valid)
				sp.prev[p] = lower ? p0 + (31u - (uint32_t)__clz(lower)) : sp.head[h];
			__syncwarp();
			uint32_t higher = grp & ~((2u << lane) - 1u);
			if (valid && higher == 0)
				sp.head[h] = p;
			__syncwarp();
		}
	}
}

// ---- 3. matches -------------------------------------------------------------------------

// trial: high's filter trials, png_match_at with png_trial_matcher (png_trial_strip).
__global__ void pngenc_match_kernel(const png_plan *plans, uint32_t count, uint64_t strips, uint8_t *scratch,
				    int trial)
{
	for (uint64_t k = blockIdx.y; k < strips; k += gridDim.y) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		if (trial && !png_plan_trials(pl))
			continue;
		strip_ptrs sp = strip_scratch(scratch, pl, i);
		uint32_t y0, n = png_plan_strip_rows(pl, i, &y0) * png_plan_rowlen(pl);
		png_matcher m;
		if (trial)
			png_trial_matcher(&m, sp.filt, n, png_plan_rowlen(pl), pl->bpp, sp.head, sp.prev);
		else
			png_matcher_init(&m, sp.filt, n, png_plan_rowlen(pl), pl->bpp, pl->quality, sp.head, sp.prev);
		for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += gridDim.x * blockDim.x) {
			if (m.level.optimal) {
				png_match_cands(&m, p, sp.best + (uint64_t)p * PNG_OPT_CANDS);
				continue;
			}
			uint32_t dist = 0;
			uint32_t len = png_match_at(&m, p, &dist);
			sp.best[p] = len ? (dist << 16 | len) : 0;
		}
	}
}

// High's filter trial `type`: a thread per row costs it (png_trial_row) from the strip
// filtered throughout with type and the matches of all its positions.
__global__ void pngenc_trial_kernel(const png_plan *plans, uint32_t count, uint64_t strips, uint8_t *scratch, int type)
{
	for (uint64_t k = blockIdx.y; k < strips; k += gridDim.y) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		if (!png_plan_trials(pl))
			continue;
		strip_ptrs sp = strip_scratch(scratch, pl, i);
		uint32_t y0, rows = png_plan_strip_rows(pl, i, &y0), rowlen = png_plan_rowlen(pl);
		png_matcher m;  // best is complete: png_trial_best only reads it
		png_trial_matcher(&m, sp.filt, rows * rowlen, rowlen, pl->bpp, sp.head, sp.prev);
		for (uint32_t r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
			png_trial_row(&m, sp.best, r, rowlen, type, sp.keys);
	}
}

// ---- 4. deflate ---------------------------------------------------------------------------

__device__ static void load_crc_table(uint32_t *table)
{
	for (int t = threadIdx.x; t < 256; t += blockDim.x)
		table[t] = kiln_crc32_table_entry((uint32_t)t);
	__syncthreads();
}

// Adler-32 of p[0, n) by the warp: lane l sums segment l, lane 0 combines in order.
__device__ static uint32_t warp_adler(const uint8_t *p, uint32_t n, int lane)
{
	uint32_t seg = (n + 31) / 32;
	uint32_t b = (uint32_t)lane * seg < n ? (uint32_t)lane * seg : n;
	uint32_t e = b + seg < n ? b + seg : n;
	uint32_t mine = kiln_adler32_update(1, p + b, e - b);
	uint32_t total = 1;
	for (int l = 0; l < 32; l++) {
		uint32_t v = __shfl_sync(FULL_MASK, mine, l);
		uint32_t lb = (uint32_t)l * seg < n ? (uint32_t)l * seg : n;
		uint32_t le = lb + seg < n ? lb + seg : n;
		total = kiln_adler32_combine(total, v, le - lb);
	}
	return total;
}

__device__ static uint32_t warp_crc(const uint32_t *table, const uint8_t *p, uint32_t n, int lane)
{
	uint32_t seg = (n + 31) / 32;
	uint32_t b = (uint32_t)lane * seg < n ? (uint32_t)lane * seg : n;
	uint32_t e = b + seg < n ? b + seg : n;
	uint32_t mine = kiln_crc32_update_table(table, 0, p + b, e - b);
	uint32_t total = 0;
	for (int l = 0; l < 32; l++) {
		uint32_t v = __shfl_sync(FULL_MASK, mine, l);
		uint32_t lb = (uint32_t)l * seg < n ? (uint32_t)l * seg : n;
		uint32_t le = lb + seg < n ? lb + seg : n;
		total = l == 0 ? v : kiln_crc32_combine(total, v, le - lb);
	}
	return total;
}

// Per-warp (per-CTA) shared state of the deflate kernel.
struct defl_shared {
	png_block_tables t;
	uint32_t sorted[PNG_DEFL_LITLEN];
	png_block_plan bp;
	uint64_t bits;
	int overflow;
	uint32_t table[256];
};

// png_huff_lengths by the warp: the used symbols compacted in symbol order, ranked in
// parallel (the keys are distinct, so the ranks are the insertion sort's order), then
// png_huff_from_sorted on lane 0.
__device__ static void warp_huff_lengths(const uint32_t *freq, uint32_t nsym, uint32_t limit, uint8_t *lens,
					 uint32_t *keys, uint32_t *sorted, uint32_t *A, int lane)
{
	uint32_t m = 0;
	for (uint32_t base = 0; base < nsym; base += 32) {
		uint32_t sym = base + (uint32_t)lane;
		uint32_t f = sym < nsym ? freq[sym] : 0;
		uint32_t bal = __ballot_sync(FULL_MASK, f != 0);
		if (f)
			keys[m + __popc(bal & ((1u << lane) - 1u))] = f << 9 | sym;
		if (sym < nsym)
			lens[sym] = 0;
		m += (uint32_t)__popc(bal);
	}
	__syncwarp();
	if (m < 2) {
		if (lane == 0)
			png_huff_tiny(keys, m, lens);
		__syncwarp();
		return;
	}
	for (uint32_t i = (uint32_t)lane; i < m; i += 32) {
		uint32_t k = keys[i], r = 0;
		for (uint32_t j = 0; j < m; j++)
			r += keys[j] < k;
		sorted[r] = k;
	}
	__syncwarp();
	if (lane == 0)
		png_huff_from_sorted(sorted, m, limit, lens, A);
	__syncwarp();
}

// The device bit writer (png_deflate.h) exists in the device pass only.
#ifdef __CUDA_ARCH__
// png_write_block by the warp: histogram by shared atomics, lengths by warp_huff_lengths,
// the choice and the header on lane 0 (the shared functions), then the tokens at once:
// each lane's bit position from a warp scan of the code lengths.
__device__ static void warp_write_block(defl_shared *sh, png_bitw *w, const uint32_t *tokens, uint32_t ntok,
					const uint8_t *raw, uint32_t raw_len, int final, int lane)
{
	png_block_tables *t = &sh->t;
	for (uint32_t i = (uint32_t)lane; i < PNG_DEFL_LITLEN; i += 32)
		t->lfreq[i] = 0;
	if (lane < PNG_DEFL_DIST)
		t->dfreq[lane] = 0;
	__syncwarp();
	for (uint32_t i = (uint32_t)lane; i < ntok; i += 32) {
		uint32_t tok = tokens[i], dist = tok >> 16, ne, ev;
		if (dist == 0) {
			atomicAdd(&t->lfreq[tok], 1u);
		} else {
			atomicAdd(&t->lfreq[png_len_code(tok & 0xFFFFu, &ne, &ev)], 1u);
			atomicAdd(&t->dfreq[png_dist_code(dist, &ne, &ev)], 1u);
		}
	}
	__syncwarp();
	if (lane == 0)
		t->lfreq[256] = 1;
	__syncwarp();
	warp_huff_lengths(t->lfreq, PNG_DEFL_LITLEN, 15, t->llen, t->keys, sh->sorted, t->A, lane);
	warp_huff_lengths(t->dfreq, PNG_DEFL_DIST, 15, t->llen + PNG_DEFL_LITLEN, t->keys, sh->sorted, t->A, lane);
	if (lane == 0) {
		png_block_choose(t, &sh->bp, w->bits, raw_len);
		png_block_header(w, t, &sh->bp, raw_len, final);
		sh->bits = w->bits;
	}
	__syncwarp();
	w->bits = sh->bits;
	if (sh->bp.type == PNG_BLOCK_STORED) {
		for (uint32_t i = (uint32_t)lane; i < raw_len; i += 32)
			png_bw_put_at(w, w->bits + 8 * (uint64_t)i, raw[i], 8);
		w->bits += 8 * (uint64_t)raw_len;
	} else {
		const uint8_t *llen = t->llen, *dlen = t->llen + PNG_DEFL_LITLEN;
		for (uint32_t c = 0; c < ntok; c += 32) {
			uint32_t i = c + (uint32_t)lane;
			uint32_t lb = 0, lnb = 0, db = 0, dnb = 0;
			if (i < ntok) {
				uint32_t tok = tokens[i], dist = tok >> 16;
				if (dist == 0) {
					lb = t->lcode[tok];
					lnb = llen[tok];
				} else {
					uint32_t ne, ev, de, dv;
					uint32_t ls = png_len_code(tok & 0xFFFFu, &ne, &ev);
					uint32_t ds = png_dist_code(dist, &de, &dv);
					lb = t->lcode[ls] | ev << llen[ls];
					lnb = llen[ls] + ne;
					db = t->dcode[ds] | dv << dlen[ds];
					dnb = dlen[ds] + de;
				}
			}
			uint32_t nb = lnb + dnb, x = nb;
#pragma unroll
			for (int off = 1; off < 32; off <<= 1) {
				uint32_t y = __shfl_up_sync(FULL_MASK, x, off);
				if (lane >= off)
					x += y;
			}
			uint32_t total = __shfl_sync(FULL_MASK, x, 31);
			uint64_t pos = w->bits + x - nb;
			png_bw_put_at(w, pos, lb, lnb);
			png_bw_put_at(w, pos + lnb, db, dnb);
			w->bits += total;
		}
		if (lane == 0)
			png_bw_put_at(w, w->bits, t->lcode[256], llen[256]);
		w->bits += llen[256];
	}
	__syncwarp();
}

// png_deflate_strip by the warp, from the precomputed matches. The parse is the CPU's:
// a position starts a match when it has one and (lazy) the next position's is not longer;
// token starts follow from position 0. Each round takes the 32 positions from the next
// token start: the match starts among them (a ballot) give the tokens by a short uniform
// loop (one step per match), block boundaries fall where the CPU's would (the token that
// would be the block's 16383rd, or a position past PNG_DEFL_BLOCK_BYTES), and the tokens
// go to the block's list at their ranks.
__device__ static uint32_t warp_deflate_strip(defl_shared *sh, const uint8_t *d, uint32_t n, const uint32_t *best,
					      int quality, int last, uint32_t *tokens, uint8_t *out,
					      uint64_t cap, int lane)
{
	png_bitw w;
	png_bw_init(&w, out, (size_t)cap);
	uint32_t lazy = png_defl_level_for(quality).lazy;
	uint32_t cur = 0, block_start = 0, ntok = 0;
	// this round's matches and bytes; the next round's are loaded a round ahead for the
	// usual case that no match crosses the 32 positions (q == 32)
	uint32_t pb = (uint32_t)lane < n ? best[lane] : 0, pd = (uint32_t)lane < n ? d[lane] : 0;
	while (cur < n) {
		uint32_t p = cur + (uint32_t)lane;
		bool valid = p < n;
		uint32_t b = pb, byte = pd;
		uint32_t p2 = p + 32;
		uint32_t nb = p2 < n ? best[p2] : 0, nd = p2 < n ? d[p2] : 0;
		uint32_t len = b & 0xFFFFu;
		uint32_t up = __shfl_down_sync(FULL_MASK, b, 1), nb0 = __shfl_sync(FULL_MASK, nb, 0);
		uint32_t nlen = p + 1 < n ? ((lane < 31 ? up : nb0) & 0xFFFFu) : 0;
		bool is_match = len > 0 && !(len < lazy && p + 1 < n && nlen > len);
		uint32_t M = __ballot_sync(FULL_MASK, valid && is_match);
		uint32_t V = __ballot_sync(FULL_MASK, valid);
		uint32_t T = 0, q = 0;
		while (q < 32) {
			uint32_t above = 0xFFFFFFFFu << q;
			uint32_t rest = M & above;
			if (!rest) {
				T |= V & above;
				q = 32;
				break;
			}
			uint32_t m = (uint32_t)__ffs(rest) - 1;
			T |= V & ((1u << m) - 1u) & above;
			T |= 1u << m;
			q = m + __shfl_sync(FULL_MASK, len, (int)m);
		}
		uint32_t ntw = (uint32_t)__popc(T);
		uint32_t close = 32;  // lane of the token that starts a new block, 32: none
		if (ntok + ntw > PNG_DEFL_BLOCK_TOKENS - 1) {
			uint32_t x = T;
			for (uint32_t k = PNG_DEFL_BLOCK_TOKENS - 1 - ntok; k > 0; k--)
				x &= x - 1;
			close = (uint32_t)__ffs(x) - 1;
		}
		uint32_t far = __ballot_sync(FULL_MASK, valid && p - block_start > PNG_DEFL_BLOCK_BYTES) & T;
		if (far && (uint32_t)__ffs(far) - 1 < close)
			close = (uint32_t)__ffs(far) - 1;
		bool start = (T >> lane) & 1u;
		uint32_t rank = (uint32_t)__popc(T & ((1u << lane) - 1u));
		uint32_t tok = ((M >> lane) & 1u) ? (b & 0xFFFF0000u) | len : byte;
		uint32_t kclose = close < 32 ? (uint32_t)__popc(T & ((1u << close) - 1u)) : ntw;
		if (start && rank < kclose)
			tokens[ntok + rank] = tok;
		__syncwarp();
		if (close < 32) {
			uint32_t at = cur + close;
			warp_write_block(sh, &w, tokens, ntok + kclose, d + block_start, at - block_start, 0, lane);
			if (start && rank >= kclose)
				tokens[rank - kclose] = tok;
			ntok = ntw - kclose;
			block_start = at;
		} else {
			ntok += ntw;
		}
		__syncwarp();
		cur += q;
		if (q == 32) {
			pb = nb;
			pd = nd;
		} else {
			uint32_t pn = cur + (uint32_t)lane;
			pb = pn < n ? best[pn] : 0;
			pd = pn < n ? d[pn] : 0;
		}
	}
	warp_write_block(sh, &w, tokens, ntok, d + block_start, n - block_start, last, lane);
	if (lane == 0) {
		png_bw_end_strip(&w, last);
		sh->bits = w.bits;
	}
	__syncwarp();
	int overflow = __any_sync(FULL_MASK, w.overflow);
	uint64_t bits = sh->bits;
	__syncwarp();
	return overflow ? 0 : (uint32_t)((bits + 7) / 8);
}
#endif

// Every strip of the batch by the warp of this CTA: its output words zeroed (the device bit
// writer ORs bits in) and the Adler-32 of its filtered bytes by the lanes, its deflate
// data from deflate(plan, strip index, scratch, n, cap) (the same size on every lane), the
// CRC-32 of that data by the lanes, its result from lane 0.
template <typename Deflate>
__device__ static void deflate_strips(const png_plan *plans, uint32_t count, uint64_t strips, uint8_t *scratch,
				      png_strip_result *results, const uint32_t *crc_table, Deflate deflate)
{
	int lane = threadIdx.x & 31;
	for (uint64_t k = blockIdx.x; k < strips; k += gridDim.x) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		strip_ptrs sp = strip_scratch(scratch, pl, i);
		uint32_t y0, n = png_plan_strip_rows(pl, i, &y0) * png_plan_rowlen(pl);
		uint64_t cap = png_plan_strip_cap(pl, i);
		uint32_t *words = (uint32_t *)sp.out;
		for (uint64_t j = (uint64_t)lane; j < (cap + 3) / 4; j += 32)
			words[j] = 0;
		__syncwarp();
		uint32_t adler = warp_adler(sp.filt, n, lane);
		uint32_t size = deflate(pl, i, &sp, n, cap);
		uint32_t crc = warp_crc(crc_table, sp.out, size, lane);
		if (lane == 0) {
			png_strip_result r;
			r.size = size;
			r.adler = adler;
			r.crc = crc;
			r.ok = size != 0;
			results[k] = r;
		}
		__syncwarp();
	}
}

__global__ void __launch_bounds__(32) pngenc_deflate_kernel(const png_plan *plans, uint32_t count, uint64_t strips,
							    uint8_t *scratch, png_strip_result *results)
{
	__shared__ defl_shared sh;
	load_crc_table(sh.table);
	int lane = threadIdx.x & 31;
	deflate_strips(plans, count, strips, scratch, results, sh.table,
		       [&](const png_plan *pl, uint32_t i, const strip_ptrs *sp, uint32_t n, uint64_t cap) -> uint32_t {
#ifdef __CUDA_ARCH__
			       return warp_deflate_strip(&sh, sp->filt, n, sp->best, pl->quality,
							 i + 1 == pl->strip_count, sp->tokens, sp->out, cap, lane);
#else
			       return 0;
#endif
		       });
}

// Positions of a block the parse stages in shared memory at a time (from device memory in
// one coalesced sweep rather than a load a position on the parse's serial path).
#define OPT_STAGE 256u
struct opt_stage {
	uint32_t cands[OPT_STAGE * PNG_OPT_CANDS];
	uint8_t d[OPT_STAGE];
};

// Per-warp (per-CTA) shared state of the high deflate kernel.
struct opt_shared {
	png_opt_work work;
	opt_stage stage;
	uint32_t size;
	uint32_t table[256];
};

#ifdef __CUDA_ARCH__
// png_opt_parse by a warp, same choices: at each position the lanes cost the lengths of
// the candidates side by side (length lo + lane, + 32, ...), and the warp takes the least
// cost and, among equal costs, the longest length, which is the choice of the serial loop
// (it replaces its best on x <= best, lengths ascending), then the literal unless that
// match costs no more. The serial parse spent about a microsecond a position on one lane
// (a dependent load and compare a length).
__device__ static void warp_opt_parse(const uint8_t *d, uint32_t start, uint32_t end, const uint32_t *cands,
				      const png_opt_costs *c, uint32_t *ring, opt_stage *stage, uint32_t *choice,
				      int lane)
{
	const uint32_t mask = PNG_OPT_RING - 1;
	if (lane == 0)
		ring[end & mask] = 0;
	__syncwarp();
	uint32_t from = end;  /* the staged positions: [from, from + OPT_STAGE) */
	for (uint32_t p = end; p-- > start;) {
		if (p < from) {
			from = p + 1 >= start + OPT_STAGE ? p + 1 - OPT_STAGE : start;
			uint32_t cnt = p + 1 - from;
			__syncwarp();
			for (uint32_t j = (uint32_t)lane; j < cnt * PNG_OPT_CANDS; j += 32)
				stage->cands[j] = cands[(uint64_t)from * PNG_OPT_CANDS + j];
			for (uint32_t j = (uint32_t)lane; j < cnt; j += 32)
				stage->d[j] = d[from + j];
			__syncwarp();
		}
		const uint32_t *cp = stage->cands + (p - from) * PNG_OPT_CANDS;
		uint32_t cand[PNG_OPT_CANDS], room = end - p;
		for (uint32_t k = 0; k < PNG_OPT_CANDS; k++)
			cand[k] = cp[k];
		uint32_t nc = png_opt_cand_count(cand), best, pick, ne, ev;
		if (!png_opt_long(cand, nc, p, room, c, ring, &best, &pick)) {
			uint32_t bx = UINT32_MAX, bl = 0, lo = PNG_DEFL_MIN_MATCH;
			for (uint32_t k = 0; k < nc && lo <= room; k++) {
				uint32_t len = cand[k] & 0xFFFFu;
				len = len < room ? len : room;
				uint32_t dc = c->dist[png_dist_code(cand[k] >> 16, &ne, &ev)];
				for (uint32_t l = lo + (uint32_t)lane; l <= len; l += 32) {
					uint32_t x = ring[(p + l) & mask] + c->len[l] + dc;
					if (x <= bx) {
						bx = x;
						bl = l;
					}
				}
				lo = len + 1;
			}
			uint32_t mx = __reduce_min_sync(FULL_MASK, bx);
			uint32_t ml = __reduce_max_sync(FULL_MASK, bx == mx ? bl : 0u);
			best = ring[(p + 1) & mask] + c->lit[stage->d[p - from]];
			pick = 1;
			if (ml && mx <= best) {
				/* the candidate whose lengths hold ml: the first as long */
				uint32_t k = 0;
				while ((cand[k] & 0xFFFFu) < ml && k + 1 < nc)
					k++;
				best = mx;
				pick = (cand[k] >> 16) << 16 | ml;
			}
		}
		__syncwarp();
		if (lane == 0) {
			ring[p & mask] = best;
			choice[p] = pick;
		}
		__syncwarp();
	}
}

// png_deflate_strip_opt with the parse by the warp (warp_opt_parse) and the rest, serial,
// on lane 0; the working state in shared memory.
__device__ static uint32_t warp_deflate_strip_opt(const uint8_t *d, uint32_t n, int last, const uint32_t *cands,
						  uint32_t *choice, png_opt_work *wk, opt_stage *stage, uint32_t *size,
						  uint8_t *out, uint64_t cap, int lane)
{
	png_bitw w;
	png_block_tables *t = &wk->t;
	if (lane == 0) {
		png_bw_init(&w, out, cap);
		png_block_tables_clear(t);
	}
	uint32_t nb = png_opt_blocks(n);
	for (uint32_t b = 0; b < nb; b++) {
		uint32_t start, end, ntok = 0;
		png_opt_block_range(n, nb, b, &start, &end);
		if (lane == 0)
			png_opt_first_costs(d, start, end, cands, t, &wk->c);
		for (uint32_t pass = 0; pass < PNG_OPT_PASSES; pass++) {
			if (pass > 0 && lane == 0)
				png_opt_costs_from_freq(&wk->c, t);
			__syncwarp();
			warp_opt_parse(d, start, end, cands, &wk->c, wk->ring, stage, choice, lane);
			if (lane == 0)
				ntok = png_opt_walk(d, start, end, choice, t);
		}
		if (lane == 0)
			png_write_block(&w, t, choice + start, ntok, d + start, end - start, last && b + 1 == nb);
	}
	if (lane == 0) {
		png_bw_end_strip(&w, last);
		*size = w.overflow ? 0 : (uint32_t)((png_bw_bits(&w) + 7) / 8);
	}
	__syncwarp();
	uint32_t r = *size;
	__syncwarp();
	return r;
}
#endif

// High: png_deflate_strip_opt's choices, the parse by the warp (warp_deflate_strip_opt);
// the strips of the batch run side by side.
__global__ void __launch_bounds__(32) pngenc_opt_kernel(const png_plan *plans, uint32_t count, uint64_t strips,
							uint8_t *scratch, png_strip_result *results)
{
	__shared__ opt_shared sh;
	load_crc_table(sh.table);
	int lane = threadIdx.x & 31;
	deflate_strips(plans, count, strips, scratch, results, sh.table,
		       [&](const png_plan *pl, uint32_t i, const strip_ptrs *sp, uint32_t n, uint64_t cap) -> uint32_t {
#ifdef __CUDA_ARCH__
			       return warp_deflate_strip_opt(sp->filt, n, i + 1 == pl->strip_count, sp->best, sp->tokens,
							     &sh.work, &sh.stage, &sh.size, sp->out, cap, lane);
#else
			       return 0;
#endif
		       });
}

// ---- 5. assemble --------------------------------------------------------------------------

// Each strip's data from scratch to its final place, all strips at once: strip k of an
// image lands at idat_off + 10 + the sum over earlier strips of (size + 12) (the IDAT
// chunk of every strip adds 12 bytes, the first one the zlib header), which is where
// png_asm_data_off puts it.
__global__ void pngenc_copy_kernel(const png_plan *plans, uint32_t count, uint64_t strips,
				   const png_strip_result *results, uint8_t *scratch)
{
	__shared__ uint64_t to;
	for (uint64_t k = blockIdx.y; k < strips; k += gridDim.y) {
		const png_plan *pl = &plans[plan_of(plans, count, k)];
		uint32_t i = (uint32_t)(k - pl->first_strip);
		const png_strip_result *res = results + pl->first_strip;
		__syncthreads();
		if (threadIdx.x == 0) {
			to = pl->idat_off + 10;
			for (uint32_t j = 0; j < i; j++)
				to += (uint64_t)res[j].size + 12;
		}
		__syncthreads();
		const uint8_t *from = strip_scratch(scratch, pl, i).out;
		uint32_t size = res[i].size;
		for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < size; b += gridDim.x * blockDim.x)
			pl->dst[to + b] = from[b];
	}
}

// Per image, by a warp: signature and IHDR (lane 0), the stream's Adler-32 (lane 0, a
// combine per strip), then every strip's chunk at once (offsets by a warp scan of the
// chunk sizes; the CRC combines, the costly part, a lane per strip), then kiSt and IEND,
// around the data the copy kernel put in place.
__global__ void __launch_bounds__(32) pngenc_assemble_kernel(const png_plan *plans, uint32_t count,
							     const png_strip_result *results, uint64_t *out_sizes)
{
	__shared__ uint32_t table[256];
	load_crc_table(table);
	int lane = threadIdx.x & 31;
	for (uint32_t j = blockIdx.x; j < count; j += gridDim.x) {
		const png_plan *pl = &plans[j];
		const png_strip_result *res = results + pl->first_strip;
		int ok = 1;
		for (uint32_t k = (uint32_t)lane; k < pl->strip_count; k += 32)
			ok &= res[k].ok != 0;
		if (!__all_sync(FULL_MASK, ok)) {
			if (lane == 0)
				out_sizes[pl->batch_index] = 0;
			continue;
		}
		uint32_t adler = 1;
		if (lane == 0) {
			png_write_head(pl, table);
			for (uint32_t k = 0; k < pl->strip_count; k++)
				adler = png_asm_adler(pl, adler, k, &res[k]);
		}
		adler = __shfl_sync(FULL_MASK, adler, 0);
		png_asm a;
		png_asm_init(pl, &a);
		for (uint32_t k0 = 0; k0 < pl->strip_count; k0 += 32) {
			uint32_t k = k0 + (uint32_t)lane;
			bool mine = k < pl->strip_count;
			uint64_t csize = mine ? png_asm_chunk_size(pl, k, &res[k]) : 0;
			uint32_t zsize = mine ? res[k].size : 0;
			// inclusive scans over the lanes
			uint64_t cpre = csize;
			uint32_t zpre = zsize;
			for (int d = 1; d < 32; d <<= 1) {
				uint64_t c = __shfl_up_sync(FULL_MASK, cpre, d);
				uint32_t z = __shfl_up_sync(FULL_MASK, zpre, d);
				if (lane >= d) {
					cpre += c;
					zpre += z;
				}
			}
			if (mine)
				png_asm_chunk(pl, a.pos + cpre - csize, a.zoff + zpre - zsize, adler, k, &res[k], table);
			a.pos += __shfl_sync(FULL_MASK, cpre, 31);
			a.zoff += __shfl_sync(FULL_MASK, zpre, 31);
		}
		a.adler = adler;
		__syncwarp();
		if (lane == 0)
			out_sizes[pl->batch_index] = png_asm_finish(pl, &a, table);
	}
}

// ---- host --------------------------------------------------------------------------------

// The device layout of a batch: plans, strip results, strip scratch.
struct gpu_layout {
	size_t plans_off, results_off, scratch_off, total;
	uint64_t strips, max_n;
	uint32_t valid, max_rows;
	int chain;  // the quality searches hash chains
};

static int chain_of(const kiln_pngenc_params *params)
{
	return png_defl_level_for((int)params->quality).chain > 0;
}

// Plans image i; refuses it unless dst fits. Fills scratch fields from *scratch_at.
static kiln_status plan_one(const kiln_pngenc_params *params, const kiln_pngenc_image *img, png_plan *pl)
{
	return png_enc_plan(params, img, pl);
}

static void layout_batch(const kiln_pngenc_params *params, const kiln_pngenc_image *images, size_t count,
			 gpu_layout *L)
{
	memset(L, 0, sizeof *L);
	L->chain = chain_of(params);
	size_t scratch = 0;
	for (size_t i = 0; i < count; i++) {
		png_plan pl;
		if (plan_one(params, &images[i], &pl) != KILN_OK)
			continue;
		uint64_t n = (uint64_t)pl.rows_per_strip * png_plan_rowlen(&pl);
		scratch += gpu_strip_scratch(&pl) * pl.strip_count;
		L->strips += pl.strip_count;
		L->max_n = n > L->max_n ? n : L->max_n;
		L->max_rows = pl.rows_per_strip > L->max_rows ? pl.rows_per_strip : L->max_rows;
		L->valid++;
	}
	L->plans_off = 0;
	L->results_off = align256((size_t)L->valid * sizeof(png_plan));
	L->scratch_off = L->results_off + align256(L->strips * sizeof(png_strip_result));
	L->total = L->scratch_off + scratch + 256;
}

extern "C" size_t kiln_pngenc_gpu_temp_size(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
					    size_t count)
{
	if (!params || !images)
		return 0;
	gpu_layout L;
	layout_batch(params, images, count, &L);
	return L.total;
}

struct put_ctx {
	uint8_t *dst;
	cudaStream_t stream;
};

static int put_device(void *ctx, uint64_t off, const void *p, size_t n)
{
	put_ctx *c = (put_ctx *)ctx;
	// pageable source: staged before the call returns, so the caller's chunk data and
	// our stack buffers may change afterwards
	return cudaMemcpyAsync(c->dst + off, p, n, cudaMemcpyHostToDevice, c->stream) != cudaSuccess;
}

template <typename Kernel>
static unsigned grid_cap(Kernel kernel, int threads, uint64_t want)
{
	int dev = 0, sms = 0, per_sm = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
		sms = 1;
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm <= 0)
		per_sm = 1;
	uint64_t cap = (uint64_t)sms * (uint64_t)per_sm;
	uint64_t g = want < cap ? want : cap;
	return (unsigned)(g ? g : 1);
}

// The filter, chain and match kernels over every strip: force >= 0, high's filter trial of
// that type (png_trial_strip); -1, the strips' own filters and search.
static void launch_filter_search(const gpu_layout *L, const png_plan *d_plans, uint32_t valid, uint64_t strips,
				 uint8_t *d_scratch, int force, cudaStream_t s)
{
	const int warps_per_cta = 4;
	unsigned gs = (unsigned)(strips < 65535 ? strips : 65535);
	uint64_t gx = (L->max_rows + warps_per_cta - 1) / warps_per_cta;
	dim3 grid1((unsigned)(gx < 65535 ? gx : 65535), gs);
	pngenc_filter_kernel<<<grid1, 32 * warps_per_cta, 0, s>>>(d_plans, valid, strips, d_scratch, force);
	if (force >= 0 || L->chain) {  // the trials search as medium does
		unsigned g2 = grid_cap(pngenc_chain_kernel, 32 * warps_per_cta, (strips + warps_per_cta - 1) / warps_per_cta);
		pngenc_chain_kernel<<<g2, 32 * warps_per_cta, 0, s>>>(d_plans, valid, strips, d_scratch);
	}
	const int threads = 128;
	uint64_t gx3 = (L->max_n + threads - 1) / threads;
	dim3 grid3((unsigned)(gx3 < 65535 ? gx3 : 65535), gs);
	pngenc_match_kernel<<<grid3, threads, 0, s>>>(d_plans, valid, strips, d_scratch, force >= 0);
}

extern "C" kiln_status kiln_pngenc_encode_gpu(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
					      uint8_t *const *dst, const size_t *dst_caps, uint64_t *d_out_sizes,
					      size_t count, kiln_status *status, void *d_temp, size_t temp_size,
					      kiln_stream stream)
{
	if (count == 0)
		return KILN_OK;
	if (!params || !images || !dst || !dst_caps || !d_out_sizes || !status || !d_temp || count > UINT32_MAX)
		return KILN_ERR_INVALID_ARG;
	gpu_layout L;
	layout_batch(params, images, count, &L);
	if (temp_size < L.total)
		return KILN_ERR_INVALID_ARG;
	cudaStream_t s = (cudaStream_t)stream;
	uint8_t *base = (uint8_t *)(((uintptr_t)d_temp + 255) & ~(uintptr_t)255);
	png_plan *d_plans = (png_plan *)(base + L.plans_off);
	png_strip_result *d_results = (png_strip_result *)(base + L.results_off);
	uint8_t *d_scratch = base + L.scratch_off;

	enum { CHUNK = 32 };
	png_plan chunk[CHUNK];
	uint32_t valid = 0, filled = 0;
	uint64_t strips = 0, scratch_at = 0;
	int trials = 0; /* some image's filters are chosen by trial (each kernel asks its plan) */
	for (size_t i = 0; i < count; i++) {
		png_plan *pl = &chunk[filled];
		kiln_status st = plan_one(params, &images[i], pl);
		if (st == KILN_OK && (!dst[i] || dst_caps[i] < pl->bound))
			st = KILN_ERR_INVALID_ARG;
		if (st != KILN_OK) {
			// keeps the layout of layout_batch: a plan valid there but refused here
			// (destination) still takes its scratch, unused
			png_plan tmp;
			if (plan_one(params, &images[i], &tmp) == KILN_OK)
				scratch_at += gpu_strip_scratch(&tmp) * tmp.strip_count;
			status[i] = st;
			if (cudaMemsetAsync(d_out_sizes + i, 0, sizeof(uint64_t), s) != cudaSuccess)
				return KILN_ERR_CUDA;
			continue;
		}
		status[i] = KILN_OK;
		pl->dst = dst[i];
		pl->first_strip = strips;
		pl->strip_scratch = gpu_strip_scratch(pl);
		pl->scratch_off = scratch_at;
		pl->batch_index = (uint32_t)i;
		scratch_at += pl->strip_scratch * pl->strip_count;
		strips += pl->strip_count;
		trials |= png_plan_trials(pl);
		put_ctx pc = {dst[i], s};
		if (png_enc_put_chunks(&images[i], put_device, &pc))
			return KILN_ERR_CUDA;
		if (++filled == CHUNK) {
			if (cudaMemcpyAsync(d_plans + valid, chunk, filled * sizeof *chunk, cudaMemcpyHostToDevice, s) !=
			    cudaSuccess)
				return KILN_ERR_CUDA;
			valid += filled;
			filled = 0;
		}
	}
	if (filled) {
		if (cudaMemcpyAsync(d_plans + valid, chunk, filled * sizeof *chunk, cudaMemcpyHostToDevice, s) !=
		    cudaSuccess)
			return KILN_ERR_CUDA;
		valid += filled;
	}
	if (valid == 0)
		return KILN_OK;

	cudaGetLastError();
	if (trials) {
		for (int type = 0; type < 5; type++) {
			launch_filter_search(&L, d_plans, valid, strips, d_scratch, type, s);
			const int threads = 64;
			uint64_t gx = (L.max_rows + threads - 1) / threads;
			dim3 grid((unsigned)(gx < 65535 ? gx : 65535), (unsigned)(strips < 65535 ? strips : 65535));
			pngenc_trial_kernel<<<grid, threads, 0, s>>>(d_plans, valid, strips, d_scratch, type);
		}
	}
	launch_filter_search(&L, d_plans, valid, strips, d_scratch, -1, s);
	if (png_defl_level_for((int)params->quality).optimal) {
		unsigned g4 = grid_cap(pngenc_opt_kernel, 32, strips);
		pngenc_opt_kernel<<<g4, 32, 0, s>>>(d_plans, valid, strips, d_scratch, d_results);
	} else {
		unsigned g4 = grid_cap(pngenc_deflate_kernel, 32, strips);
		pngenc_deflate_kernel<<<g4, 32, 0, s>>>(d_plans, valid, strips, d_scratch, d_results);
	}
	{
		const int threads = 256;
		// a few CTAs a strip, each looping: most strips fill a fraction of their bound
		uint64_t gx = (png_deflate_strip_bound(L.max_n) + threads - 1) / threads;
		dim3 grid((unsigned)(gx < 8 ? gx : 8), (unsigned)(strips < 65535 ? strips : 65535));
		pngenc_copy_kernel<<<grid, threads, 0, s>>>(d_plans, valid, strips, d_results, d_scratch);
	}
	pngenc_assemble_kernel<<<valid < 65535 ? valid : 65535, 32, 0, s>>>(d_plans, valid, d_results, d_out_sizes);
	return cudaGetLastError() == cudaSuccess ? KILN_OK : KILN_ERR_CUDA;
}
