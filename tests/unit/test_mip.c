/* Unit tests of the mip chains (CPU backend): level sizes, the filter's arithmetic (flat
 * images stay flat, sRGB averages in linear light, alpha linearly, odd sizes lose no
 * texel), a double-precision reference, argument checks, the sRGB tables against libm,
 * and thread-count independence. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/pool.h"
#include "common/texture.h"
#include "kernels/mip/mip.h"
#include "kernels/mip/mip_texel.h"
#include "tests/unit/mip_chains.h"

static double srgb_to_linear_libm(int code)
{
	double c = code / 255.0;
	return c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4);
}

/* The code whose exact linear value is nearest v (by exhaustive search). */
static int nearest_code_libm(double v)
{
	static double lin[256];
	if (lin[255] == 0)
		for (int c = 0; c < 256; c++)
			lin[c] = srgb_to_linear_libm(c);
	int best = 0;
	for (int c = 1; c < 256; c++)
		if (fabs(lin[c] - v) < fabs(lin[best] - v))
			best = c;
	return best;
}

static void alloc_chain(test_chain *tc, uint32_t w, uint32_t h, uint32_t pad, bool srgb)
{
	cr_assert(test_chain_alloc(tc, w, h, pad, srgb), "out of memory for %ux%u", w, h);
}

static void build(test_chain *tc)
{
	cr_assert_eq(kiln_mip_build_cpu(&tc->chain, 1, NULL), KILN_OK);
}

/* ---- level sizes ---------------------------------------------------------------- */

static void expect_sizes(uint32_t w, uint32_t h, uint32_t count, const uint32_t *ws, const uint32_t *hs)
{
	cr_assert_eq(kiln_mip_count(w, h), count, "%ux%u", w, h);
	test_chain tc;
	alloc_chain(&tc, w, h, 0, true);
	for (uint32_t i = 0; i < count; i++) {
		cr_expect_eq(tc.levels[i].width, ws[i], "%ux%u level %u", w, h, i);
		cr_expect_eq(tc.levels[i].height, hs[i], "%ux%u level %u", w, h, i);
	}
	cr_expect_eq(kiln_mip_build_cpu(&tc.chain, 1, NULL), KILN_OK, "%ux%u", w, h);
	test_chain_free(&tc);
}

