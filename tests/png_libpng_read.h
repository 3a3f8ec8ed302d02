/* Test helper shared by the unit and GPU tests: reading a PNG held in memory with libpng
 * without transforms, the reference the tests compare kiln's codec with. Failing reads
 * fail the test (Criterion). */
#ifndef KILN_TESTS_PNG_LIBPNG_READ_H
#define KILN_TESTS_PNG_LIBPNG_READ_H

#include <criterion/criterion.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A PNG in memory as libpng's read callback sees it. */
typedef struct png_test_membuf {
	const uint8_t *p;
	size_t n, at;
} png_test_membuf;

static inline void png_test_mem_read(png_structp png, png_bytep out, png_size_t n)
{
	png_test_membuf *m = png_get_io_ptr(png);
	if (m->at + n > m->n)
		png_error(png, "read past end");
	memcpy(out, m->p + m->at, n);
	m->at += n;
}

/* The header and the raw samples as libpng reads them without transforms (Adam7 images
 * de-interlaced by libpng). */
typedef struct png_test_raw {
	uint32_t w, h;
	int ct, depth, interlace;
	size_t rowbytes;
	uint8_t *px; /* h rows of rowbytes; free() it */
} png_test_raw;

static inline void png_test_read_raw(const uint8_t *file, size_t size, png_test_raw *r, const char *what)
{
	memset(r, 0, sizeof *r);
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	cr_assert(png && info);
	png_bytep *volatile rows = NULL;
	if (setjmp(png_jmpbuf(png)))
		cr_assert_fail("%s: libpng refused the file", what);
	png_test_membuf m = {file, size, 0};
	png_set_read_fn(png, &m, png_test_mem_read);
	png_read_info(png, info);
	png_uint_32 w, h;
	int ct, depth, interlace;
	png_get_IHDR(png, info, &w, &h, &depth, &ct, &interlace, NULL, NULL);
	r->w = w;
	r->h = h;
	r->ct = ct;
	r->depth = depth;
	r->interlace = interlace;
	if (interlace != PNG_INTERLACE_NONE)
		png_set_interlace_handling(png);
	png_read_update_info(png, info);
	r->rowbytes = png_get_rowbytes(png, info);
	r->px = malloc(r->rowbytes * h);
	rows = malloc(h * sizeof *rows);
	cr_assert(r->px && rows);
	for (uint32_t y = 0; y < h; y++)
		rows[y] = r->px + y * r->rowbytes;
	png_read_image(png, rows);
	png_read_end(png, NULL);
	free(rows);
	png_destroy_read_struct(&png, &info, NULL);
}

#endif
