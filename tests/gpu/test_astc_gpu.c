/* GPU tests of the ASTC encoder (make test-gpu, on a GPU machine): kiln_astc_encode_gpu
 * writes the same bytes as kiln_astc_encode_cpu for every one of the 14 footprints, at
 * every quality, sRGB and linear, for random images (sizes that are not multiples of the
 * footprint, with and without alpha) in batches of 1, 7 and 32 surfaces, and for Kodak
 * images, and for a batch of more blocks than the kernel lists at once; a bad surface
 * fails alone; the encoder's tables survive a device reset. The CPU encoder is slow at
 * the large footprints and at `high`, so the images stay small there.
 * Without a GPU these tests fail: this binary only runs where a GPU is expected. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/image.h"
#include "common/pool.h"
#include "kernels/astc/astc.h"
#include "kernels/astc/astc_enc.h"
#include "kernels/gpu.h"
#include "tests/gpu/gpu_testutil.h"

static const uint32_t footprints[14][2] = {
	{4, 4}, {5, 4}, {5, 5}, {6, 5}, {6, 6}, {8, 5}, {8, 6},
	{8, 8}, {10, 5}, {10, 6}, {10, 8}, {10, 10}, {12, 10}, {12, 12},
};


/* A host image whose regions mix what the encoder treats differently: noise, smooth ramps,
 * solid colours (void-extent blocks) and two-colour patterns (2-partition blocks); with
 * alpha, opaque, transparent, ramped and random alpha. */
typedef struct host_image {
	uint8_t *px;
	kiln_surface s;
} host_image;

static host_image host_image_random(uint32_t w, uint32_t h, int with_alpha, uint32_t seed)
{
	host_image img;
	img.px = malloc((size_t)w * h * 4 + 1);
	cr_assert_not_null(img.px);
	seed |= 1;
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			uint32_t region = (x / 5 * 7919u + y / 5 * 104729u + seed) % 5;
			uint8_t *t = img.px + ((size_t)y * w + x) * 4;
			uint32_t r = test_xorshift32(&seed);
			for (int c = 0; c < 3; c++) {
				if (region == 0)
					t[c] = (uint8_t)(r >> (8 * c));
				else if (region == 1)
					t[c] = (uint8_t)(40 * c + 9 * x + 5 * y);
				else if (region == 2)
					t[c] = (uint8_t)(60 * c + 17);
				else
					t[c] = (uint8_t)((x + y) & 2 ? 200 - 50 * c : 30 + 20 * c);
			}
			uint32_t alpha_kind = (x / 6 + y / 6 * 3 + seed) % 4;
			t[3] = !with_alpha || alpha_kind == 0 ? 255
			       : alpha_kind == 1	       ? 0
			       : alpha_kind == 2	       ? (uint8_t)(7 * x + 3 * y)
						       : (uint8_t)(r >> 24);
		}
	}
	kiln_surface s = {img.px, w, h, w * 4, (uint32_t)with_alpha};
	img.s = s;
	return img;
}

/* kiln_astc_bound for the footprint of params (a kiln_astc_params), at least 1. */
static size_t bound_of(const kiln_surface *s, const void *params)
{
	const kiln_astc_params *p = params;
	size_t b = kiln_astc_bound(s->width, s->height, p->block_w, p->block_h);
	return b ? b : 1;
}

/* Uploads count host surfaces and encodes them on the GPU in launches of `batch` surfaces,
 * each launch on its own stream with its own scratch (a launch lasts as long as its slowest
 * block, a second or so at 12x12 high: running them side by side keeps the test short).
 * A surface with NULL pixels keeps NULL on the device; dst_null[i] passes a NULL
 * destination. misalign shifts every device pointer and stride by one byte. Returns the
 * first launch's error, or KILN_OK. */