Test(mip, chain_sizes)
{
	static const uint32_t w768[] = { 768, 384, 192, 96, 48, 24, 12, 6, 3, 1 };
	static const uint32_t h512[] = { 512, 256, 128, 64, 32, 16, 8, 4, 2, 1 };
	expect_sizes(768, 512, 10, w768, h512);
	static const uint32_t w5[] = { 5, 2, 1 }, h3[] = { 3, 1, 1 };
	expect_sizes(5, 3, 3, w5, h3);
	static const uint32_t one[] = { 1 };
	expect_sizes(1, 1, 1, one, one);
	static const uint32_t w4099[] = { 4099, 2049, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1 };
	static const uint32_t h17[] = { 17, 8, 4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	expect_sizes(4099, 17, 13, w4099, h17);
	static const uint32_t w1[] = { 1, 1, 1, 1 }, h9[] = { 9, 4, 2, 1 };
	expect_sizes(1, 9, 4, w1, h9);
}

/* ---- the filter ------------------------------------------------------------------- */

/* Every level of a flat w x h image is the same flat colour, exactly. */
static void expect_flat(uint32_t w, uint32_t h, bool srgb, const uint8_t rgba[4])
{
	test_chain tc;
	alloc_chain(&tc, w, h, 4, srgb);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			test_chain_set(&tc, x, y, rgba);
	build(&tc);
	for (uint32_t l = 1; l < tc.chain.count; l++)
		for (uint32_t y = 0; y < tc.levels[l].height; y++)
			for (uint32_t x = 0; x < tc.levels[l].width; x++)
				cr_assert_eq(memcmp(test_chain_texel(&tc, l, x, y), rgba, 4), 0,
					     "%ux%u %s value %u: level %u texel %u,%u changed", w, h,
					     srgb ? "sRGB" : "linear", rgba[0], l, x, y);
	test_chain_free(&tc);
}

Test(mip, constant_image_stays_constant)
{
	/* every code, through even, odd (3-tap, weights k-d, k, d+1) and 1-wide axes */
	for (int v = 0; v < 256; v++) {
		uint8_t rgba[4] = { (uint8_t)v, (uint8_t)(255 - v), (uint8_t)(v * 7), (uint8_t)(v ^ 0x5a) };
		expect_flat(13, 7, true, rgba);
		expect_flat(13, 7, false, rgba);
	}
	static const uint8_t grey[4] = { 77, 77, 77, 200 };
	expect_flat(4099, 17, true, grey);
	expect_flat(1, 9, true, grey);
	expect_flat(768, 512, false, grey);
}

/* A 2x2 checkerboard of black and white with the given alpha pattern; returns level 1. */
static void checker_2x2(bool srgb, const uint8_t alpha[4], uint8_t out[4])
{
	test_chain tc;
	alloc_chain(&tc, 2, 2, 0, srgb);
	for (uint32_t i = 0; i < 4; i++) {
		uint8_t v = (i == 0 || i == 3) ? 0 : 255;
		uint8_t rgba[4] = { v, v, v, alpha[i] };
		test_chain_set(&tc, i % 2, i / 2, rgba);
	}
	build(&tc);
	memcpy(out, test_chain_texel(&tc, 1, 0, 0), 4);
	test_chain_free(&tc);
}

Test(mip, srgb_averages_in_linear_light)
{
	static const uint8_t opaque[4] = { 255, 255, 255, 255 };
	uint8_t out[4];
	checker_2x2(true, opaque, out);
	/* linear 0.5 lies between codes 187 (0.4969) and 188 (0.5029); 188 is nearer */
	cr_expect_eq(nearest_code_libm(0.5), 188);
	for (int c = 0; c < 3; c++)
		cr_expect_eq(out[c], 188, "channel %d: %u", c, out[c]);
	cr_expect_eq(out[3], 255);
}

Test(mip, linear_mode_averages_codes)
{
	static const uint8_t opaque[4] = { 255, 255, 255, 255 };
	uint8_t out[4];
	checker_2x2(false, opaque, out);
	/* 127.5 exactly: integer averages round halves up */
	for (int c = 0; c < 3; c++)
		cr_expect_eq(out[c], 128, "channel %d: %u", c, out[c]);
}

Test(mip, alpha_is_averaged_linearly_in_srgb_mode)
{
	static const uint8_t alpha[4] = { 0, 255, 255, 0 };
	static const uint8_t alpha3[4] = { 10, 20, 30, 41 };
	uint8_t out[4];
	checker_2x2(true, alpha, out);
	cr_expect_eq(out[3], 128, "alpha %u", out[3]);
	cr_expect_eq(out[0], 188);
	checker_2x2(true, alpha3, out);
	cr_expect_eq(out[3], 25, "alpha %u (25.25)", out[3]);
}

/* Texel (bx, by) of a black w x h image set to white: which level-1 texels change. */
static void single_bright(uint32_t w, uint32_t h, bool srgb, uint32_t bx, uint32_t by, test_chain *tc)
{
	alloc_chain(tc, w, h, 0, srgb);
	static const uint8_t white[4] = { 255, 255, 255, 255 };
	test_chain_set(tc, bx, by, white);
	build(tc);
}

Test(mip, odd_sizes_keep_every_source_texel)
{
	/* the last column of a 5x5: 5 -> 2 gives destination 1 the taps 2, 3, 4 with weights
	 * 1, 2, 2 (over 5); row 2 reaches both destination rows with weight 1 of 5 */
	test_chain tc;
	single_bright(5, 5, false, 4, 2, &tc);
	cr_expect_eq(test_chain_texel(&tc, 1, 1, 0)[0], 20, "255 * 2/5 * 1/5 = 20.4");
	cr_expect_eq(test_chain_texel(&tc, 1, 1, 1)[0], 20);
	cr_expect_eq(test_chain_texel(&tc, 1, 0, 0)[0], 0);
	cr_expect_eq(test_chain_texel(&tc, 1, 0, 1)[0], 0);
	test_chain_free(&tc);

	/* any single texel of these sizes changes level 1, in both modes */
	static const uint32_t sizes[][2] = { { 5, 5 }, { 7, 3 }, { 3, 1 }, { 1, 9 }, { 6, 5 } };
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		uint32_t w = sizes[s][0], h = sizes[s][1];
		for (int srgb = 0; srgb < 2; srgb++) {
			for (uint32_t y = 0; y < h; y++) {
				for (uint32_t x = 0; x < w; x++) {
					single_bright(w, h, srgb, x, y, &tc);
					int lit = 0;
					for (uint32_t v = 0; v < tc.levels[1].height; v++)
						for (uint32_t u = 0; u < tc.levels[1].width; u++)
							lit |= test_chain_texel(&tc, 1, u, v)[1] != 0;
					cr_expect(lit, "%ux%u %s: texel %u,%u lost", w, h,
						  srgb ? "sRGB" : "linear", x, y);
					test_chain_free(&tc);
				}
			}
		}
	}
}

