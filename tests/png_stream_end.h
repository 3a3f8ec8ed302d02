/* PNG files whose zlib stream ends in every way a reader meets (complete; without or with a
 * bad Adler-32; without a final block; with data past the image, ending properly or not;
 * with stray bytes after the end; with a window smaller than 32 KiB), its IDAT data cut
 * into chunks in several ways and followed by IEND or another chunk first. libpng accepts
 * some and refuses others, depending on where its reads fall (docs/PNG.md, "where the
 * image data ends"). Shared by tests/unit/test_png_dec.c (kiln's CPU decoder against
 * libpng) and tests/gpu (the GPU decoder and texenc against the CPU decoder), so it uses
 * no Criterion: a function that fails returns NULL or a status, and appends are checked
 * with PNG_TEST_CHECK as in tests/png_testutil.h (included first by the caller or here). */
#ifndef KILN_TESTS_PNG_STREAM_END_H
#define KILN_TESTS_PNG_STREAM_END_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "kernels/png/png_defilter.h"
#include "tests/png_testutil.h"

enum {
	END_COMPLETE,      /* final block, Adler-32 */
	END_NO_ADLER,      /* final block, no trailer */
	END_HALF_ADLER,    /* final block, 2 bytes of the trailer */
	END_BAD_ADLER,     /* final block, a wrong trailer */
	END_SYNC,          /* all the rows, then a sync flush: no final block, no trailer */
	END_SYNC_GARBAGE,  /* the same followed by an invalid block type */
	END_EXTRA,         /* more data than the image, then a proper end */
	END_EXTRA_SYNC,    /* more data than the image and no end */
	END_EXTRA_BAD,     /* more data than the image, then an invalid block type */
	END_TRAILING,      /* a proper end followed by stray bytes */
	END_SMALL_WINDOW,  /* complete, with a 512-byte window (CINFO 1) */
	END_COUNT
};

/* The images the tests run every ending over: the CPU tests the first PNG_END_IMAGES, the
 * GPU tests all PNG_END_IMAGES_GPU (the last, larger one a stream of many pieces for the
 * parallel inflate). */
typedef struct png_end_image {
	uint32_t w, h, depth, color, bpp;
	int interlace, noisy;
} png_end_image;

static const png_end_image png_end_images[] = {
	{32, 32, 16, 0, 2, 0, 0}, /* the first fuzz finding's shape */
	{61, 47, 8, 2, 3, 0, 1},  /* a stream over 8 KiB: libpng's reads come in pieces */
	{37, 29, 8, 6, 4, 1, 0},  /* Adam7 */
	{300, 200, 8, 6, 4, 0, 1},
};
#define PNG_END_IMAGES_GPU (sizeof png_end_images / sizeof png_end_images[0])
#define PNG_END_IMAGES (PNG_END_IMAGES_GPU - 1)

/* IDAT chunk sizes (0: one chunk); the third also closes the run with an empty IDAT. */
static const uint32_t png_end_splits[] = {0, 1, 7, 100, 8193};
#define PNG_END_SPLITS (sizeof png_end_splits / sizeof png_end_splits[0])
/* What follows the IDAT run before IEND (NULL: IEND itself). */
static const char *const png_end_afters[] = {NULL, "IDaT", "abCd", "tEXt"};
#define PNG_END_AFTERS (sizeof png_end_afters / sizeof png_end_afters[0])

/* A zlib stream of filt[0, flen) ending as `how` says (*len: its size; free() it), or
 * NULL when zlib fails. */
