/* GPU tests of the encode front end (run by make test-gpu on a GPU machine): the whole
 * path (upload, mips on the GPU, one codec launch, download) gives the same bytes as the
 * CPU backend, for Kodak and random images, every quality, batch sizes 1, 7 and 32, and the
 * kiln binary writes identical files with --device gpu and --device cpu; batches kept in
 * flight with submit/collect give the same bytes too. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu.h"
#include "kernels/texenc.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/unit/testutil.h"

#define NKODAK 24

/* Encodes count images in batches of `batch` on the given device. */
static void encode_all(const kiln_device *dev, const kiln_texenc_opts *opts, kiln_image *images,
		       size_t count, size_t batch, kiln_texture *out)
{
	kiln_pool *pool = NULL;
	kiln_texenc *enc;
	cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	cr_assert_eq(kiln_texenc_create(dev, opts, pool, &enc), KILN_OK, "%s", kiln_gpu_last_error());
	kiln_status *st = calloc(count, sizeof *st);
	for (size_t first = 0; first < count; first += batch) {
		size_t n = count - first < batch ? count - first : batch;
		cr_assert_eq(kiln_texenc_encode(enc, images + first, n, out + first, st + first), KILN_OK,
			     "%s", kiln_texenc_last_error(enc));
		for (size_t i = first; i < first + n; i++)
			cr_assert_eq(st[i], KILN_OK, "image %zu: %s", i, kiln_strerror(st[i]));
	}
	free(st);
	kiln_texenc_destroy(enc);
	kiln_pool_destroy(pool);
}

static void expect_same(const kiln_texture *a, const kiln_texture *b, size_t count, const char *what)
{
	for (size_t i = 0; i < count; i++) {
		cr_assert_eq(a[i].num_levels, b[i].num_levels);
		cr_assert_eq(a[i].format, b[i].format);
		for (uint32_t l = 0; l < a[i].num_levels; l++) {
			cr_assert_eq(a[i].levels[l].size, b[i].levels[l].size);
			cr_expect_eq(memcmp(a[i].levels[l].data, b[i].levels[l].data, a[i].levels[l].size), 0,
				     "%s: image %zu level %u differs between CPU and GPU", what, i, l);
		}
	}
}

static void compare_backends(kiln_image *images, size_t count, kiln_quality q, bool mips, size_t batch,
			     const char *what)
{
	kiln_device cpu = {KILN_DEVICE_CPU, 0}, gpu = {KILN_DEVICE_GPU, 0};
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.quality = q;
	opts.mipmaps = mips;
	kiln_texture *a = calloc(count, sizeof *a), *b = calloc(count, sizeof *b);
	encode_all(&cpu, &opts, images, count, count, a);
	encode_all(&gpu, &opts, images, count, batch, b);
	expect_same(a, b, count, what);
	for (size_t i = 0; i < count; i++) {
		kiln_texture_free_levels(&a[i]);
		kiln_texture_free_levels(&b[i]);
	}
	free(a);
	free(b);
}

Test(texenc_gpu, kodak_every_quality_with_mipmaps, .timeout = 600)
{
	gpu_test_require("texenc_gpu");
	kiln_image images[NKODAK];
	for (int i = 0; i < NKODAK; i++)
		gpu_test_read_kodak(i + 1, &images[i]);
	for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++) {
		compare_backends(images, NKODAK, (kiln_quality)q, true, 7, "kodak batch 7");
		compare_backends(images, NKODAK, (kiln_quality)q, false, 1, "kodak batch 1");
	}
	for (int i = 0; i < NKODAK; i++)
		kiln_image_free(&images[i]);
}

Test(texenc_gpu, random_images_batches_1_7_32, .timeout = 600)
{
	gpu_test_require("texenc_gpu");
	static const uint32_t sizes[][2] = {{1, 1}, {5, 3}, {4099, 17}, {64, 64}, {33, 65}, {257, 3}, {7, 300}, {128, 96}};
	enum { N = 32 };
	kiln_image images[N];
	for (int i = 0; i < N; i++)
		cr_assert(test_random_image(&images[i], sizes[i % 8][0], sizes[i % 8][1], (uint32_t)i, i % 3 == 0));
	static const size_t batches[] = {1, 7, 32};
	for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++)
		for (int b = 0; b < 3; b++)
			compare_backends(images, N, (kiln_quality)q, true, batches[b], "random");
	for (int i = 0; i < N; i++)
		kiln_image_free(&images[i]);
}