/* ---- against a double-precision reference ------------------------------------------ */

/* Area weights computed from their definition (interval overlaps), independently of the
 * closed form in mip_texel.h: weight of source index j for destination d, over n. */
static uint64_t overlap(uint32_t n, uint32_t d, uint32_t j)
{
	uint64_t m = n > 1 ? n / 2 : 1;
	uint64_t lo = (uint64_t)d * n, hi = lo + n;
	uint64_t jlo = j * m, jhi = jlo + m;
	uint64_t a = lo > jlo ? lo : jlo, b = hi < jhi ? hi : jhi;
	return b > a ? b - a : 0;
}

/* Level l+1 texel (x, y), channel c, from level l: exact rational for linear channels
 * (rounded half up), nearest code in double for sRGB colour. */
static int reference_texel(const test_chain *tc, uint32_t l, uint32_t x, uint32_t y, int c)
{
	const kiln_surface *s = &tc->levels[l];
	bool lin_light = tc->chain.srgb && c < 3;
	uint64_t isum = 0;
	double dsum = 0;
	for (uint32_t j = 0; j < s->height; j++) {
		uint64_t wy = overlap(s->height, y, j);
		for (uint32_t i = 0; wy && i < s->width; i++) {
			uint64_t w = wy * overlap(s->width, x, i);
			int v = test_chain_texel(tc, l, i, j)[c];
			isum += w * v;
			dsum += (double)w * srgb_to_linear_libm(v);
		}
	}
	uint64_t den = (uint64_t)s->width * s->height;
	return lin_light ? nearest_code_libm(dsum / den) : (int)((isum + den / 2) / den);
}

static void expect_reference(uint32_t w, uint32_t h, bool srgb, uint32_t seed)
{
	test_chain tc;
	alloc_chain(&tc, w, h, 12, srgb);
	test_chain_random(&tc, seed);
	build(&tc);
	size_t total = 0, off_by_one = 0;
	for (uint32_t l = 0; l + 1 < tc.chain.count; l++) {
		for (uint32_t y = 0; y < tc.levels[l + 1].height; y++) {
			for (uint32_t x = 0; x < tc.levels[l + 1].width; x++) {
				for (int c = 0; c < 4; c++) {
					int got = test_chain_texel(&tc, l + 1, x, y)[c];
					int want = reference_texel(&tc, l, x, y, c);
					total++;
					/* float vs double may only disagree next to a midpoint */
					if (srgb && c < 3 && abs(got - want) == 1) {
						off_by_one++;
						continue;
					}
					cr_assert_eq(got, want, "%ux%u %s level %u texel %u,%u ch %d",
						     w, h, srgb ? "sRGB" : "linear", l + 1, x, y, c);
				}
			}
		}
	}
	cr_expect_leq(off_by_one * 1000, total, "%zu of %zu sRGB values off by one", off_by_one, total);
	test_chain_free(&tc);
}

