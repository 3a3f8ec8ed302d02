/* The ASTC encoder's per-block logic, written once for both backends (see kiln_hd.h).
 *
 * A block is encoded by trying candidates and keeping the one whose exact decode (the
 * decoder of astc_block.h) has the lowest squared error:
 *  - constant blocks become void-extent blocks;
 *  - partitionings: one partition, and (medium, high) 2-partition seeds whose pattern best
 *    matches a 2-means clustering of the texels' colours;
 *  - for each partitioning, every block mode of the footprint (weight grid and weight
 *    range; the colour range is what the mode leaves): endpoints from the principal axis
 *    of each partition, grid weights from the texel weights through the transpose of the
 *    infill, then alternating refits: endpoints by integer least squares against the
 *    quantised infilled weights, weights re-projected on the quantised endpoints;
 *  - endpoint modes RGB direct (8) for opaque partitions, RGBA direct (12) otherwise.
 * Float appears only in the fit (evaluated in one fixed order, never contracted, no libm);
 * every comparison that picks output bits compares integer errors and breaks ties towards
 * the first candidate, so the CPU and GPU backends produce the same bytes. */
#ifndef KILN_ASTC_ENC_H
#define KILN_ASTC_ENC_H

#include <float.h>
#include <stdint.h>

#include "kernels/astc/astc_block.h"
#include "kernels/codec.h"
#include "kernels/kiln_hd.h"

#if !defined(__CUDA_ARCH__) && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "astc_enc.h needs FLT_EVAL_METHOD == 0 (build with SSE2 floating point)"
#endif

#define ASTC_ENC_MAX_MODES 2048
#define ASTC_ENC_SEEDS 1024
/* 2-partition seeds whose patterns are scored in full, per quality */
#define ASTC_ENC_MAX_TRY_SEEDS 8

#define ASTC_ENC_MAX_GRIDS 128

/* One candidate block mode (single plane) of a footprint. */
typedef struct astc_enc_mode {
	uint16_t mode;
	uint8_t grid_w, grid_h, wrange, weight_bits;
	uint8_t grid; /* index into astc_enc_ctx.grids */
} astc_enc_mode;

/* A weight grid size with the infill taps of every texel and, per grid point, the sum of
 * its factors (for the transpose of the infill). */
typedef struct astc_enc_grid {
	uint8_t w, h;
	uint8_t full; /* the grid is the footprint: no infill */
	astc_infill_tap taps[ASTC_MAX_TEXELS];
	uint16_t den[ASTC_MAX_WEIGHTS];
} astc_enc_grid;

/* What the encoder precomputes per footprint: the distinct valid single-plane block modes
 * and the 2-partition pattern of every seed (bit i: texel i is in partition 1). The CPU
 * backend builds it once per footprint; it is read-only afterwards. */
typedef struct astc_enc_ctx {
	int bw, bh;
	int mode_count, grid_count;
	astc_enc_mode modes[ASTC_ENC_MAX_MODES];
	astc_enc_grid grids[ASTC_ENC_MAX_GRIDS];
	uint64_t part2[ASTC_ENC_SEEDS][3]; /* 144 bits per seed */
	uint8_t part2_ok[ASTC_ENC_SEEDS];  /* both partitions non-empty, first of its pattern */
} astc_enc_ctx;

