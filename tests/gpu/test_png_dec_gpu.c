/* GPU tests of kiln's PNG decoder (kernels/png/png_dec.h): kiln_pngdec_decode_gpu against
 * the CPU path and libpng (kiln_png_decode), pixel for pixel, on Kodak, the 8-bit
 * non-interlaced PngSuite files and kiSt files built here (zlib, Z_FULL_FLUSH at strip
 * boundaries), at batch sizes 1, 7 and 32; damaged files in a batch fail alone; streams
 * that end irregularly get the CPU decoder's verdict (the device sends them to the CPU
 * path). */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/image.h"
#include "common/png_io.h"
#include "kernels/gpu.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_enc.h"
#include "kernels/png/png_defilter.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/pngsuite.h"
/* every append of the hand-built files checked */
#define PNG_TEST_CHECK(expr) cr_assert_eq((expr), KILN_OK)
#include "tests/png_testutil.h"
#include "tests/png_stream_end.h"

/* files[0, n) through the GPU decoder in one batch as its callers use it: a file the
 * device sends to the CPU path (KILN_ERR_UNSUPPORTED, png_dec.h) is decoded there. st[i]:
 * the final status; rgba[i]: the pixels (rows of 4 * width bytes; free() them) when OK;
 * to_cpu[i]: the CPU path decided. */
static void gpu_decode(kiln_buf *const *files, size_t n, kiln_status *st, uint8_t **rgba, bool *to_cpu,
		       const char *what)
{
	kiln_pngdec_gpu_file *gf = calloc(n, sizeof *gf);
	uint8_t **d_data = calloc(n, sizeof *d_data), **d_rgba = calloc(n, sizeof *d_rgba);
	cr_assert(gf && d_data && d_rgba);
	char err[256];
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(kiln_pngdec_probe(files[i]->data, files[i]->len, NULL, &gf[i].info, err, sizeof err),
			     KILN_OK, "%s file %zu: %s", what, i, err);
		cr_assert_eq(kiln_gpu_malloc((void **)&d_data[i], files[i]->len), KILN_OK);
		cr_assert_eq(kiln_gpu_h2d(d_data[i], files[i]->data, files[i]->len, NULL), KILN_OK);
		size_t bytes = (size_t)gf[i].info.width * 4 * gf[i].info.height;
		cr_assert_eq(kiln_gpu_malloc((void **)&d_rgba[i], bytes), KILN_OK);
		gf[i].data = d_data[i];
		gf[i].size = files[i]->len;
		gf[i].rgba = d_rgba[i];
		gf[i].stride = gf[i].info.width * 4;
	}
	size_t temp = kiln_pngdec_temp_size(gf, n);
	void *d_temp;
	cr_assert_eq(kiln_gpu_malloc(&d_temp, temp), KILN_OK);
	cr_assert_eq(kiln_pngdec_decode_gpu(gf, n, st, d_temp, temp, NULL), KILN_OK, "%s", what);
	cr_assert_eq(kiln_gpu_stream_sync(NULL), KILN_OK, "%s: %s", what, kiln_gpu_last_error());
	cr_assert_eq(kiln_pngdec_gpu_status(gf, n, st, d_temp, temp), KILN_OK);
	for (size_t i = 0; i < n; i++) {
		size_t bytes = (size_t)gf[i].info.width * 4 * gf[i].info.height;
		rgba[i] = NULL;
		to_cpu[i] = st[i] == KILN_ERR_UNSUPPORTED;
		if (to_cpu[i]) {
			kiln_image img;
			st[i] = kiln_pngdec_decode_probed_image(files[i]->data, &gf[i].info, NULL, &img, NULL, err,
								sizeof err);
			if (st[i] == KILN_OK) {
				rgba[i] = malloc(bytes);
				cr_assert(rgba[i]);
				for (uint32_t y = 0; y < img.height; y++)
					memcpy(rgba[i] + (size_t)y * 4 * img.width, kiln_image_row(&img, y),
					       (size_t)4 * img.width);
				kiln_image_free(&img);
			}
		} else if (st[i] == KILN_OK) {
			rgba[i] = malloc(bytes);
			cr_assert(rgba[i]);
			cr_assert_eq(kiln_gpu_d2h(rgba[i], d_rgba[i], bytes, NULL), KILN_OK);
		}
	}
	for (size_t i = 0; i < n; i++) {
		kiln_gpu_free(d_data[i]);
		kiln_gpu_free(d_rgba[i]);
	}
	kiln_gpu_free(d_temp);
	free(gf);
	free(d_data);
	free(d_rgba);
}

