/* Unit tests of the BC1 codec (CPU backend and decoder): the format as kiln decodes it,
 * the encoder's tables against brute force, exactness on solid and two-colour blocks,
 * error bounds, punch-through alpha, edge padding, per-surface status, and output that
 * does not depend on the thread pool or on how surfaces are grouped into batches. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pool.h"
#include "kernels/bc1/bc1.h"
#include "kernels/bc1/bc1_block.h"
#include "tests/unit/testutil.h"

static const kiln_quality qualities[3] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};

typedef struct test_image {
	uint8_t *px;
	uint32_t w, h;
	int has_alpha;
} test_image;

static test_image image_new(uint32_t w, uint32_t h)
{
	test_image img = {calloc((size_t)w * h, 4), w, h, 0};
	cr_assert_not_null(img.px);
	return img;
}

static uint8_t *texel(const test_image *img, uint32_t x, uint32_t y)
{
	return img->px + ((size_t)y * img->w + x) * 4;
}

static void image_random(test_image *img, uint32_t seed, int with_alpha)
{
	for (size_t i = 0; i < (size_t)img->w * img->h * 4; i++)
		img->px[i] = (uint8_t)test_xorshift32(&seed);
	img->has_alpha = with_alpha;
	if (!with_alpha)
		for (size_t i = 0; i < (size_t)img->w * img->h; i++)
			img->px[4 * i + 3] = 255;
}

/* Smooth value noise with a few hard-edged rectangles and a little grain: photo-like
 * enough that the encoders' quality levels separate. */
static void image_natural_edges(test_image *img, uint32_t seed, int rectangles)
{
	enum { CELL = 12 };
	uint32_t gw = img->w / CELL + 2, gh = img->h / CELL + 2;
	uint8_t *grid = malloc((size_t)gw * gh * 3);
	cr_assert_not_null(grid);
	for (size_t i = 0; i < (size_t)gw * gh * 3; i++)
		grid[i] = (uint8_t)test_xorshift32(&seed);
	for (uint32_t y = 0; y < img->h; y++) {
		for (uint32_t x = 0; x < img->w; x++) {
			uint32_t gx = x / CELL, gy = y / CELL, fx = x % CELL, fy = y % CELL;
			for (int c = 0; c < 3; c++) {
				int v00 = grid[(gy * gw + gx) * 3 + c], v10 = grid[(gy * gw + gx + 1) * 3 + c];
				int v01 = grid[((gy + 1) * gw + gx) * 3 + c], v11 = grid[((gy + 1) * gw + gx + 1) * 3 + c];
				int top = v00 * (CELL - (int)fx) + v10 * (int)fx;
				int bot = v01 * (CELL - (int)fx) + v11 * (int)fx;
				int v = (top * (CELL - (int)fy) + bot * (int)fy) / (CELL * CELL);
				v += (int)(test_xorshift32(&seed) % 7) - 3;
				texel(img, x, y)[c] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
			}
			texel(img, x, y)[3] = 255;
		}
	}
	for (int r = 0; r < rectangles; r++) {
		uint32_t x0 = test_xorshift32(&seed) % img->w, y0 = test_xorshift32(&seed) % img->h;
		uint32_t x1 = x0 + test_xorshift32(&seed) % 40, y1 = y0 + test_xorshift32(&seed) % 40;
		uint8_t col[3] = {(uint8_t)test_xorshift32(&seed), (uint8_t)test_xorshift32(&seed), (uint8_t)test_xorshift32(&seed)};
		for (uint32_t y = y0; y < y1 && y < img->h; y++)
			for (uint32_t x = x0; x < x1 && x < img->w; x++)
				memcpy(texel(img, x, y), col, 3);
	}
	free(grid);
}

static void image_natural(test_image *img, uint32_t seed)
{
	image_natural_edges(img, seed, 6);
}

static kiln_surface surface_of(const test_image *img)
{
	kiln_surface s = {img->px, img->w, img->h, img->w * 4, (uint32_t)img->has_alpha};
	return s;
}

/* Encodes one image; returns the blocks (kiln_bc1_bound bytes, freed by the caller). */
static uint8_t *encode(const test_image *img, kiln_quality q, int cutoff)
{
	kiln_bc1_params p;
	kiln_bc1_params_default(&p);
	p.quality = q;
	p.alpha_cutoff = cutoff;
	kiln_surface s = surface_of(img);
	uint8_t *out = malloc(kiln_bc1_bound(img->w, img->h));
	cr_assert_not_null(out);
	uint8_t *dst[1] = {out};
	kiln_status st = KILN_ERR_IO;
	cr_assert_eq(kiln_bc1_encode_cpu(&p, &s, dst, 1, &st, NULL), KILN_OK);
	cr_assert_eq(st, KILN_OK);
	return out;
}

static test_image decode(const uint8_t *blocks, uint32_t w, uint32_t h, int punch_through)
{
	test_image img = image_new(w, h);
	cr_assert_eq(kiln_bc1_decode(blocks, kiln_bc1_bound(w, h), w, h, punch_through, img.px, w * 4),
		     KILN_OK);
	return img;
}

