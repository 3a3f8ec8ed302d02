/* PNG files built by hand for the tests and the bench, independently of kiln's encoder
 * (zlib for the data, zlib's crc32 for the chunks): big-endian fields, chunks, and kiSt
 * files. Shared by tests/unit, tests/gpu and bench/, so it uses no Criterion: a file that
 * wants every append checked defines PNG_TEST_CHECK(status_expression) before including
 * it (the default ignores the status: the buffers' caps are far above what is built). */
#ifndef KILN_TESTS_PNG_TESTUTIL_H
#define KILN_TESTS_PNG_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/image.h"

#ifndef PNG_TEST_CHECK
#define PNG_TEST_CHECK(expr) ((void)(expr))
#endif

static inline uint32_t png_test_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void png_test_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Appends a chunk with its CRC. */
static inline void png_test_add_chunk(kiln_buf *b, const char *type, const void *data, uint32_t len)
{
	uint8_t hdr[8];
	png_test_put_be32(hdr, len);
	memcpy(hdr + 4, type, 4);
	PNG_TEST_CHECK(kiln_buf_append(b, hdr, 8));
	if (len)
		PNG_TEST_CHECK(kiln_buf_append(b, data, len));
	uLong crc = crc32(crc32(0, (const Bytef *)type, 4), (const Bytef *)data, len);
	uint8_t c[4];
	png_test_put_be32(c, (uint32_t)crc);
	PNG_TEST_CHECK(kiln_buf_append(b, c, 4));
}

static inline uint8_t png_test_paeth(int a, int b, int c)
{
	int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
	return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

/* An RGBA8 image as a kiSt PNG (docs/PNG.md; RGB when !alpha): strips of rps rows, their
 * first row Sub, the others Paeth; one zlib stream at level 6 with Z_FULL_FLUSH between
 * strips, in IDAT chunks of 64 KiB. *out is initialised here. KILN_ERR_NOMEM when
 * memory runs out. */
static inline kiln_status png_test_make_kist(const kiln_image *img, uint32_t rps, int alpha, kiln_buf *out)
{
	uint32_t w = img->width, h = img->height, bpp = alpha ? 4 : 3;
	size_t rb = (size_t)w * bpp;
	uint32_t strips = (h + rps - 1) / rps;
	uint8_t *raw = malloc(rb * h), *filt = malloc((rb + 1) * h), *zb = NULL, *k = NULL;
	uint32_t *offs = calloc(strips, 4);
	kiln_status st = KILN_ERR_NOMEM;
	z_stream z;
	memset(&z, 0, sizeof z);
	kiln_buf_init(out, (size_t)256 << 20);
	if (!raw || !filt || !offs || deflateInit(&z, 6) != Z_OK)
		goto fail;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++)
			memcpy(raw + y * rb + x * bpp, kiln_image_row(img, y) + 4 * x, bpp);
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *f = filt + y * (rb + 1);
		const uint8_t *r = raw + y * rb, *p = y ? r - rb : NULL;
		int sub = y % rps == 0;
		f[0] = sub ? 1 : 4;
		for (size_t i = 0; i < rb; i++) {
			int a = i >= bpp ? r[i - bpp] : 0, b = p ? p[i] : 0, c = p && i >= bpp ? p[i - bpp] : 0;
			f[1 + i] = (uint8_t)(r[i] - (sub ? a : png_test_paeth(a, b, c)));
		}
	}
	size_t cap = deflateBound(&z, (rb + 1) * h) + 64 * (size_t)h + 64;
	if (!(zb = malloc(cap))) {
		deflateEnd(&z);
		goto fail;
	}
	z.next_out = zb;
	z.avail_out = (uInt)cap;
	for (uint32_t s = 0; s < strips; s++) {
		offs[s] = (uint32_t)(z.next_out - zb);
		uint32_t r0 = s * rps, r1 = r0 + rps < h ? r0 + rps : h;
		z.next_in = filt + r0 * (rb + 1);
		z.avail_in = (uInt)((r1 - r0) * (rb + 1));
		deflate(&z, s + 1 == strips ? Z_FINISH : Z_FULL_FLUSH);
	}
	size_t zlen = z.total_out;
	deflateEnd(&z);
	offs[0] = 2;
	size_t kl = 20 + 4 * (size_t)strips;
	if (!(k = calloc(1, kl)))
		goto fail;
	static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
	PNG_TEST_CHECK(kiln_buf_append(out, sig, 8));
	uint8_t ihdr[13] = {0};
	png_test_put_be32(ihdr, w);
	png_test_put_be32(ihdr + 4, h);
	ihdr[8] = 8;
	ihdr[9] = alpha ? 6 : 2;
	png_test_add_chunk(out, "IHDR", ihdr, 13);
	k[0] = 1;
	png_test_put_be32(k + 4, (uint32_t)zlen);
	memcpy(k + 8, zb + zlen - 4, 4);
	png_test_put_be32(k + 12, rps);
	png_test_put_be32(k + 16, strips);
	for (uint32_t s = 0; s < strips; s++)
		png_test_put_be32(k + 20 + 4 * s, offs[s]);
	png_test_add_chunk(out, "kiSt", k, (uint32_t)kl);
	for (size_t p = 0; p < zlen; p += 65536)
		png_test_add_chunk(out, "IDAT", zb + p, (uint32_t)(zlen - p < 65536 ? zlen - p : 65536));
	png_test_add_chunk(out, "IEND", "", 0);
	st = KILN_OK;
fail:
	free(k);
	free(zb);
	free(offs);
	free(raw);
	free(filt);
	return st;
}

#endif
