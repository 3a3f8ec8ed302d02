/* BC1 (DXT1) per-block logic, written once for both backends: bc1_cpu.c runs these
 * functions over the thread pool and bc1_cuda.cu runs them in kernels, where the candidate
 * loops of `high` are split across the lanes of a warp. Decisions are made with integer
 * arithmetic, or with float expressions that are evaluated in one fixed order on both
 * sides (no contraction, no libm), and every search breaks ties towards its lowest
 * candidate: that is what makes the output bytes independent of the backend.
 *
 * The decoder this models: endpoints c0, c1 in RGB565 expanded by bit replication; c0 > c1
 * selects the 4-colour palette {c0, c1, (2c0+c1+1)/3, (c0+2c1+1)/3}, otherwise the
 * 3-colour palette {c0, c1, (c0+c1+1)/2, black} whose index 3 is transparent in BC1a. The
 * encoder never gives index 3 of a 3-colour block to an opaque texel, so its blocks decode
 * to the same colours whether or not the reader treats index 3 as transparent. */
#ifndef KILN_BC1_BLOCK_H
#define KILN_BC1_BLOCK_H

#include <float.h>
#include <stdint.h>

#include "kernels/bc1/bc1_tables.h"
#include "kernels/codec.h"
#include "kernels/kiln_hd.h"

/* Each float operation must round to float, as on the GPU: x87 excess precision (i386
 * without SSE) would change which candidates win. */
#if !defined(__CUDA_ARCH__) && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "bc1_block.h needs FLT_EVAL_METHOD == 0 (build with SSE2 floating point)"
#endif

/* The coarse candidate search of `high` keeps one winner per group of candidates (index
 * modulo BC1_GROUPS) and scores those winners exactly. 32 is a warp: on the GPU each lane
 * owns one group, so the CPU and GPU compute the same set of winners. */
#define BC1_GROUPS 32
/* Endpoint moves tried by the final local search: one channel of one endpoint by +-1. */
#define BC1_MOVES 12

typedef struct bc1_block {
	uint32_t rgba[16]; /* texel x + 4y as r | g << 8 | b << 16 | a << 24 */
	uint32_t opaque;   /* bit i set: texel i keeps its colour; clear: punched through */
} bc1_block;

/* An encoding under evaluation: endpoints as RGB565, the palette rule it is scored with
 * (four: 4-colour arithmetic; order of c0 and c1 is fixed only when packing), 2-bit
 * indices and the RGB squared error they give. */
typedef struct bc1_fit {
	uint32_t c0, c1;
	uint32_t indices;
	uint32_t error;
	int four;
} bc1_fit;

/* The opaque texels of a block sorted along an axis, as prefix sums: the least-squares
 * system of every contiguous split comes from three lookups. Channel 3 pads rows to 16
 * bytes. The float copy holds the same (exactly representable) integers. */
typedef struct bc1_sorted {
	int32_t prefix[17][4];
	float prefixf[17][4];
	float total_sq; /* |P[n]|^2 */
	uint8_t order[16];
	int n;
} bc1_sorted;

/* One cluster-fit candidate (its code from bc1_candidates) with the coefficients of its
 * coarse score for a given texel count (see bc1_candidate_gain). The backends keep the
 * table for 16 texels (shared memory on the GPU); other counts are computed on the fly. */
typedef struct bc1_candidate {
	float aa, at, tt;
	uint32_t code;
} bc1_candidate;

/* One surface of a batch as the encoders walk it: its blocks are numbered from
 * first_block on, in one sequence over the whole batch (the GPU kernel finds a block's
 * surface by binary search over first_block; the array lives in device scratch there). */
typedef struct bc1_batch_surface {
	const uint8_t *rgba;
	uint8_t *dst;
	uint64_t first_block;
	uint32_t width, height, stride;
	uint32_t blocks_x;
	uint32_t cutoff;   /* alpha below this is punched through; 0: never */
	uint32_t aligned4; /* rows start on 4-byte boundaries: texels load as words */
} bc1_batch_surface;

/* Fills desc for surface src written to dst; returns 0 for a surface that cannot be
 * encoded (NULL pointers, no texels, rows longer than the stride, 2^32 blocks or more).
 * The pointers may be device memory: they are only compared with NULL. */
KILN_HD int bc1_describe(const kiln_surface *src, uint8_t *dst, int alpha_cutoff,
			 bc1_batch_surface *desc)
{
	uint64_t blocks_x = ((uint64_t)src->width + 3) / 4, blocks_y = ((uint64_t)src->height + 3) / 4;
	if (!src->rgba || !dst || src->width == 0 || src->height == 0 ||
	    (uint64_t)src->stride < 4 * (uint64_t)src->width || blocks_x * blocks_y > UINT32_MAX)
		return 0;
	int cutoff = alpha_cutoff < 0 ? 0 : (alpha_cutoff > 256 ? 256 : alpha_cutoff);
	desc->rgba = src->rgba;
	desc->dst = dst;
	desc->first_block = 0;
	desc->width = src->width;
	desc->height = src->height;
	desc->stride = src->stride;
	desc->blocks_x = (uint32_t)blocks_x;
	desc->cutoff = src->has_alpha ? (uint32_t)cutoff : 0;
	desc->aligned4 = (uintptr_t)src->rgba % 4 == 0 && src->stride % 4 == 0;
	return 1;
}

