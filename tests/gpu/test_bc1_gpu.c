/* GPU tests of the BC1 encoder (make test-gpu, on a GPU machine): kiln_bc1_encode_gpu
 * writes the same bytes as kiln_bc1_encode_cpu for random images of many sizes, with and
 * without alpha, at every quality, in batches of 1, 7 and 32 surfaces, and for the 24 Kodak
 * images; a bad surface in a GPU batch gets its own status while the others still match
 * the CPU. Without a GPU these tests fail: this binary only runs where a GPU is expected. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/image.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "kernels/bc1/bc1.h"
#include "kernels/gpu.h"
#include "tests/unit/testutil.h"

static const kiln_quality qualities[3] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};

static void require_gpu(void)
{
	if (kiln_gpu_count() < 1)
		cr_assert_fail("no usable GPU: the bc1_gpu tests must run on a machine with an NVIDIA GPU "
			       "(kiln_gpu_count() == 0, built with CUDA: %d)", (int)kiln_gpu_built());
	cr_assert_eq(kiln_gpu_use(0), KILN_OK, "%s", kiln_gpu_last_error());
}

static uint32_t rng_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
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
			uint32_t r = rng_next(&seed);
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
	kiln_surface *ds = calloc(count, sizeof *ds);
	uint8_t **dpx = calloc(count, sizeof *dpx), **dout = calloc(count, sizeof *dout);
	uint8_t **dst = calloc(count, sizeof *dst);
	uint8_t **row = calloc(count, sizeof *row);
	cr_assert(ds && dpx && dout && dst && row);
	for (size_t i = 0; i < count; i++) {
		ds[i] = src[i];
		size_t bound = kiln_bc1_bound(src[i].width, src[i].height);
		cr_assert_eq(kiln_gpu_malloc((void **)&dout[i], bound + 8), KILN_OK);
		cr_assert_eq(kiln_gpu_memset(dout[i], 0x5a, bound + 8, stream), KILN_OK);
		dst[i] = dst_null && dst_null[i] ? NULL : dout[i] + misalign;
		if (!src[i].rgba || src[i].width == 0 || src[i].height == 0) {
			ds[i].rgba = src[i].rgba ? dout[i] : NULL; /* never read */
			continue;
		}
		uint32_t stride = src[i].width * 4 + (uint32_t)misalign;
		size_t size = (size_t)stride * src[i].height;
		cr_assert_eq(kiln_gpu_malloc((void **)&dpx[i], size + 1), KILN_OK);
		/* rows repacked at the device stride on the host first */
		row[i] = calloc(size, 1);
		cr_assert_not_null(row[i]);
		for (uint32_t y = 0; y < src[i].height; y++)
			memcpy(row[i] + (size_t)y * stride, src[i].rgba + (size_t)y * src[i].stride, src[i].width * 4);
		cr_assert_eq(kiln_gpu_h2d(dpx[i] + misalign, row[i], size, stream), KILN_OK);
		ds[i].rgba = dpx[i] + misalign;
		ds[i].stride = stride;
	}
	void *temp;
	size_t temp_size = kiln_bc1_temp_size(count);
	cr_assert_eq(kiln_gpu_malloc(&temp, temp_size), KILN_OK);
	kiln_status st = kiln_bc1_encode_gpu(p, ds, dst, count, status, temp, temp_size, stream);
	if (st == KILN_OK) {
		for (size_t i = 0; i < count; i++)
			cr_assert_eq(kiln_gpu_d2h(out[i], dout[i] + misalign, kiln_bc1_bound(src[i].width, src[i].height),
						  stream), KILN_OK);
		cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK, "%s", kiln_gpu_last_error());
	}
	kiln_gpu_stream_sync(stream);
	for (size_t i = 0; i < count; i++) {
		kiln_gpu_free(dpx[i]);
		kiln_gpu_free(dout[i]);
		free(row[i]);
	}
	kiln_gpu_free(temp);
	kiln_gpu_stream_destroy(stream);
	free(ds);
	free(dpx);
	free(dout);
	free(dst);
	free(row);
	return st;
}

static uint8_t **alloc_outputs(const kiln_surface *src, size_t count, int fill)
{
	uint8_t **out = calloc(count, sizeof *out);
	cr_assert_not_null(out);
	for (size_t i = 0; i < count; i++) {
		size_t bound = kiln_bc1_bound(src[i].width, src[i].height);
		out[i] = malloc(bound ? bound : 1);
		cr_assert_not_null(out[i]);
		memset(out[i], fill, bound);
	}
	return out;
}

