/* GPU tests of the BC1 encoder (make test-gpu, on a GPU machine): kiln_bc1_encode_gpu
 * writes the same bytes as kiln_bc1_encode_cpu for random images of many sizes, with and
 * without alpha, at every quality, in batches of 1, 7 and 32 surfaces, and for the 24 Kodak
 * images; a bad surface in a GPU batch gets its own status while the others still match
 * the CPU. Without a GPU these tests fail: this binary only runs where a GPU is expected. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/image.h"
#include "common/pool.h"
#include "kernels/bc1/bc1.h"
#include "kernels/gpu.h"
#include "tests/gpu/gpu_testutil.h"

static const kiln_quality qualities[3] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};

/* The gpu_test_bound_fn of BC1: no parameter changes the size of its output. */
static size_t bc1_bound(const kiln_surface *s, const void *params)
{
	return kiln_bc1_bound(s->width, s->height);
}

/* A host image whose 4x4 regions mix what the encoder treats differently: noise, smooth
 * ramps, solid colours and two-colour patterns; with alpha, random, fully transparent and
 * fully opaque blocks. */
typedef struct host_image {
	uint8_t *px;
	kiln_surface s;
} host_image;

static host_image host_image_random(uint32_t w, uint32_t h, int with_alpha, uint32_t seed)
{
	host_image img;
	img.px = malloc((size_t)w * h * 4);
	cr_assert_not_null(img.px);
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			uint32_t region = (x / 4 * 7919u + y / 4 * 104729u + seed) % 5;
			uint8_t *t = img.px + ((size_t)y * w + x) * 4;
			uint32_t r = test_xorshift32(&seed);
			for (int c = 0; c < 3; c++) {
				if (region == 0)
					t[c] = (uint8_t)(r >> (8 * c));
				else if (region == 1)
					t[c] = (uint8_t)(40 * c + 9 * x + 5 * y);
				else if (region == 2)
					t[c] = (uint8_t)(60 * c + region * 17);
				else
					t[c] = (uint8_t)((r & 1) ? 200 - 50 * c : 30 + 20 * c);
			}
			uint32_t alpha_kind = (x / 4 + y / 4 * 3 + seed) % 4;
			t[3] = !with_alpha || alpha_kind == 0 ? 255 : (alpha_kind == 1 ? 0 : (uint8_t)(r >> 24));
		}
	}
	kiln_surface s = {img.px, w, h, w * 4, (uint32_t)with_alpha};
	img.s = s;
	return img;
}

/* Encodes count host surfaces on the CPU (all threads); out[i] gets kiln_bc1_bound bytes. */
static void cpu_encode(const kiln_bc1_params *p, const kiln_surface *src, uint8_t **out, size_t count,
		       kiln_status *status)
{
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	cr_assert_eq(kiln_bc1_encode_cpu(p, src, out, count, status, pool), KILN_OK);
	kiln_pool_destroy(pool);
}

/* Uploads count host surfaces and encodes them on the GPU as one batch. A surface with
 * NULL pixels keeps NULL on the device; dst_null[i] passes a NULL destination. misalign
 * shifts every device pointer by one byte (and every stride by one), so texel loads and
 * block stores take their unaligned paths. */
static kiln_status gpu_encode(const kiln_bc1_params *p, const kiln_surface *src, uint8_t **out,
			      size_t count, kiln_status *status, int misalign, const int *dst_null)
{
	kiln_stream stream;
	cr_assert_eq(kiln_gpu_stream_create(&stream), KILN_OK, "%s", kiln_gpu_last_error());
	gpu_test_surfaces g;
	gpu_test_surfaces_upload(&g, src, count, bc1_bound, p, 8, misalign, dst_null, stream);
	void *temp;
	size_t temp_size = kiln_bc1_temp_size(count);
	cr_assert_eq(kiln_gpu_malloc(&temp, temp_size), KILN_OK);
	kiln_status st = kiln_bc1_encode_gpu(p, g.dev, g.dst, count, status, temp, temp_size, stream);
	if (st == KILN_OK) {
		for (size_t i = 0; i < count; i++)
			cr_assert_eq(kiln_gpu_d2h(out[i], g.out[i] + misalign, kiln_bc1_bound(src[i].width, src[i].height),
						  stream), KILN_OK);
		cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK, "%s", kiln_gpu_last_error());
	}
	kiln_gpu_stream_sync(stream);
	gpu_test_surfaces_free(&g);
	kiln_gpu_free(temp);
	kiln_gpu_stream_destroy(stream);
	return st;
}