static inline uint8_t *png_end_stream(const uint8_t *filt, size_t flen, int how, size_t *len)
{
	static uint8_t more[3000];
	memset(more, 'q', sizeof more);
	z_stream z;
	memset(&z, 0, sizeof z);
	if (deflateInit2(&z, 9, Z_DEFLATED, how == END_SMALL_WINDOW ? 9 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return NULL;
	size_t cap = deflateBound(&z, flen + sizeof more) + 64;
	uint8_t *buf = malloc(cap);
	if (!buf) {
		deflateEnd(&z);
		return NULL;
	}
	z.next_out = buf;
	z.avail_out = (uInt)cap;
	z.next_in = (Bytef *)filt;
	z.avail_in = (uInt)flen;
	bool extra = how == END_EXTRA || how == END_EXTRA_SYNC || how == END_EXTRA_BAD;
	bool sync = how == END_SYNC || how == END_SYNC_GARBAGE;
	int rc = deflate(&z, extra ? Z_NO_FLUSH : sync ? Z_SYNC_FLUSH : Z_FINISH);
	if (extra && (rc == Z_OK || rc == Z_STREAM_END)) {
		z.next_in = more;
		z.avail_in = sizeof more;
		rc = deflate(&z, how == END_EXTRA ? Z_FINISH : Z_SYNC_FLUSH);
	}
	size_t n = z.total_out;
	deflateEnd(&z);
	if (rc != Z_OK && rc != Z_STREAM_END) {
		free(buf);
		return NULL;
	}
	if (how == END_NO_ADLER)
		n -= 4;
	else if (how == END_HALF_ADLER)
		n -= 2;
	else if (how == END_BAD_ADLER)
		buf[n - 1] ^= 1;
	else if (how == END_SYNC_GARBAGE || how == END_EXTRA_BAD || how == END_TRAILING) {
		buf[n++] = 0xff; /* BFINAL 1, BTYPE 3: invalid */
		buf[n++] = 0xff;
	}
	*len = n;
	return buf;
}

/* Filtered bytes (filter None) of image im, interlaced or not, random (noisy, from *rng)
 * or smooth (*len: the size; free() it), or NULL. */
static inline uint8_t *png_end_filtered(const png_end_image *im, uint32_t *rng, size_t *len)
{
	uint32_t w = im->w, h = im->h, bpp = im->bpp;
	size_t total = 0;
	for (uint32_t p = 0; p < (im->interlace ? 7u : 1u); p++) {
		uint32_t pw = w, ph = h;
		if (im->interlace)
			kiln_adam7_pass_size(p, w, h, &pw, &ph);
		if (pw && ph)
			total += ((size_t)pw * bpp + 1) * ph;
	}
	uint8_t *f = malloc(total);
	if (!f)
		return NULL;
	size_t o = 0;
	for (uint32_t p = 0; p < (im->interlace ? 7u : 1u); p++) {
		uint32_t pw = w, ph = h;
		if (im->interlace)
			kiln_adam7_pass_size(p, w, h, &pw, &ph);
		for (uint32_t y = 0; pw && y < ph; y++) {
			f[o++] = 0;
			for (size_t i = 0; i < (size_t)pw * bpp; i++) {
				*rng = *rng * 1103515245u + 12345u;
				f[o++] = im->noisy ? (uint8_t)(*rng >> 16) : (uint8_t)(3 * i + y);
			}
		}
	}
	*len = total;
	return f;
}

/* Every (image, ending) pair of images[0, count) as a stream, images first:
 *     png_end_walk w = png_end_walk_start(images, count, seed);
 *     while (png_end_walk_next(&w))
 *             ... w.im, w.how, w.z[0, w.zlen) ...
 * then check w.failed. Each call frees the stream before (and an image's filtered bytes
 * after its last stream); the random images draw from one generator seeded by seed. */
typedef struct png_end_walk {
	const png_end_image *images;
	size_t count;
	size_t im;     /* the current stream's image */
	int how;       /* and ending */
	uint8_t *z;    /* the stream */
	size_t zlen;
	bool failed;   /* memory ran out: the walk ended early */
	uint32_t rng;
	uint8_t *filt; /* image im's filtered bytes */
	size_t flen;
} png_end_walk;

static inline png_end_walk png_end_walk_start(const png_end_image *images, size_t count, uint32_t seed)
{
	return (png_end_walk){.images = images, .count = count, .how = END_COUNT, .rng = seed};
}

static inline bool png_end_walk_next(png_end_walk *w)
{
	free(w->z);
	w->z = NULL;
	if (++w->how >= END_COUNT) {
		if (w->filt)
			w->im++;
		free(w->filt);
		w->filt = NULL;
		if (w->im >= w->count)
			return false;
		w->filt = png_end_filtered(&w->images[w->im], &w->rng, &w->flen);
		w->how = 0;
	}
	if (w->filt)
		w->z = png_end_stream(w->filt, w->flen, w->how, &w->zlen);
	if (!w->z) {
		free(w->filt);
		w->filt = NULL;
		w->failed = true;
		return false;
	}
	return true;
}

/* The whole file into b (initialised here): IHDR of im, the stream z[0, zlen) in IDAT
 * chunks of png_end_splits[split] bytes, then png_end_afters[after] and IEND. */
static inline void png_end_file(const png_end_image *im, const uint8_t *z, size_t zlen, size_t split, size_t after,
				kiln_buf *b)
{
	kiln_buf_init(b, (size_t)64 << 20);
	static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
	PNG_TEST_CHECK(kiln_buf_append(b, sig, 8));
	uint8_t ihdr[13];
	png_test_put_be32(ihdr, im->w);
	png_test_put_be32(ihdr + 4, im->h);
	ihdr[8] = (uint8_t)im->depth;
	ihdr[9] = (uint8_t)im->color;
	ihdr[10] = ihdr[11] = 0;
	ihdr[12] = (uint8_t)im->interlace;
	png_test_add_chunk(b, "IHDR", ihdr, 13);
	size_t step = png_end_splits[split] ? png_end_splits[split] : zlen;
	for (size_t p = 0; p < zlen; p += step)
		png_test_add_chunk(b, "IDAT", z + p, (uint32_t)(zlen - p < step ? zlen - p : step));
	if (split == 2)
		png_test_add_chunk(b, "IDAT", "", 0); /* an empty IDAT closes the run */
	if (png_end_afters[after])
		png_test_add_chunk(b, png_end_afters[after], "k\0v", 3);
	png_test_add_chunk(b, "IEND", "", 0);
}

#endif