static double rgb_psnr(const test_image *a, const test_image *b)
{
	double se = 0;
	for (size_t i = 0; i < (size_t)a->w * a->h; i++)
		for (int c = 0; c < 3; c++) {
			double d = (double)a->px[4 * i + c] - b->px[4 * i + c];
			se += d * d;
		}
	if (se == 0)
		return 99.0;
	return 10.0 * log10(255.0 * 255.0 * 3.0 * a->w * a->h / se);
}

static double encode_psnr(const test_image *img, kiln_quality q)
{
	uint8_t *blocks = encode(img, q, 128);
	test_image dec = decode(blocks, img->w, img->h, 0);
	double psnr = rgb_psnr(img, &dec);
	free(dec.px);
	free(blocks);
	return psnr;
}

static uint16_t block_c0(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint16_t block_c1(const uint8_t *b) { return (uint16_t)(b[2] | b[3] << 8); }

static void make_block(uint8_t b[8], uint16_t c0, uint16_t c1, uint32_t idx)
{
	b[0] = (uint8_t)c0;
	b[1] = (uint8_t)(c0 >> 8);
	b[2] = (uint8_t)c1;
	b[3] = (uint8_t)(c1 >> 8);
	for (int i = 0; i < 4; i++)
		b[4 + i] = (uint8_t)(idx >> (8 * i));
}

static int expand_ref(int q, int bits)
{
	return bits == 5 ? (q << 3 | q >> 2) : (q << 2 | q >> 4);
}

/* ---- the format ---- */

Test(bc1_format, endpoints_expand_by_bit_replication)
{
	for (int q = 0; q < 64; q++) {
		uint8_t b[8], out[64];
		uint16_t c0 = (uint16_t)((q & 31) << 11 | q << 5 | (q & 31));
		make_block(b, c0, 0, 0); /* index 0 everywhere: c0 itself */
		bc1_decode_block(b, 0, out);
		cr_expect_eq(out[0], expand_ref(q & 31, 5), "r5 %d", q & 31);
		cr_expect_eq(out[1], expand_ref(q, 6), "g6 %d", q);
		cr_expect_eq(out[2], expand_ref(q & 31, 5), "b5 %d", q & 31);
		cr_expect_eq(out[3], 255);
	}
	cr_expect_eq(expand_ref(31, 5), 255);
	cr_expect_eq(expand_ref(63, 6), 255);
	cr_expect_eq(expand_ref(16, 5), 132);
}

Test(bc1_format, four_colour_palette_rounds_to_nearest)
{
	/* c0 = (31, 0, 10) > c1 = (2, 63, 0) */
	uint16_t c0 = 31 << 11 | 0 << 5 | 10, c1 = 2 << 11 | 63 << 5 | 0;
	int e0[3] = {255, 0, expand_ref(10, 5)}, e1[3] = {expand_ref(2, 5), 255, 0};
	uint8_t b[8], out[64];
	make_block(b, c0, c1, 0xe4u); /* texels 0..3 use indices 0, 1, 2, 3 */
	bc1_decode_block(b, 1, out);
	for (int c = 0; c < 3; c++) {
		cr_expect_eq(out[0 + c], e0[c]);
		cr_expect_eq(out[4 + c], e1[c]);
		cr_expect_eq(out[8 + c], (2 * e0[c] + e1[c] + 1) / 3);
		cr_expect_eq(out[12 + c], (e0[c] + 2 * e1[c] + 1) / 3);
	}
	for (int i = 0; i < 4; i++)
		cr_expect_eq(out[4 * i + 3], 255, "4-colour blocks are opaque, punch-through or not");
}

Test(bc1_format, three_colour_palette_and_index_3)
{
	uint16_t c0 = 3 << 11 | 10 << 5 | 7, c1 = 20 << 11 | 40 << 5 | 30; /* c0 <= c1 */
	int e0[3] = {expand_ref(3, 5), expand_ref(10, 6), expand_ref(7, 5)};
	int e1[3] = {expand_ref(20, 5), expand_ref(40, 6), expand_ref(30, 5)};
	uint8_t b[8], opaque[64], punched[64];
	make_block(b, c0, c1, 0xe4u);
	bc1_decode_block(b, 0, opaque);
	bc1_decode_block(b, 1, punched);
	for (int c = 0; c < 3; c++) {
		cr_expect_eq(opaque[8 + c], (e0[c] + e1[c] + 1) / 2);
		cr_expect_eq(opaque[12 + c], 0);
		cr_expect_eq(punched[12 + c], 0);
	}
	cr_expect_eq(opaque[12 + 3], 255, "index 3 is opaque black without punch-through");
	cr_expect_eq(punched[12 + 3], 0, "index 3 is transparent with punch-through");
	cr_expect_eq(punched[8 + 3], 255);
	/* equal endpoints are the 3-colour rule too */
	make_block(b, c1, c1, 0xffffffffu);
	bc1_decode_block(b, 1, punched);
	cr_expect_eq(punched[3], 0);
}

Test(bc1_format, texel_x_y_at_bit_2_times_4y_plus_x)
{
	uint8_t b[8], out[64];
	uint16_t c0 = 0xffff, c1 = 0;
	/* only texel (2, 1) takes index 1 (black) */
	make_block(b, c0, c1, 1u << (2 * (4 * 1 + 2)));
	bc1_decode_block(b, 0, out);
	for (int i = 0; i < 16; i++)
		cr_expect_eq(out[4 * i], i == 4 * 1 + 2 ? 0 : 255, "texel %d", i);
	/* and the surface decoder puts it at (x, y) */
	test_image img = decode(b, 4, 4, 0);
	cr_expect_eq(texel(&img, 2, 1)[0], 0);
	cr_expect_eq(texel(&img, 1, 2)[0], 255);
	free(img.px);
}

/* ---- tables ---- */

static void solid_table_check(const uint16_t *table, int bits, int three)
{
	int levels = 1 << bits;
	for (int v = 0; v < 256; v++) {
		int best = 1 << 30, ba = 0, bb = 0;
		for (int a = 0; a < levels; a++)
			for (int b = 0; b < levels; b++) {
				int ea = expand_ref(a, bits), eb = expand_ref(b, bits);
				int p = three ? (ea + eb + 1) / 2 : (2 * ea + eb + 1) / 3;
				int e = abs(p - v);
				if (e < best) {
					best = e;
					ba = a;
					bb = b;
				}
			}
		cr_expect_eq(table[v], ba | bb << 8, "%d-bit %s v=%d", bits, three ? "3-colour" : "4-colour", v);
	}
}

Test(bc1_tables, solid_tables_match_brute_force)
{
	solid_table_check(bc1_solid4_5, 5, 0);
	solid_table_check(bc1_solid4_6, 6, 0);
	solid_table_check(bc1_solid3_5, 5, 1);
	solid_table_check(bc1_solid3_6, 6, 1);
}

Test(bc1_tables, candidates_are_the_nonsingular_contiguous_splits)
{
	int n = 0;
	for (int c0 = 0; c0 <= 16; c0++)
		for (int c1 = c0; c1 <= 16; c1++)
			for (int c2 = c1; c2 <= 16; c2++) {
				if (c0 == 16 || c1 - c0 == 16 || c2 - c1 == 16 || c2 == 0)
					continue;
				cr_assert_lt(n, BC1_CANDIDATES4);
				cr_expect_eq(bc1_candidates[n], c0 | c1 << 5 | c2 << 10, "4-colour %d", n);
				n++;
			}
	cr_expect_eq(n, 965);
	cr_expect_eq(BC1_CANDIDATES4, 965);
	for (int c0 = 0; c0 <= 16; c0++)
		for (int c1 = c0; c1 <= 16; c1++) {
			if (c0 == 16 || c1 - c0 == 16 || c1 == 0)
				continue;
			cr_assert_lt(n, BC1_CANDIDATES);
			cr_expect_eq(bc1_candidates[n], c0 | c1 << 5 | 1 << 15, "3-colour %d", n);
			n++;
		}
	cr_expect_eq(n, BC1_CANDIDATES);
	cr_expect_eq(BC1_CANDIDATES - BC1_CANDIDATES4, 150);
	/* every listed split has a solvable least-squares system for 16 texels */
	for (int i = 0; i < BC1_CANDIDATES; i++) {
		bc1_candidate k;
		cr_expect(bc1_candidate_make(bc1_candidates[i], 16, &k), "candidate %d", i);
	}
}

/* ---- solid colours ---- */

/* The least squared error any block reaches for a solid colour, by brute force over
 * endpoint pairs: channels are independent once the palette rule and the index are
 * fixed (c0 < c1 is a swap of the indices, c0 == c1 a 3-colour index 0). */
static int solid_optimum(const uint8_t rgb[3], int allow_four)
{
	int best = 1 << 30;
	for (int four = allow_four; four >= 0; four--) {
		for (int k = 0; k < (four ? 4 : 3); k++) {
			int total = 0;
			for (int c = 0; c < 3; c++) {
				int bits = c == 1 ? 6 : 5, levels = 1 << bits, cbest = 1 << 30;
				for (int a = 0; a < levels; a++)
					for (int b = 0; b < levels; b++) {
						int ea = expand_ref(a, bits), eb = expand_ref(b, bits), p;
						if (k == 0)
							p = ea;
						else if (k == 1)
							p = eb;
						else if (!four)
							p = (ea + eb + 1) / 2;
						else
							p = k == 2 ? (2 * ea + eb + 1) / 3 : (ea + 2 * eb + 1) / 3;
						int d = (p - rgb[c]) * (p - rgb[c]);
						if (d < cbest)
							cbest = d;
					}
				total += cbest;
			}
			if (total < best)
				best = total;
		}
	}
	return best;
}

static void check_solid(const uint8_t rgb[3], int with_hole)
{
	test_image img = image_new(4, 4);
	for (int i = 0; i < 16; i++) {
		memcpy(img.px + 4 * i, rgb, 3);
		img.px[4 * i + 3] = 255;
	}
	if (with_hole) {
		img.has_alpha = 1;
		img.px[4 * 5 + 3] = 0;
	}
	int optimum = solid_optimum(rgb, !with_hole);
	for (int q = 0; q < 3; q++) {
		uint8_t *blocks = encode(&img, qualities[q], 128);
		test_image dec = decode(blocks, 4, 4, 1);
		for (int i = 0; i < 16; i++) {
			if (with_hole && i == 5) {
				cr_expect_eq(dec.px[4 * i + 3], 0);
				continue;
			}
			int err = 0;
			for (int c = 0; c < 3; c++)
				err += (dec.px[4 * i + c] - rgb[c]) * (dec.px[4 * i + c] - rgb[c]);
			cr_expect_eq(err, optimum, "colour %d,%d,%d hole %d quality %d texel %d: %d, best %d",
				     rgb[0], rgb[1], rgb[2], with_hole, q, i, err, optimum);
			cr_expect_eq(dec.px[4 * i + 3], 255);
		}
		free(dec.px);
		free(blocks);
	}
	free(img.px);
}

Test(bc1_solid, blocks_decode_to_the_best_achievable_colour)
{
	static const uint8_t fixed[][3] = {
		{0, 0, 0}, {255, 255, 255}, {1, 2, 3}, {127, 128, 129}, {8, 4, 8}, {254, 1, 253},
		{33, 200, 97}, {100, 100, 100}, {7, 250, 13},
	};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		check_solid(fixed[i], 0);
		check_solid(fixed[i], 1);
	}
	uint32_t seed = 12345;
	for (int i = 0; i < 8; i++) {
		uint8_t rgb[3] = {(uint8_t)test_xorshift32(&seed), (uint8_t)test_xorshift32(&seed), (uint8_t)test_xorshift32(&seed)};
		check_solid(rgb, i & 1);
	}
}

