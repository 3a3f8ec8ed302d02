/* Unit tests of kiln's own PNG decoder (kernels/png/png_dec.h), always against
 * common/png_io.h's kiln_png_decode (libpng) as the reference: every PngSuite file, random
 * images of every colour type and depth written by libpng (with tRNS, interlaced, each
 * filter forced), zlib streams of every level and strategy, truncated and bit-flipped
 * files, extreme shapes, kiSt files (valid -> strips, broken -> ignored) and limits. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/image.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "kernels/png/png_dec.h"
#include "tests/unit/testutil.h"
#include "tests/pngsuite.h"

#define KILN_FUZZ_PNG_KILN_NO_ENTRY
#include "tests/fuzz/fuzz_png_kiln.c"
/* every append of the hand-built files checked */
#define PNG_TEST_CHECK(expr) cr_assert_eq((expr), KILN_OK)
#include "tests/png_testutil.h"
#include "tests/png_stream_end.h"

#define ERR_CAP 256

static kiln_buf load_file(const char *path)
{
	kiln_buf b;
	kiln_buf_init(&b, (size_t)64 << 20);
	kiln_status st = kiln_buf_read_file(&b, path);
	cr_assert_eq(st, KILN_OK, "cannot read %s", path);
	return b;
}

/* Compares kiln's decoder with libpng on one input. Returns 1 when both decoded (and
 * matched), 0 when both refused; fails the test on any disagreement. */
static int compare_with_libpng(const uint8_t *data, size_t size, const kiln_image_limits *limits,
			       kiln_pool *pool, const char *what)
{
	kiln_image ref, got;
	char e1[ERR_CAP], e2[ERR_CAP];
	kiln_status s1 = kiln_png_decode(data, size, limits, &ref, e1, sizeof e1);
	kiln_status s2 = kiln_pngdec_decode_image(data, size, limits, &got, pool, e2, sizeof e2);
	if (s1 != KILN_OK) {
		cr_assert_neq(s2, KILN_OK, "%s: libpng refuses (%s) but kiln decodes", what, e1);
		cr_assert(e2[0] != '\0', "%s: refused without a message", what);
		kiln_image_free(&got);
		return 0;
	}
	cr_assert_eq(s2, KILN_OK, "%s: libpng decodes but kiln refuses: %s (%s)", what, e2,
		     kiln_strerror(s2));
	cr_assert_eq(got.width, ref.width, "%s", what);
	cr_assert_eq(got.height, ref.height, "%s", what);
	cr_assert_eq(got.has_alpha, ref.has_alpha, "%s: has_alpha", what);
	cr_assert_eq(got.srgb, ref.srgb, "%s: srgb", what);
	for (uint32_t y = 0; y < ref.height; y++) {
		const uint8_t *a = kiln_image_row(&ref, y), *b = kiln_image_row(&got, y);
		if (memcmp(a, b, 4 * (size_t)ref.width) != 0) {
			uint32_t x = 0;
			while (memcmp(a + 4 * x, b + 4 * x, 4) == 0)
				x++;
			cr_assert_fail("%s: pixel (%u, %u) differs: libpng %02x%02x%02x%02x kiln %02x%02x%02x%02x",
				       what, x, y, a[4 * x], a[4 * x + 1], a[4 * x + 2], a[4 * x + 3],
				       b[4 * x], b[4 * x + 1], b[4 * x + 2], b[4 * x + 3]);
		}
	}
	kiln_image_free(&ref);
	kiln_image_free(&got);
	return 1;
}

/* ---- PngSuite ------------------------------------------------------------------------ */

TestSuite(png_dec, .timeout = 60);

Test(png_dec, pngsuite)
{
	static pngsuite_list suite;
	pngsuite_list_files(&suite, PNGSUITE_ALL);
	unsigned decoded = 0, refused = 0;
	for (size_t i = 0; i < suite.n; i++) {
		const char *name = suite.names[i];
		char path[1024];
		kiln_buf b = load_file(pngsuite_path(path, sizeof path, name));
		if (name[0] == 'x') {
			kiln_image img;
			char err[ERR_CAP];
			kiln_status st = kiln_pngdec_decode_image(b.data, b.len, NULL, &img, NULL, err, sizeof err);
			cr_expect_neq(st, KILN_OK, "%s: corrupt file decoded", name);
			cr_expect(err[0] != '\0', "%s: no message", name);
			refused++;
		} else {
			decoded += (unsigned)compare_with_libpng(b.data, b.len, NULL, NULL, name);
		}
		kiln_buf_free(&b);
	}
	cr_expect_geq(decoded, 150, "only %u PngSuite files decoded", decoded);
	cr_expect_geq(refused, 10, "only %u corrupt files", refused);
}

