/* GPU tests of the PNG encoder (make test-gpu, on a GPU machine): kiln_pngenc_encode_gpu
 * writes the same files, byte for byte, as kiln_pngenc_encode_cpu, for the Kodak images
 * and for random images of every colour type and bit depth (with passthrough chunks), at
 * every quality, in batches of 1, 7 and 32; a refused image in a GPU batch gets its own
 * status while the others still match. Without a GPU these tests fail: this binary only
 * runs where a GPU is expected. */
#include <criterion/criterion.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/png/png_enc.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/png_libpng_read.h"
#include "common/buf.h"

static uint32_t channels(int ct)
{
	return ct == 0 || ct == 3 ? 1 : ct == 4 ? 2 : ct == 2 ? 3 : 4;
}

/* Host image: pixels plus its source row length (what is uploaded). */
typedef struct himg {
	kiln_pngenc_image img;
	uint8_t *px;
	size_t row;  /* bytes of a source row */
	kiln_png_chunk chunks[2];
	uint8_t pal[768], trns[256];
} himg;

static void make_random(himg *h, uint32_t w, uint32_t ht, int ct, int depth, int rgba, uint32_t seed)
{
	memset(h, 0, sizeof *h);
	h->row = rgba ? (size_t)w * 4 : ((size_t)w * channels(ct) * depth + 7) / 8;
	size_t stride = h->row + seed % 5;
	h->px = malloc(stride * ht + 1);
	cr_assert_not_null(h->px);
	for (uint32_t y = 0; y < ht; y++)
		for (size_t i = 0; i < stride; i++) {
			uint32_t region = (uint32_t)((i / 16 + y / 8 + seed) % 4);
			uint32_t r = test_xorshift32(&seed);
			h->px[y * stride + i] = region == 0 ? (uint8_t)r : region == 1 ? (uint8_t)(i * 3 + y * 5)
					      : region == 2 ? (uint8_t)(seed & 0x0F) : (uint8_t)((r & 3) * 40);
		}
	h->img = (kiln_pngenc_image){h->px, w, ht, stride, (uint8_t)ct, (uint8_t)depth, (uint8_t)rgba, NULL, 0};
	if (ct == 3) {
		int n = 1 << depth;
		for (int i = 0; i < 3 * n; i++)
			h->pal[i] = (uint8_t)(i * 37);
		memcpy(h->chunks[0].type, "PLTE", 4);
		h->chunks[0].data = h->pal;
		h->chunks[0].length = 3 * (uint32_t)n;
		for (int i = 0; i < n; i++)
			h->trns[i] = (uint8_t)(255 - i);
		memcpy(h->chunks[1].type, "tRNS", 4);
		h->chunks[1].data = h->trns;
		h->chunks[1].length = (uint32_t)n;
		h->img.chunks = h->chunks;
		h->img.chunk_count = 2;
	}
}

/* Kodak image k as raw RGB8 rows through libpng. */
static void load_kodak(int k, himg *h)
{
	char path[512];
	kiln_buf f = gpu_test_load(test_kodak_path(path, sizeof path, k));
	png_test_raw r;
	png_test_read_raw(f.data, f.len, &r, path);
	kiln_buf_free(&f);
	memset(h, 0, sizeof *h);
	h->row = r.rowbytes;
	h->px = r.px;
	h->img = (kiln_pngenc_image){h->px, r.w, r.h, h->row, (uint8_t)r.ct, (uint8_t)r.depth, 0, NULL, 0};
}

/* Encodes the batch on the CPU and on the GPU and compares every file. Images with
 * expect_fail set must be refused by both. */