Test(texenc_gpu, cli_gpu_and_cpu_files_are_identical, .timeout = 600)
{
	gpu_test_require("texenc_gpu");
	int rc = gpu_test_sh(NULL,
		 "$kiln samples -o $d/in; "
		 "$kiln encode -q --mipmaps --device cpu $d/in/*.png $data/kodak/kodim0[1-4].png -o $d/cpu; "
		 "$kiln encode -q --mipmaps --device gpu $d/in/*.png $data/kodak/kodim0[1-4].png -o $d/gpu; "
		 "$kiln encode -q --container ktx2 --quality fast --device gpu:0 $d/in/*.png -o $d/gpuk; "
		 "$kiln encode -q --container ktx2 --quality fast --device cpu $d/in/*.png -o $d/cpuk; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpuk $d/gpuk");
	cr_expect_eq(rc, 0, "kiln encode --device gpu must write the same files as --device cpu");
}

/* The asynchronous path: 10 batches of mixed sizes kept KILN_TEXENC_MAX_INFLIGHT deep on
 * the GPU (upload of one batch overlapping the kernels and download of others), the images
 * freed as soon as they are submitted, an option change in the middle, bad images mixed
 * in: every batch gives the bytes and statuses of the CPU backend. */
Test(texenc_gpu, pipelined_submit_collect_over_10_batches_matches_cpu, .timeout = 600)
{
	gpu_test_require("texenc_gpu");
	enum { NBATCH = 10, MAXN = 32 };
	static const uint32_t sizes[][2] = {{768, 512}, {5, 3}, {4099, 17}, {64, 64}, {33, 65}, {512, 768}, {7, 300}, {1, 1}};
	kiln_device cpu = {KILN_DEVICE_CPU, 0}, gpu = {KILN_DEVICE_GPU, 0};
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.mipmaps = true;
	kiln_pool *pool = NULL;
	cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	kiln_texenc *ref, *enc;
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &ref), KILN_OK);
	cr_assert_eq(kiln_texenc_create(&gpu, &opts, NULL, &enc), KILN_OK, "%s", kiln_gpu_last_error());
	cr_expect_eq(kiln_texenc_depth(enc), KILN_TEXENC_MAX_INFLIGHT);
	static kiln_texture want[NBATCH][MAXN], got[NBATCH][MAXN];
	static kiln_status want_st[NBATCH][MAXN], got_st[NBATCH][MAXN];
	size_t count[NBATCH];
	uint64_t ticket[NBATCH];
	size_t next = 0;
	for (size_t b = 0; b < NBATCH; b++) {
		if (b == NBATCH / 2) { /* options change between batches in flight */
			opts.mipmaps = false;
			opts.quality = KILN_QUALITY_FAST;
			cr_assert_eq(kiln_texenc_set_opts(ref, &opts), KILN_OK);
			cr_assert_eq(kiln_texenc_set_opts(enc, &opts), KILN_OK);
		}
		count[b] = b % 3 == 0 ? MAXN : 1 + b * 3;
		kiln_image images[MAXN];
		for (size_t i = 0; i < count[b]; i++)
			cr_assert(test_random_image(&images[i], sizes[(i + b) % 8][0], sizes[(i + b) % 8][1],
						    (uint32_t)(b * 100 + i), (i + b) % 3 == 0));
		uint8_t *keep = images[1 % count[b]].pixels;
		if (count[b] > 2)
			images[1].pixels = NULL; /* a bad image inside the batch */
		cr_assert_eq(kiln_texenc_encode(ref, images, count[b], want[b], want_st[b]), KILN_OK);
		if (kiln_texenc_inflight(enc) == KILN_TEXENC_MAX_INFLIGHT) {
			cr_assert_eq(kiln_texenc_collect(enc, ticket[next], got[next], got_st[next]), KILN_OK, "batch %zu: %s",
				     next, kiln_texenc_last_error(enc));
			next++;
		}
		cr_assert_eq(kiln_texenc_submit(enc, images, count[b], &ticket[b]), KILN_OK);
		images[1 % count[b]].pixels = keep;
		for (size_t i = 0; i < count[b]; i++)
			kiln_image_free(&images[i]);
	}
	uint64_t waited = kiln_texenc_device_wait_ns(enc);
	for (; next < NBATCH; next++)
		cr_assert_eq(kiln_texenc_collect(enc, ticket[next], got[next], got_st[next]), KILN_OK, "batch %zu: %s",
			     next, kiln_texenc_last_error(enc));
	/* the last collects waited on the device's streams: counted (the worker's figures) */
	cr_expect_gt(kiln_texenc_device_wait_ns(enc), waited);
	cr_expect_eq(kiln_texenc_device_wait_ns(ref), 0u);
	for (size_t b = 0; b < NBATCH; b++) {
		for (size_t i = 0; i < count[b]; i++) {
			cr_expect_eq(got_st[b][i], want_st[b][i], "batch %zu image %zu", b, i);
			if (want_st[b][i] != KILN_OK || got_st[b][i] != KILN_OK)
				continue;
			expect_same(&want[b][i], &got[b][i], 1, "pipelined");
		}
		for (size_t i = 0; i < count[b]; i++) {
			kiln_texture_free_levels(&want[b][i]);
			kiln_texture_free_levels(&got[b][i]);
		}
	}
	kiln_texenc_destroy(ref);
	kiln_texenc_destroy(enc);
	kiln_pool_destroy(pool);
}

