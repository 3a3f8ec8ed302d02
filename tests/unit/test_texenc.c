/* The encode front end's batch API on the CPU backend: submit/collect gives the bytes of
 * kiln_texenc_encode, tickets are collected in any order, slots run out and come back,
 * per-image status survives the trip, images may be freed once submitted, options apply
 * to the batches submitted after them, level 0's error measured on request. (GPU parity:
 * tests/gpu/test_texenc_gpu.c, tests/gpu/test_texenc_png_gpu.c.) */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/astc/astc.h"
#include "kernels/bc1/bc1.h"
#include "kernels/texenc.h"
#include "tests/unit/testutil.h"

static kiln_pool *pool;

static void setup(void)
{
	cr_assert_eq(kiln_pool_create(2, &pool), KILN_OK);
}

static void teardown(void)
{
	kiln_pool_destroy(pool);
}

TestSuite(texenc, .init = setup, .fini = teardown, .timeout = 60);

static const uint32_t sizes[][2] = {{1, 1}, {5, 3}, {64, 64}, {33, 65}, {257, 3}, {7, 30}, {128, 96}, {16, 16}};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void make_images(kiln_image *images, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		cr_assert(test_random_image(&images[i], sizes[(i + seed) % NSIZES][0], sizes[(i + seed) % NSIZES][1],
					    (uint32_t)i + seed * 100, (i + seed) % 3 == 0));
}

static void free_images(kiln_image *images, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kiln_image_free(&images[i]);
}

static kiln_texenc *make_encoder(bool mipmaps, kiln_quality q)
{
	kiln_device cpu = {KILN_DEVICE_CPU, 0};
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.mipmaps = mipmaps;
	opts.quality = q;
	kiln_texenc *enc;
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &enc), KILN_OK);
	return enc;
}

static void expect_same_textures(const kiln_texture *a, const kiln_texture *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(a[i].num_levels, b[i].num_levels, "image %zu", i);
		cr_assert_eq(a[i].format, b[i].format);
		cr_assert_eq(a[i].srgb, b[i].srgb);
		for (uint32_t l = 0; l < a[i].num_levels; l++) {
			cr_assert_eq(a[i].levels[l].width, b[i].levels[l].width);
			cr_assert_eq(a[i].levels[l].height, b[i].levels[l].height);
			cr_assert_eq(a[i].levels[l].size, b[i].levels[l].size);
			cr_assert_not_null(a[i].levels[l].data);
			cr_assert_not_null(b[i].levels[l].data);
			cr_expect_eq(memcmp(a[i].levels[l].data, b[i].levels[l].data, a[i].levels[l].size), 0,
				     "image %zu level %u differs", i, l);
		}
	}
}

static void free_textures(kiln_texture *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kiln_texture_free_levels(&t[i]);
}

Test(texenc, cpu_depth_is_one_and_slots_are_counted)
{
	kiln_texenc *enc = make_encoder(false, KILN_QUALITY_FAST);
	cr_expect_eq(kiln_texenc_depth(enc), 1);
	cr_expect_eq(kiln_texenc_inflight(enc), 0);
	kiln_image img[1];
	make_images(img, 1, 2);
	uint64_t t[KILN_TEXENC_MAX_INFLIGHT + 1];
	for (unsigned i = 0; i < KILN_TEXENC_MAX_INFLIGHT; i++) {
		cr_assert_eq(kiln_texenc_submit(enc, img, 1, &t[i]), KILN_OK);
		cr_expect_neq(t[i], 0);
		cr_expect_eq(kiln_texenc_inflight(enc), i + 1);
	}
	/* every slot taken: refused, no ticket; encode needs a slot too */
	t[KILN_TEXENC_MAX_INFLIGHT] = 99;
	cr_expect_eq(kiln_texenc_submit(enc, img, 1, &t[KILN_TEXENC_MAX_INFLIGHT]), KILN_ERR_INVALID_ARG);
	cr_expect_eq(t[KILN_TEXENC_MAX_INFLIGHT], 0);
	kiln_texture out[1];
	kiln_status st[1];
	cr_expect_eq(kiln_texenc_encode(enc, img, 1, out, st), KILN_ERR_INVALID_ARG);
	cr_expect_eq(st[0], KILN_ERR_INVALID_ARG);
	cr_expect_eq(out[0].levels[0].data, NULL);
	/* unknown tickets write nothing */
	st[0] = KILN_OK;
	cr_expect_eq(kiln_texenc_collect(enc, 0, out, st), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_texenc_collect(enc, t[2] + 1, out, st), KILN_ERR_INVALID_ARG);
	cr_expect_eq(st[0], KILN_OK);
	for (unsigned i = 0; i < KILN_TEXENC_MAX_INFLIGHT; i++) {
		cr_assert_eq(kiln_texenc_collect(enc, t[i], out, st), KILN_OK);
		cr_expect_eq(st[0], KILN_OK);
		free_textures(out, 1);
		/* a collected ticket is gone */
		cr_expect_eq(kiln_texenc_collect(enc, t[i], out, st), KILN_ERR_INVALID_ARG);
	}
	cr_expect_eq(kiln_texenc_inflight(enc), 0);
	/* a slot comes back and tickets keep increasing */
	uint64_t again;
	cr_assert_eq(kiln_texenc_submit(enc, img, 1, &again), KILN_OK);
	cr_expect_gt(again, t[KILN_TEXENC_MAX_INFLIGHT - 1]);
	cr_assert_eq(kiln_texenc_collect(enc, again, out, st), KILN_OK);
	free_textures(out, 1);
	free_images(img, 1);
	kiln_texenc_destroy(enc);
}