KILN_HD void astc_enc_ctx_init(astc_enc_ctx *ctx, int bw, int bh)
{
	ctx->bw = bw;
	ctx->bh = bh;
	ctx->mode_count = 0;
	ctx->grid_count = 0;
	for (uint32_t m = 0; m < 2048; m++) {
		astc_mode md;
		if ((m & 0x1FFu) == 0x1FCu || !astc_mode_decode(m, bw, bh, &md) || md.dual)
			continue;
		int dup = 0;
		for (int i = 0; i < ctx->mode_count && !dup; i++)
			dup = ctx->modes[i].grid_w == md.grid_w && ctx->modes[i].grid_h == md.grid_h &&
			      ctx->modes[i].wrange == md.wrange;
		if (dup)
			continue;
		astc_enc_mode *e = &ctx->modes[ctx->mode_count++];
		e->mode = (uint16_t)m;
		e->grid_w = md.grid_w;
		e->grid_h = md.grid_h;
		e->wrange = md.wrange;
		e->weight_bits = md.weight_bits;
		int g = 0;
		while (g < ctx->grid_count && (ctx->grids[g].w != md.grid_w || ctx->grids[g].h != md.grid_h))
			g++;
		if (g == ctx->grid_count) {
			astc_enc_grid *gr = &ctx->grids[ctx->grid_count++];
			gr->w = md.grid_w;
			gr->h = md.grid_h;
			gr->full = md.grid_w == bw && md.grid_h == bh;
			for (int j = 0; j < ASTC_MAX_WEIGHTS; j++)
				gr->den[j] = 0;
			for (int y = 0; y < bh; y++) {
				for (int x = 0; x < bw; x++) {
					astc_infill_tap *t = &gr->taps[y * bw + x];
					astc_infill_texel(bw, bh, md.grid_w, md.grid_h, x, y, t);
					for (int k = 0; k < 4; k++)
						gr->den[t->idx[k]] = (uint16_t)(gr->den[t->idx[k]] + t->fac[k]);
				}
			}
		}
		e->grid = (uint8_t)g;
	}
	int n = bw * bh;
	for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
		uint64_t bits[3] = {0, 0, 0};
		int ones = 0;
		for (int y = 0; y < bh; y++) {
			for (int x = 0; x < bw; x++) {
				int i = y * bw + x;
				if (astc_partition(s, x, y, 2, n)) {
					bits[i >> 6] |= 1ull << (i & 63);
					ones++;
				}
			}
		}
		ctx->part2[s][0] = bits[0];
		ctx->part2[s][1] = bits[1];
		ctx->part2[s][2] = bits[2];
		int ok = ones > 0 && ones < n;
		for (int t = 0; t < s && ok; t++) {
			int same = 1, inv = 1;
			for (int k = 0; k < 3; k++) {
				uint64_t mask = k * 64 + 64 <= n ? ~0ull : (k * 64 >= n ? 0 : (1ull << (n - k * 64)) - 1);
				same &= ((ctx->part2[t][k] ^ bits[k]) & mask) == 0;
				inv &= ((ctx->part2[t][k] ^ ~bits[k]) & mask) == 0;
			}
			if (same || inv)
				ok = 0;
		}
		ctx->part2_ok[s] = (uint8_t)ok;
	}
}

/* The texels of one block (edge blocks repeat the last row and column). */
typedef struct astc_enc_block {
	int bw, bh, n;
	int srgb;
	uint8_t px[ASTC_MAX_TEXELS][4];
} astc_enc_block;

KILN_HD void astc_enc_load(const kiln_surface *s, uint32_t bx, uint32_t by, int bw, int bh,
			   int srgb, astc_enc_block *blk)
{
	blk->bw = bw;
	blk->bh = bh;
	blk->n = bw * bh;
	blk->srgb = srgb;
	for (int y = 0; y < bh; y++) {
		for (int x = 0; x < bw; x++) {
			const uint8_t *t = kiln_surface_texel(s, bx * (uint32_t)bw + (uint32_t)x,
							      by * (uint32_t)bh + (uint32_t)y);
			for (int c = 0; c < 4; c++)
				blk->px[y * bw + x][c] = s->has_alpha || c < 3 ? t[c] : 255;
		}
	}
}

/* Per-partition line fit: endpoints in float and each texel's position 0..1 on it. */
typedef struct astc_enc_fit {
	int parts;
	uint8_t part[ASTC_MAX_TEXELS];
	uint8_t alpha[4];       /* partition p has alpha below 255 (needs CEM 12) */
	float w[ASTC_MAX_TEXELS];
} astc_enc_fit;

/* Principal axis of each partition by power iteration (no square roots), projections
 * normalised to 0..1, oriented so that endpoint 1 has the larger RGB sum (the direct
 * modes need s1 >= s0 to avoid blue contraction). */