/* ASTC through the front end on the GPU: mip levels built on the GPU, sRGB and linear
 * images in one batch (two codec launches), alpha kept: the CPU's bytes. */
Test(texenc_gpu, astc_gpu_matches_cpu_with_mipmaps_srgb_and_alpha, .timeout = 300)
{
	gpu_test_require("texenc_gpu");
	static const uint32_t sizes[][2] = {{1, 1}, {5, 3}, {67, 45}, {64, 64}, {33, 65}, {130, 7}, {7, 90}, {96, 80}};
	enum { N = 8 };
	kiln_image images[N];
	for (int i = 0; i < N; i++) {
		cr_assert(test_random_image(&images[i], sizes[i][0], sizes[i][1], (uint32_t)i + 40, i % 3 == 0));
		images[i].srgb = i % 2 == 0;
	}
	static const struct {
		uint32_t bw, bh;
		kiln_quality q;
		size_t batch;
	} runs[] = {{6, 6, KILN_QUALITY_MEDIUM, 8}, {4, 4, KILN_QUALITY_FAST, 3}, {8, 5, KILN_QUALITY_HIGH, 8},
		    {12, 12, KILN_QUALITY_MEDIUM, 1}};
	kiln_device cpu = {KILN_DEVICE_CPU, 0}, gpu = {KILN_DEVICE_GPU, 0};
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		kiln_texenc_opts opts;
		kiln_texenc_opts_default(&opts);
		opts.format = KILN_TEXFMT_ASTC;
		opts.block_w = runs[r].bw;
		opts.block_h = runs[r].bh;
		opts.quality = runs[r].q;
		opts.mipmaps = true;
		kiln_texture a[N], b[N];
		encode_all(&cpu, &opts, images, N, N, a);
		encode_all(&gpu, &opts, images, N, runs[r].batch, b);
		expect_same(a, b, N, "astc");
		for (int i = 0; i < N; i++) {
			cr_expect_eq(b[i].srgb, images[i].srgb, "image %d keeps its colour space", i);
			kiln_texture_free_levels(&a[i]);
			kiln_texture_free_levels(&b[i]);
		}
	}
	for (int i = 0; i < N; i++)
		kiln_image_free(&images[i]);
}

Test(texenc_gpu, cli_astc_gpu_and_cpu_files_are_identical, .timeout = 300)
{
	gpu_test_require("texenc_gpu");
	int rc = gpu_test_sh(NULL,
		 "$kiln samples -o $d/in; rm $d/in/wide.png; "
		 "$kiln encode -q --format astc --block 6x6 --quality fast --container ktx2 --mipmaps --device cpu "
		 "$d/in/*.png $data/kodak/kodim0[1-2].png -o $d/cpu; "
		 "$kiln encode -q --format astc --block 6x6 --quality fast --container ktx2 --mipmaps --device gpu "
		 "$d/in/*.png $data/kodak/kodim0[1-2].png -o $d/gpu; "
		 "$kiln encode -q --format astc --block 8x5 --quality medium --linear --device gpu:0 $d/in/*.png -o $d/gpua; "
		 "$kiln encode -q --format astc --block 8x5 --quality medium --linear --device cpu $d/in/*.png -o $d/cpua; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpua $d/gpua");
	cr_expect_eq(rc, 0, "kiln encode --format astc --device gpu must write the same files as --device cpu");
}