/* Ten batches of different sizes, kept KILN_TEXENC_MAX_INFLIGHT deep, images freed as soon
 * as they are submitted: the same bytes as kiln_texenc_encode of each batch. */
Test(texenc, pipelined_batches_give_the_bytes_of_encode)
{
	enum { NBATCH = 10, MAXN = 9 };
	for (int mips = 0; mips < 2; mips++) {
		kiln_texenc *ref = make_encoder(mips, KILN_QUALITY_MEDIUM);
		kiln_texenc *enc = make_encoder(mips, KILN_QUALITY_MEDIUM);
		kiln_texture want[NBATCH][MAXN], got[NBATCH][MAXN];
		kiln_status want_st[NBATCH][MAXN], got_st[NBATCH][MAXN];
		size_t count[NBATCH];
		uint64_t ticket[NBATCH];
		size_t next_collect = 0;
		for (size_t b = 0; b < NBATCH; b++) {
			count[b] = 1 + (b * 5) % MAXN;
			kiln_image images[MAXN];
			make_images(images, count[b], (uint32_t)b);
			cr_assert_eq(kiln_texenc_encode(ref, images, count[b], want[b], want_st[b]), KILN_OK);
			if (kiln_texenc_inflight(enc) == KILN_TEXENC_MAX_INFLIGHT) {
				cr_assert_eq(kiln_texenc_collect(enc, ticket[next_collect], got[next_collect],
								 got_st[next_collect]), KILN_OK);
				next_collect++;
			}
			cr_assert_eq(kiln_texenc_submit(enc, images, count[b], &ticket[b]), KILN_OK);
			free_images(images, count[b]); /* submit has copied what it needs */
		}
		for (; next_collect < NBATCH; next_collect++)
			cr_assert_eq(kiln_texenc_collect(enc, ticket[next_collect], got[next_collect],
							 got_st[next_collect]), KILN_OK);
		for (size_t b = 0; b < NBATCH; b++) {
			for (size_t i = 0; i < count[b]; i++)
				cr_expect_eq(got_st[b][i], want_st[b][i]);
			expect_same_textures(want[b], got[b], count[b]);
			free_textures(want[b], count[b]);
			free_textures(got[b], count[b]);
		}
		kiln_texenc_destroy(ref);
		kiln_texenc_destroy(enc);
	}
}