KILN_HD void astc_enc_fit_lines(const astc_enc_block *blk, astc_enc_fit *fit)
{
	for (int p = 0; p < fit->parts; p++) {
		float mean[4] = {0, 0, 0, 0};
		int cnt = 0, alpha = 0;
		for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			cnt++;
			for (int c = 0; c < 4; c++)
				mean[c] += (float)blk->px[i][c];
			alpha |= blk->px[i][3] != 255;
		}
		fit->alpha[p] = (uint8_t)alpha;
		if (cnt == 0)
			continue;
		for (int c = 0; c < 4; c++)
			mean[c] = mean[c] / (float)cnt;
		float cov[4][4] = {{0}};
		for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			float d[4];
			for (int c = 0; c < 4; c++)
				d[c] = (float)blk->px[i][c] - mean[c];
			for (int a = 0; a < 4; a++)
				for (int b = 0; b < 4; b++)
					cov[a][b] += d[a] * d[b];
		}
		/* start from the channel of largest variance */
		float v[4] = {0, 0, 0, 0};
		int big = 0;
		for (int c = 1; c < 4; c++)
			if (cov[c][c] > cov[big][big])
				big = c;
		v[big] = 1.0f;
		for (int it = 0; it < 8; it++) {
			float nv[4], m = 0.0f;
			for (int a = 0; a < 4; a++) {
				nv[a] = cov[a][0] * v[0] + cov[a][1] * v[1] + cov[a][2] * v[2] + cov[a][3] * v[3];
				float mag = nv[a] < 0 ? -nv[a] : nv[a];
				m = mag > m ? mag : m;
			}
			if (m <= 0.0f)
				break;
			for (int a = 0; a < 4; a++)
				v[a] = nv[a] / m;
		}
		if (v[0] + v[1] + v[2] < 0.0f)
			for (int a = 0; a < 4; a++)
				v[a] = -v[a];
		float vv = v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
		float tmin = FLT_MAX, tmax = -FLT_MAX;
		for (int i = 0; i < blk->n; i++) {
			if (fit->part[i] != p)
				continue;
			float t = 0.0f;
			for (int c = 0; c < 4; c++)
				t += ((float)blk->px[i][c] - mean[c]) * v[c];
			t = vv > 0.0f ? t / vv : 0.0f;
			fit->w[i] = t;
			tmin = t < tmin ? t : tmin;
			tmax = t > tmax ? t : tmax;
		}
		float span = tmax - tmin;
		for (int i = 0; i < blk->n; i++)
			if (fit->part[i] == p)
				fit->w[i] = span > 0.0f ? (fit->w[i] - tmin) / span : 0.5f;
	}
}

/* Decoded endpoints (0..255) of partition p from s. */
KILN_HD void astc_enc_decoded_endpoints(const astc_symbolic *s, int p, int *e0, int *e1)
{
	int pos = 0;
	for (int q = 0; q < p; q++)
		pos += astc_cem_values(s->cem[q]);
	uint8_t v[8];
	for (int i = 0; i < astc_cem_values(s->cem[p]); i++)
		v[i] = astc_color_unquant[s->crange][s->colors[pos + i]];
	astc_decode_endpoints(s->cem[p], v, e0, e1);
}

/* Texel weights 0..1 -> grid weights 0..64 through the transpose of the infill: each grid
 * point averages the texels it contributes to, weighted by its factor. */
KILN_HD void astc_enc_grid_from_texels(const astc_enc_grid *g, int n, const float *tw, float *grid)
{
	int ng = g->w * g->h;
	if (g->full) {
		for (int i = 0; i < ng; i++)
			grid[i] = tw[i] * 64.0f;
		return;
	}
	float num[ASTC_MAX_WEIGHTS];
	for (int j = 0; j < ng; j++)
		num[j] = 0.0f;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < 4; k++)
			num[g->taps[i].idx[k]] += (float)g->taps[i].fac[k] * tw[i];
	for (int j = 0; j < ng; j++)
		grid[j] = g->den[j] > 0 ? num[j] / (float)g->den[j] * 64.0f : 32.0f;
}

/* The decoder's infill (astc_infill) with precomputed taps. */
KILN_HD void astc_enc_infill(const astc_enc_grid *g, int n, const uint8_t *grid, uint8_t *W)
{
	if (g->full) {
		for (int i = 0; i < n; i++)
			W[i] = grid[i];
		return;
	}
	for (int i = 0; i < n; i++) {
		const astc_infill_tap *t = &g->taps[i];
		int sum = 8 + grid[t->idx[0]] * t->fac[0] + grid[t->idx[1]] * t->fac[1] +
			  grid[t->idx[2]] * t->fac[2] + grid[t->idx[3]] * t->fac[3];
		W[i] = (uint8_t)(sum >> 4);
	}
}