/* The window (CINFO) of a file's zlib stream. */
static unsigned stream_cinfo(const kiln_buf *f)
{
	kiln_pngdec_info info;
	cr_assert_eq(kiln_pngdec_probe(f->data, f->len, NULL, &info, NULL, 0), KILN_OK);
	return f->data[info.idat_offset + 8] >> 4;
}

/* Decodes files[0, n) on the GPU in one batch; expect[i]: 1 must decode (and match the
 * CPU path and libpng), 0 must fail (status not OK, as on the CPU path). The files to
 * decode end their streams cleanly: the device may send one to the CPU path only for its
 * window (CINFO below 7); a damaged one may go there (its Adler-32 no longer matches). */
static void gpu_batch(kiln_buf *const *files, size_t n, const int *expect, const char *what)
{
	kiln_status *st = calloc(n, sizeof *st);
	uint8_t **got = calloc(n, sizeof *got);
	bool *to_cpu = calloc(n, sizeof *to_cpu);
	cr_assert(st && got && to_cpu);
	char err[256];
	gpu_decode(files, n, st, got, to_cpu, what);
	for (size_t i = 0; i < n; i++) {
		if (!expect[i]) {
			cr_expect_neq(st[i], KILN_OK, "%s file %zu: a damaged file decoded", what, i);
			kiln_image img;
			kiln_status cpu_st = kiln_pngdec_decode_image(files[i]->data, files[i]->len, NULL, &img, NULL,
								      err, sizeof err);
			cr_expect_neq(cpu_st, KILN_OK, "%s file %zu: the CPU path decodes a file the GPU refused", what, i);
			if (cpu_st == KILN_OK)
				kiln_image_free(&img);
			continue;
		}
		if (to_cpu[i])
			cr_assert_neq(stream_cinfo(files[i]), 7, "%s file %zu: sent to the CPU path", what, i);
		cr_assert_eq(st[i], KILN_OK, "%s file %zu: %s", what, i, kiln_strerror(st[i]));
		kiln_pngdec_info info;
		cr_assert_eq(kiln_pngdec_probe(files[i]->data, files[i]->len, NULL, &info, NULL, 0), KILN_OK);
		uint32_t w = info.width, h = info.height;
		uint8_t *gpu = got[i], *cpu = malloc((size_t)w * 4 * h);
		cr_assert_eq(kiln_pngdec_decode_cpu(files[i]->data, files[i]->len, NULL, cpu, (size_t)w * 4, NULL,
						    err, sizeof err), KILN_OK, "%s", err);
		kiln_image ref;
		cr_assert_eq(kiln_png_decode(files[i]->data, files[i]->len, NULL, &ref, err, sizeof err), KILN_OK);
		for (uint32_t y = 0; y < h; y++) {
			cr_assert(memcmp(gpu + (size_t)y * w * 4, cpu + (size_t)y * w * 4, (size_t)w * 4) == 0,
				  "%s file %zu: GPU row %u differs from the CPU's", what, i, y);
			cr_assert(memcmp(gpu + (size_t)y * w * 4, kiln_image_row(&ref, y), (size_t)w * 4) == 0,
				  "%s file %zu: GPU row %u differs from libpng's", what, i, y);
		}
		kiln_image_free(&ref);
		free(cpu);
	}
	for (size_t i = 0; i < n; i++)
		free(got[i]);
	free(got);
	free(st);
	free(to_cpu);
}

static kiln_buf kodak[24];
static kiln_buf kodak_kist[24];

static void load_kodak(void)
{
	char path[512];
	for (int i = 0; i < 24; i++)
		kodak[i] = gpu_test_load(test_kodak_path(path, sizeof path, i + 1));
}