/* ---- random images written by libpng ------------------------------------------------- */

typedef struct write_opts {
	int color, depth, interlace, filter; /* filter: -1 libpng's choice, else PNG_FILTER_* */
	int trns;      /* add a tRNS chunk */
	int level;     /* zlib level */
	int srgb;      /* 1 sRGB, 2 gAMA 1.0 (linear), 0 none */
} write_opts;

static void write_fn(png_structp png, png_bytep data, size_t len)
{
	kiln_buf *b = png_get_io_ptr(png);
	if (kiln_buf_append(b, data, len) != KILN_OK)
		png_error(png, "append");
}
static void flush_fn(png_structp png) { }

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return rng_state >> 8;
}

/* A w x h image of random samples (with runs, so that matches occur) written by libpng. */
static kiln_buf write_random_png(uint32_t w, uint32_t h, const write_opts *o)
{
	kiln_buf out;
	kiln_buf_init(&out, (size_t)256 << 20);
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	int channels = o->color == 0 || o->color == 3 ? 1 : o->color == 2 ? 3 : o->color == 4 ? 2 : 4;
	size_t rowbytes = ((size_t)w * channels * o->depth + 7) / 8;
	uint8_t *pix = malloc(rowbytes * h + 1);
	for (size_t i = 0; i < rowbytes * h; i++)
		pix[i] = (i > 0 && rnd() % 4 == 0) ? pix[i - 1] : (uint8_t)rnd();
	if (setjmp(png_jmpbuf(png)))
		cr_assert_fail("libpng write failed");
	png_set_write_fn(png, &out, write_fn, flush_fn);
	png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
	png_set_IHDR(png, info, w, h, o->depth, o->color, o->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_set_compression_level(png, o->level);
	if (o->filter >= 0)
		png_set_filter(png, 0, o->filter);
	if (o->color == 3) {
		png_color pal[256];
		int n = 1 << o->depth;
		n = n > 3 ? n - 1 : n; /* leave an index out of the palette sometimes */
		for (int i = 0; i < 256; i++)
			pal[i] = (png_color){(png_byte)rnd(), (png_byte)rnd(), (png_byte)rnd()};
		png_set_PLTE(png, info, pal, n);
		if (o->trns) {
			png_byte alpha[256];
			for (int i = 0; i < 256; i++)
				alpha[i] = (png_byte)rnd();
			png_set_tRNS(png, info, alpha, n / 2 + 1, NULL);
		}
	} else if (o->trns && (o->color == 0 || o->color == 2)) {
		png_color_16 key = {0};
		/* a value present in the data: the first sample(s) */
		if (o->depth == 16) {
			key.gray = key.red = (png_uint_16)(pix[0] << 8 | pix[1]);
			key.green = o->color == 2 ? (png_uint_16)(pix[2] << 8 | pix[3]) : 0;
			key.blue = o->color == 2 ? (png_uint_16)(pix[4] << 8 | pix[5]) : 0;
		} else if (o->depth == 8) {
			key.gray = key.red = pix[0];
			key.green = o->color == 2 ? pix[1] : 0;
			key.blue = o->color == 2 ? pix[2] : 0;
		} else {
			key.gray = (png_uint_16)(pix[0] >> (8 - o->depth));
		}
		png_set_tRNS(png, info, NULL, 0, &key);
	}
	if (o->srgb == 1)
		png_set_sRGB(png, info, PNG_sRGB_INTENT_PERCEPTUAL);
	else if (o->srgb == 2)
		png_set_gAMA_fixed(png, info, PNG_GAMMA_LINEAR);
	png_write_info(png, info);
	if (o->depth == 16)
		png_set_swap(png); /* no-op on the data's meaning: samples are random anyway */
	png_bytep *rows = malloc(h * sizeof *rows);
	for (uint32_t y = 0; y < h; y++)
		rows[y] = pix + y * rowbytes;
	png_write_image(png, rows);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	free(rows);
	free(pix);
	return out;
}

Test(png_dec, every_format)
{
	static const int formats[][2] = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {2, 8}, {2, 16},
					 {3, 1}, {3, 2}, {3, 4}, {3, 8}, {4, 8}, {4, 16}, {6, 8},
					 {6, 16}};
	unsigned n = 0;
	for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
		for (int interlace = 0; interlace < 2; interlace++)
			for (int trns = 0; trns < 2; trns++) {
				write_opts o = {formats[f][0], formats[f][1], interlace, -1, trns, 6,
						(int)(f % 3)};
				uint32_t w = 1 + rnd() % 61, h = 1 + rnd() % 37;
				kiln_buf b = write_random_png(w, h, &o);
				char what[96];
				snprintf(what, sizeof what, "colour %d depth %d interlace %d trns %d %ux%u",
					 o.color, o.depth, interlace, trns, w, h);
				n += (unsigned)compare_with_libpng(b.data, b.len, NULL, NULL, what);
				kiln_buf_free(&b);
			}
	cr_expect_eq(n, 60);
}