Test(bc1_solid, representable_colours_are_exact)
{
	uint32_t seed = 99;
	for (int i = 0; i < 64; i++) {
		uint32_t c565 = test_xorshift32(&seed) & 0xffff;
		uint8_t rgb[3] = {(uint8_t)expand_ref((int)(c565 >> 11), 5),
				  (uint8_t)expand_ref((int)(c565 >> 5 & 63), 6),
				  (uint8_t)expand_ref((int)(c565 & 31), 5)};
		cr_assert_eq(solid_optimum(rgb, 1), 0);
		check_solid(rgb, 0);
	}
}

/* ---- fitting ---- */

static void fill_block(test_image *img, uint32_t bx, uint32_t by, const uint8_t colours[][3],
		       const int *which)
{
	for (int i = 0; i < 16; i++) {
		uint8_t *t = texel(img, 4 * bx + (uint32_t)(i & 3), 4 * by + (uint32_t)(i >> 2));
		memcpy(t, colours[which[i]], 3);
		t[3] = 255;
	}
}

static uint8_t random_565_channel(uint32_t *seed, int bits)
{
	return (uint8_t)expand_ref((int)(test_xorshift32(seed) % (1u << bits)), bits);
}

Test(bc1_encode, two_representable_colours_are_exact)
{
	/* 32 x 32 blocks, each two random 565 colours in a random pattern */
	test_image img = image_new(128, 128);
	uint32_t seed = 777;
	for (uint32_t by = 0; by < 32; by++)
		for (uint32_t bx = 0; bx < 32; bx++) {
			uint8_t cols[2][3];
			for (int k = 0; k < 2; k++)
				for (int c = 0; c < 3; c++)
					cols[k][c] = random_565_channel(&seed, c == 1 ? 6 : 5);
			int which[16];
			uint32_t pattern = test_xorshift32(&seed) | 1u | 1u << 15; /* both colours used */
			for (int i = 0; i < 16; i++)
				which[i] = (int)(pattern >> i & 1) ^ (i == 15);
			fill_block(&img, bx, by, (const uint8_t(*)[3])cols, which);
		}
	for (int q = 0; q < 3; q++) {
		uint8_t *blocks = encode(&img, qualities[q], 128);
		test_image dec = decode(blocks, img.w, img.h, 0);
		size_t wrong = 0;
		for (size_t i = 0; i < (size_t)img.w * img.h; i++)
			wrong += memcmp(img.px + 4 * i, dec.px + 4 * i, 4) != 0;
		cr_expect_eq(wrong, 0, "quality %d: %zu texels differ", q, wrong);
		free(dec.px);
		free(blocks);
	}
	free(img.px);
}