static void make_kodak_kist(void)
{
	char err[256];
	for (int i = 0; i < 24; i++) {
		kiln_image img;
		cr_assert_eq(kiln_png_decode(kodak[i].data, kodak[i].len, NULL, &img, err, sizeof err), KILN_OK);
		cr_assert_eq(png_test_make_kist(&img, 16 + 8 * (i % 3), i % 2, &kodak_kist[i]), KILN_OK);
		kiln_image_free(&img);
	}
}

/* set[0, 24) decoded in batches of 1, 7 and 32: batch k takes every step-th file from
 * file k on, so each size mixes different files. */
static void batches_1_7_32(kiln_buf *set, size_t step, const char *label)
{
	static const size_t sizes[] = {1, 7, 32};
	for (int k = 0; k < 3; k++) {
		kiln_buf *files[32];
		int expect[32];
		for (size_t i = 0; i < sizes[k]; i++) {
			files[i] = &set[(i * step + (size_t)k) % 24];
			expect[i] = 1;
		}
		char what[32];
		snprintf(what, sizeof what, "%s batch %zu", label, sizes[k]);
		gpu_batch(files, sizes[k], expect, what);
	}
}

TestSuite(png_dec_gpu, .timeout = 300);

Test(png_dec_gpu, kodak_batches)
{
	gpu_test_require_device0("png_dec_gpu");
	load_kodak();
	batches_1_7_32(kodak, 5, "Kodak");
	for (int i = 0; i < 24; i++)
		kiln_buf_free(&kodak[i]);
}

Test(png_dec_gpu, kist_batches)
{
	gpu_test_require_device0("png_dec_gpu");
	load_kodak();
	make_kodak_kist();
	kiln_pngdec_info info;
	char err[256];
	cr_assert_eq(kiln_pngdec_probe(kodak_kist[0].data, kodak_kist[0].len, NULL, &info, err, sizeof err), KILN_OK);
	cr_assert_gt(info.strips, 1, "the kiSt chunk is used");
	batches_1_7_32(kodak_kist, 7, "kiSt");
	for (int i = 0; i < 24; i++) {
		kiln_buf_free(&kodak[i]);
		kiln_buf_free(&kodak_kist[i]);
	}
}

Test(png_dec_gpu, pngsuite)
{
	gpu_test_require_device0("png_dec_gpu");
	static pngsuite_list suite;
	pngsuite_list_files(&suite, PNGSUITE_VALID);
	kiln_buf bufs[200];
	kiln_buf *files[200];
	int expect[200];
	size_t n = 0, unsupported = 0;
	for (size_t f = 0; f < suite.n && n < 200; f++) {
		char path[1024];
		kiln_buf b = gpu_test_load(pngsuite_path(path, sizeof path, suite.names[f]));
		kiln_pngdec_info info;
		char err[256];
		if (kiln_pngdec_probe(b.data, b.len, NULL, &info, err, sizeof err) != KILN_OK || !info.gpu_ok) {
			unsupported++;
			kiln_buf_free(&b);
			continue;
		}
		bufs[n] = b;
		files[n] = &bufs[n];
		expect[n] = 1;
		n++;
	}
	cr_assert_gt(n, 40, "%zu 8-bit non-interlaced PngSuite files", n);
	/* batches of up to 32 */
	for (size_t i = 0; i < n; i += 32)
		gpu_batch(files + i, n - i < 32 ? n - i : 32, expect + i, "PngSuite");
	for (size_t i = 0; i < n; i++)
		kiln_buf_free(&bufs[i]);
}

/* An 8-bit PNG (color 0 or 2) whose rows (filter None) hold pix[0, h * w * channels),
 * its zlib stream written at the given level and strategy. */