Test(png_dec, each_filter)
{
	static const int filters[] = {PNG_FILTER_NONE, PNG_FILTER_SUB, PNG_FILTER_UP, PNG_FILTER_AVG,
				      PNG_FILTER_PAETH};
	static const int formats[][2] = {{2, 8}, {6, 16}, {0, 2}, {4, 8}, {3, 4}};
	for (size_t f = 0; f < 5; f++)
		for (size_t i = 0; i < 5; i++) {
			write_opts o = {formats[f][0], formats[f][1], (int)(i == 4 && f == 1), filters[i], 0, 6, 0};
			kiln_buf b = write_random_png(97, 41, &o);
			char what[64];
			snprintf(what, sizeof what, "filter %d colour %d depth %d", (int)i, o.color, o.depth);
			cr_expect_eq(compare_with_libpng(b.data, b.len, NULL, NULL, what), 1);
			kiln_buf_free(&b);
		}
}

/* ---- PNGs assembled here from filtered bytes: zlib streams, kiSt ------------------------ */

/* Filtered bytes of a random RGB(A) image, filter types cycling over the rows; the first
 * row of every strip of `rps` rows uses None or Sub. */
static uint8_t *make_filtered(uint32_t w, uint32_t h, int channels, uint32_t rps, size_t *len)
{
	size_t rb = (size_t)w * channels + 1;
	uint8_t *f = malloc(rb * h);
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *r = f + y * rb;
		r[0] = (uint8_t)(y % rps == 0 ? y / rps % 2 : y % 5);
		for (size_t i = 1; i < rb; i++)
			r[i] = (i > 1 && rnd() % 3) ? r[i - 1] : (uint8_t)rnd();
	}
	*len = rb * h;
	return f;
}

typedef struct build_opts {
	int level, strategy;
	uint32_t rps;       /* rows per strip: Z_FULL_FLUSH at each boundary (0: none) */
	int kist;           /* write the kiSt chunk */
	int corrupt_kist;   /* 1: bad adler field, 2: bad offset, 3: wrong version, 4: bad CRC */
	uint32_t idat_max;  /* bytes per IDAT chunk */
} build_opts;

static kiln_buf build_png(uint32_t w, uint32_t h, int color, const uint8_t *filt, size_t flen,
			  const build_opts *o)
{
	int channels = color == 6 ? 4 : 3;
	size_t rb = (size_t)w * channels + 1;
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(deflateInit2(&z, o->level, Z_DEFLATED, 15, 8, o->strategy), Z_OK);
	size_t cap = deflateBound(&z, flen) + 64 + 16 * (size_t)h;
	uint8_t *zbuf = malloc(cap);
	uint32_t rps = o->rps ? o->rps : h;
	uint32_t strips = (h + rps - 1) / rps;
	uint32_t *offs = calloc(strips, 4);
	z.next_out = zbuf;
	z.avail_out = (uInt)cap;
	for (uint32_t s = 0; s < strips; s++) {
		offs[s] = (uint32_t)(z.next_out - zbuf);
		uint32_t r0 = s * rps, r1 = r0 + rps < h ? r0 + rps : h;
		z.next_in = (Bytef *)filt + r0 * rb;
		z.avail_in = (uInt)((r1 - r0) * rb);
		int flush = s + 1 == strips ? Z_FINISH : (o->rps ? Z_FULL_FLUSH : Z_NO_FLUSH);
		int rc = deflate(&z, flush);
		cr_assert(rc == Z_OK || rc == Z_STREAM_END);
	}
	cr_assert_eq(z.avail_in, 0);
	size_t zlen = z.total_out;
	deflateEnd(&z);
	offs[0] = 2;

	kiln_buf out;
	kiln_buf_init(&out, (size_t)256 << 20);
	static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
	kiln_buf_append(&out, sig, 8);
	uint8_t ihdr[13];
	png_test_put_be32(ihdr, w);
	png_test_put_be32(ihdr + 4, h);
	ihdr[8] = 8;
	ihdr[9] = (uint8_t)color;
	ihdr[10] = ihdr[11] = ihdr[12] = 0;
	png_test_add_chunk(&out, "IHDR", ihdr, 13);
	if (o->kist) {
		size_t kl = 20 + 4 * (size_t)strips;
		uint8_t *k = calloc(1, kl);
		k[0] = o->corrupt_kist == 3 ? 2 : 1;
		png_test_put_be32(k + 4, (uint32_t)zlen);
		uint32_t adler = (uint32_t)zbuf[zlen - 4] << 24 | (uint32_t)zbuf[zlen - 3] << 16 |
				 (uint32_t)zbuf[zlen - 2] << 8 | zbuf[zlen - 1];
		png_test_put_be32(k + 8, o->corrupt_kist == 1 ? adler ^ 1 : adler);
		png_test_put_be32(k + 12, rps);
		png_test_put_be32(k + 16, strips);
		for (uint32_t s = 0; s < strips; s++)
			png_test_put_be32(k + 20 + 4 * s, offs[s] + (o->corrupt_kist == 2 && s == strips - 1 ? 1 : 0));
		size_t at = out.len;
		png_test_add_chunk(&out, "kiSt", k, (uint32_t)kl);
		if (o->corrupt_kist == 4)
			out.data[out.len - 1] ^= 0x55;
		(void)at;
		free(k);
	}
	uint32_t step = o->idat_max ? o->idat_max : 1u << 30;
	for (size_t p = 0; p < zlen; p += step)
		png_test_add_chunk(&out, "IDAT", zbuf + p, (uint32_t)(zlen - p < step ? zlen - p : step));
	png_test_add_chunk(&out, "IEND", "", 0);
	free(zbuf);
	free(offs);
	return out;
}