/* Blocks of a described surface: at most 2^32 - 1 (bc1_describe refuses more). */
KILN_HD uint64_t bc1_surface_blocks(const bc1_batch_surface *desc)
{
	return (uint64_t)desc->blocks_x * (((uint64_t)desc->height + 3) / 4);
}

KILN_HD uint32_t bc1_channel(uint32_t texel, int c) { return (texel >> (8 * c)) & 0xffu; }

KILN_HD uint32_t bc1_bits(int c) { return c == 1 ? 6u : 5u; }

/* Reads block (bx, by), repeating the last row and column where it overhangs. */
KILN_HD void bc1_block_load(const kiln_surface *surf, uint32_t bx, uint32_t by, uint32_t cutoff,
			    bc1_block *blk)
{
	uint32_t opaque = 0;
	for (int i = 0; i < 16; i++) {
		uint32_t x = 4 * bx + (uint32_t)(i & 3), y = 4 * by + (uint32_t)(i >> 2);
		const uint8_t *p = kiln_surface_texel(surf, x, y);
		blk->rgba[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			       (uint32_t)p[3] << 24;
		opaque |= (uint32_t)(p[3] >= cutoff) << i;
	}
	blk->opaque = opaque;
}

/* 5- or 6-bit value to 8 bits by bit replication, as every BC1 decoder does. */
KILN_HD int bc1_expand(uint32_t q, uint32_t bits)
{
	return bits == 5 ? (int)(q << 3 | q >> 2) : (int)(q << 2 | q >> 4);
}

KILN_HD uint32_t bc1_field(uint32_t c565, int c)
{
	return c == 0 ? c565 >> 11 : (c == 1 ? (c565 >> 5) & 63u : c565 & 31u);
}

KILN_HD uint32_t bc1_rgb565(uint32_t r, uint32_t g, uint32_t b) { return r << 11 | g << 5 | b; }

/* The decoder's palette for endpoints c0, c1 under the 4- or 3-colour rule. */
KILN_HD void bc1_palette(uint32_t c0, uint32_t c1, int four, int pal[4][3])
{
	for (int c = 0; c < 3; c++) {
		int e0 = bc1_expand(bc1_field(c0, c), bc1_bits(c));
		int e1 = bc1_expand(bc1_field(c1, c), bc1_bits(c));
		pal[0][c] = e0;
		pal[1][c] = e1;
		if (four) {
			pal[2][c] = (2 * e0 + e1 + 1) / 3;
			pal[3][c] = (e0 + 2 * e1 + 1) / 3;
		} else {
			pal[2][c] = (e0 + e1 + 1) / 2;
			pal[3][c] = 0;
		}
	}
}

KILN_HD uint32_t bc1_distance(uint32_t texel, const int p[3])
{
	int dr = (int)bc1_channel(texel, 0) - p[0];
	int dg = (int)bc1_channel(texel, 1) - p[1];
	int db = (int)bc1_channel(texel, 2) - p[2];
	return (uint32_t)(dr * dr + dg * dg + db * db);
}

/* Gives texels [begin, end) their nearest palette entry (ties: the lowest index; index 3
 * of a 3-colour palette only to punched-through texels), ORs their indices into *indices
 * and returns their error. Integer sums: spans can be added in any order. */
KILN_HD uint32_t bc1_assign_span(const bc1_block *blk, uint32_t c0, uint32_t c1, int four,
				 int begin, int end, uint32_t *indices)
{
	int pal[4][3];
	bc1_palette(c0, c1, four, pal);
	uint32_t error = 0, idx = 0;
	for (int i = begin; i < end; i++) {
		if (!(blk->opaque >> i & 1u)) {
			idx |= 3u << (2 * i);
			continue;
		}
		uint32_t t = blk->rgba[i];
		uint32_t best = bc1_distance(t, pal[0]), k = 0;
		uint32_t d1 = bc1_distance(t, pal[1]);
		uint32_t d2 = bc1_distance(t, pal[2]);
		uint32_t d3 = four ? bc1_distance(t, pal[3]) : UINT32_MAX;
		if (d1 < best) {
			best = d1;
			k = 1;
		}
		if (d2 < best) {
			best = d2;
			k = 2;
		}
		if (d3 < best) {
			best = d3;
			k = 3;
		}
		error += best;
		idx |= k << (2 * i);
	}
	*indices |= idx;
	return error;
}

KILN_HD uint32_t bc1_assign(const bc1_block *blk, uint32_t c0, uint32_t c1, int four,
			    uint32_t *indices)
{
	*indices = 0;
	return bc1_assign_span(blk, c0, c1, four, 0, 16, indices);
}

KILN_HD void bc1_fit_set(bc1_fit *fit, const bc1_block *blk, uint32_t c0, uint32_t c1, int four)
{
	fit->c0 = c0;
	fit->c1 = c1;
	fit->four = four;
	fit->error = bc1_assign(blk, c0, c1, four, &fit->indices);
}

KILN_HD uint32_t bc1_absdiff(int a, int b) { return (uint32_t)(a > b ? a - b : b - a); }

/* The 5- or 6-bit value whose expansion comes nearest to num/den (an 8-bit-scale value,
 * den > 0), ties to the lower. Integer only: num <= 255 * den < 2^23 keeps it in range. */
KILN_HD uint32_t bc1_quantise(int32_t num, int32_t den, uint32_t bits)
{
	uint32_t top = (1u << bits) - 1;
	if (num <= 0)
		return 0;
	if (num >= 255 * den)
		return top;
	uint32_t q = (2 * top * (uint32_t)num + 255u * (uint32_t)den) / (510u * (uint32_t)den);
	/* q rounds the ideal grid; the expansion is off that grid by up to half a step */
	uint32_t best = q, dist = bc1_absdiff(bc1_expand(q, bits) * den, num);
	if (q > 0 && bc1_absdiff(bc1_expand(q - 1, bits) * den, num) <= dist) {
		best = q - 1;
		dist = bc1_absdiff(bc1_expand(q - 1, bits) * den, num);
	}
	if (q < top && bc1_absdiff(bc1_expand(q + 1, bits) * den, num) < dist)
		best = q + 1;
	return best;
}

KILN_HD uint32_t bc1_quantise_texel(uint32_t texel)
{
	return bc1_rgb565(bc1_quantise((int32_t)bc1_channel(texel, 0), 1, 5),
			  bc1_quantise((int32_t)bc1_channel(texel, 1), 1, 6),
			  bc1_quantise((int32_t)bc1_channel(texel, 2), 1, 5));
}

/* Solves the 2x2 least-squares system for endpoints a, b with integer weights alpha (on a)
 * and w - alpha (on b): [A AB; AB B] [a; b] = w [Ax; Bx], det = A*B - AB^2 > 0, and
 * quantises the solution. Bounds: A, B <= 144, sums <= 3*255*16, so w*num < 2^23. */
KILN_HD void bc1_solve(int32_t A, int32_t B, int32_t AB, int32_t w, const int32_t Ax[3],
		       const int32_t Bx[3], uint32_t *ca, uint32_t *cb)
{
	int32_t det = A * B - AB * AB;
	uint32_t qa[3], qb[3];
	for (int c = 0; c < 3; c++) {
		qa[c] = bc1_quantise(w * (B * Ax[c] - AB * Bx[c]), det, bc1_bits(c));
		qb[c] = bc1_quantise(w * (A * Bx[c] - AB * Ax[c]), det, bc1_bits(c));
	}
	*ca = bc1_rgb565(qa[0], qa[1], qa[2]);
	*cb = bc1_rgb565(qb[0], qb[1], qb[2]);
}

/* Weight of endpoint c0 (out of 3, or 2 in 3-colour blocks) for each palette index. */
KILN_HD int32_t bc1_weight(uint32_t index, int four)
{
	if (four)
		return index == 0 ? 3 : (index == 1 ? 0 : (index == 2 ? 2 : 1));
	return index == 0 ? 2 : (index == 1 ? 0 : 1);
}

/* Least-squares endpoints for the indices of `fit` (each texel's weights fixed by its
 * index), quantised. Returns 0 when the system is singular (one index used throughout). */
KILN_HD int bc1_refit(const bc1_block *blk, const bc1_fit *fit, uint32_t *ca, uint32_t *cb)
{
	int32_t w = fit->four ? 3 : 2;
	int32_t A = 0, B = 0, AB = 0, Ax[3] = {0, 0, 0}, Bx[3] = {0, 0, 0};
	for (int i = 0; i < 16; i++) {
		if (!(blk->opaque >> i & 1u))
			continue;
		int32_t al = bc1_weight(fit->indices >> (2 * i) & 3u, fit->four), be = w - al;
		A += al * al;
		B += be * be;
		AB += al * be;
		for (int c = 0; c < 3; c++) {
			Ax[c] += al * (int32_t)bc1_channel(blk->rgba[i], c);
			Bx[c] += be * (int32_t)bc1_channel(blk->rgba[i], c);
		}
	}
	if (A * B - AB * AB == 0)
		return 0;
	bc1_solve(A, B, AB, w, Ax, Bx, ca, cb);
	return 1;
}

/* Replaces fit by its least-squares refit while that lowers the error. */
KILN_HD void bc1_refine(const bc1_block *blk, bc1_fit *fit, int rounds)
{
	for (int r = 0; r < rounds; r++) {
		bc1_fit next;
		if (!bc1_refit(blk, fit, &next.c0, &next.c1))
			return;
		bc1_fit_set(&next, blk, next.c0, next.c1, fit->four);
		if (next.error >= fit->error)
			return;
		*fit = next;
	}
}

/* Move m of the local search: channel (m % 6) / 2 of endpoint m / 6, by -1 or +1.
 * Returns 0 when the move leaves the 5/6-bit range. */
KILN_HD int bc1_move(uint32_t c0, uint32_t c1, int m, uint32_t *n0, uint32_t *n1)
{
	int c = (m % 6) / 2;
	uint32_t e = m < 6 ? c0 : c1;
	uint32_t v = bc1_field(e, c), top = (1u << bc1_bits(c)) - 1;
	if (m & 1) {
		if (v == top)
			return 0;
		v++;
	} else {
		if (v == 0)
			return 0;
		v--;
	}
	uint32_t shift = c == 0 ? 11 : (c == 1 ? 5 : 0);
	e = (e & ~(top << shift)) | v << shift;
	*n0 = m < 6 ? e : c0;
	*n1 = m < 6 ? c1 : e;
	return 1;
}

/* Error of move m applied to fit, or UINT32_MAX when it is not a valid move. */
KILN_HD uint32_t bc1_move_error(const bc1_block *blk, const bc1_fit *fit, int m, bc1_fit *out)
{
	uint32_t n0, n1;
	if (!bc1_move(fit->c0, fit->c1, m, &n0, &n1))
		return UINT32_MAX;
	bc1_fit_set(out, blk, n0, n1, fit->four);
	return out->error;
}

/* Greedy local search over single-step endpoint moves: each round takes the best move
 * (ties: the lowest move number) while it lowers the error. */
KILN_HD void bc1_polish(const bc1_block *blk, bc1_fit *fit, int rounds)
{
	for (int r = 0; r < rounds; r++) {
		bc1_fit best = *fit;
		for (int m = 0; m < BC1_MOVES; m++) {
			bc1_fit next;
			if (bc1_move_error(blk, fit, m, &next) < best.error)
				best = next;
		}
		if (best.error >= fit->error)
			return;
		*fit = best;
	}
}

/* Writes the block: 4-colour blocks need c0 > c1 and 3-colour ones c0 <= c1, so the
 * endpoints are swapped (and the indices remapped) where the fit has them the other way.
 * A 4-colour fit with c0 == c1 has one colour and becomes a 3-colour block of index 0. */
KILN_HD void bc1_pack(const bc1_fit *fit, uint32_t out[2])
{
	uint32_t c0 = fit->c0, c1 = fit->c1, idx = fit->indices;
	if (fit->four && c0 == c1) {
		idx = 0;
	} else if (fit->four && c0 < c1) {
		c0 = fit->c1;
		c1 = fit->c0;
		idx ^= 0x55555555u; /* 0 <-> 1, 2 <-> 3 */
	} else if (!fit->four && c0 > c1) {
		c0 = fit->c1;
		c1 = fit->c0;
		idx ^= ~(idx >> 1) & 0x55555555u; /* 0 <-> 1; 2 and 3 stay */
	}
	out[0] = c0 | c1 << 16;
	out[1] = idx;
}

/* A block with no opaque texel: 3-colour (c0 == c1 == 0), every index transparent. */
KILN_HD void bc1_pack_transparent(uint32_t out[2])
{
	out[0] = 0;
	out[1] = 0xffffffffu;
}

/* Opaque texels all of one colour: the optimal endpoints come per channel from tables.
 * Index 2 of either palette reaches every value a pair can; blocks with punched-through
 * texels must use the 3-colour rule. */
KILN_HD void bc1_encode_solid(const bc1_block *blk, uint32_t rgb, uint32_t out[2])
{
	uint32_t a4[3], b4[3], a3[3], b3[3], err4 = 0, err3 = 0;
	for (int c = 0; c < 3; c++) {
		uint32_t v = bc1_channel(rgb, c), bits = bc1_bits(c);
		uint32_t p4 = bits == 5 ? bc1_solid4_5[v] : bc1_solid4_6[v];
		uint32_t p3 = bits == 5 ? bc1_solid3_5[v] : bc1_solid3_6[v];
		a4[c] = p4 & 0xffu;
		b4[c] = p4 >> 8;
		a3[c] = p3 & 0xffu;
		b3[c] = p3 >> 8;
		int e4 = (2 * bc1_expand(a4[c], bits) + bc1_expand(b4[c], bits) + 1) / 3 - (int)v;
		int e3 = (bc1_expand(a3[c], bits) + bc1_expand(b3[c], bits) + 1) / 2 - (int)v;
		err4 += (uint32_t)(e4 * e4);
		err3 += (uint32_t)(e3 * e3);
	}
	bc1_fit fit;
	int four = blk->opaque == 0xffffu && err4 <= err3;
	fit.four = four;
	fit.c0 = four ? bc1_rgb565(a4[0], a4[1], a4[2]) : bc1_rgb565(a3[0], a3[1], a3[2]);
	fit.c1 = four ? bc1_rgb565(b4[0], b4[1], b4[2]) : bc1_rgb565(b3[0], b3[1], b3[2]);
	/* index 2 for opaque texels, 3 for punched-through ones */
	uint32_t transparent = 0;
	for (int i = 0; i < 16; i++)
		transparent |= (~blk->opaque >> i & 1u) << (2 * i);
	fit.indices = 0xaaaaaaaau | transparent;
	fit.error = four ? err4 : err3;
	bc1_pack(&fit, out);
}

/* The nine sums over opaque texels that bc1_stats needs: r, g, b, rr, rg, rb, gg, gb, bb. */
KILN_HD void bc1_moments(uint32_t texel, int32_t m[9])
{
	int32_t r = (int32_t)bc1_channel(texel, 0);
	int32_t g = (int32_t)bc1_channel(texel, 1);
	int32_t b = (int32_t)bc1_channel(texel, 2);
	m[0] = r;
	m[1] = g;
	m[2] = b;
	m[3] = r * r;
	m[4] = r * g;
	m[5] = r * b;
	m[6] = g * g;
	m[7] = g * b;
	m[8] = b * b;
}

/* Channel sums and the covariance scaled by n^2 (n*sum(xy) - sum(x)sum(y)), from the
 * summed moments of n texels; exact in int32 (|value| <= 16 * 16 * 255^2 < 2^24, so the
 * float copy is exact too). cov is rr, rg, rb, gg, gb, bb. */
KILN_HD void bc1_covariance(int32_t n, const int32_t m[9], int32_t sum[3], int32_t cov[6])
{
	for (int c = 0; c < 3; c++)
		sum[c] = m[c];
	cov[0] = n * m[3] - m[0] * m[0];
	cov[1] = n * m[4] - m[0] * m[1];
	cov[2] = n * m[5] - m[0] * m[2];
	cov[3] = n * m[6] - m[1] * m[1];
	cov[4] = n * m[7] - m[1] * m[2];
	cov[5] = n * m[8] - m[2] * m[2];
}

KILN_HD int bc1_stats(const bc1_block *blk, int32_t sum[3], int32_t cov[6])
{
	int32_t n = 0, total[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
	for (int i = 0; i < 16; i++) {
		if (!(blk->opaque >> i & 1u))
			continue;
		int32_t m[9];
		bc1_moments(blk->rgba[i], m);
		for (int k = 0; k < 9; k++)
			total[k] += m[k];
		n++;
	}
	bc1_covariance(n, total, sum, cov);
	return n;
}

KILN_HD float bc1_fabs(float x) { return x < 0.0f ? -x : x; }

/* Principal axis of the covariance by a fixed number of power iterations, started from
 * the column of the largest variance (already one step from that channel's unit vector,
 * and never orthogonal to the axis as a fixed start vector can be). Scaled by its
 * largest component each step instead of normalised, which needs no sqrt. */
KILN_HD void bc1_axis(const int32_t cov[6], int iterations, float axis[3])
{
	float m[3][3];
	m[0][0] = (float)cov[0];
	m[0][1] = m[1][0] = (float)cov[1];
	m[0][2] = m[2][0] = (float)cov[2];
	m[1][1] = (float)cov[3];
	m[1][2] = m[2][1] = (float)cov[4];
	m[2][2] = (float)cov[5];
	/* column k of the symmetric matrix, picked without indexing by k (which would put
	 * the matrix in GPU local memory) */
	int k = cov[3] > cov[0] ? 1 : 0;
	if (cov[5] > (k ? cov[3] : cov[0]))
		k = 2;
	float v[3];
	v[0] = k == 0 ? m[0][0] : (k == 1 ? m[0][1] : m[0][2]);
	v[1] = k == 0 ? m[1][0] : (k == 1 ? m[1][1] : m[1][2]);
	v[2] = k == 0 ? m[2][0] : (k == 1 ? m[2][1] : m[2][2]);
	for (int it = 0; it < iterations; it++) {
		float w[3];
		for (int r = 0; r < 3; r++)
			w[r] = (m[r][0] * v[0] + m[r][1] * v[1]) + m[r][2] * v[2];
		float big = bc1_fabs(w[0]);
		if (bc1_fabs(w[1]) > big)
			big = bc1_fabs(w[1]);
		if (bc1_fabs(w[2]) > big)
			big = bc1_fabs(w[2]);
		if (big == 0.0f)
			break;
		float inv = 1.0f / big;
		for (int r = 0; r < 3; r++)
			v[r] = w[r] * inv;
	}
	for (int r = 0; r < 3; r++)
		axis[r] = v[r];
}

KILN_HD float bc1_key(uint32_t texel, const float axis[3])
{
	return ((float)bc1_channel(texel, 0) * axis[0] + (float)bc1_channel(texel, 1) * axis[1]) +
	       (float)bc1_channel(texel, 2) * axis[2];
}

/* The sort order of texels: by key, ties by texel index, so it is a total order. */
KILN_HD int bc1_before(float key_j, int j, float key_i, int i)
{
	return key_j < key_i || (key_j == key_i && j < i);
}

/* Position of opaque texel i in the sorted order. */
KILN_HD int bc1_rank(const float key[16], uint32_t opaque, int i)
{
	int rank = 0;
	for (int j = 0; j < 16; j++)
		rank += (int)((opaque >> j & 1u) && bc1_before(key[j], j, key[i], i));
	return rank;
}

/* Prefix row k: the channel sums of the first k sorted texels. */
KILN_HD void bc1_prefix_row(bc1_sorted *s, int k, const int32_t sum[3])
{
	for (int c = 0; c < 3; c++) {
		s->prefix[k][c] = sum[c];
		s->prefixf[k][c] = (float)sum[c];
	}
	s->prefix[k][3] = 0;
	s->prefixf[k][3] = 0.0f;
}

/* Sets n and the squared total once the rows up to n are in place. Each square is exact
 * in float (< 2^24); their sum is rounded, the same way everywhere. */
KILN_HD void bc1_prefix_finish(bc1_sorted *s, int n)
{
	const int32_t *t = s->prefix[n];
	s->n = n;
	s->total_sq = ((float)(t[0] * t[0]) + (float)(t[1] * t[1])) + (float)(t[2] * t[2]);
}

KILN_HD void bc1_sort(const bc1_block *blk, const float axis[3], bc1_sorted *s)
{
	float key[16];
	int n = 0;
	for (int i = 0; i < 16; i++)
		key[i] = bc1_key(blk->rgba[i], axis);
	for (int i = 0; i < 16; i++) {
		if (!(blk->opaque >> i & 1u))
			continue;
		s->order[bc1_rank(key, blk->opaque, i)] = (uint8_t)i;
		n++;
	}
	int32_t sum[3] = {0, 0, 0};
	bc1_prefix_row(s, 0, sum);
	for (int k = 1; k <= n; k++) {
		for (int c = 0; c < 3; c++)
			sum[c] += (int32_t)bc1_channel(blk->rgba[s->order[k - 1]], c);
		bc1_prefix_row(s, k, sum);
	}
	bc1_prefix_finish(s, n);
}

/* Cluster sizes and least-squares matrix of candidate `code` for n sorted texels.
 * Returns 0 for candidates that do not apply (4-colour with punched-through texels, a
 * split beyond n, or a singular system). */
KILN_HD int bc1_candidate_system(uint32_t code, int n, int32_t *A, int32_t *B, int32_t *AB)
{
	int32_t c0 = (int32_t)(code & 31u), c1 = (int32_t)(code >> 5 & 31u);
	int32_t c2 = (int32_t)(code >> 10 & 31u);
	if (code >> 15) {
		if (c1 > n)
			return 0;
		int32_t n0 = c0, n1 = c1 - c0, n2 = n - c1;
		*A = 4 * n0 + n1;
		*B = n1 + 4 * n2;
		*AB = n1;
	} else {
		if (n != 16)
			return 0;
		int32_t n0 = c0, n1 = c1 - c0, n2 = c2 - c1, n3 = n - c2;
		*A = 9 * n0 + 4 * n1 + n2;
		*B = n1 + 4 * n2 + 9 * n3;
		*AB = 2 * (n1 + n2);
	}
	return *A * *B - *AB * *AB != 0;
}

/* Candidate `code` for n sorted texels; 0 when it does not apply. */
KILN_HD int bc1_candidate_make(uint32_t code, int n, bc1_candidate *k)
{
	int32_t A, B, AB;
	if (!bc1_candidate_system(code, n, &A, &B, &AB))
		return 0;
	float w = (code >> 15) ? 2.0f : 3.0f, inv = 1.0f / (float)(A * B - AB * AB);
	k->aa = (float)(A + B + 2 * AB) * inv;
	k->at = ((float)(2 * AB + 2 * A) * w) * inv;
	k->tt = (((float)A * w) * w) * inv;
	k->code = code;
	return 1;
}

/* The coarse score of a candidate: how much of the block's variance its unquantised
 * least-squares endpoints explain, [Ax Bx] M^-1 [Ax Bx]^T with M = [A AB; AB B], so the
 * error is sum|x|^2 minus this gain, in the same units for both palettes. With
 * Ax = P[c0] + P[c1] + P[c2] (P[0] = 0 stands in for the c2 of 3-colour candidates),
 * T = P[n] and Bx = wT - Ax, it expands to aa*|Ax|^2 - at*Ax.T + tt*|T|^2: two dot
 * products per candidate. */
KILN_HD float bc1_candidate_gain(const float *p0, const float *p1, const float *p2,
				 const float *t, float total_sq, const bc1_candidate *k)
{
	float ax0 = (p0[0] + p1[0]) + p2[0];
	float ax1 = (p0[1] + p1[1]) + p2[1];
	float ax2 = (p0[2] + p1[2]) + p2[2];
	float aa = (ax0 * ax0 + ax1 * ax1) + ax2 * ax2;
	float at = (ax0 * t[0] + ax1 * t[1]) + ax2 * t[2];
	return (k->aa * aa - k->at * at) + k->tt * total_sq;
}

KILN_HD float bc1_candidate_gain_sorted(const bc1_sorted *s, const bc1_candidate *k)
{
	uint32_t code = k->code;
	return bc1_candidate_gain(s->prefixf[code & 31u], s->prefixf[code >> 5 & 31u],
				  s->prefixf[code >> 10 & 31u], s->prefixf[s->n], s->total_sq, k);
}

/* The exact evaluation of a candidate: quantised least-squares endpoints, then every
 * texel to its nearest palette entry. Returns 0 when the candidate does not apply. */
KILN_HD int bc1_candidate_fit(const bc1_block *blk, const bc1_sorted *s, uint32_t code, bc1_fit *fit)
{
	int32_t A, B, AB;
	if (!bc1_candidate_system(code, s->n, &A, &B, &AB))
		return 0;
	int four = !(code >> 15);
	int32_t w = four ? 3 : 2, Ax[3], Bx[3];
	const int32_t *p0 = s->prefix[code & 31u], *p1 = s->prefix[code >> 5 & 31u];
	const int32_t *p2 = s->prefix[code >> 10 & 31u], *t = s->prefix[s->n];
	for (int c = 0; c < 3; c++) {
		Ax[c] = p0[c] + p1[c] + p2[c];
		Bx[c] = w * t[c] - Ax[c];
	}
	uint32_t ca, cb;
	bc1_solve(A, B, AB, w, Ax, Bx, &ca, &cb);
	bc1_fit_set(fit, blk, ca, cb, four);
	return 1;
}

/* Whether fit a beats fit b: lower error, ties to the lower candidate number. */
KILN_HD int bc1_better(uint32_t err_a, uint32_t cand_a, uint32_t err_b, uint32_t cand_b)
{
	return err_a < err_b || (err_a == err_b && cand_a < cand_b);
}

/* Returns the RGB of the opaque texels when they all share it, else UINT32_MAX. */
KILN_HD uint32_t bc1_solid_rgb(const bc1_block *blk)
{
	uint32_t rgb = UINT32_MAX;
	for (int i = 0; i < 16; i++) {
		if (!(blk->opaque >> i & 1u))
			continue;
		uint32_t t = blk->rgba[i] & 0xffffffu;
		if (rgb == UINT32_MAX)
			rgb = t;
		else if (t != rgb)
			return UINT32_MAX;
	}
	return rgb;
}

/* The blocks every quality handles the same way: no opaque texel, or one colour.
 * Returns 1 when out was written. */
KILN_HD int bc1_encode_trivial(const bc1_block *blk, uint32_t out[2])
{
	if (blk->opaque == 0) {
		bc1_pack_transparent(out);
		return 1;
	}
	uint32_t rgb = bc1_solid_rgb(blk);
	if (rgb == UINT32_MAX)
		return 0;
	bc1_encode_solid(blk, rgb, out);
	return 1;
}

/* Range fit: endpoints at the texels that project furthest along the principal axis,
 * then `refits` least-squares refits from the indices. Used by `fast` and `medium`. */
KILN_HD void bc1_range_fit(const bc1_block *blk, int iterations, int refits, bc1_fit *fit)
{
	int32_t sum[3], cov[6];
	float axis[3];
	int n = bc1_stats(blk, sum, cov);
	bc1_axis(cov, iterations, axis);
	/* the extreme texels by value, not by position: an index into rgba would put the
	 * block in GPU local memory */
	int found = 0;
	uint32_t tlo = 0, thi = 0;
	float klo = 0.0f, khi = 0.0f;
	for (int i = 0; i < 16; i++) {
		if (!(blk->opaque >> i & 1u))
			continue;
		float k = bc1_key(blk->rgba[i], axis);
		if (!found || k < klo) {
			tlo = blk->rgba[i];
			klo = k;
		}
		if (!found || k > khi) {
			thi = blk->rgba[i];
			khi = k;
		}
		found = 1;
	}
	bc1_fit_set(fit, blk, bc1_quantise_texel(thi), bc1_quantise_texel(tlo), n == 16);
	bc1_refine(blk, fit, refits);
}

KILN_HD void bc1_encode_fast(const bc1_block *blk, uint32_t out[2])
{
	if (bc1_encode_trivial(blk, out))
		return;
	bc1_fit fit;
	bc1_range_fit(blk, 4, 1, &fit);
	bc1_pack(&fit, out);
}

KILN_HD void bc1_encode_medium(const bc1_block *blk, uint32_t out[2])
{
	if (bc1_encode_trivial(blk, out))
		return;
	bc1_fit fit;
	bc1_range_fit(blk, 8, 3, &fit);
	bc1_polish(blk, &fit, 4);
	bc1_pack(&fit, out);
}

/* Group g's winner of the coarse search: the candidate i = g (mod BC1_GROUPS) with the
 * highest gain, ties to the lowest i; -1 when none applies. One GPU lane computes one
 * group. table[i] is bc1_candidate_make(bc1_candidates[i], 16). */
KILN_HD int bc1_group_winner(const bc1_sorted *s, const bc1_candidate *table, int g)
{
	int winner = -1;
	float best = 0.0f;
	for (int i = g; i < BC1_CANDIDATES; i += BC1_GROUPS) {
		bc1_candidate k = table[i];
		if (s->n != 16 && !bc1_candidate_make(k.code, s->n, &k))
			continue;
		float gain = bc1_candidate_gain_sorted(s, &k);
		if (winner < 0 || gain > best) {
			winner = i;
			best = gain;
		}
	}
	return winner;
}

/* The cluster fit over the texels sorted in s: every group's winner of the coarse search
 * is evaluated exactly, and the best (ties: lowest candidate) is returned. Returns 0 if
 * no candidate applies. */
KILN_HD int bc1_cluster_fit(const bc1_block *blk, const bc1_sorted *s, const bc1_candidate *table,
			    bc1_fit *out)
{
	int found = -1;
	for (int g = 0; g < BC1_GROUPS; g++) {
		int i = bc1_group_winner(s, table, g);
		bc1_fit fit;
		if (i < 0 || !bc1_candidate_fit(blk, s, table[i].code, &fit))
			continue;
		if (found < 0 || bc1_better(fit.error, (uint32_t)i, out->error, (uint32_t)found)) {
			*out = fit;
			found = i;
		}
	}
	return found >= 0;
}

/* `high`: cluster fit along the principal axis, then the local search. (A second
 * cluster fit along the found endpoints' axis, as in squish's iterative fit, was measured
 * at +0.001 dB on Kodak: not worth its time.) */
KILN_HD void bc1_encode_high(const bc1_block *blk, const bc1_candidate *table, uint32_t out[2])
{
	if (bc1_encode_trivial(blk, out))
		return;
	int32_t sum[3], cov[6];
	float axis[3];
	bc1_sorted s;
	bc1_fit fit;
	bc1_stats(blk, sum, cov);
	bc1_axis(cov, 8, axis);
	bc1_sort(blk, axis, &s);
	if (!bc1_cluster_fit(blk, &s, table, &fit)) {
		/* unreachable: two colours always leave a 3-colour candidate; keep it defined */
		bc1_encode_solid(blk, blk->rgba[s.order[0]] & 0xffffffu, out);
		return;
	}
	bc1_polish(blk, &fit, 8);
	bc1_pack(&fit, out);
}

KILN_HD void bc1_encode_block(const bc1_block *blk, int quality, const bc1_candidate *table,
			      uint32_t out[2])
{
	if (quality == KILN_QUALITY_FAST)
		bc1_encode_fast(blk, out);
	else if (quality == KILN_QUALITY_MEDIUM)
		bc1_encode_medium(blk, out);
	else
		bc1_encode_high(blk, table, out);
}

KILN_HD void bc1_store(uint8_t *dst, const uint32_t block[2])
{
	for (int i = 0; i < 4; i++) {
		dst[i] = (uint8_t)(block[0] >> (8 * i));
		dst[4 + i] = (uint8_t)(block[1] >> (8 * i));
	}
}

/* Decodes one block into 16 RGBA texels (x + 4y). punch_through: index 3 of a 3-colour
 * block is transparent black, else opaque black. */
KILN_HD void bc1_decode_block(const uint8_t in[8], int punch_through, uint8_t out[64])
{
	uint32_t c0 = (uint32_t)in[0] | (uint32_t)in[1] << 8;
	uint32_t c1 = (uint32_t)in[2] | (uint32_t)in[3] << 8;
	uint32_t idx = (uint32_t)in[4] | (uint32_t)in[5] << 8 | (uint32_t)in[6] << 16 |
		       (uint32_t)in[7] << 24;
	int pal[4][3];
	int four = c0 > c1;
	bc1_palette(c0, c1, four, pal);
	for (int i = 0; i < 16; i++) {
		uint32_t k = idx >> (2 * i) & 3u;
		for (int c = 0; c < 3; c++)
			out[4 * i + c] = (uint8_t)pal[k][c];
		out[4 * i + 3] = (!four && k == 3 && punch_through) ? 0 : 255;
	}
}

#endif