static kiln_buf png_with_stream(uint32_t w, uint32_t h, int color, const uint8_t *pix, int level, int strategy)
{
	uint32_t ch = color == 2 ? 3 : 1;
	size_t rb = (size_t)w * ch + 1, flen = rb * h;
	uint8_t *filt = malloc(flen);
	cr_assert(filt);
	for (uint32_t y = 0; y < h; y++) {
		filt[y * rb] = 0;
		memcpy(filt + y * rb + 1, pix + (size_t)y * w * ch, rb - 1);
	}
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(deflateInit2(&z, level, Z_DEFLATED, 15, 8, strategy), Z_OK);
	size_t cap = deflateBound(&z, flen);
	uint8_t *zb = malloc(cap);
	z.next_in = filt;
	z.avail_in = (uInt)flen;
	z.next_out = zb;
	z.avail_out = (uInt)cap;
	cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	size_t zlen = z.total_out;
	deflateEnd(&z);
	kiln_buf out;
	kiln_buf_init(&out, (size_t)64 << 20);
	static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
	PNG_TEST_CHECK(kiln_buf_append(&out, sig, 8));
	uint8_t ihdr[13] = {0};
	png_test_put_be32(ihdr, w);
	png_test_put_be32(ihdr + 4, h);
	ihdr[8] = 8;
	ihdr[9] = (uint8_t)color;
	png_test_add_chunk(&out, "IHDR", ihdr, 13);
	png_test_add_chunk(&out, "IDAT", zb, (uint32_t)zlen);
	png_test_add_chunk(&out, "IEND", "", 0);
	free(zb);
	free(filt);
	return out;
}

/* Files without strips are inflated in parallel (kernels/png/png_inflate_par.h): zlib
 * streams of every level and strategy, and a file whose stored blocks carry another
 * deflate stream (block headers inside stored data: candidates no segment may start at),
 * in one batch. */
Test(png_dec_gpu, streams_of_every_kind)
{
	gpu_test_require_device0("png_dec_gpu");
	load_kodak();
	kiln_image img;
	char err[256];
	cr_assert_eq(kiln_png_decode(kodak[2].data, kodak[2].len, NULL, &img, err, sizeof err), KILN_OK);
	uint32_t w = img.width, h = img.height;
	uint8_t *rgb = malloc((size_t)w * h * 3);
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			memcpy(rgb + ((size_t)y * w + x) * 3, kiln_image_row(&img, y) + 4 * (size_t)x, 3);
	static const int strategies[] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_RLE, Z_HUFFMAN_ONLY, Z_FIXED};
	kiln_buf bufs[32];
	kiln_buf *files[32];
	int expect[32];
	size_t n = 0;
	for (int level = 0; level <= 9; level += 3)
		for (int st = 0; st < 5; st++) {
			bufs[n] = png_with_stream(w, h, 2, rgb, level, strategies[st]);
			n++;
		}
	/* the Kodak file's own stream as the pixels of a gray image, stored (level 0) */
	kiln_pngdec_info info;
	cr_assert_eq(kiln_pngdec_probe(kodak[2].data, kodak[2].len, NULL, &info, err, sizeof err), KILN_OK);
	uint32_t gw = 1024, gh = (uint32_t)(info.zlib_size / gw);
	bufs[n++] = png_with_stream(gw, gh, 0, kodak[2].data + info.idat_offset + 8, 0, Z_DEFAULT_STRATEGY);
	for (size_t i = 0; i < n; i++) {
		files[i] = &bufs[i];
		expect[i] = 1;
	}
	gpu_batch(files, n, expect, "streams");
	for (size_t i = 0; i < n; i++)
		kiln_buf_free(&bufs[i]);
	free(rgb);
	kiln_image_free(&img);
	for (int i = 0; i < 24; i++)
		kiln_buf_free(&kodak[i]);
}

/* Damaged deflate data with valid chunk CRCs (the probe passes): the file fails on the
 * device, alone. */