Test(png_dec, zlib_levels_and_strategies)
{
	static const int strategies[] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_RLE, Z_HUFFMAN_ONLY, Z_FIXED};
	size_t flen;
	uint8_t *filt = make_filtered(211, 67, 3, 67, &flen);
	unsigned n = 0;
	for (int level = 0; level <= 9; level++)
		for (int s = 0; s < 5; s++) {
			build_opts o = {level, strategies[s], 0, 0, 0, (uint32_t)(level % 3 == 0 ? 0 : 997 * level)};
			kiln_buf b = build_png(211, 67, 2, filt, flen, &o);
			char what[64];
			snprintf(what, sizeof what, "level %d strategy %d", level, strategies[s]);
			n += (unsigned)compare_with_libpng(b.data, b.len, NULL, NULL, what);
			kiln_buf_free(&b);
		}
	free(filt);
	cr_expect_eq(n, 50);
}

/* ---- damaged inputs ------------------------------------------------------------------- */

Test(png_dec, truncated_and_bitflipped)
{
	write_opts o = {6, 8, 0, -1, 0, 6, 1};
	kiln_buf b = write_random_png(45, 33, &o);
	uint8_t *copy = malloc(b.len);
	/* Truncation anywhere: libpng refuses (it reads through IEND), so must kiln. */
	for (size_t cut = 0; cut < b.len; cut += 1 + cut / 16) {
		kiln_image img;
		char err[ERR_CAP];
		kiln_status st = kiln_pngdec_decode_image(b.data, cut, NULL, &img, NULL, err, sizeof err);
		cr_assert_neq(st, KILN_OK, "cut at %zu of %zu decoded", cut, b.len);
		cr_assert(err[0], "cut at %zu: no message", cut);
	}
	/* Bit flips: the same verdict (and pixels) as libpng. */
	unsigned both_ok = 0;
	for (size_t i = 0; i < 3000; i++) {
		memcpy(copy, b.data, b.len);
		size_t at = rnd() % b.len;
		copy[at] ^= (uint8_t)(1u << (rnd() % 8));
		char what[64];
		snprintf(what, sizeof what, "flip at byte %zu", at);
		both_ok += (unsigned)compare_with_libpng(copy, b.len, NULL, NULL, what);
	}
	cr_expect_gt(both_ok, 0); /* flips in ancillary data or in CRC-free positions */
	free(copy);
	kiln_buf_free(&b);
}

Test(png_dec, extreme_shapes)
{
	kiln_image_limits lim = {.max_width = 200000, .max_height = 200000, .max_pixels = 1u << 24};
	static const uint32_t shapes[][2] = {{1, 1}, {1, 100000}, {100000, 1}};
	for (int s = 0; s < 3; s++)
		for (int color = 0; color < 2; color++) {
			write_opts o = {color ? 6 : 0, color ? 8 : 1, 0, -1, 0, 6, 0};
			kiln_buf b = write_random_png(shapes[s][0], shapes[s][1], &o);
			char what[64];
			snprintf(what, sizeof what, "%ux%u", shapes[s][0], shapes[s][1]);
			cr_expect_eq(compare_with_libpng(b.data, b.len, &lim, NULL, what), 1);
			kiln_buf_free(&b);
		}
}