/* Exact error of an encoding with texel weights W: what astc_decode_symbolic would give,
 * without recomputing partitions and infill. Stops early once over `limit`. */
KILN_HD uint32_t astc_enc_eval(const astc_enc_block *blk, const uint8_t *part, const uint8_t *W,
			       const astc_symbolic *s, uint32_t limit)
{
	int e[4][2][4];
	for (int p = 0; p < s->partitions; p++)
		astc_enc_decoded_endpoints(s, p, e[p][0], e[p][1]);
	uint32_t err = 0;
	for (int i = 0; i < blk->n; i++) {
		int p = part[i];
		for (int k = 0; k < 4; k++) {
			int d = (int)astc_interpolate(e[p][0][k], e[p][1][k], W[i], blk->srgb) - (int)blk->px[i][k];
			err += (uint32_t)(d * d);
		}
		if (err > limit)
			return err;
	}
	return err;
}

KILN_HD int astc_enc_round64(float v)
{
	int r = (int)(v + 0.5f);
	return r < 0 ? 0 : (r > 64 ? 64 : r);
}

/* Endpoints of partition p by least squares against integer texel weights W (0..64):
 * minimise sum((64-W) e0 + W e1 - 64 x)^2 per channel, solved exactly in 64-bit integers
 * and rounded to nearest. Returns 0 when the weights do not determine two endpoints. */
KILN_HD int astc_enc_lsq(const astc_enc_block *blk, const uint8_t *part, int p, const uint8_t *W,
			 int *e0, int *e1)
{
	int64_t a = 0, b = 0, c = 0, d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
	for (int i = 0; i < blk->n; i++) {
		if (part[i] != p)
			continue;
		int64_t w1 = W[i], w0 = 64 - w1;
		a += w0 * w0;
		b += w0 * w1;
		c += w1 * w1;
		for (int k = 0; k < 4; k++) {
			d0[k] += w0 * 64 * blk->px[i][k];
			d1[k] += w1 * 64 * blk->px[i][k];
		}
	}
	int64_t det = a * c - b * b;
	if (det <= 0)
		return 0;
	for (int k = 0; k < 4; k++) {
		int64_t n0 = c * d0[k] - b * d1[k], n1 = a * d1[k] - b * d0[k];
		/* round half away from zero, then clamp */
		int64_t q0 = n0 >= 0 ? (2 * n0 + det) / (2 * det) : -((-2 * n0 + det) / (2 * det));
		int64_t q1 = n1 >= 0 ? (2 * n1 + det) / (2 * det) : -((-2 * n1 + det) / (2 * det));
		e0[k] = q0 < 0 ? 0 : (q0 > 255 ? 255 : (int)q0);
		e1[k] = q1 < 0 ? 0 : (q1 > 255 ? 255 : (int)q1);
	}
	return 1;
}

/* The float endpoints of a line fit (the extremes of each partition's projection). */
KILN_HD void astc_enc_line_endpoints(const astc_enc_block *blk, const astc_enc_fit *fit, int p,
				     int *e0, int *e1)
{
	/* texel weights are 0..1 along the line: least squares with the unquantised
	 * weights recovers the line's endpoints (or the mean for a flat partition) */
	uint8_t W[ASTC_MAX_TEXELS];
	for (int i = 0; i < blk->n; i++)
		W[i] = (uint8_t)astc_enc_round64(fit->w[i] * 64.0f);
	if (astc_enc_lsq(blk, fit->part, p, W, e0, e1))
		return;
	int sum[4] = {0, 0, 0, 0}, cnt = 0;
	for (int i = 0; i < blk->n; i++) {
		if (fit->part[i] != p)
			continue;
		cnt++;
		for (int k = 0; k < 4; k++)
			sum[k] += blk->px[i][k];
	}
	for (int k = 0; k < 4; k++)
		e0[k] = e1[k] = cnt ? (sum[k] + cnt / 2) / cnt : 0;
}