Test(texenc, tickets_collect_in_any_order)
{
	kiln_texenc *enc = make_encoder(true, KILN_QUALITY_FAST);
	kiln_image a[2], b[1], c[3];
	cr_assert(test_random_image(&a[0], 8, 8, 1, false));
	cr_assert(test_random_image(&a[1], 12, 4, 2, false));
	cr_assert(test_random_image(&b[0], 40, 20, 3, true));
	cr_assert(test_random_image(&c[0], 1, 1, 4, false));
	cr_assert(test_random_image(&c[1], 2, 9, 5, false));
	cr_assert(test_random_image(&c[2], 64, 32, 6, false));
	uint64_t ta, tb, tc;
	cr_assert_eq(kiln_texenc_submit(enc, a, 2, &ta), KILN_OK);
	cr_assert_eq(kiln_texenc_submit(enc, b, 1, &tb), KILN_OK);
	cr_assert_eq(kiln_texenc_submit(enc, c, 3, &tc), KILN_OK);
	cr_expect(ta != tb && tb != tc && ta != tc);
	kiln_texture out[3];
	kiln_status st[3];
	cr_assert_eq(kiln_texenc_collect(enc, tc, out, st), KILN_OK);
	cr_expect_eq(out[0].levels[0].width, 1);
	cr_expect_eq(out[1].levels[0].height, 9);
	cr_expect_eq(out[2].levels[0].width, 64);
	cr_expect_eq(out[2].num_levels, 7);
	free_textures(out, 3);
	cr_assert_eq(kiln_texenc_collect(enc, ta, out, st), KILN_OK);
	cr_expect_eq(out[0].levels[0].width, 8);
	cr_expect_eq(out[1].levels[0].width, 12);
	free_textures(out, 2);
	cr_assert_eq(kiln_texenc_collect(enc, tb, out, st), KILN_OK);
	cr_expect_eq(out[0].levels[0].width, 40);
	cr_expect_eq(out[0].format, KILN_TEXFMT_BC1_RGBA);
	free_textures(out, 1);
	free_images(a, 2);
	free_images(b, 1);
	free_images(c, 3);
	cr_expect_eq(kiln_texenc_device_wait_ns(enc), 0u, "the CPU backend waits for no device");
	kiln_texenc_destroy(enc);
}

Test(texenc, per_image_status_survives_submit_and_collect)
{
	kiln_texenc *enc = make_encoder(true, KILN_QUALITY_FAST);
	enum { N = 6 };
	kiln_image images[N];
	make_images(images, N, 1);
	kiln_image keep1 = images[1], keep4 = images[4];
	images[1].pixels = NULL;                         /* no pixels */
	images[4].stride = images[4].width * 4 - 1;      /* rows shorter than the width */
	uint64_t t;
	cr_assert_eq(kiln_texenc_submit(enc, images, N, &t), KILN_OK);
	kiln_texture out[N];
	kiln_status st[N];
	cr_assert_eq(kiln_texenc_collect(enc, t, out, st), KILN_OK, "bad images do not fail the batch");
	for (size_t i = 0; i < N; i++) {
		bool bad = i == 1 || i == 4;
		cr_expect_eq(st[i] != KILN_OK, bad, "image %zu: %s", i, kiln_strerror(st[i]));
		for (uint32_t l = 0; l < KILN_MAX_LEVELS; l++)
			if (bad)
				cr_expect_null(out[i].levels[l].data, "a failed image has no levels");
	}
	/* the good ones are what they would be alone */
	for (size_t i = 0; i < N; i++) {
		if (i == 1 || i == 4)
			continue;
		kiln_texture alone;
		kiln_status ast;
		cr_assert_eq(kiln_texenc_encode(enc, &images[i], 1, &alone, &ast), KILN_OK);
		expect_same_textures(&alone, &out[i], 1);
		kiln_texture_free_levels(&alone);
	}
	free_textures(out, N);
	/* a batch of only bad images still gets a ticket and its statuses */
	kiln_image bad[2] = {images[1], images[4]};
	cr_assert_eq(kiln_texenc_submit(enc, bad, 2, &t), KILN_OK);
	cr_assert_eq(kiln_texenc_collect(enc, t, out, st), KILN_OK);
	cr_expect_eq(st[0], KILN_ERR_INVALID_ARG);
	cr_expect_eq(st[1], KILN_ERR_INVALID_ARG);
	/* and an empty batch */
	cr_assert_eq(kiln_texenc_submit(enc, NULL, 0, &t), KILN_OK);
	cr_expect_eq(kiln_texenc_collect(enc, t, out, st), KILN_OK);
	images[1] = keep1;
	images[4] = keep4;
	free_images(images, N);
	kiln_texenc_destroy(enc);
}