Test(png_dec, limits_before_allocation)
{
	/* A header claiming 60000 x 60000 pixels followed by nothing useful. */
	write_opts o = {2, 8, 0, -1, 0, 6, 0};
	kiln_buf b = write_random_png(4, 4, &o);
	png_test_put_be32(b.data + 16, 60000);
	png_test_put_be32(b.data + 20, 60000);
	png_test_put_be32(b.data + 29, (uint32_t)crc32(0, b.data + 12, 17));
	kiln_pngdec_info info;
	char err[ERR_CAP];
	cr_assert_eq(kiln_pngdec_probe(b.data, b.len, NULL, &info, err, sizeof err), KILN_ERR_TOO_LARGE);
	cr_assert(strstr(err, "limits"), "%s", err);
	kiln_image_limits lim = {.max_width = 3, .max_height = 100, .max_pixels = 1000};
	kiln_buf c = write_random_png(4, 4, &o);
	kiln_image img;
	cr_assert_eq(kiln_pngdec_decode_image(c.data, c.len, &lim, &img, NULL, err, sizeof err),
		     KILN_ERR_TOO_LARGE);
	cr_assert_null(img.pixels);
	kiln_buf_free(&b);
	kiln_buf_free(&c);
}

/* ---- kiSt ----------------------------------------------------------------------------- */

Test(png_dec, kist_strips)
{
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(2, &pool), KILN_OK);
	static const uint32_t rps_list[] = {1, 7, 16, 64};
	for (int color = 0; color < 2; color++)
		for (size_t r = 0; r < 4; r++) {
			uint32_t w = 123, h = 150, rps = rps_list[r];
			size_t flen;
			uint8_t *filt = make_filtered(w, h, color ? 4 : 3, rps, &flen);
			for (int corrupt = 0; corrupt <= 4; corrupt++) {
				build_opts o = {6, Z_DEFAULT_STRATEGY, rps, 1, corrupt, r == 2 ? 4096 : 0};
				kiln_buf b = build_png(w, h, color ? 6 : 2, filt, flen, &o);
				kiln_pngdec_info info;
				char err[ERR_CAP];
				cr_assert_eq(kiln_pngdec_probe(b.data, b.len, NULL, &info, err, sizeof err), KILN_OK, "%s", err);
				/* 2 (an offset one byte late) passes the structural checks: the strips fail to
				 * inflate and the decode falls back to the serial path. */
				uint32_t want = corrupt && corrupt != 2 ? 1 : (h + rps - 1) / rps;
				cr_expect_eq(info.strips, want, "rps %u corrupt %d: %u strips", rps, corrupt, info.strips);
				char what[64];
				snprintf(what, sizeof what, "kiSt rps %u corrupt %d", rps, corrupt);
				cr_expect_eq(compare_with_libpng(b.data, b.len, NULL, pool, what), 1);
				cr_expect_eq(compare_with_libpng(b.data, b.len, NULL, NULL, what), 1);
				kiln_buf_free(&b);
			}
			free(filt);
		}
	kiln_pool_destroy(pool);
}

/* A kiSt chunk that passes the structural checks over data that was not compressed in
 * strips: the strips fail to inflate and the file decodes serially, same pixels. */
Test(png_dec, kist_lies)
{
	uint32_t w = 64, h = 64;
	size_t flen;
	uint8_t *filt = make_filtered(w, h, 3, 8, &flen);
	/* Strips of 8 rows flushed, but filter types of strip starts set to Paeth/Up: the
	 * strips inflate but need the row above (ordered de-filter). */
	for (uint32_t y = 8; y < h; y += 8)
		filt[y * (3 * w + 1)] = (uint8_t)(2 + y / 8 % 3);
	build_opts o = {6, Z_DEFAULT_STRATEGY, 8, 1, 0, 0};
	kiln_buf b = build_png(w, h, 2, filt, flen, &o);
	cr_expect_eq(compare_with_libpng(b.data, b.len, NULL, NULL, "kiSt with Up/Avg/Paeth strip starts"), 1);
	kiln_buf_free(&b);
	free(filt);
}

/* ---- where the image data ends: libpng's reads (png_dec_cpu.c, libpng_replay) --------- */

/* Every way the zlib stream can end (complete, without or with a bad Adler-32, without a
 * final block, with data past the image, with bad data past it, a small window:
 * tests/png_stream_end.h) split into IDAT chunks
 * in several ways and followed by IEND, an unknown critical chunk, an unknown ancillary
 * chunk or tEXt: kiln accepts exactly what libpng accepts, with the same pixels. */