enum { MAX_LAUNCHES = 32 };
static kiln_status gpu_encode(const kiln_astc_params *p, const kiln_surface *src, uint8_t **out, size_t count,
			      size_t batch, kiln_status *status, int misalign, const int *dst_null)
{
	size_t launches = (count + batch - 1) / batch;
	cr_assert(launches <= MAX_LAUNCHES);
	kiln_stream streams[MAX_LAUNCHES];
	void *temps[MAX_LAUNCHES];
	size_t temp_size = kiln_astc_temp_size(batch);
	for (size_t l = 0; l < launches; l++) {
		cr_assert_eq(kiln_gpu_stream_create(&streams[l]), KILN_OK, "%s", kiln_gpu_last_error());
		cr_assert_eq(kiln_gpu_malloc(&temps[l], temp_size), KILN_OK);
	}
	kiln_stream stream = streams[0]; /* uploads; synchronised before the launches */
	gpu_test_surfaces g;
	gpu_test_surfaces_upload(&g, src, count, bound_of, p, 16, misalign, dst_null, stream);
	cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK, "%s", kiln_gpu_last_error());
	kiln_status st = KILN_OK;
	for (size_t l = 0; l < launches && st == KILN_OK; l++) {
		size_t first = l * batch, n = count - first < batch ? count - first : batch;
		st = kiln_astc_encode_gpu(p, g.dev + first, g.dst + first, n, status + first, temps[l], temp_size,
					  streams[l]);
		for (size_t i = first; st == KILN_OK && i < first + n; i++)
			cr_assert_eq(kiln_gpu_d2h(out[i], g.out[i] + misalign, bound_of(&src[i], p), streams[l]), KILN_OK);
	}
	for (size_t l = 0; l < launches; l++)
		if (st == KILN_OK)
			cr_assert_eq(kiln_gpu_stream_sync(streams[l]), KILN_OK, "%s", kiln_gpu_last_error());
		else
			kiln_gpu_stream_sync(streams[l]);
	gpu_test_surfaces_free(&g);
	for (size_t l = 0; l < launches; l++) {
		kiln_gpu_free(temps[l]);
		kiln_gpu_stream_destroy(streams[l]);
	}
	return st;
}

static kiln_pool *test_pool(void)
{
	static kiln_pool *pool;
	if (!pool)
		cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	return pool;
}

/* Expects the GPU to write the CPU's bytes, for each batch size of `batches` (0 ends). */
static void expect_same_bytes(const kiln_astc_params *p, const kiln_surface *src, size_t count,
			      const size_t *batches, int misalign, const char *what)
{
	kiln_status *cst = calloc(count, sizeof *cst), *gst = calloc(count, sizeof *gst);
	cr_assert(cst && gst);
	uint8_t **cpu = gpu_test_outputs(bound_of, p, src, count, 0x11);
	cr_assert_eq(kiln_astc_encode_cpu(p, src, cpu, count, cst, test_pool()), KILN_OK);
	for (const size_t *b = batches; *b; b++) {
		uint8_t **gpu = gpu_test_outputs(bound_of, p, src, count, 0x22);
		cr_assert_eq(gpu_encode(p, src, gpu, count, *b, gst, misalign, NULL), KILN_OK, "%s: %s", what,
			     kiln_gpu_last_error());
		for (size_t i = 0; i < count; i++) {
			cr_expect_eq(gst[i], cst[i], "%s: surface %zu status", what, i);
			size_t bound = kiln_astc_bound(src[i].width, src[i].height, p->block_w, p->block_h);
			size_t first = gpu_test_first_diff(cpu[i], gpu[i], bound) / KILN_ASTC_BLOCK_BYTES;
			cr_expect_eq(first, bound / KILN_ASTC_BLOCK_BYTES,
				     "%s %ux%u quality %d srgb %d batch %zu: surface %zu (%ux%u alpha %u) differs "
				     "from block %zu on", what, p->block_w, p->block_h, (int)p->quality, p->srgb, *b,
				     i, src[i].width, src[i].height, src[i].has_alpha, first);
		}
		gpu_test_outputs_free(gpu, count);
	}
	gpu_test_outputs_free(cpu, count);
	free(cst);
	free(gst);
}

enum { NRANDOM = 32 };

/* 32 small images: odd sizes (never a multiple of most footprints), every other one with
 * alpha. `scale` bounds the random sizes (the slow footprints get small images). */
static void random_set(host_image *img, kiln_surface *src, uint32_t scale, uint32_t seed)
{
	static const uint32_t fixed[][2] = {{1, 1}, {5, 3}, {4, 4}, {13, 7}, {12, 12}, {3, 25}, {25, 3}, {17, 11}};
	for (int i = 0; i < NRANDOM; i++) {
		uint32_t w, h;
		if (i < (int)(sizeof fixed / sizeof fixed[0])) {
			w = fixed[i][0];
			h = fixed[i][1];
		} else {
			w = 1 + test_xorshift32(&seed) % scale;
			h = 1 + test_xorshift32(&seed) % scale;
		}
		img[i] = host_image_random(w, h, i % 2, (uint32_t)i * 977 + seed);
		src[i] = img[i].s;
	}
}

/* Every footprint and quality at the given batch sizes; sRGB on alternate combinations so
 * that each footprint sees both colour spaces. */
static void random_every_footprint(const size_t *batches, size_t count, uint32_t seed)
{
	gpu_test_require_device0("astc_gpu");
	for (int f = 0; f < 14; f++) {
		uint32_t area = footprints[f][0] * footprints[f][1];
		host_image img[NRANDOM];
		kiln_surface src[NRANDOM];
		random_set(img, src, area <= 36 ? 40 : 24, seed + (uint32_t)f);
		for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++) {
			kiln_astc_params p;
			kiln_astc_params_default(&p);
			p.quality = (kiln_quality)q;
			p.block_w = footprints[f][0];
			p.block_h = footprints[f][1];
			p.srgb = (f + q + (int)seed) % 2;
			expect_same_bytes(&p, src, count, batches, 0, "random");
		}
		for (int i = 0; i < NRANDOM; i++)
			free(img[i].px);
	}
}