Test(bc1_encode, three_colour_mode_is_used_when_it_is_exact)
{
	/* a, b representable and their 3-colour midpoint: exact only in 3-colour mode */
	uint8_t cols[3][3] = {{expand_ref(4, 5), expand_ref(10, 6), expand_ref(30, 5)},
			      {expand_ref(20, 5), expand_ref(50, 6), expand_ref(2, 5)}};
	for (int c = 0; c < 3; c++)
		cols[2][c] = (uint8_t)((cols[0][c] + cols[1][c] + 1) / 2);
	int which[16] = {0, 2, 1, 2, 2, 0, 2, 1, 1, 2, 0, 2, 2, 2, 2, 0};
	test_image img = image_new(4, 4);
	fill_block(&img, 0, 0, (const uint8_t(*)[3])cols, which);
	uint8_t *blocks = encode(&img, KILN_QUALITY_HIGH, 128);
	cr_expect_leq(block_c0(blocks), block_c1(blocks), "3-colour mode");
	test_image dec = decode(blocks, 4, 4, 0);
	cr_expect_eq(memcmp(dec.px, img.px, 64), 0, "exact");
	free(dec.px);
	free(blocks);
	free(img.px);
}

Test(bc1_encode, gradients_stay_within_bounds)
{
	/* 4x4 ramps (7 steps along x + y) in random directions of colour space */
	static const double mse_bound[3] = {25.0, 18.0, 15.0};
	double mse_sum[3] = {0, 0, 0};
	uint32_t seed = 4242;
	for (int trial = 0; trial < 64; trial++) {
		test_image img = image_new(4, 4);
		int base[3], step[3];
		for (int c = 0; c < 3; c++) {
			base[c] = (int)(test_xorshift32(&seed) % 128);
			step[c] = (int)(test_xorshift32(&seed) % 17) - 8;
		}
		for (int i = 0; i < 16; i++) {
			for (int c = 0; c < 3; c++) {
				int v = base[c] + 64 + step[c] * ((i & 3) + (i >> 2));
				img.px[4 * i + c] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
			}
			img.px[4 * i + 3] = 255;
		}
		for (int q = 0; q < 3; q++) {
			uint8_t *blocks = encode(&img, qualities[q], 128);
			test_image dec = decode(blocks, 4, 4, 0);
			int worst = 0;
			double se = 0;
			for (int i = 0; i < 16; i++)
				for (int c = 0; c < 3; c++) {
					int d = abs(dec.px[4 * i + c] - img.px[4 * i + c]);
					worst = d > worst ? d : worst;
					se += d * d;
				}
			/* 7 values on 4 palette entries whose endpoints are off by up to a 565 step */
			cr_expect_leq(worst, 12, "trial %d quality %d: max error %d", trial, q, worst);
			cr_expect_leq(se / 48, mse_bound[q], "trial %d quality %d: mse %.1f", trial, q, se / 48);
			mse_sum[q] += se / 48;
			free(dec.px);
			free(blocks);
		}
		free(img.px);
	}
	cr_expect_leq(mse_sum[2], mse_sum[1], "high %.1f medium %.1f", mse_sum[2], mse_sum[1]);
	cr_expect_leq(mse_sum[1], mse_sum[0], "medium %.1f fast %.1f", mse_sum[1], mse_sum[0]);
}