static void compare(const kiln_pngenc_params *p, himg *const *h, size_t count, const int *expect_fail)
{
	kiln_pngenc_image *imgs = calloc(count, sizeof *imgs), *dimgs = calloc(count, sizeof *dimgs);
	uint8_t **cdst = calloc(count, sizeof *cdst), **ddst = calloc(count, sizeof *ddst);
	uint8_t **dpx = calloc(count, sizeof *dpx);
	size_t *caps = calloc(count, sizeof *caps), *csz = calloc(count, sizeof *csz);
	uint64_t *gsz = calloc(count, sizeof *gsz);
	kiln_status *cst = calloc(count, sizeof *cst), *gst = calloc(count, sizeof *gst);
	cr_assert(imgs && dimgs && cdst && ddst && dpx && caps && csz && gsz && cst && gst);
	kiln_stream stream;
	cr_assert_eq(kiln_gpu_stream_create(&stream), KILN_OK, "%s", kiln_gpu_last_error());
	for (size_t i = 0; i < count; i++) {
		imgs[i] = h[i]->img;
		dimgs[i] = imgs[i];
		caps[i] = kiln_pngenc_bound(p, &imgs[i]);
		size_t cap = caps[i] ? caps[i] : 64;
		cdst[i] = malloc(cap);
		cr_assert_eq(kiln_gpu_malloc((void **)&ddst[i], cap), KILN_OK);
		size_t bytes = imgs[i].stride * imgs[i].height;
		cr_assert_eq(kiln_gpu_malloc((void **)&dpx[i], bytes ? bytes : 1), KILN_OK);
		if (bytes)
			cr_assert_eq(kiln_gpu_h2d(dpx[i], imgs[i].pixels, bytes, stream), KILN_OK);
		dimgs[i].pixels = dpx[i];
		if (expect_fail && expect_fail[i] == 2)  /* refused for its destination */
			caps[i] = caps[i] ? caps[i] - 1 : 0;
	}
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	size_t cts = kiln_pngenc_cpu_temp_size(p, imgs, count, pool);
	void *ctemp = malloc(cts);
	cr_assert_eq(kiln_pngenc_encode_cpu(p, imgs, cdst, caps, csz, count, cst, ctemp, cts, pool), KILN_OK);
	free(ctemp);
	kiln_pool_destroy(pool);

	size_t gts = kiln_pngenc_gpu_temp_size(p, dimgs, count);
	void *gtemp;
	uint64_t *dsz;
	cr_assert_eq(kiln_gpu_malloc(&gtemp, gts), KILN_OK, "temp %zu bytes", gts);
	cr_assert_eq(kiln_gpu_malloc((void **)&dsz, count * sizeof *dsz), KILN_OK);
	kiln_status rc = kiln_pngenc_encode_gpu(p, dimgs, ddst, caps, dsz, count, gst, gtemp, gts, stream);
	cr_assert_eq(rc, KILN_OK, "%s: %s", kiln_strerror(rc), kiln_gpu_last_error());
	cr_assert_eq(kiln_gpu_d2h(gsz, dsz, count * sizeof *dsz, stream), KILN_OK);
	cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK, "%s", kiln_gpu_last_error());
	for (size_t i = 0; i < count; i++) {
		cr_assert_eq(gst[i], cst[i], "image %zu: GPU status %d, CPU %d", i, gst[i], cst[i]);
		if (expect_fail && expect_fail[i]) {
			cr_assert_neq(cst[i], KILN_OK);
			cr_assert_eq(gsz[i], 0);
			continue;
		}
		cr_assert_eq(cst[i], KILN_OK, "image %zu: %s", i, kiln_strerror(cst[i]));
		cr_assert_eq(gsz[i], csz[i], "image %zu: GPU %llu bytes, CPU %zu", i, (unsigned long long)gsz[i], csz[i]);
		uint8_t *back = malloc(csz[i]);
		cr_assert_eq(kiln_gpu_d2h(back, ddst[i], csz[i], stream), KILN_OK);
		cr_assert_eq(kiln_gpu_stream_sync(stream), KILN_OK);
		if (memcmp(back, cdst[i], csz[i]) != 0) {
			size_t at = 0;
			while (back[at] == cdst[i][at])
				at++;
			cr_assert_fail("image %zu (%ux%u type %d depth %d, quality %d): first difference at byte %zu of %zu",
				       i, imgs[i].width, imgs[i].height, imgs[i].color_type, imgs[i].bit_depth,
				       (int)p->quality, at, csz[i]);
		}
		free(back);
	}
	kiln_gpu_free(gtemp);
	kiln_gpu_free(dsz);
	for (size_t i = 0; i < count; i++) {
		free(cdst[i]);
		kiln_gpu_free(ddst[i]);
		kiln_gpu_free(dpx[i]);
	}
	kiln_gpu_stream_destroy(stream);
	free(imgs);
	free(dimgs);
	free(cdst);
	free(ddst);
	free(dpx);
	free(caps);
	free(csz);
	free(gsz);
	free(cst);
	free(gst);
}