static void free_outputs(uint8_t **out, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(out[i]);
	free(out);
}

/* Expects the GPU, run in batches of `batch` surfaces, to write the CPU's bytes. */
static void expect_same_bytes(const kiln_bc1_params *p, const kiln_surface *src, size_t count, size_t batch,
			      int misalign, const char *what)
{
	kiln_status *cst = calloc(count, sizeof *cst), *gst = calloc(count, sizeof *gst);
	uint8_t **cpu = alloc_outputs(src, count, 0x11), **gpu = alloc_outputs(src, count, 0x22);
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
		size_t first = bound;
		for (size_t b = 0; b < bound && first == bound; b++)
			if (cpu[i][b] != gpu[i][b])
				first = b;
		cr_expect_eq(first, bound, "%s quality %d batch %zu: surface %zu (%ux%u alpha %u) differs from "
			     "block %zu on", what, (int)p->quality, batch, i, src[i].width, src[i].height,
			     src[i].has_alpha, first / 8);
	}
	free_outputs(cpu, count);
	free_outputs(gpu, count);
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
			w = 1 + rng_next(&seed) % 160;
			h = 1 + rng_next(&seed) % 120;
		}
		img[i] = host_image_random(w, h, i % 2, (uint32_t)i * 977 + 3);
		src[i] = img[i].s;
	}
}

static void random_images_in_batches_of(size_t batch)
{
	require_gpu();
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
	require_gpu();
	host_image img[NRANDOM];
	kiln_surface src[NRANDOM];
	random_set(img, src);
	expect_same_bytes_each_quality(src, 12, 12, 1, "misaligned");
	for (int i = 0; i < NRANDOM; i++)
		free(img[i].px);
}

Test(bc1_gpu, alpha_cutoffs)
{
	require_gpu();
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
	require_gpu();
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
	require_gpu();
	enum { N = 24 };
	kiln_image img[N];
	kiln_surface src[N];
	for (int i = 0; i < N; i++) {
		char name[32], path[512], err[256] = "";
		snprintf(name, sizeof name, "kodim%02d.png", i + 1);
		test_data_path(path, sizeof path, "kodak", name);
		cr_assert_eq(kiln_png_read_file(path, NULL, &img[i], err, sizeof err), KILN_OK, "%s: %s", path, err);
		kiln_surface s = {img[i].pixels, img[i].width, img[i].height, (uint32_t)img[i].stride,
				  img[i].has_alpha};
		src[i] = s;
	}
	expect_same_bytes_each_quality(src, N, N, 0, "kodak");
	for (int i = 0; i < N; i++)
		kiln_image_free(&img[i]);
}

Test(bc1_gpu, a_bad_surface_fails_alone)
{
	require_gpu();
	enum { N = 6 };
	host_image good[3];
	for (int i = 0; i < 3; i++)
		good[i] = host_image_random(9 + 4 * (uint32_t)i, 6 + (uint32_t)i, i == 1, (uint32_t)i + 7);
	kiln_surface src[N] = {good[0].s, good[0].s, good[1].s, good[1].s, good[2].s, good[2].s};
	src[1].rgba = NULL; /* no pixels */
	src[3].width = 0;   /* 0 x 0 */
	src[3].height = 0;
	int dst_null[N] = {0, 0, 0, 0, 0, 1};
	static const kiln_status expect[N] = {KILN_OK, KILN_ERR_INVALID_ARG, KILN_OK, KILN_ERR_INVALID_ARG,
					      KILN_OK, KILN_ERR_INVALID_ARG};
	for (int q = 0; q < 3; q++) {
		kiln_bc1_params p;
		kiln_bc1_params_default(&p);
		p.quality = qualities[q];
		kiln_status gst[N];
		uint8_t **gpu = alloc_outputs(src, N, 0), **cpu = alloc_outputs(src, N, 0);
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
		free_outputs(gpu, N);
		free_outputs(cpu, N);
	}
	for (int i = 0; i < 3; i++)
		free(good[i].px);
}

Test(bc1_gpu, refuses_what_it_cannot_run)
{
	require_gpu();
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