Test(png_dec, stream_end_like_libpng)
{
	unsigned accepted = 0, refused = 0, sync_accepted = 0, sync_refused = 0;
	png_end_walk w = png_end_walk_start(png_end_images, PNG_END_IMAGES, 12345);
	while (png_end_walk_next(&w)) {
		for (size_t sp = 0; sp < PNG_END_SPLITS; sp++) {
			if (png_end_splits[sp] == 1 && w.zlen > 4000)
				continue;
			for (size_t af = 0; af < PNG_END_AFTERS; af++) {
				kiln_buf b;
				png_end_file(&png_end_images[w.im], w.z, w.zlen, sp, af, &b);
				char what[96];
				snprintf(what, sizeof what, "image %zu, end %d, IDAT of %u, then %s", w.im, w.how,
					 png_end_splits[sp], png_end_afters[af] ? png_end_afters[af] : "IEND");
				int ok = compare_with_libpng(b.data, b.len, NULL, NULL, what);
				accepted += ok;
				refused += !ok;
				if (w.how == END_SYNC) {
					sync_accepted += ok;
					sync_refused += !ok;
				}
				kiln_buf_free(&b);
			}
		}
	}
	cr_assert(!w.failed, "out of memory making the streams");
	/* The table reaches both verdicts, also for the same stream cut into chunks differently
	 * (a stream without its end passes when libpng's last read still finds IDAT data). */
	cr_expect_gt(accepted, 100);
	cr_expect_gt(refused, 50);
	cr_expect_gt(sync_accepted, 0);
	cr_expect_gt(sync_refused, 0);
}

/* kiln's inflater over a whole stream, as the GPU's reproduces it (out of line: gcc's
 * bounds check misreads the tables' second levels where it sees their allocation). */
static __attribute__((noinline)) int inflate_whole(kiln_inflate_tables *t, const kiln_pngdec_info *info,
						   const uint8_t *zs, uint8_t *out, size_t *out_len, size_t *used)
{
	int final = 0;
	return kiln_inflate_raw(t, zs + 2, (size_t)info->zlib_size - 2, out, (size_t)info->filtered_size, out_len,
				used, 0, &final);
}

/* kiln_pngdec_stream_verdict, the rule by which the GPU decoder settles a stream or sends
 * it to the CPU path, on the same files (whole and cut short): what it settles (OK,
 * truncated, corrupt) is the CPU decoder's verdict; every complete stream with a 32 KiB
 * window is settled; the rest (the CPU path decides) include files the CPU path (as
 * libpng) accepts and files it refuses. */
Test(png_dec, stream_verdict_as_the_cpu_path)
{
	unsigned settled = 0, cpu_ok = 0, cpu_refused = 0;
	kiln_inflate_tables *t = malloc(sizeof *t);
	cr_assert_not_null(t);
	char err[ERR_CAP];
	png_end_walk w = png_end_walk_start(png_end_images, PNG_END_IMAGES, 777);
	while (png_end_walk_next(&w)) {
		/* cut short as well: the image then does not come out whole */
		for (int cut = 0; cut < 2; cut++) {
			size_t n = cut ? w.zlen / 2 : w.zlen;
			for (size_t sp = 0; sp < PNG_END_SPLITS; sp += 2) {
				kiln_buf b;
				png_end_file(&png_end_images[w.im], w.z, n, sp, 0, &b);
				kiln_pngdec_info info;
				cr_assert_eq(kiln_pngdec_probe(b.data, b.len, NULL, &info, err, sizeof err), KILN_OK);
				const uint8_t *zs;
				uint8_t *owned;
				cr_assert_eq(kiln_pngdec_zlib_stream(b.data, &info, &zs, &owned, err, sizeof err), KILN_OK);
				uint8_t *out = malloc((size_t)info.filtered_size + 16);
				size_t out_len = 0, used = 0;
				int rc = inflate_whole(t, &info, zs, out, &out_len, &used);
				uint32_t adler = (uint32_t)adler32(adler32(0L, Z_NULL, 0), out, (uInt)out_len);
				kiln_status v = kiln_pngdec_stream_verdict(rc, out_len, used, adler, zs, info.zlib_size,
									   info.filtered_size);
				kiln_image got;
				kiln_status cst = kiln_pngdec_decode_image(b.data, b.len, NULL, &got, NULL, err, sizeof err);
				if (w.how == END_COMPLETE || w.how == END_TRAILING)
					cr_expect_eq(v, cut ? KILN_ERR_TRUNCATED : KILN_OK, "image %zu, end %d, cut %d", w.im,
						     w.how, cut);
				if (v == KILN_ERR_UNSUPPORTED) {
					cpu_ok += cst == KILN_OK;
					cpu_refused += cst != KILN_OK;
				} else {
					settled++;
					cr_assert_eq(cst, v, "image %zu, end %d, cut %d, split %zu: verdict %s, CPU path %s",
						     w.im, w.how, cut, sp, kiln_strerror(v), kiln_strerror(cst));
				}
				if (cst == KILN_OK)
					kiln_image_free(&got);
				free(out);
				free(owned);
				kiln_buf_free(&b);
			}
		}
	}
	cr_assert(!w.failed, "out of memory making the streams");
	free(t);
	cr_expect_gt(settled, 20);
	cr_expect_gt(cpu_ok, 0);
	cr_expect_gt(cpu_refused, 0);
}