/* Expects the GPU, run in batches of `batch` surfaces, to write the CPU's bytes. */
static void expect_same_bytes(const kiln_bc1_params *p, const kiln_surface *src, size_t count, size_t batch,
			      int misalign, const char *what)
{
	kiln_status *cst = calloc(count, sizeof *cst), *gst = calloc(count, sizeof *gst);
	uint8_t **cpu = gpu_test_outputs(bc1_bound, p, src, count, 0x11);
	uint8_t **gpu = gpu_test_outputs(bc1_bound, p, src, count, 0x22);
	cr_assert(cst && gst);
	cpu_encode(p, src, cpu, count, cst);
	for (size_t start = 0; start < count; start += batch) {
		size_t n = count - start < batch ? count - start : batch;
		cr_assert_eq(gpu_encode(p, src + start, gpu + start, n, gst + start, misalign, NULL), KILN_OK,
			     "%s: %s", what, kiln_gpu_last_error());
	}
	for (size_t i = 0; i < count; i++) {
		cr_expect_eq(gst[i], cst[i], "%s: surface %zu status", what, i);
		size_t bound = kiln_bc1_bound(src[i].width, src[i].height);
		size_t first = gpu_test_first_diff(cpu[i], gpu[i], bound);
		cr_expect_eq(first, bound, "%s quality %d batch %zu: surface %zu (%ux%u alpha %u) differs from "
			     "block %zu on", what, (int)p->quality, batch, i, src[i].width, src[i].height,
			     src[i].has_alpha, first / 8);
	}
	gpu_test_outputs_free(cpu, count);
	gpu_test_outputs_free(gpu, count);
	free(cst);
	free(gst);
}

/* expect_same_bytes at each of the three qualities, with default parameters otherwise. */
static void expect_same_bytes_each_quality(const kiln_surface *src, size_t count, size_t batch, int misalign,
					   const char *what)
{
	for (int q = 0; q < 3; q++) {
		kiln_bc1_params p;
		kiln_bc1_params_default(&p);
		p.quality = qualities[q];
		expect_same_bytes(&p, src, count, batch, misalign, what);
	}
}

enum { NRANDOM = 32 };

static void random_set(host_image *img, kiln_surface *src)
{
	static const uint32_t fixed[][2] = {{1, 1}, {5, 3}, {4, 4}, {13, 7}, {64, 64}, {3, 250}, {257, 129}, {1023, 5}};
	uint32_t seed = 20240601;
	for (int i = 0; i < NRANDOM; i++) {
		uint32_t w, h;
		if (i < (int)(sizeof fixed / sizeof fixed[0])) {
			w = fixed[i][0];
			h = fixed[i][1];
		} else {
			w = 1 + test_xorshift32(&seed) % 160;
			h = 1 + test_xorshift32(&seed) % 120;
		}
		img[i] = host_image_random(w, h, i % 2, (uint32_t)i * 977 + 3);
		src[i] = img[i].s;
	}
}

static void random_images_in_batches_of(size_t batch)
{
	gpu_test_require_device0("bc1_gpu");
	host_image img[NRANDOM];
	kiln_surface src[NRANDOM];
	random_set(img, src);
	expect_same_bytes_each_quality(src, NRANDOM, batch, 0, "random");
	for (int i = 0; i < NRANDOM; i++)
		free(img[i].px);
}

Test(bc1_gpu, random_images_batch_1)
{
	random_images_in_batches_of(1);
}

Test(bc1_gpu, random_images_batch_7)
{
	random_images_in_batches_of(7);
}

Test(bc1_gpu, random_images_batch_32)
{
	random_images_in_batches_of(32);
}

Test(bc1_gpu, unaligned_pixels_and_outputs)
{
	gpu_test_require_device0("bc1_gpu");
	host_image img[NRANDOM];
	kiln_surface src[NRANDOM];
	random_set(img, src);
	expect_same_bytes_each_quality(src, 12, 12, 1, "misaligned");
	for (int i = 0; i < NRANDOM; i++)
		free(img[i].px);
}

Test(bc1_gpu, alpha_cutoffs)
{
	gpu_test_require_device0("bc1_gpu");
	host_image img[4];
	kiln_surface src[4];
	for (int i = 0; i < 4; i++) {
		img[i] = host_image_random(37 + (uint32_t)i, 21, 1, (uint32_t)i + 50);
		src[i] = img[i].s;
	}
	static const int cutoffs[] = {0, 1, 255, 256};
	for (int q = 0; q < 3; q++)
		for (size_t c = 0; c < sizeof cutoffs / sizeof cutoffs[0]; c++) {
			kiln_bc1_params p;
			kiln_bc1_params_default(&p);
			p.quality = qualities[q];
			p.alpha_cutoff = cutoffs[c];
			expect_same_bytes(&p, src, 4, 4, 0, "cutoff");
		}
	for (int i = 0; i < 4; i++)
		free(img[i].px);
}