Test(bc1_encode, ramps_of_a_palette_are_exact_at_high_quality)
{
	/* texels that are the four entries of some 4-colour palette, in ramp order */
	uint32_t seed = 5150;
	for (int trial = 0; trial < 200; trial++) {
		uint16_t c0 = (uint16_t)test_xorshift32(&seed), c1 = (uint16_t)test_xorshift32(&seed);
		if (c0 == c1)
			continue;
		if (c0 < c1) {
			uint16_t t = c0;
			c0 = c1;
			c1 = t;
		}
		uint8_t b[8], pal[64];
		make_block(b, c0, c1, 0xe4u);
		bc1_decode_block(b, 0, pal); /* texels 0..3: entries 0, 1, 2, 3 */
		static const int ramp[7] = {0, 2, 3, 1, 1, 3, 2};
		test_image img = image_new(4, 4);
		for (int i = 0; i < 16; i++)
			memcpy(img.px + 4 * i, pal + 4 * ramp[((i & 3) + (i >> 2)) % 7], 4);
		uint8_t *blocks = encode(&img, KILN_QUALITY_HIGH, 128);
		test_image dec = decode(blocks, 4, 4, 0);
		cr_expect_eq(memcmp(dec.px, img.px, 64), 0, "trial %d: c0 %04x c1 %04x", trial, c0, c1);
		free(dec.px);
		free(blocks);
		free(img.px);
	}
}

Test(bc1_encode, random_blocks_round_trip_within_bounds)
{
	test_image img = image_new(64, 64);
	image_random(&img, 31337, 0);
	for (int q = 0; q < 3; q++) {
		uint8_t *blocks = encode(&img, qualities[q], 128);
		test_image dec = decode(blocks, img.w, img.h, 0);
		/* white noise is the worst case; it still lands near 14 dB */
		cr_expect_gt(rgb_psnr(&img, &dec), 12.0, "quality %d", q);
		for (size_t i = 0; i < (size_t)img.w * img.h; i++)
			cr_expect_eq(dec.px[4 * i + 3], 255);
		free(dec.px);
		free(blocks);
	}
	free(img.px);
}