/* ---- iCCP: the profile counts where libpng keeps it ------------------------------------ */

typedef struct icc_opts {
	uint32_t length;   /* declared length (0: the real one) */
	uint32_t total;    /* bytes of the profile */
	uint8_t version;
	const char *cls, *space, *pcs, *sig;
	uint32_t intent, tag_count, tag_start, tag_len;
} icc_opts;

static void icc_profile(uint8_t *p, const icc_opts *o)
{
	memset(p, 0, o->total);
	png_test_put_be32(p, o->length ? o->length : o->total);
	p[8] = o->version;
	memcpy(p + 12, o->cls, 4);
	memcpy(p + 16, o->space, 4);
	memcpy(p + 20, o->pcs, 4);
	memcpy(p + 36, o->sig, 4);
	png_test_put_be32(p + 64, o->intent);
	png_test_put_be32(p + 68, 0xF6D6);
	png_test_put_be32(p + 72, 0x10000);
	png_test_put_be32(p + 76, 0xD32D);
	png_test_put_be32(p + 128, o->tag_count);
	for (uint32_t t = 0; t < o->tag_count && 144 + 12 * t <= o->total; t++) {
		memcpy(p + 132 + 12 * t, "wtpt", 4);
		png_test_put_be32(p + 136 + 12 * t, o->tag_start);
		png_test_put_be32(p + 140 + 12 * t, o->tag_len);
	}
	/* a 300-byte pattern after the tags: matches at distance 300 */
	for (uint32_t i = 132 + 12 * o->tag_count, k = 0; i < o->total; i++, k++)
		p[i] = (uint8_t)((k % 300) * 7 + 1);
}

enum { ICC_PLAIN, ICC_NO_ADLER, ICC_CUT, ICC_WINDOW256, ICC_BAD_CRC, ICC_KEYWORD80, ICC_METHOD1, ICC_TWICE,
       ICC_THEN_SRGB };

/* A grey 4x3 PNG with gAMA 1.0 and one iCCP chunk (how: its variant), so that its colour
 * space reads as linear exactly when libpng does not keep the profile. */
static kiln_buf iccp_png(const icc_opts *o, int how, uint32_t keyword_len, int color)
{
	uint8_t *prof = malloc(o->total);
	icc_profile(prof, o);
	uLongf zcap = compressBound(o->total) + 16;
	uint8_t *chunk = malloc(82 + zcap);
	memset(chunk, 'k', keyword_len);
	chunk[keyword_len] = 0;
	chunk[keyword_len + 1] = how == ICC_METHOD1;
	uint8_t *z = chunk + keyword_len + 2;
	uLongf zlen = zcap;
	cr_assert_eq(compress2(z, &zlen, prof, o->total, 9), Z_OK);
	if (how == ICC_NO_ADLER)
		zlen -= 4;
	else if (how == ICC_CUT)
		zlen = zlen * 3 / 4;
	else if (how == ICC_WINDOW256) {
		/* a 256-byte window declared over distances of 300: zlib refuses them only when
		 * they reach out of its current output buffer, which libpng's reads decide */
		z[0] = 0x08;
		z[1] = (uint8_t)((z[1] & 0xe0) | (31 - ((0x08u << 8) | (z[1] & 0xe0)) % 31) % 31);
	}
	kiln_buf b;
	kiln_buf_init(&b, (size_t)64 << 20);
	static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
	PNG_TEST_CHECK(kiln_buf_append(&b, sig, 8));
	uint8_t ihdr[13] = {0, 0, 0, 4, 0, 0, 0, 3, 8, (uint8_t)color, 0, 0, 0};
	png_test_add_chunk(&b, "IHDR", ihdr, 13);
	uint8_t g[4];
	png_test_put_be32(g, 100000);
	png_test_add_chunk(&b, "gAMA", g, 4);
	uint32_t clen = (uint32_t)(keyword_len + 2 + zlen);
	png_test_add_chunk(&b, "iCCP", chunk, clen);
	if (how == ICC_BAD_CRC)
		b.data[b.len - 1] ^= 1;
	if (how == ICC_TWICE) {
		z[40] ^= 0xff; /* a second profile that is not kept */
		png_test_add_chunk(&b, "iCCP", chunk, clen);
	}
	if (how == ICC_THEN_SRGB)
		png_test_add_chunk(&b, "sRGB", "\0", 1);
	uint8_t raw[3 * (1 + 4 * 3)];
	for (size_t i = 0; i < sizeof raw; i++)
		raw[i] = i % (color == 2 ? 13 : 5) == 0 ? 0 : (uint8_t)(i * 9);
	uint8_t zi[128];
	uLongf zil = sizeof zi;
	cr_assert_eq(compress2(zi, &zil, raw, color == 2 ? sizeof raw : 3 * 5, 9), Z_OK);
	png_test_add_chunk(&b, "IDAT", zi, (uint32_t)zil);
	png_test_add_chunk(&b, "IEND", "", 0);
	free(prof);
	free(chunk);
	return b;
}