Test(bc1_gpu, more_surfaces_than_one_upload_chunk)
{
	gpu_test_require_device0("bc1_gpu");
	enum { N = 150 };
	host_image img[N];
	kiln_surface src[N];
	for (int i = 0; i < N; i++) {
		img[i] = host_image_random(1 + (uint32_t)i % 11, 1 + (uint32_t)i % 7, i % 3 == 0, (uint32_t)i);
		src[i] = img[i].s;
	}
	kiln_bc1_params p;
	kiln_bc1_params_default(&p);
	p.quality = KILN_QUALITY_HIGH;
	expect_same_bytes(&p, src, N, N, 0, "150 surfaces");
	for (int i = 0; i < N; i++)
		free(img[i].px);
}

Test(bc1_gpu, kodak_matches_cpu)
{
	gpu_test_require_device0("bc1_gpu");
	enum { N = 24 };
	kiln_image img[N];
	kiln_surface src[N];
	for (int i = 0; i < N; i++)
		src[i] = gpu_test_read_kodak(i + 1, &img[i]);
	expect_same_bytes_each_quality(src, N, N, 0, "kodak");
	for (int i = 0; i < N; i++)
		kiln_image_free(&img[i]);
}

Test(bc1_gpu, a_bad_surface_fails_alone)
{
	gpu_test_require_device0("bc1_gpu");
	enum { N = GPU_TEST_BAD_BATCH };
	host_image good[3];
	for (int i = 0; i < 3; i++)
		good[i] = host_image_random(9 + 4 * (uint32_t)i, 6 + (uint32_t)i, i == 1, (uint32_t)i + 7);
	kiln_surface src[N];
	int dst_null[N];
	kiln_status expect[N];
	gpu_test_bad_batch(good[0].s, good[1].s, good[2].s, src, dst_null, expect);
	for (int q = 0; q < 3; q++) {
		kiln_bc1_params p;
		kiln_bc1_params_default(&p);
		p.quality = qualities[q];
		kiln_status gst[N];
		uint8_t **gpu = gpu_test_outputs(bc1_bound, &p, src, N, 0), **cpu = gpu_test_outputs(bc1_bound, &p, src, N, 0);
		cr_assert_eq(gpu_encode(&p, src, gpu, N, gst, 0, dst_null), KILN_OK, "%s", kiln_gpu_last_error());
		for (int i = 0; i < N; i++) {
			cr_expect_eq(gst[i], expect[i], "quality %d surface %d", q, i);
			if (expect[i] != KILN_OK)
				continue;
			kiln_status one;
			cr_assert_eq(kiln_bc1_encode_cpu(&p, &src[i], &cpu[i], 1, &one, NULL), KILN_OK);
			cr_expect_eq(memcmp(gpu[i], cpu[i], kiln_bc1_bound(src[i].width, src[i].height)), 0,
				     "quality %d surface %d", q, i);
		}
		/* the refused surface with pixels was not written: its buffer keeps the fill */
		for (size_t b = 0; b < kiln_bc1_bound(src[1].width, src[1].height); b++)
			cr_expect_eq(gpu[1][b], 0x5a, "surface 1 byte %zu", b);
		gpu_test_outputs_free(gpu, N);
		gpu_test_outputs_free(cpu, N);
	}
	for (int i = 0; i < 3; i++)
		free(good[i].px);
}

Test(bc1_gpu, refuses_what_it_cannot_run)
{
	gpu_test_require_device0("bc1_gpu");
	host_image img = host_image_random(8, 8, 0, 1);
	kiln_bc1_params p;
	kiln_bc1_params_default(&p);
	void *temp;
	cr_assert_eq(kiln_gpu_malloc(&temp, kiln_bc1_temp_size(1)), KILN_OK);
	uint8_t *dst[1] = {(uint8_t *)temp}; /* never written: every call below is refused */
	kiln_status st;
	cr_expect_eq(kiln_bc1_encode_gpu(&p, &img.s, dst, 1, &st, temp, kiln_bc1_temp_size(1) - 1, NULL),
		     KILN_ERR_INVALID_ARG, "scratch smaller than kiln_bc1_temp_size");
	cr_expect_eq(kiln_bc1_encode_gpu(&p, &img.s, dst, 1, &st, NULL, kiln_bc1_temp_size(1), NULL),
		     KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_encode_gpu(NULL, &img.s, dst, 1, &st, temp, kiln_bc1_temp_size(1), NULL),
		     KILN_ERR_INVALID_ARG);
	p.quality = (kiln_quality)9;
	cr_expect_eq(kiln_bc1_encode_gpu(&p, &img.s, dst, 1, &st, temp, kiln_bc1_temp_size(1), NULL),
		     KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_bc1_encode_gpu(&p, &img.s, dst, 0, &st, temp, kiln_bc1_temp_size(1), NULL), KILN_OK);
	kiln_gpu_free(temp);
	free(img.px);
}