/* Quantises the endpoints of every partition into s (CEM 8 or 12, colour range s->crange)
 * and puts endpoint 1 on the side of the larger RGB sum after quantisation. Returns a
 * bit mask of the partitions whose endpoints were swapped (their weights must invert). */
KILN_HD int astc_enc_quant_endpoints(astc_symbolic *s, int ep[4][2][4])
{
	int pos = 0, swapped = 0;
	for (int p = 0; p < s->partitions; p++) {
		int rgba = s->cem[p] == 12;
		uint8_t q[2][4];
		int sum[2] = {0, 0};
		for (int e = 0; e < 2; e++) {
			for (int k = 0; k < 4; k++) {
				q[e][k] = astc_color_quant[s->crange][ep[p][e][k]];
				if (k < 3)
					sum[e] += astc_color_unquant[s->crange][q[e][k]];
			}
		}
		int lo = 0, hi = 1;
		if (sum[1] < sum[0]) {
			lo = 1;
			hi = 0;
			swapped |= 1 << p;
		}
		for (int k = 0; k < (rgba ? 4 : 3); k++) {
			s->colors[pos + 2 * k] = q[lo][k];
			s->colors[pos + 2 * k + 1] = q[hi][k];
		}
		pos += rgba ? 8 : 6;
	}
	return swapped;
}

/* Encodes with one block mode and a partitioning: fills s, returns its exact error. */
KILN_HD uint32_t astc_enc_try_mode(const astc_enc_ctx *ctx, const astc_enc_block *blk,
				   const astc_enc_fit *fit, const astc_enc_mode *m, int seed,
				   int iterations, uint32_t limit, astc_symbolic *s)
{
	const astc_enc_grid *g = &ctx->grids[m->grid];
	int parts = fit->parts;
	int values = 0;
	s->kind = ASTC_KIND_NORMAL;
	s->partitions = (uint8_t)parts;
	s->seed = (uint16_t)seed;
	s->ccs = 0;
	s->block_mode = m->mode;
	s->mode.grid_w = m->grid_w;
	s->mode.grid_h = m->grid_h;
	s->mode.dual = 0;
	s->mode.wrange = m->wrange;
	s->mode.weight_bits = m->weight_bits;
	int mixed = 0;
	for (int p = 0; p < parts; p++) {
		s->cem[p] = fit->alpha[p] ? 12 : 8;
		values += astc_cem_values(s->cem[p]);
		mixed |= s->cem[p] != s->cem[0];
	}
	int config = parts == 1 ? 17 : (mixed ? 25 + 3 * parts : 29);
	if (values > ASTC_MAX_VALUES)
		return UINT32_MAX;
	int cr = astc_color_range(values, 128 - config - m->weight_bits);
	if (cr < 0)
		return UINT32_MAX;
	s->crange = (uint8_t)cr;

	int ng = m->grid_w * m->grid_h;
	float tw[ASTC_MAX_TEXELS], grid[ASTC_MAX_WEIGHTS];
	int ep[4][2][4];
	for (int i = 0; i < blk->n; i++)
		tw[i] = fit->w[i];
	for (int p = 0; p < parts; p++)
		astc_enc_line_endpoints(blk, fit, p, ep[p][0], ep[p][1]);

	uint8_t W[ASTC_MAX_TEXELS], gq[ASTC_MAX_WEIGHTS];
	uint32_t best = UINT32_MAX;
	astc_symbolic cur = *s;
	for (int it = 0; it <= iterations; it++) {
		/* weights for the current texel positions, quantised and infilled */
		astc_enc_grid_from_texels(g, blk->n, tw, grid);
		for (int j = 0; j < ng; j++) {
			cur.weights[0][j] = astc_weight_quant[m->wrange][astc_enc_round64(grid[j])];
			gq[j] = astc_weight_unquant[m->wrange][cur.weights[0][j]];
		}
		astc_enc_infill(g, blk->n, gq, W);
		/* endpoints refitted to those weights (kept when they do not determine a line) */
		for (int p = 0; p < parts; p++) {
			int e0[4], e1[4];
			if (astc_enc_lsq(blk, fit->part, p, W, e0, e1)) {
				for (int k = 0; k < 4; k++) {
					ep[p][0][k] = e0[k];
					ep[p][1][k] = e1[k];
				}
			}
		}
		int swapped = astc_enc_quant_endpoints(&cur, ep);
		if (swapped && parts == 1) {
			/* invert the weights of the (single) partition and requantise */
			for (int j = 0; j < ng; j++) {
				cur.weights[0][j] = astc_weight_quant[m->wrange][64 - astc_enc_round64(grid[j])];
				gq[j] = astc_weight_unquant[m->wrange][cur.weights[0][j]];
			}
			astc_enc_infill(g, blk->n, gq, W);
		}
		uint32_t err = astc_enc_eval(blk, fit->part, W, &cur, best < limit ? best : limit);
		if (err < best) {
			best = err;
			*s = cur;
		}
		if (it == iterations)
			break;
		/* texel positions re-projected on the quantised endpoints */
		for (int p = 0; p < parts; p++) {
			int e0[4], e1[4];
			astc_enc_decoded_endpoints(&cur, p, e0, e1);
			int d[4], dd = 0;
			for (int k = 0; k < 4; k++) {
				d[k] = e1[k] - e0[k];
				dd += d[k] * d[k];
			}
			for (int i = 0; i < blk->n; i++) {
				if (fit->part[i] != p)
					continue;
				int t = 0;
				for (int k = 0; k < 4; k++)
					t += ((int)blk->px[i][k] - e0[k]) * d[k];
				float f = dd > 0 ? (float)t / (float)dd : 0.5f;
				tw[i] = f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f);
			}
		}
	}
	return best;
}