Test(png_dec_gpu, bad_files_fail_alone)
{
	gpu_test_require_device0("png_dec_gpu");
	load_kodak();
	make_kodak_kist();
	kiln_buf bad[4];
	for (int k = 0; k < 4; k++) {
		kiln_buf *src = k < 2 ? &kodak[k] : &kodak_kist[k];
		kiln_buf_init(&bad[k], (size_t)64 << 20);
		kiln_buf_append(&bad[k], src->data, src->len);
		/* find the first IDAT and damage its middle, then fix its CRC */
		size_t p = 8;
		while (memcmp(bad[k].data + p + 4, "IDAT", 4) != 0)
			p += 12 + ((size_t)bad[k].data[p] << 24 | (size_t)bad[k].data[p + 1] << 16 |
				   (size_t)bad[k].data[p + 2] << 8 | bad[k].data[p + 3]);
		uint32_t len = (uint32_t)bad[k].data[p] << 24 | (uint32_t)bad[k].data[p + 1] << 16 |
			       (uint32_t)bad[k].data[p + 2] << 8 | bad[k].data[p + 3];
		for (uint32_t j = len / 3; j < len / 3 + 64 && j < len; j++)
			bad[k].data[p + 8 + j] ^= (uint8_t)(0x5A + j);
		png_test_put_be32(bad[k].data + p + 8 + len, (uint32_t)crc32(0, bad[k].data + p + 4, len + 4));
	}
	kiln_buf *files[12];
	int expect[12];
	for (int i = 0; i < 12; i++) {
		files[i] = i % 3 == 1 ? &bad[i / 3] : (i % 2 ? &kodak_kist[i] : &kodak[i]);
		expect[i] = i % 3 != 1;
	}
	gpu_batch(files, 12, expect, "mixed batch");
	for (int k = 0; k < 4; k++)
		kiln_buf_free(&bad[k]);
	for (int i = 0; i < 24; i++) {
		kiln_buf_free(&kodak[i]);
		kiln_buf_free(&kodak_kist[i]);
	}
}

/* The de-filter's waits across bands and the IDAT gather: images of every 8-bit colour
 * type (palette with tRNS) as kiln's encoder writes them (an IDAT chunk a strip) with every
 * row filtered Up, Average or Paeth (the first row of a band then reads the band above),
 * or adaptively, in one strip or the automatic ones, at widths that end inside a tile of
 * 32 pixels and heights of many bands of 32 rows. */
Test(png_dec_gpu, every_colour_type_and_filter_across_bands)
{
	gpu_test_require_device0("png_dec_gpu");
	static const uint8_t colors[] = {KILN_PNG_COLOR_GRAY, KILN_PNG_COLOR_GRAY_ALPHA, KILN_PNG_COLOR_RGB,
					 KILN_PNG_COLOR_RGBA, KILN_PNG_COLOR_PALETTE};
	static const uint8_t channels[] = {1, 2, 3, 4, 1};
	static const uint32_t sizes[][2] = {{45, 97}, {33, 160}, {100, 65}, {1, 200}, {300, 129}};
	static const int filters[] = {KILN_PNG_FILTER_UP, KILN_PNG_FILTER_AVG, KILN_PNG_FILTER_PAETH,
				      KILN_PNGENC_FILTER_ADAPTIVE};
	uint8_t plte[3 * 16], trns[16];
	for (int i = 0; i < 16; i++) {
		plte[3 * i] = (uint8_t)(17 * i);
		plte[3 * i + 1] = (uint8_t)(255 - 13 * i);
		plte[3 * i + 2] = (uint8_t)(70 + 11 * i);
		trns[i] = (uint8_t)(i * 16 + 15);
	}
	kiln_png_chunk pal_chunks[2] = {{{'P', 'L', 'T', 'E'}, plte, sizeof plte}, {{'t', 'R', 'N', 'S'}, trns, sizeof trns}};
	kiln_buf bufs[40];
	kiln_buf *files[40];
	int expect[40];
	size_t n = 0;
	uint32_t seed = 12345;
	for (int c = 0; c < 5; c++)
		for (int fl = 0; fl < 4; fl++) {
			uint32_t w = sizes[(c + fl) % 5][0], h = sizes[(c + fl) % 5][1], ch = channels[c];
			uint8_t *pix = malloc((size_t)w * h * ch);
			cr_assert(pix);
			/* gradients with noise: the filters' predictions matter */
			for (uint32_t y = 0; y < h; y++)
				for (uint32_t x = 0; x < w; x++)
					for (uint32_t k = 0; k < ch; k++) {
						seed = seed * 1103515245u + 12345u;
						uint32_t v = (x * (3 + k) + y * (5 - k) + ((seed >> 16) & 7u)) & 0xFFu;
						pix[((size_t)y * w + x) * ch + k] =
						    colors[c] == KILN_PNG_COLOR_PALETTE ? (uint8_t)(v & 15u) : (uint8_t)v;
					}
			kiln_pngenc_image img = {.pixels = pix, .width = w, .height = h, .stride = (size_t)w * ch,
						 .color_type = colors[c], .bit_depth = 8};
			if (colors[c] == KILN_PNG_COLOR_PALETTE) {
				img.chunks = pal_chunks;
				img.chunk_count = 2;
			}
			kiln_pngenc_params p;
			kiln_pngenc_params_default(&p);
			p.filter = filters[fl];
			p.single_strip = fl % 2;
			p.quality = KILN_QUALITY_FAST;
			size_t cap = kiln_pngenc_bound(&p, &img), size = 0, temp_size = kiln_pngenc_cpu_temp_size(&p, &img, 1, NULL);
			cr_assert_gt(cap, 0);
			void *temp = malloc(temp_size);
			kiln_buf_init(&bufs[n], (size_t)64 << 20);
			cr_assert_eq(kiln_buf_reserve(&bufs[n], cap), KILN_OK);
			uint8_t *dst = bufs[n].data;
			kiln_status one = KILN_ERR_INVALID_ARG;
			cr_assert_eq(kiln_pngenc_encode_cpu(&p, &img, &dst, &cap, &size, 1, &one, temp, temp_size, NULL), KILN_OK);
			cr_assert_eq(one, KILN_OK, "colour %d filter %d: %s", colors[c], filters[fl], kiln_strerror(one));
			bufs[n].len = size;
			free(temp);
			free(pix);
			files[n] = &bufs[n];
			expect[n] = 1;
			n++;
		}
	gpu_batch(files, n, expect, "colour types and filters");
	/* and one at a time */
	for (size_t i = 0; i < n; i += 3)
		gpu_batch(files + i, 1, expect + i, "colour types and filters, alone");
	for (size_t i = 0; i < n; i++)
		kiln_buf_free(&bufs[i]);
}