Test(bc1_quality, high_beats_medium_beats_fast)
{
	test_image img = image_new(256, 192);
	image_natural(&img, 2024);
	double fast = encode_psnr(&img, KILN_QUALITY_FAST);
	double medium = encode_psnr(&img, KILN_QUALITY_MEDIUM);
	double high = encode_psnr(&img, KILN_QUALITY_HIGH);
	cr_expect_gt(fast, 30.0, "fast %.2f dB", fast);
	cr_expect_geq(medium, fast, "medium %.3f dB, fast %.3f dB", medium, fast);
	cr_expect_geq(high, medium, "high %.3f dB, medium %.3f dB", high, medium);
	cr_expect_gt(high, fast + 0.2, "high %.3f dB, fast %.3f dB", high, fast);
	free(img.px);
}

/* ---- punch-through alpha ---- */

static test_image alpha_image(uint32_t seed)
{
	test_image img = image_new(32, 32);
	image_natural(&img, seed);
	img.has_alpha = 1;
	for (size_t i = 0; i < 32 * 32; i++)
		img.px[4 * i + 3] = (uint8_t)test_xorshift32(&seed);
	/* one block fully transparent, one fully opaque */
	for (int i = 0; i < 16; i++) {
		texel(&img, (uint32_t)(i & 3), (uint32_t)(i >> 2))[3] = 3;
		texel(&img, 4 + (uint32_t)(i & 3), (uint32_t)(i >> 2))[3] = 200;
	}
	return img;
}

Test(bc1_alpha, texels_below_the_cutoff_punch_through)
{
	test_image img = alpha_image(55);
	for (int q = 0; q < 3; q++) {
		uint8_t *blocks = encode(&img, qualities[q], 128);
		test_image dec = decode(blocks, img.w, img.h, 1);
		for (uint32_t y = 0; y < img.h; y++)
			for (uint32_t x = 0; x < img.w; x++) {
				int transparent = texel(&img, x, y)[3] < 128;
				cr_expect_eq(texel(&dec, x, y)[3], transparent ? 0 : 255, "q %d (%u,%u)", q, x, y);
			}
		/* blocks with a transparent texel are 3-colour */
		for (uint32_t b = 0; b < 64; b++) {
			uint32_t bx = b % 8, by = b / 8, any = 0;
			for (int i = 0; i < 16; i++)
				any |= texel(&img, 4 * bx + (uint32_t)(i & 3), 4 * by + (uint32_t)(i >> 2))[3] < 128;
			if (any)
				cr_expect_leq(block_c0(blocks + 8 * b), block_c1(blocks + 8 * b), "block %u", b);
		}
		/* the fully transparent block is the canonical one */
		cr_expect_eq(memcmp(blocks, "\0\0\0\0\xff\xff\xff\xff", 8), 0);
		/* opaque texels keep their colour reasonably: mean error over them */
		double se = 0;
		size_t n = 0;
		for (size_t i = 0; i < 32 * 32; i++)
			if (img.px[4 * i + 3] >= 128) {
				for (int c = 0; c < 3; c++)
					se += pow((double)img.px[4 * i + c] - dec.px[4 * i + c], 2);
				n += 3;
			}
		cr_expect_lt(se / (double)n, 60.0, "q %d: mse over opaque texels %.1f", q, se / (double)n);
		free(dec.px);
		free(blocks);
	}
	free(img.px);
}

Test(bc1_alpha, no_cutoff_or_no_alpha_never_punches_through)
{
	test_image img = alpha_image(56);
	for (int q = 0; q < 3; q++) {
		for (int variant = 0; variant < 2; variant++) {
			img.has_alpha = variant; /* variant 0: has_alpha = 0, cutoff 128 */
			uint8_t *blocks = encode(&img, qualities[q], variant ? 0 : 128);
			test_image dec = decode(blocks, img.w, img.h, 1);
			for (size_t i = 0; i < 32 * 32; i++)
				cr_expect_eq(dec.px[4 * i + 3], 255, "q %d variant %d texel %zu", q, variant, i);
			free(dec.px);
			free(blocks);
		}
	}
	free(img.px);
}

/* ---- sizes and padding ---- */