static const int kinds[][2] = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {2, 8}, {2, 16}, {3, 1}, {3, 2},
			       {3, 4}, {3, 8}, {4, 8}, {4, 16}, {6, 8}, {6, 16}};
#define NKINDS (sizeof kinds / sizeof kinds[0])

Test(png_enc_gpu, kodak_batch_of_32_matches_cpu_at_every_quality, .timeout = 240)
{
	gpu_test_require_device0("png_enc_gpu");
	static himg k[24];
	himg *batch[32];
	for (int i = 0; i < 24; i++)
		load_kodak(i + 1, &k[i]);
	for (int i = 0; i < 32; i++)
		batch[i] = &k[i % 24];
	for (int q = 0; q < 3; q++) {
		kiln_pngenc_params p;
		kiln_pngenc_params_default(&p);
		p.quality = (kiln_quality)q;
		compare(&p, batch, 32, NULL);
	}
	kiln_pngenc_params p;
	kiln_pngenc_params_default(&p);
	p.single_strip = 1;
	compare(&p, batch, 1, NULL);
	for (int i = 0; i < 24; i++)
		free(k[i].px);
}

Test(png_enc_gpu, random_images_of_every_kind_in_batches_of_1_and_7, .timeout = 120)
{
	gpu_test_require_device0("png_enc_gpu");
	static himg imgs[NKINDS + 2];
	himg *all[NKINDS + 2];
	uint32_t seed = 2024;
	for (size_t k = 0; k < NKINDS; k++) {
		uint32_t w = 1 + test_xorshift32(&seed) % 300, h = 1 + test_xorshift32(&seed) % 120;
		make_random(&imgs[k], w, h, kinds[k][0], kinds[k][1], 0, 500u + (uint32_t)k);
		all[k] = &imgs[k];
	}
	make_random(&imgs[NKINDS], 97, 61, 2, 8, 1, 11);      /* RGBA8 source written as RGB8 */
	make_random(&imgs[NKINDS + 1], 64, 80, 6, 8, 1, 12);  /* RGBA8 */
	all[NKINDS] = &imgs[NKINDS];
	all[NKINDS + 1] = &imgs[NKINDS + 1];
	size_t total = NKINDS + 2;
	for (int q = 0; q < 3; q++) {
		for (int variant = 0; variant < 3; variant++) {
			kiln_pngenc_params p;
			kiln_pngenc_params_default(&p);
			p.quality = (kiln_quality)q;
			p.rows_per_strip = variant == 0 ? 0 : variant == 1 ? 7 : 1;
			p.filter = variant == 2 ? 4 : KILN_PNGENC_FILTER_ADAPTIVE;
			for (size_t at = 0; at < total; at += 7)
				compare(&p, all + at, total - at < 7 ? total - at : 7, NULL);
			compare(&p, all + (size_t)(q + variant) % total, 1, NULL);
		}
	}
	for (size_t k = 0; k < total; k++)
		free(imgs[k].px);
}

Test(png_enc_gpu, refused_image_in_batch_gets_its_own_status, .timeout = 60)
{
	gpu_test_require_device0("png_enc_gpu");
	static himg a, b, c;
	make_random(&a, 120, 50, 2, 8, 0, 1);
	make_random(&b, 33, 20, 0, 8, 0, 2);
	make_random(&c, 80, 44, 6, 16, 0, 3);
	b.img.bit_depth = 3;  /* invalid */
	himg *batch[3] = {&a, &b, &c};
	int fail[3] = {0, 1, 0};
	kiln_pngenc_params p;
	kiln_pngenc_params_default(&p);
	compare(&p, batch, 3, fail);
	b.img.bit_depth = 8;
	int fail2[3] = {0, 2, 0};  /* destination below the bound */
	compare(&p, batch, 3, fail2);
	free(a.px);
	free(b.px);
	free(c.px);
}