Test(astc_gpu, every_footprint_batch_1, .timeout = 300)
{
	static const size_t batches[] = {1, 0};
	random_every_footprint(batches, 8, 11);
}

Test(astc_gpu, every_footprint_batch_7, .timeout = 300)
{
	static const size_t batches[] = {7, 0};
	random_every_footprint(batches, NRANDOM, 12);
}

Test(astc_gpu, every_footprint_batch_32, .timeout = 300)
{
	static const size_t batches[] = {32, 0};
	random_every_footprint(batches, NRANDOM, 13);
}

Test(astc_gpu, unaligned_pixels_and_outputs, .timeout = 120)
{
	gpu_test_require_device0("astc_gpu");
	host_image img[NRANDOM];
	kiln_surface src[NRANDOM];
	random_set(img, src, 40, 5);
	static const size_t batches[] = {12, 0};
	for (int f = 0; f < 14; f += 4) {
		kiln_astc_params p;
		kiln_astc_params_default(&p);
		p.quality = KILN_QUALITY_MEDIUM;
		p.block_w = footprints[f][0];
		p.block_h = footprints[f][1];
		p.srgb = f % 8 == 0;
		expect_same_bytes(&p, src, 12, batches, 1, "misaligned");
	}
	for (int i = 0; i < NRANDOM; i++)
		free(img[i].px);
}

Test(astc_gpu, more_surfaces_than_one_upload_chunk, .timeout = 120)
{
	gpu_test_require_device0("astc_gpu");
	enum { N = 150 };
	host_image img[N];
	kiln_surface src[N];
	for (int i = 0; i < N; i++) {
		img[i] = host_image_random(1 + (uint32_t)i % 11, 1 + (uint32_t)i % 7, i % 3 == 0, (uint32_t)i);
		src[i] = img[i].s;
	}
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.quality = KILN_QUALITY_MEDIUM;
	static const size_t batches[] = {N, 0};
	expect_same_bytes(&p, src, N, batches, 0, "150 surfaces");
	for (int i = 0; i < N; i++)
		free(img[i].px);
}

/* A batch of more blocks than the kernel lists at once (ASTC_GPU_WINDOW): its second
 * window starts from counters the first one reset. 4x4 fast, two surfaces, 1,065,025
 * blocks in all. */
Test(astc_gpu, a_batch_past_one_window, .timeout = 300)
{
	gpu_test_require_device0("astc_gpu");
	host_image img[2] = {host_image_random(4128, 4128, 0, 21), host_image_random(3, 4, 1, 22)};
	kiln_surface src[2] = {img[0].s, img[1].s};
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.quality = KILN_QUALITY_FAST;
	p.block_w = p.block_h = 4;
	cr_assert_gt(1032u * 1032u + 1u, ASTC_GPU_WINDOW);
	static const size_t batches[] = {2, 0};
	expect_same_bytes(&p, src, 2, batches, 0, "two windows");
	for (int i = 0; i < 2; i++)
		free(img[i].px);
}

/* Kodak images at the footprints the bench measures: whole images at fast and medium,
 * 96x96 crops at high. */
Test(astc_gpu, kodak_matches_cpu, .timeout = 300)
{
	gpu_test_require_device0("astc_gpu");
	enum { N = 3 };
	static const int which[N] = {1, 13, 23};
	kiln_image img[N];
	kiln_surface src[N], crop[N];
	for (int i = 0; i < N; i++) {
		src[i] = gpu_test_read_kodak(which[i], &img[i]);
		crop[i] = src[i];
		crop[i].rgba = img[i].pixels + 200 * img[i].stride + 300 * 4;
		crop[i].width = 96;
		crop[i].height = 96;
	}
	static const size_t batches[] = {N, 0};
	static const struct {
		uint32_t bw, bh;
		kiln_quality q;
		int srgb, cropped;
	} runs[] = {
		{4, 4, KILN_QUALITY_FAST, 1, 0},   {4, 4, KILN_QUALITY_MEDIUM, 0, 0}, {6, 6, KILN_QUALITY_MEDIUM, 1, 0},
		{8, 8, KILN_QUALITY_FAST, 0, 0},   {12, 12, KILN_QUALITY_FAST, 1, 0}, {4, 4, KILN_QUALITY_HIGH, 1, 1},
		{6, 6, KILN_QUALITY_HIGH, 0, 1},   {8, 8, KILN_QUALITY_HIGH, 1, 1},
	};
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		kiln_astc_params p;
		kiln_astc_params_default(&p);
		p.block_w = runs[r].bw;
		p.block_h = runs[r].bh;
		p.quality = runs[r].q;
		p.srgb = runs[r].srgb;
		expect_same_bytes(&p, runs[r].cropped ? crop : src, N, batches, 0, "kodak");
	}
	for (int i = 0; i < N; i++)
		kiln_image_free(&img[i]);
}