/* A copy of f whose zlib header declares window cinfo (FCHECK and the IDAT's CRC redone). */
static kiln_buf with_cinfo(const kiln_buf *f, unsigned cinfo)
{
	kiln_pngdec_info info;
	cr_assert_eq(kiln_pngdec_probe(f->data, f->len, NULL, &info, NULL, 0), KILN_OK);
	kiln_buf b;
	kiln_buf_init(&b, (size_t)64 << 20);
	PNG_TEST_CHECK(kiln_buf_append(&b, f->data, f->len));
	size_t p = (size_t)info.idat_offset;
	uint32_t len = png_test_be32(b.data + p);
	uint8_t *z = b.data + p + 8;
	z[0] = (uint8_t)(cinfo << 4 | 8);
	z[1] = (uint8_t)(z[1] & 0xE0u);
	z[1] = (uint8_t)(z[1] + (31 - ((unsigned)z[0] * 256 + z[1]) % 31) % 31);
	png_test_put_be32(b.data + p + 8 + len, (uint32_t)crc32(0, b.data + p + 4, len + 4));
	return b;
}

/* Streams that end irregularly (tests/png_stream_end.h: no or a bad Adler-32, no final
 * block, data past the image, a small window; whole and cut short; in IDAT chunks of
 * several sizes), with kiSt files whose header declares a 16 KiB window, through the GPU
 * decoder as its callers use it (files it sends to the CPU path decoded there), in batches
 * of up to 64: every verdict and every decoded pixel is the CPU decoder's. The device
 * settles the clean streams itself, and the CPU path gets both kinds of verdict. */