static void check_size(uint32_t w, uint32_t h, size_t expect_bound)
{
	cr_assert_eq(kiln_bc1_bound(w, h), expect_bound, "%ux%u", w, h);
	test_image img = image_new(w, h);
	image_natural_edges(&img, w * 31 + h, 0);
	/* the same image padded to whole blocks by repeating the last row and column */
	uint32_t pw = (w + 3) / 4 * 4, ph = (h + 3) / 4 * 4;
	test_image pad = image_new(pw, ph);
	for (uint32_t y = 0; y < ph; y++)
		for (uint32_t x = 0; x < pw; x++)
			memcpy(texel(&pad, x, y), texel(&img, x < w ? x : w - 1, y < h ? y : h - 1), 4);
	for (int q = 0; q < 3; q++) {
		kiln_bc1_params p;
		kiln_bc1_params_default(&p);
		p.quality = qualities[q];
		uint8_t *out = malloc(expect_bound + 64);
		cr_assert_not_null(out);
		memset(out, 0xa5, expect_bound + 64);
		kiln_surface s = surface_of(&img);
		uint8_t *dst[1] = {out};
		kiln_status st;
		cr_assert_eq(kiln_bc1_encode_cpu(&p, &s, dst, 1, &st, NULL), KILN_OK);
		cr_assert_eq(st, KILN_OK);
		for (size_t i = expect_bound; i < expect_bound + 64; i++)
			cr_assert_eq(out[i], 0xa5, "%ux%u: wrote past the bound", w, h);
		uint8_t *padded = encode(&pad, qualities[q], 128);
		cr_expect_eq(memcmp(out, padded, expect_bound), 0, "%ux%u q %d: edge blocks not clamped", w, h, q);
		test_image dec = decode(out, w, h, 0);
		double psnr = rgb_psnr(&img, &dec);
		cr_expect_gt(psnr, w * h == 1 ? 40.0 : 28.0, "%ux%u q %d: %.2f dB", w, h, q, psnr);
		free(dec.px);
		free(padded);
		free(out);
	}
	free(pad.px);
	free(img.px);
}

Test(bc1_size, one_by_one)
{
	check_size(1, 1, 8);
}

Test(bc1_size, five_by_three)
{
	check_size(5, 3, 16);
}

Test(bc1_size, wide_and_odd)
{
	check_size(4099, 17, 1025 * 5 * 8);
}

Test(bc1_size, bound_and_decoder_checks)
{
	cr_expect_eq(kiln_bc1_bound(4, 4), 8);
	cr_expect_eq(kiln_bc1_bound(8, 5), 32);
	cr_expect_eq(kiln_bc1_bound(16384, 16384), (size_t)4096 * 4096 * 8);
	cr_expect_eq(kiln_bc1_bound(0, 7), 0);
	uint8_t blocks[16] = {0}, px[8 * 4 * 4];
	cr_expect_eq(kiln_bc1_decode(blocks, 8, 8, 4, 0, px, 32), KILN_ERR_TRUNCATED);
	cr_expect_eq(kiln_bc1_decode(blocks, 16, 8, 4, 0, px, 31), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_decode(blocks, 16, 0, 4, 0, px, 32), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_decode(NULL, 16, 8, 4, 0, px, 32), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_decode(blocks, 16, 8, 4, 0, px, 32), KILN_OK);
}

/* ---- batches ---- */

Test(bc1_batch, a_bad_surface_fails_alone)
{
	test_image a = image_new(12, 8), b = image_new(7, 9);
	image_natural(&a, 1);
	image_natural(&b, 2);
	kiln_bc1_params p;
	kiln_bc1_params_default(&p);
	kiln_surface s[5] = {surface_of(&a), surface_of(&a), surface_of(&b), surface_of(&b), surface_of(&a)};
	s[1].rgba = NULL;         /* no pixels */
	s[3].width = 0;           /* 0 x 0 */
	s[3].height = 0;
	s[4].stride = 4 * 12 - 1; /* rows overlap */
	uint8_t out[5][64];
	uint8_t *dst[5] = {out[0], out[1], out[2], out[3], out[4]};
	memset(out, 0x5a, sizeof out);
	kiln_status st[5];
	for (int q = 0; q < 3; q++) {
		p.quality = qualities[q];
		cr_assert_eq(kiln_bc1_encode_cpu(&p, s, dst, 5, st, NULL), KILN_OK);
		cr_expect_eq(st[0], KILN_OK);
		cr_expect_eq(st[1], KILN_ERR_INVALID_ARG);
		cr_expect_eq(st[2], KILN_OK);
		cr_expect_eq(st[3], KILN_ERR_INVALID_ARG);
		cr_expect_eq(st[4], KILN_ERR_INVALID_ARG);
		uint8_t *ea = encode(&a, qualities[q], 128), *eb = encode(&b, qualities[q], 128);
		cr_expect_eq(memcmp(out[0], ea, kiln_bc1_bound(12, 8)), 0);
		cr_expect_eq(memcmp(out[2], eb, kiln_bc1_bound(7, 9)), 0);
		for (int i = 0; i < 64; i++)
			cr_expect_eq(out[1][i], 0x5a, "a refused surface is not written");
		free(ea);
		free(eb);
	}
	/* a NULL destination is refused the same way */
	dst[2] = NULL;
	cr_assert_eq(kiln_bc1_encode_cpu(&p, s, dst, 3, st, NULL), KILN_OK);
	cr_expect_eq(st[0], KILN_OK);
	cr_expect_eq(st[2], KILN_ERR_INVALID_ARG);
	/* whole-call errors */
	cr_expect_eq(kiln_bc1_encode_cpu(NULL, s, dst, 1, st, NULL), KILN_ERR_INVALID_ARG);
	p.quality = (kiln_quality)7;
	cr_expect_eq(kiln_bc1_encode_cpu(&p, s, dst, 1, st, NULL), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_encode_cpu(&p, s, dst, 0, st, NULL), KILN_OK);
	free(a.px);
	free(b.px);
}