Test(texenc, options_apply_to_batches_submitted_after_them)
{
	kiln_texenc *enc = make_encoder(false, KILN_QUALITY_FAST);
	kiln_image img[1];
	cr_assert(test_random_image(&img[0], 32, 32, 9, false));
	uint64_t t1, t2;
	cr_assert_eq(kiln_texenc_submit(enc, img, 1, &t1), KILN_OK);
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.mipmaps = true;
	cr_assert_eq(kiln_texenc_set_opts(enc, &opts), KILN_OK);
	cr_assert_eq(kiln_texenc_submit(enc, img, 1, &t2), KILN_OK);
	kiln_texture out[1];
	kiln_status st[1];
	cr_assert_eq(kiln_texenc_collect(enc, t1, out, st), KILN_OK);
	cr_expect_eq(out[0].num_levels, 1);
	free_textures(out, 1);
	cr_assert_eq(kiln_texenc_collect(enc, t2, out, st), KILN_OK);
	cr_expect_eq(out[0].num_levels, 6);
	free_textures(out, 1);
	free_images(img, 1);
	kiln_texenc_destroy(enc);
}

Test(texenc, destroy_with_batches_in_flight)
{
	kiln_texenc *enc = make_encoder(true, KILN_QUALITY_FAST);
	kiln_image img[3];
	make_images(img, 3, 4);
	uint64_t t;
	cr_assert_eq(kiln_texenc_submit(enc, img, 3, &t), KILN_OK);
	cr_assert_eq(kiln_texenc_submit(enc, img, 2, &t), KILN_OK);
	kiln_texenc_destroy(enc); /* frees the uncollected textures */
	free_images(img, 3);
}

/* ASTC through the front end: the footprint from the options, mip chains, and a batch
 * mixing sRGB and linear images (encoded in two codec calls) giving each image the bytes
 * it gets alone; bad footprints are refused. */
Test(texenc, astc_batches_mix_colour_spaces_and_keep_mip_chains)
{
	kiln_device cpu = {KILN_DEVICE_CPU, 0};
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.format = KILN_TEXFMT_ASTC;
	opts.block_w = 7;
	opts.block_h = 7;
	kiln_texenc *enc;
	cr_expect_eq(kiln_texenc_create(&cpu, &opts, pool, &enc), KILN_ERR_INVALID_ARG);
	opts.block_w = 6;
	opts.block_h = 5;
	opts.quality = KILN_QUALITY_FAST;
	opts.mipmaps = true;
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &enc), KILN_OK);
	cr_expect(kiln_texenc_gpu_supported(KILN_TEXFMT_ASTC));
	cr_expect(kiln_texenc_gpu_supported(KILN_TEXFMT_BC1_RGB));
	enum { N = 5 };
	kiln_image images[N];
	make_images(images, N, 3);
	for (size_t i = 0; i < N; i++)
		images[i].srgb = i % 2 == 0;
	kiln_texture all[N], one[N];
	kiln_status st[N];
	cr_assert_eq(kiln_texenc_encode(enc, images, N, all, st), KILN_OK);
	for (size_t i = 0; i < N; i++) {
		cr_assert_eq(st[i], KILN_OK);
		cr_expect_eq(all[i].format, KILN_TEXFMT_ASTC);
		cr_expect_eq(all[i].block_w, 6u);
		cr_expect_eq(all[i].block_h, 5u);
		cr_expect_eq(all[i].srgb, images[i].srgb);
		cr_expect_eq(all[i].num_levels, kiln_mip_count(images[i].width, images[i].height));
		for (uint32_t l = 0; l < all[i].num_levels; l++)
			cr_expect_eq(all[i].levels[l].size,
				     (size_t)((all[i].levels[l].width + 5) / 6) * ((all[i].levels[l].height + 4) / 5) * 16);
		cr_assert_eq(kiln_texenc_encode(enc, &images[i], 1, &one[i], &st[i]), KILN_OK);
		cr_assert_eq(st[i], KILN_OK);
	}
	expect_same_textures(all, one, N);
	for (size_t i = 0; i < N; i++) {
		kiln_texture_free_levels(&all[i]);
		kiln_texture_free_levels(&one[i]);
	}
	free_images(images, N);
	kiln_texenc_destroy(enc);
}

/* Level 0's squared RGB error and texel count by decoding the texture's blocks with the
 * public decoders, independently of kernels/texerr.h: texels whose alpha punch-through
 * made transparent are left out. */