Test(mip, matches_double_reference)
{
	static const uint32_t sizes[][2] = { { 37, 23 }, { 64, 5 }, { 1, 31 }, { 19, 1 }, { 30, 30 } };
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		expect_reference(sizes[s][0], sizes[s][1], false, (uint32_t)s);
		expect_reference(sizes[s][0], sizes[s][1], true, (uint32_t)s + 100);
	}
}

/* ---- arguments ------------------------------------------------------------------- */

Test(mip, invalid_chains_are_rejected)
{
	test_chain tc;
	alloc_chain(&tc, 9, 6, 0, true);
	kiln_mip_chain *ch = &tc.chain;
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_OK);
	cr_expect_eq(kiln_mip_build_cpu(NULL, 0, NULL), KILN_OK, "an empty batch is fine");
	cr_expect_eq(kiln_mip_build_cpu(NULL, 1, NULL), KILN_ERR_INVALID_ARG);

	ch->levels = NULL;
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_ERR_INVALID_ARG, "NULL levels");
	ch->levels = tc.levels;
	uint32_t count = ch->count;
	ch->count = 0;
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_ERR_INVALID_ARG, "no levels");
	ch->count = count + 1;
	tc.levels[count] = tc.levels[count - 1];
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_ERR_INVALID_ARG, "too many levels");
	ch->count = 2;
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_OK, "a partial chain is fine");
	ch->count = count;

	struct { uint32_t level; int field; uint32_t value; const char *what; } bad[] = {
		{ 1, 0, 5, "level 1 width 5 (9 >> 1 is 4)" },
		{ 2, 1, 2, "level 2 height 2 (6 >> 2 is 1)" },
		{ 3, 1, 0, "level 3 height 0 (at least 1)" },
		{ 1, 2, 15, "stride below 4 * width" },
		{ 0, 0, 0, "base width 0" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		kiln_surface saved = tc.levels[bad[i].level];
		kiln_surface *s = &tc.levels[bad[i].level];
		uint32_t *field = bad[i].field == 0 ? &s->width : bad[i].field == 1 ? &s->height : &s->stride;
		*field = bad[i].value;
		cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_ERR_INVALID_ARG, "%s", bad[i].what);
		tc.levels[bad[i].level] = saved;
	}
	const uint8_t *px = tc.levels[2].rgba;
	tc.levels[2].rgba = NULL;
	cr_expect_eq(kiln_mip_build_cpu(ch, 1, NULL), KILN_ERR_INVALID_ARG, "NULL pixels");
	tc.levels[2].rgba = px;

	/* one bad chain refuses the batch before any level is written */
	test_chain good;
	alloc_chain(&good, 4, 4, 0, false);
	test_chain_random(&good, 1);
	kiln_mip_chain pair[2] = { good.chain, *ch };
	pair[1].count = 0;
	cr_expect_eq(kiln_mip_build_cpu(pair, 2, NULL), KILN_ERR_INVALID_ARG);
	cr_expect_eq(test_chain_texel(&good, 1, 0, 0)[0], 0, "nothing written");
	test_chain_free(&good);
	test_chain_free(&tc);
}

Test(mip, temp_size)
{
	cr_expect_eq(kiln_mip_temp_size(0, 10), 0u);
	cr_expect_eq(kiln_mip_temp_size(32, 1), 0u);
	cr_expect_gt(kiln_mip_temp_size(1, 2), 0u);
	cr_expect_eq(kiln_mip_temp_size(32, 15), 32 * 14 * kiln_mip_temp_size(1, 2));
	cr_expect_eq(kiln_mip_temp_size(SIZE_MAX / 2, 15), SIZE_MAX);
}

/* ---- the tables ---------------------------------------------------------------------- */