Test(bc1_batch, output_does_not_depend_on_pool_or_grouping)
{
	enum { N = 6 };
	static const uint32_t dims[N][2] = {{64, 64}, {5, 3}, {33, 17}, {1, 1}, {128, 36}, {20, 20}};
	test_image img[N];
	kiln_surface s[N];
	for (int i = 0; i < N; i++) {
		img[i] = image_new(dims[i][0], dims[i][1]);
		if (i % 2)
			image_random(&img[i], (uint32_t)i + 1, i == 3 || i == 5);
		else
			image_natural(&img[i], (uint32_t)i + 1);
		if (i == 4) {
			img[i].has_alpha = 1;
			for (size_t t = 0; t < (size_t)img[i].w * img[i].h; t++)
				img[i].px[4 * t + 3] = (uint8_t)(t * 7);
		}
		s[i] = surface_of(&img[i]);
	}
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(4, &pool), KILN_OK);
	for (int q = 0; q < 3; q++) {
		kiln_bc1_params p;
		kiln_bc1_params_default(&p);
		p.quality = qualities[q];
		uint8_t *ref[N], *other[N];
		kiln_status st[N];
		for (int i = 0; i < N; i++) {
			ref[i] = malloc(kiln_bc1_bound(dims[i][0], dims[i][1]));
			other[i] = malloc(kiln_bc1_bound(dims[i][0], dims[i][1]));
		}
		cr_assert_eq(kiln_bc1_encode_cpu(&p, s, ref, N, st, NULL), KILN_OK);
		/* a pool of 4 threads, the whole batch */
		cr_assert_eq(kiln_bc1_encode_cpu(&p, s, other, N, st, pool), KILN_OK);
		for (int i = 0; i < N; i++)
			cr_expect_eq(memcmp(ref[i], other[i], kiln_bc1_bound(dims[i][0], dims[i][1])), 0,
				     "q %d surface %d: pool", q, i);
		/* one surface a batch, in reverse order, with the pool */
		for (int i = N - 1; i >= 0; i--) {
			memset(other[i], 0, kiln_bc1_bound(dims[i][0], dims[i][1]));
			cr_assert_eq(kiln_bc1_encode_cpu(&p, &s[i], &other[i], 1, &st[i], pool), KILN_OK);
		}
		for (int i = 0; i < N; i++)
			cr_expect_eq(memcmp(ref[i], other[i], kiln_bc1_bound(dims[i][0], dims[i][1])), 0,
				     "q %d surface %d: batches of one", q, i);
		/* batches of 2 and 4, serial */
		cr_assert_eq(kiln_bc1_encode_cpu(&p, s, other, 2, st, NULL), KILN_OK);
		cr_assert_eq(kiln_bc1_encode_cpu(&p, s + 2, other + 2, 4, st, NULL), KILN_OK);
		for (int i = 0; i < N; i++) {
			cr_expect_eq(memcmp(ref[i], other[i], kiln_bc1_bound(dims[i][0], dims[i][1])), 0,
				     "q %d surface %d: batches of 2 + 4", q, i);
			free(ref[i]);
			free(other[i]);
		}
	}
	kiln_pool_destroy(pool);
	for (int i = 0; i < N; i++)
		free(img[i].px);
}

Test(bc1_batch, more_surfaces_than_one_descriptor_chunk)
{
	/* 300 small surfaces: the CPU backend walks them in chunks */
	enum { N = 300 };
	test_image img = image_new(9, 6);
	image_natural(&img, 8);
	kiln_surface s[N];
	uint8_t *dst[N];
	kiln_status st[N];
	static uint8_t out[N][48];
	for (int i = 0; i < N; i++) {
		s[i] = surface_of(&img);
		s[i].width = 1 + (uint32_t)i % 9;
		dst[i] = out[i];
	}
	kiln_bc1_params p;
	kiln_bc1_params_default(&p);
	p.quality = KILN_QUALITY_FAST;
	cr_assert_eq(kiln_bc1_encode_cpu(&p, s, dst, N, st, NULL), KILN_OK);
	for (int i = 0; i < N; i++) {
		cr_expect_eq(st[i], KILN_OK);
		uint8_t one[48];
		uint8_t *d1[1] = {one};
		kiln_status s1;
		kiln_bc1_encode_cpu(&p, &s[i], d1, 1, &s1, NULL);
		cr_expect_eq(memcmp(one, out[i], kiln_bc1_bound(s[i].width, 6)), 0, "surface %d", i);
	}
	free(img.px);
}