Test(png_dec_gpu, irregular_stream_ends)
{
	gpu_test_require_device0("png_dec_gpu");
	/* the shared images (the 16-bit and the Adam7 one go to the CPU path at once) and a
	 * larger one: a stream of many pieces for the parallel inflate */
	enum { MAX = 1200 };
	kiln_buf *bufs = calloc(MAX, sizeof *bufs);
	int *how_of = calloc(MAX, sizeof *how_of), *cut_of = calloc(MAX, sizeof *cut_of);
	bool *gpu_ok = calloc(MAX, sizeof *gpu_ok);
	cr_assert(bufs && how_of && cut_of && gpu_ok);
	size_t n = 0;
	png_end_walk w = png_end_walk_start(png_end_images, PNG_END_IMAGES_GPU, 4242);
	while (png_end_walk_next(&w)) {
		for (int cut = 0; cut < 2; cut++)
			for (size_t sp = 0; sp < PNG_END_SPLITS; sp++) {
				if (png_end_splits[sp] == 1 && w.zlen > 4000)
					continue;
				cr_assert_lt(n, MAX);
				png_end_file(&w.images[w.im], w.z, cut ? w.zlen * 2 / 3 : w.zlen, sp,
					     (sp + w.how) % PNG_END_AFTERS, &bufs[n]);
				how_of[n] = w.how;
				cut_of[n] = cut;
				gpu_ok[n] = w.images[w.im].depth == 8 && !w.images[w.im].interlace;
				n++;
			}
	}
	cr_assert(!w.failed, "out of memory making the streams");
	/* kiSt strips with a smaller window declared: the CPU path does not take the strips */
	load_kodak();
	make_kodak_kist();
	for (int k = 0; k < 3; k++) {
		cr_assert_lt(n, MAX);
		bufs[n] = with_cinfo(&kodak_kist[k], 6);
		kiln_pngdec_info info;
		cr_assert_eq(kiln_pngdec_probe(bufs[n].data, bufs[n].len, NULL, &info, NULL, 0), KILN_OK);
		cr_assert_gt(info.strips, 1, "the kiSt chunk still holds");
		how_of[n] = END_SMALL_WINDOW;
		gpu_ok[n] = true;
		n++;
	}
	for (int i = 0; i < 24; i++) {
		kiln_buf_free(&kodak[i]);
		kiln_buf_free(&kodak_kist[i]);
	}
	unsigned gpu_accepted = 0, gpu_refused = 0, cpu_accepted = 0, cpu_refused = 0;
	char err[256];
	for (size_t first = 0; first < n; first += 64) {
		size_t m = n - first < 64 ? n - first : 64;
		kiln_buf *files[64];
		kiln_status st[64];
		uint8_t *got[64];
		bool to_cpu[64];
		for (size_t i = 0; i < m; i++)
			files[i] = &bufs[first + i];
		gpu_decode(files, m, st, got, to_cpu, "irregular ends");
		for (size_t i = 0; i < m; i++) {
			size_t f = first + i;
			kiln_image ref;
			kiln_status cst = kiln_pngdec_decode_image(bufs[f].data, bufs[f].len, NULL, &ref, NULL, err, sizeof err);
			cr_assert_eq(st[i], cst, "file %zu (end %d, cut %d): %s (%s) where the CPU path gives %s", f,
				     how_of[f], cut_of[f], kiln_strerror(st[i]), to_cpu[i] ? "CPU path" : "GPU",
				     kiln_strerror(cst));
			if (gpu_ok[f] && !cut_of[f] && (how_of[f] == END_COMPLETE || how_of[f] == END_TRAILING))
				cr_assert(!to_cpu[i], "file %zu: a clean stream sent to the CPU path", f);
			if (st[i] == KILN_OK) {
				for (uint32_t y = 0; y < ref.height; y++)
					cr_assert(memcmp(got[i] + (size_t)y * 4 * ref.width, kiln_image_row(&ref, y),
							 (size_t)4 * ref.width) == 0,
						  "file %zu (end %d): row %u differs from the CPU decoder's", f, how_of[f], y);
				kiln_image_free(&ref);
			}
			if (gpu_ok[f] && !to_cpu[i]) {
				gpu_accepted += st[i] == KILN_OK;
				gpu_refused += st[i] != KILN_OK;
			} else if (gpu_ok[f]) {
				cpu_accepted += st[i] == KILN_OK;
				cpu_refused += st[i] != KILN_OK;
			}
			free(got[i]);
		}
	}
	cr_expect_gt(gpu_accepted, 10);
	cr_expect_gt(gpu_refused, 10);
	cr_expect_gt(cpu_accepted, 0);
	cr_expect_gt(cpu_refused, 0);
	for (size_t i = 0; i < n; i++)
		kiln_buf_free(&bufs[i]);
	free(bufs);
	free(how_of);
	free(cut_of);
	free(gpu_ok);
}