Test(astc_gpu, a_bad_surface_fails_alone)
{
	gpu_test_require_device0("astc_gpu");
	enum { N = GPU_TEST_BAD_BATCH };
	host_image good[3];
	for (int i = 0; i < 3; i++)
		good[i] = host_image_random(9 + 4 * (uint32_t)i, 6 + (uint32_t)i, i == 1, (uint32_t)i + 7);
	kiln_surface src[N];
	int dst_null[N];
	kiln_status expect[N];
	gpu_test_bad_batch(good[0].s, good[1].s, good[2].s, src, dst_null, expect);
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.block_w = 5;
	p.block_h = 4;
	kiln_status gst[N];
	uint8_t **gpu = gpu_test_outputs(bound_of, &p, src, N, 0), **cpu = gpu_test_outputs(bound_of, &p, src, N, 0);
	cr_assert_eq(gpu_encode(&p, src, gpu, N, N, gst, 0, dst_null), KILN_OK, "%s", kiln_gpu_last_error());
	for (int i = 0; i < N; i++) {
		cr_expect_eq(gst[i], expect[i], "surface %d", i);
		if (expect[i] != KILN_OK)
			continue;
		kiln_status one;
		cr_assert_eq(kiln_astc_encode_cpu(&p, &src[i], &cpu[i], 1, &one, NULL), KILN_OK);
		cr_expect_eq(memcmp(gpu[i], cpu[i], kiln_astc_bound(src[i].width, src[i].height, 5, 4)), 0,
			     "surface %d", i);
	}
	/* the refused surface with pixels was not written: its buffer keeps the fill */
	for (size_t b = 0; b < kiln_astc_bound(src[1].width, src[1].height, 5, 4); b++)
		cr_expect_eq(gpu[1][b], 0x5a, "surface 1 byte %zu", b);
	gpu_test_outputs_free(gpu, N);
	gpu_test_outputs_free(cpu, N);
	for (int i = 0; i < 3; i++)
		free(good[i].px);
}

/* The per-footprint tables live in device memory; a reset (what texenc does after a CUDA
 * error) loses them, and the next call must put them back. */
Test(astc_gpu, tables_survive_a_device_reset, .timeout = 120)
{
	gpu_test_require_device0("astc_gpu");
	host_image img = host_image_random(37, 29, 1, 3);
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.quality = KILN_QUALITY_FAST;
	static const size_t batches[] = {1, 0};
	expect_same_bytes(&p, &img.s, 1, batches, 0, "before reset");
	cr_assert_eq(kiln_gpu_reset(), KILN_OK, "%s", kiln_gpu_last_error());
	cr_assert_eq(kiln_gpu_use(0), KILN_OK, "%s", kiln_gpu_last_error());
	expect_same_bytes(&p, &img.s, 1, batches, 0, "after reset");
	free(img.px);
}

Test(astc_gpu, refuses_what_it_cannot_run)
{
	gpu_test_require_device0("astc_gpu");
	host_image img = host_image_random(8, 8, 0, 1);
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	size_t ts = kiln_astc_temp_size(1);
	void *temp;
	cr_assert_eq(kiln_gpu_malloc(&temp, ts), KILN_OK);
	uint8_t *dst[1] = {(uint8_t *)temp}; /* never written: every call below is refused */
	kiln_status st;
	cr_expect_eq(kiln_astc_encode_gpu(&p, &img.s, dst, 1, &st, temp, ts - 1, NULL), KILN_ERR_INVALID_ARG,
		     "scratch smaller than kiln_astc_temp_size");
	cr_expect_eq(kiln_astc_encode_gpu(&p, &img.s, dst, 1, &st, NULL, ts, NULL), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_astc_encode_gpu(NULL, &img.s, dst, 1, &st, temp, ts, NULL), KILN_ERR_INVALID_ARG);
	p.block_w = 7;
	p.block_h = 7;
	cr_expect_eq(kiln_astc_encode_gpu(&p, &img.s, dst, 1, &st, temp, ts, NULL), KILN_ERR_INVALID_ARG,
		     "7x7 is no footprint");
	kiln_astc_params_default(&p);
	p.quality = (kiln_quality)9;
	cr_expect_eq(kiln_astc_encode_gpu(&p, &img.s, dst, 1, &st, temp, ts, NULL), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_astc_encode_gpu(&p, &img.s, dst, 0, &st, temp, ts, NULL), KILN_OK);
	kiln_gpu_free(temp);
	free(img.px);
}