/* Squared error of a 2-means clustering against seed s's pattern (either labelling). */
KILN_HD int astc_enc_pattern_mismatch(const astc_enc_ctx *ctx, int seed, const uint64_t *labels, int n)
{
	int diff = 0;
	for (int k = 0; k < 3; k++) {
		uint64_t mask = k * 64 + 64 <= n ? ~0ull : (k * 64 >= n ? 0 : (1ull << (n - k * 64)) - 1);
		uint64_t x = (ctx->part2[seed][k] ^ labels[k]) & mask;
		while (x) {
			x &= x - 1;
			diff++;
		}
	}
	return diff < n - diff ? diff : n - diff;
}

/* Two clusters of the block's colours (Lloyd iterations from the two texels farthest
 * along the principal axis), as a bit set: texel i in cluster 1. */
KILN_HD void astc_enc_two_means(const astc_enc_block *blk, const astc_enc_fit *line, uint64_t *labels)
{
	int lo = 0, hi = 0;
	for (int i = 1; i < blk->n; i++) {
		if (line->w[i] < line->w[lo])
			lo = i;
		if (line->w[i] > line->w[hi])
			hi = i;
	}
	int c[2][4];
	for (int k = 0; k < 4; k++) {
		c[0][k] = blk->px[lo][k];
		c[1][k] = blk->px[hi][k];
	}
	for (int it = 0; it < 4; it++) {
		int sum[2][4] = {{0}}, cnt[2] = {0, 0};
		labels[0] = labels[1] = labels[2] = 0;
		for (int i = 0; i < blk->n; i++) {
			int d0 = 0, d1 = 0;
			for (int k = 0; k < 4; k++) {
				int a = blk->px[i][k] - c[0][k], b = blk->px[i][k] - c[1][k];
				d0 += a * a;
				d1 += b * b;
			}
			int l = d1 < d0;
			if (l)
				labels[i >> 6] |= 1ull << (i & 63);
			cnt[l]++;
			for (int k = 0; k < 4; k++)
				sum[l][k] += blk->px[i][k];
		}
		for (int l = 0; l < 2; l++)
			if (cnt[l])
				for (int k = 0; k < 4; k++)
					c[l][k] = (sum[l][k] + cnt[l] / 2) / cnt[l];
	}
}

#define ASTC_ENC_SHORTLIST 4

/* Every block mode with a single fit (no refinement), then the best few refined: keeps
 * *best / *best_err when nothing beats them. */