static kiln_texerr reference_error(const kiln_texture *t, const kiln_image *img, int alpha_cutoff)
{
	const kiln_level *lv = &t->levels[0];
	uint8_t *rgba = malloc((size_t)lv->width * 4 * lv->height);
	cr_assert(rgba);
	if (t->format == KILN_TEXFMT_ASTC)
		cr_assert_eq(kiln_astc_decode(lv->data, lv->size, lv->width, lv->height, t->block_w, t->block_h, t->srgb,
					      rgba, (size_t)lv->width * 4), KILN_OK);
	else
		cr_assert_eq(kiln_bc1_decode(lv->data, lv->size, lv->width, lv->height, t->format == KILN_TEXFMT_BC1_RGBA,
					     rgba, (size_t)lv->width * 4), KILN_OK);
	kiln_texerr e = {0, 0};
	for (uint32_t y = 0; y < lv->height; y++)
		for (uint32_t x = 0; x < lv->width; x++) {
			const uint8_t *a = kiln_image_row(img, y) + 4 * (size_t)x;
			const uint8_t *b = rgba + ((size_t)y * lv->width + x) * 4;
			if (t->format == KILN_TEXFMT_BC1_RGBA && a[3] < alpha_cutoff)
				continue;
			for (int c = 0; c < 3; c++)
				e.sse += (uint64_t)((a[c] - b[c]) * (a[c] - b[c]));
			e.texels++;
		}
	free(rgba);
	return e;
}

/* opts.measure: collect_measured gives level 0's error of each image (BC1 with and without
 * punch-through alpha, ASTC 6x5 with mipmaps, sizes that end inside a block), the error a
 * decode of the texture gives; without it, zeros; kiln_texerr_psnr turns it into the
 * worker's centi-dB. */
Test(texenc, measured_error_is_the_decoded_texture_s)
{
	enum { N = 8 };
	kiln_image images[N];
	make_images(images, N, 5);
	for (int astc = 0; astc < 2; astc++) {
		kiln_device cpu = {KILN_DEVICE_CPU, 0};
		kiln_texenc_opts opts;
		kiln_texenc_opts_default(&opts);
		opts.quality = KILN_QUALITY_FAST;
		opts.measure = true;
		if (astc) {
			opts.format = KILN_TEXFMT_ASTC;
			opts.block_w = 6;
			opts.block_h = 5;
			opts.mipmaps = true;
		}
		kiln_texenc *enc;
		cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &enc), KILN_OK);
		kiln_texture tex[N];
		kiln_status st[N];
		kiln_texerr err[N];
		uint64_t ticket;
		cr_assert_eq(kiln_texenc_submit(enc, images, N, &ticket), KILN_OK);
		cr_assert_eq(kiln_texenc_collect_measured(enc, ticket, tex, st, err), KILN_OK);
		bool punched = false;
		for (size_t i = 0; i < N; i++) {
			cr_assert_eq(st[i], KILN_OK);
			punched |= tex[i].format == KILN_TEXFMT_BC1_RGBA;
			kiln_texerr want = reference_error(&tex[i], &images[i], opts.alpha_cutoff);
			cr_expect(err[i].sse == want.sse && err[i].texels == want.texels,
				  "%s image %zu: %llu over %llu texels, want %llu over %llu", astc ? "ASTC" : "BC1", i,
				  (unsigned long long)err[i].sse, (unsigned long long)err[i].texels,
				  (unsigned long long)want.sse, (unsigned long long)want.texels);
			int32_t cdb;
			cr_expect_eq(kiln_texerr_psnr(&err[i], &cdb), err[i].texels > 0);
			kiln_texture_free_levels(&tex[i]);
		}
		if (!astc)
			cr_expect(punched, "an image with alpha goes to BC1 RGBA (punch-through)");
		opts.measure = false;
		cr_assert_eq(kiln_texenc_set_opts(enc, &opts), KILN_OK);
		cr_assert_eq(kiln_texenc_submit(enc, images, N, &ticket), KILN_OK);
		cr_assert_eq(kiln_texenc_collect_measured(enc, ticket, tex, st, err), KILN_OK);
		for (size_t i = 0; i < N; i++) {
			cr_expect(err[i].sse == 0 && err[i].texels == 0, "not measured: zeros");
			kiln_texture_free_levels(&tex[i]);
		}
		kiln_texenc_destroy(enc);
	}
	kiln_texerr perfect = {0, 10}, none = {5, 0};
	int32_t cdb = 0;
	cr_expect(kiln_texerr_psnr(&perfect, &cdb) && cdb == 9900);
	cr_expect(!kiln_texerr_psnr(&none, &cdb));
	free_images(images, N);
}