Test(mip_tables, match_libm_in_double)
{
	for (int b = 0; b < 256; b++)
		cr_expect_eq(kiln_mip_srgb_to_linear(b), (float)srgb_to_linear_libm(b), "code %d", b);
	for (int k = 0; k < 255; k++) {
		float mid = (float)((srgb_to_linear_libm(k) + srgb_to_linear_libm(k + 1)) / 2);
		cr_expect_eq(kiln_mip_linear_midpoint(k), mid, "midpoint %d", k);
		if (k > 0)
			cr_expect_lt(kiln_mip_linear_midpoint(k - 1), kiln_mip_linear_midpoint(k));
	}
	cr_expect_eq(kiln_mip_srgb_to_linear(0), 0.0f);
	cr_expect_eq(kiln_mip_srgb_to_linear(255), 1.0f);
}

Test(mip_tables, linear_to_srgb_is_nearest)
{
	for (int b = 0; b < 256; b++)
		cr_expect_eq(kiln_mip_linear_to_srgb(kiln_mip_srgb_to_linear(b)), b, "round trip %d", b);
	/* ties go up; either side of a midpoint goes its own way */
	for (int k = 0; k < 255; k++) {
		float mid = kiln_mip_linear_midpoint(k);
		cr_expect_eq(kiln_mip_linear_to_srgb(mid), k + 1);
		cr_expect_eq(kiln_mip_linear_to_srgb(nextafterf(mid, 0.0f)), k);
	}
	cr_expect_eq(kiln_mip_linear_to_srgb(2.0f), 255);
	uint32_t r = 99;
	for (int i = 0; i < 20000; i++) {
		r = r * 1103515245u + 12345u;
		double v = (r >> 8) / 16777216.0;
		int want = nearest_code_libm(v);
		double lo = (srgb_to_linear_libm(want > 0 ? want - 1 : 0) + srgb_to_linear_libm(want)) / 2;
		/* skip values within float rounding of a midpoint */
		if (fabs(v - lo) < 1e-6)
			continue;
		cr_assert_eq(kiln_mip_linear_to_srgb((float)v), want, "v %.9f", v);
	}
}

/* ---- threads ----------------------------------------------------------------------- */

/* The same random batch through a NULL pool and a 4-thread pool gives the same bytes. */
Test(mip, pool_does_not_change_output)
{
	static const uint32_t sizes[][2] = { { 1023, 517 }, { 5, 3 }, { 1, 1 }, { 300, 1 }, { 64, 64 } };
	enum { N = sizeof sizes / sizeof sizes[0] };
	test_chain serial[N], threaded[N];
	kiln_mip_chain a[N], b[N];
	for (size_t i = 0; i < N; i++) {
		alloc_chain(&serial[i], sizes[i][0], sizes[i][1], 8 * (uint32_t)i, i % 2 == 0);
		alloc_chain(&threaded[i], sizes[i][0], sizes[i][1], 0, i % 2 == 0);
		test_chain_random(&serial[i], (uint32_t)i);
		test_chain_random(&threaded[i], (uint32_t)i);
		/* the same level 0 content with different padding */
		for (uint32_t y = 0; y < sizes[i][1]; y++)
			memcpy(threaded[i].pixels[0] + (size_t)y * threaded[i].levels[0].stride,
			       test_chain_texel(&serial[i], 0, 0, y), (size_t)sizes[i][0] * 4);
		a[i] = serial[i].chain;
		b[i] = threaded[i].chain;
	}
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(4, &pool), KILN_OK);
	cr_assert_eq(kiln_mip_build_cpu(a, N, NULL), KILN_OK);
	cr_assert_eq(kiln_mip_build_cpu(b, N, pool), KILN_OK);
	kiln_pool_destroy(pool);
	for (size_t i = 0; i < N; i++) {
		uint32_t bad = 0;
		cr_expect(test_chain_equal(&serial[i], &threaded[i], &bad), "chain %zu level %u differs", i, bad);
		test_chain_free(&serial[i]);
		test_chain_free(&threaded[i]);
	}
}