Test(png_dec, iccp_counts_like_libpng)
{
	static const struct {
		const char *what;
		icc_opts o;
		int how;
		uint32_t keyword_len;
		int color;
		int srgb; /* libpng 1.6.39's verdict, -1: not stated */
	} cases[] = {
		{"valid", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"valid, RGB", {0, 400, 2, "mntr", "RGB ", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 2, 1},
		{"chunk under 92 bytes", {0, 144, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 0}, ICC_PLAIN, 3, 0, 0},
		{"the same, chunk over 92", {0, 144, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 0}, ICC_PLAIN, 79, 0, 1},
		{"length < 132", {100, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"length over the stream", {4000, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"stream past the length", {300, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"length over 8 MiB", {(8u << 20) + 4, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"v4, length not a multiple of 4", {0, 402, 4, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"v2, length not a multiple of 4", {0, 402, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"tag table past the length", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 30, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"no tags", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 0, 0, 0}, ICC_PLAIN, 40, 0, 1},
		{"intent 0xffff", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0xffff, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"intent 5", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 5, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"bad signature", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsq", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"RGB profile, grey image", {0, 400, 2, "mntr", "RGB ", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"grey profile, RGB image", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 2, 0},
		{"CMYK", {0, 400, 2, "mntr", "CMYK", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"abstract class", {0, 400, 2, "abst", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"device link", {0, 400, 2, "link", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"unknown class", {0, 400, 2, "xxxx", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"Lab PCS", {0, 400, 2, "mntr", "GRAY", "Lab ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 1},
		{"bad PCS", {0, 400, 2, "mntr", "GRAY", "Luv ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 40, 0, 0},
		{"tag past the end", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 390, 20}, ICC_PLAIN, 40, 0, 0},
		{"tag start past the end", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 401, 0}, ICC_PLAIN, 40, 0, 0},
		{"tag ending at the end", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 380, 20}, ICC_PLAIN, 40, 0, 1},
		{"tag misaligned", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 145, 20}, ICC_PLAIN, 40, 0, 1},
		{"no Adler-32", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_NO_ADLER, 40, 0, 1},
		{"stream cut", {0, 2000, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_CUT, 40, 0, 0},
		{"256-byte window, long distances", {0, 3000, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_WINDOW256, 40, 0, -1},
		{"256-byte window, 20 KB", {0, 20000, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_WINDOW256, 40, 0, -1},
		{"bad CRC", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_BAD_CRC, 40, 0, 1},
		{"keyword of 80", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_KEYWORD80, 80, 0, 0},
		{"keyword of 79", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_PLAIN, 79, 0, 1},
		{"method 1", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_METHOD1, 40, 0, 0},
		{"a second, bad profile", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_TWICE, 40, 0, 0},
		{"then sRGB", {0, 400, 2, "mntr", "GRAY", "XYZ ", "acsp", 0, 1, 144, 20}, ICC_THEN_SRGB, 40, 0, 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		kiln_buf b = iccp_png(&cases[i].o, cases[i].how, cases[i].keyword_len, cases[i].color);
		cr_assert_eq(compare_with_libpng(b.data, b.len, NULL, NULL, cases[i].what), 1);
		if (cases[i].srgb >= 0) {
			kiln_pngdec_info info;
			char err[ERR_CAP];
			cr_assert_eq(kiln_pngdec_probe(b.data, b.len, NULL, &info, err, sizeof err), KILN_OK, "%s", err);
			cr_expect_eq(info.srgb, (uint32_t)cases[i].srgb, "%s", cases[i].what);
		}
		kiln_buf_free(&b);
	}
}

/* ---- the fuzz target's seeds and findings ---------------------------------------------- */

static unsigned replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		kiln_buf b = load_file(path);
		static const uint8_t none[1];
		kiln_fuzz_png_kiln_fixed(b.len ? b.data : none, b.len);
		kiln_buf_free(&b);
		n++;
	}
	closedir(d);
	return n;
}

Test(png_dec, fuzz_regressions)
{
	cr_expect_gt(replay_dir("tests/fuzz/corpus/png_kiln"), 0);
	replay_dir("tests/fuzz/regressions/png_kiln");
}