KILN_HD void astc_enc_search(const astc_enc_ctx *ctx, const astc_enc_block *blk,
			     const astc_enc_fit *fit, int seed, int quality, astc_symbolic *best,
			     uint32_t *best_err)
{
	int keep = quality == KILN_QUALITY_FAST ? 2 : (quality == KILN_QUALITY_MEDIUM ? 3 : ASTC_ENC_SHORTLIST);
	int iterations = quality == KILN_QUALITY_FAST ? 1 : (quality == KILN_QUALITY_MEDIUM ? 2 : 3);
	int list[ASTC_ENC_SHORTLIST], have = 0;
	uint32_t errs[ASTC_ENC_SHORTLIST];
	astc_symbolic cand;
	for (int m = 0; m < ctx->mode_count; m++) {
		uint32_t limit = have == keep ? errs[have - 1] : UINT32_MAX;
		uint32_t e = astc_enc_try_mode(ctx, blk, fit, &ctx->modes[m], seed, 0, limit, &cand);
		if (e < *best_err) {
			*best_err = e;
			*best = cand;
		}
		int at = have;
		while (at > 0 && errs[at - 1] > e)
			at--;
		if (at >= keep)
			continue;
		int last = have < keep ? have : keep - 1;
		for (int j = last; j > at; j--) {
			list[j] = list[j - 1];
			errs[j] = errs[j - 1];
		}
		list[at] = m;
		errs[at] = e;
		if (have < keep)
			have++;
	}
	for (int t = 0; t < have; t++) {
		uint32_t e = astc_enc_try_mode(ctx, blk, fit, &ctx->modes[list[t]], seed, iterations,
					       *best_err, &cand);
		if (e < *best_err) {
			*best_err = e;
			*best = cand;
		}
	}
}

/* Encodes one block into 16 bytes. */
KILN_HD void astc_encode_block(const astc_enc_ctx *ctx, const astc_enc_block *blk, int quality,
			       uint8_t *out)
{
	astc_symbolic best;
	int n = blk->n;
	int constant = 1;
	for (int i = 1; i < n && constant; i++)
		for (int k = 0; k < 4; k++)
			constant &= blk->px[i][k] == blk->px[0][k];
	if (constant) {
		best.kind = ASTC_KIND_VOID;
		for (int k = 0; k < 4; k++)
			best.void_color[k] = (uint16_t)(blk->px[0][k] * 257);
		astc_pack(&best, out);
		return;
	}
	uint32_t best_err = UINT32_MAX;

	astc_enc_fit fit;
	fit.parts = 1;
	for (int i = 0; i < n; i++)
		fit.part[i] = 0;
	astc_enc_fit_lines(blk, &fit);
	astc_enc_search(ctx, blk, &fit, 0, quality, &best, &best_err);

	int tries = quality == KILN_QUALITY_FAST ? 0 : (quality == KILN_QUALITY_MEDIUM ? 2 : ASTC_ENC_MAX_TRY_SEEDS);
	if (tries > 0 && best_err > 0) {
		uint64_t labels[3];
		astc_enc_two_means(blk, &fit, labels);
		int seeds[ASTC_ENC_MAX_TRY_SEEDS], scores[ASTC_ENC_MAX_TRY_SEEDS], have = 0;
		for (int s = 0; s < ASTC_ENC_SEEDS; s++) {
			if (!ctx->part2_ok[s])
				continue;
			int sc = astc_enc_pattern_mismatch(ctx, s, labels, n);
			/* insertion into the sorted shortlist; ties keep the lower seed first */
			int at = have;
			while (at > 0 && scores[at - 1] > sc)
				at--;
			if (at >= tries)
				continue;
			int last = have < tries ? have : tries - 1;
			for (int j = last; j > at; j--) {
				seeds[j] = seeds[j - 1];
				scores[j] = scores[j - 1];
			}
			seeds[at] = s;
			scores[at] = sc;
			if (have < tries)
				have++;
		}
		for (int t = 0; t < have; t++) {
			astc_enc_fit f2;
			f2.parts = 2;
			for (int i = 0; i < n; i++)
				f2.part[i] = (uint8_t)((ctx->part2[seeds[t]][i >> 6] >> (i & 63)) & 1u);
			astc_enc_fit_lines(blk, &f2);
			astc_enc_search(ctx, blk, &f2, seeds[t], quality, &best, &best_err);
		}
	}
	astc_pack(&best, out);
}

#endif
