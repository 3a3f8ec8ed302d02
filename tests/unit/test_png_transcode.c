/* PNG -> PNG with kiln's codec (kernels/png/png_transcode.h), judged by libpng: every
 * PngSuite file that libpng reads comes back as the same image (the same RGBA8 pixels
 * through common/png_io.h, the same raw samples, colour type and bit depth through
 * libpng without transforms, never interlaced) with its colour and text chunks carried
 * byte for byte; the x* files are refused with a message; a few Kodak images round trip
 * (in several kiSt strips); --png-rgba8 gives 8-bit RGB(A) with the decoder's pixels;
 * unknown chunks follow the PNG copy rules. Then `kiln encode --format png` through the
 * binary: a folder with a bad file (exit 1, the others written, the JSON report), the
 * usage errors (exit 2). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <png.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/png/png_transcode.h"
#include "tests/unit/testutil.h"
#include "tests/unit/proc_util.h"
#include "tests/pngsuite.h"
#include "tests/png_libpng_read.h"

TestSuite(png_transcode, .timeout = 120);

/* ---- helpers -------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void read_file(const char *path, kiln_buf *buf)
{
	kiln_buf_init(buf, (size_t)1 << 28);
	cr_assert_eq(kiln_buf_read_file(buf, path), KILN_OK, "cannot read %s", path);
}

/* Transcodes in[0, n) into out (initialised here); asserts success. */
static void transcode_ok(const uint8_t *in, size_t n, const kiln_png_transcode_opts *opts, kiln_buf *out,
			 const char *what)
{
	char err[256] = "";
	kiln_buf_init(out, (size_t)1 << 28);
	kiln_png_transcode_info info;
	kiln_status st = kiln_png_transcode(in, n, opts, NULL, out, &info, err, sizeof err);
	cr_assert_eq(st, KILN_OK, "%s: %s (%s)", what, kiln_strerror(st), err);
	cr_assert_eq(info.bytes, out->len, "%s", what);
}

static int channels_of(int ct)
{
	return ct == 2 ? 3 : ct == 4 ? 2 : ct == 6 ? 4 : 1;
}

/* The samples of two raw images are equal (padding bits of a row's last byte ignored). */
static void assert_same_raw(const png_test_raw *a, const png_test_raw *b, const char *what)
{
	cr_assert_eq(a->rowbytes, b->rowbytes, "%s", what);
	uint64_t bits = (uint64_t)channels_of(a->ct) * (uint64_t)a->depth * a->w;
	size_t full = (size_t)(bits / 8), rest = (size_t)(bits % 8);
	for (uint32_t y = 0; y < a->h; y++) {
		const uint8_t *p = a->px + y * a->rowbytes, *q = b->px + y * b->rowbytes;
		cr_assert(memcmp(p, q, full) == 0, "%s: row %u differs", what, y);
		if (rest) {
			uint8_t mask = (uint8_t)(0xFF00u >> rest);
			cr_assert_eq(p[full] & mask, q[full] & mask, "%s: row %u differs at its end", what, y);
		}
	}
}

/* The same RGBA8 image through common/png_io.h (libpng, expanded to RGBA8). */
static void assert_same_rgba(const uint8_t *a, size_t an, const uint8_t *b, size_t bn, bool flags,
			     const char *what)
{
	kiln_image x, y;
	char err[256];
	cr_assert_eq(kiln_png_decode(a, an, NULL, &x, err, sizeof err), KILN_OK, "%s: %s", what, err);
	cr_assert_eq(kiln_png_decode(b, bn, NULL, &y, err, sizeof err), KILN_OK, "%s (output): %s", what, err);
	cr_assert_eq(x.width, y.width, "%s", what);
	cr_assert_eq(x.height, y.height, "%s", what);
	if (flags) {
		cr_assert_eq(x.has_alpha, y.has_alpha, "%s: alpha", what);
		cr_assert_eq(x.srgb, y.srgb, "%s: colour space", what);
	}
	for (uint32_t r = 0; r < x.height; r++)
		cr_assert(memcmp(kiln_image_row(&x, r), kiln_image_row(&y, r), 4 * (size_t)x.width) == 0,
			  "%s: RGBA8 row %u differs", what, r);
	kiln_image_free(&x);
	kiln_image_free(&y);
}

/* Chunk i of a file (walking from the signature): type, data, length; false past IEND. */
typedef struct chunk_ref {
	char type[5];
	const uint8_t *data;
	uint32_t len;
} chunk_ref;

static size_t list_chunks(const uint8_t *f, size_t n, chunk_ref *out, size_t cap)
{
	size_t count = 0, pos = 8;
	while (pos + 12 <= n && count < cap) {
		uint32_t len = be32(f + pos);
		if (len > n - pos - 12)
			break;
		chunk_ref *c = &out[count++];
		memcpy(c->type, f + pos + 4, 4);
		c->type[4] = '\0';
		c->data = f + pos + 8;
		c->len = len;
		pos += 12 + (size_t)len;
		if (strcmp(c->type, "IEND") == 0)
			break;
	}
	return count;
}

static bool has_chunk(const chunk_ref *c, size_t n, const char *type, const uint8_t *data, uint32_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(c[i].type, type) == 0 && c[i].len == len && (len == 0 || memcmp(c[i].data, data, len) == 0))
			return true;
	return false;
}

static size_t count_type(const chunk_ref *c, size_t n, const char *type)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += strcmp(c[i].type, type) == 0;
	return k;
}

/* Every gAMA, cHRM, sRGB, iCCP, tEXt, zTXt, iTXt chunk of in is in out with the same data. */
static void assert_chunks_carried(const uint8_t *in, size_t in_n, const uint8_t *out, size_t out_n,
				  const char *what)
{
	static const char *const carried[] = {"gAMA", "cHRM", "sRGB", "iCCP", "tEXt", "zTXt", "iTXt"};
	enum { MAXC = 512 };
	chunk_ref *a = calloc(MAXC, sizeof *a), *b = calloc(MAXC, sizeof *b);
	cr_assert(a && b);
	size_t na = list_chunks(in, in_n, a, MAXC), nb = list_chunks(out, out_n, b, MAXC);
	for (size_t i = 0; i < na; i++)
		for (size_t k = 0; k < sizeof carried / sizeof carried[0]; k++)
			if (strcmp(a[i].type, carried[k]) == 0)
				cr_assert(has_chunk(b, nb, a[i].type, a[i].data, a[i].len), "%s: its %s chunk is missing",
					  what, a[i].type);
	cr_assert_eq(count_type(b, nb, "IHDR"), 1, "%s", what);
	cr_assert_eq(strcmp(b[nb - 1].type, "IEND"), 0, "%s: no IEND", what);
	free(a);
	free(b);
}

/* ---- PngSuite ------------------------------------------------------------------------- */

/* Calls fn on every PngSuite file whose name starts (or not, want_x false) with 'x'. */
static size_t each_suite_file(bool want_x, void (*fn)(const char *name, const uint8_t *f, size_t n))
{
	static pngsuite_list suite;
	pngsuite_list_files(&suite, want_x ? PNGSUITE_BROKEN : PNGSUITE_VALID);
	for (size_t i = 0; i < suite.n; i++) {
		char path[PATH_MAX];
		kiln_buf f;
		read_file(pngsuite_path(path, sizeof path, suite.names[i]), &f);
		fn(suite.names[i], f.data, f.len);
		kiln_buf_free(&f);
	}
	return suite.n;
}

static void check_keep(const char *name, const uint8_t *f, size_t n)
{
	kiln_buf out;
	transcode_ok(f, n, NULL, &out, name);
	png_test_raw a, b;
	png_test_read_raw(f, n, &a, name);
	png_test_read_raw(out.data, out.len, &b, name);
	cr_assert_eq(a.w, b.w, "%s", name);
	cr_assert_eq(a.h, b.h, "%s", name);
	cr_assert_eq(a.ct, b.ct, "%s: colour type %d became %d", name, a.ct, b.ct);
	cr_assert_eq(a.depth, b.depth, "%s: bit depth %d became %d", name, a.depth, b.depth);
	cr_assert_eq(b.interlace, PNG_INTERLACE_NONE, "%s: the output is interlaced", name);
	assert_same_raw(&a, &b, name);
	assert_same_rgba(f, n, out.data, out.len, true, name);
	assert_chunks_carried(f, n, out.data, out.len, name);
	free(a.px);
	free(b.px);
	kiln_buf_free(&out);
}

Test(png_transcode, pngsuite_same_image_and_chunks)
{
	size_t n = each_suite_file(false, check_keep);
	cr_assert_geq(n, 150, "only %zu PngSuite files", n);
}

static void check_refused(const char *name, const uint8_t *f, size_t n)
{
	char err[256] = "";
	kiln_buf out;
	kiln_buf_init(&out, (size_t)1 << 28);
	kiln_status st = kiln_png_transcode(f, n, NULL, NULL, &out, NULL, err, sizeof err);
	cr_assert_neq(st, KILN_OK, "%s was accepted", name);
	cr_assert_gt(strlen(err), 5, "%s: no message", name);
	cr_assert_null(strchr(err, '\n'), "%s: not one line: %s", name, err);
	cr_assert_eq(out.len, 0, "%s: output written", name);
	/* and libpng refuses it too */
	kiln_image img;
	cr_assert_neq(kiln_png_decode(f, n, NULL, &img, NULL, 0), KILN_OK, "%s", name);
	kiln_buf_free(&out);
}

Test(png_transcode, pngsuite_x_files_refused)
{
	size_t n = each_suite_file(true, check_refused);
	cr_assert_geq(n, 10, "only %zu x files", n);
}

/* --png-rgba8: RGBA8 (or RGB8) of the decoder's pixels, the colour chunks still there. */
static void check_rgba8(const char *name, const uint8_t *f, size_t n)
{
	kiln_png_transcode_opts opts;
	kiln_png_transcode_opts_default(&opts);
	opts.rgba8 = 1;
	opts.quality = KILN_QUALITY_FAST;
	kiln_buf out;
	transcode_ok(f, n, &opts, &out, name);
	png_test_raw b;
	png_test_read_raw(out.data, out.len, &b, name);
	kiln_image x;
	cr_assert_eq(kiln_png_decode(f, n, NULL, &x, NULL, 0), KILN_OK, "%s", name);
	cr_assert_eq(b.ct, x.has_alpha ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB, "%s: colour type %d", name, b.ct);
	cr_assert_eq(b.depth, 8, "%s", name);
	kiln_image_free(&x);
	free(b.px);
	assert_same_rgba(f, n, out.data, out.len, true, name);
	kiln_buf_free(&out);
}

Test(png_transcode, rgba8_option)
{
	static const char *const names[] = {"basi0g01.png", "basn0g16.png", "basi3p04.png", "tbbn3p08.png",
					    "basn4a16.png", "tbrn2c08.png", "g04n0g16.png", "cs3n2c16.png"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char path[PATH_MAX];
		kiln_buf f;
		read_file(test_data_path(path, sizeof path, "pngsuite", names[i]), &f);
		check_rgba8(names[i], f.data, f.len);
		kiln_buf_free(&f);
	}
}

/* ---- Kodak ---------------------------------------------------------------------------- */

/* The batch path (the worker's and `kiln encode`'s): sources read, then encoded together
 * by a runner, give the files of one-at-a-time transcodes; an image that does not fit its
 * output buffer, or that the encoder refuses, fails alone and gets nothing appended. */
#define BATCH_MAX 256
static kiln_buf batch_files[BATCH_MAX];
static size_t batch_count;

static void keep_file(const char *name, const uint8_t *f, size_t n)
{
	(void)name;
	cr_assert_lt(batch_count, BATCH_MAX);
	kiln_buf_init(&batch_files[batch_count], n);
	cr_assert_eq(kiln_buf_append(&batch_files[batch_count], f, n), KILN_OK);
	batch_count++;
}

Test(png_transcode, runner_batches_match_single_transcodes)
{
	batch_count = 0;
	each_suite_file(false, keep_file);
	size_t n = batch_count;
	cr_assert_gt(n, 100);
	kiln_png_transcode_opts opts;
	kiln_png_transcode_opts_default(&opts);
	opts.quality = KILN_QUALITY_FAST;
	static kiln_png_source srcs[BATCH_MAX];
	static kiln_png_source *ptrs[BATCH_MAX];
	static kiln_buf out[BATCH_MAX];
	static kiln_status status[BATCH_MAX];
	char err[256];
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(kiln_png_source_read(batch_files[i].data, batch_files[i].len, NULL, &opts, NULL, &srcs[i],
						  err, sizeof err),
			     KILN_OK, "%s", err);
		ptrs[i] = &srcs[i];
		kiln_buf_init(&out[i], (size_t)1 << 26);
		cr_assert_eq(kiln_buf_append(&out[i], "pre", 3), KILN_OK); /* appended after what is there */
	}
	/* image 1 gets a buffer too small for it, image 2 a colour type the encoder refuses */
	out[1].max = 3 + 40;
	srcs[2].image.color_type = 5;
	kiln_pool *pool = NULL;
	cr_assert_eq(kiln_pool_create(2, &pool), KILN_OK);
	kiln_pngenc_runner *runner = NULL;
	kiln_device cpu = {.kind = KILN_DEVICE_CPU};
	cr_assert_eq(kiln_pngenc_runner_create(&cpu, pool, &runner), KILN_OK);
	cr_assert_eq(kiln_png_source_encode(runner, &opts, ptrs, n, out, status, err, sizeof err), KILN_OK, "%s", err);
	cr_expect_neq(status[1], KILN_OK);
	cr_expect_eq(out[1].len, 3, "nothing appended to a buffer the file does not fit");
	cr_expect_eq(status[2], KILN_ERR_INVALID_ARG);
	cr_expect_eq(out[2].len, 3);
	for (size_t i = 0; i < n; i++) {
		if (i == 1 || i == 2)
			continue;
		cr_assert_eq(status[i], KILN_OK, "file %zu: %s", i, kiln_strerror(status[i]));
		kiln_buf one;
		kiln_buf_init(&one, (size_t)1 << 26);
		cr_assert_eq(kiln_png_transcode(batch_files[i].data, batch_files[i].len, &opts, NULL, &one, NULL, err,
						sizeof err),
			     KILN_OK, "%s", err);
		cr_assert_eq(out[i].len, 3 + one.len, "file %zu", i);
		cr_assert_eq(srcs[i].info.bytes, one.len, "file %zu", i);
		cr_assert(memcmp(out[i].data, "pre", 3) == 0 && memcmp(out[i].data + 3, one.data, one.len) == 0,
			  "file %zu: the batch wrote other bytes", i);
		kiln_buf_free(&one);
	}
	/* an empty batch is fine, and the runner is reusable after failures */
	cr_expect_eq(kiln_png_source_encode(runner, &opts, ptrs, 0, out, status, err, sizeof err), KILN_OK);
	kiln_pngenc_runner_destroy(runner);
	kiln_pool_destroy(pool);
	for (size_t i = 0; i < n; i++) {
		kiln_png_source_free(&srcs[i]);
		kiln_buf_free(&out[i]);
		kiln_buf_free(&batch_files[i]);
	}
}

Test(png_transcode, kodak_round_trip)
{
	static const char *const names[] = {"kodim01.png", "kodim07.png", "kodim23.png"};
	static const kiln_quality q[] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};
	kiln_pool *pool = NULL;
	cr_assert_eq(kiln_pool_create(2, &pool), KILN_OK);
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char path[PATH_MAX];
		kiln_buf f, out;
		read_file(test_data_path(path, sizeof path, "kodak", names[i]), &f);
		kiln_png_transcode_opts opts;
		kiln_png_transcode_opts_default(&opts);
		opts.quality = q[i];
		transcode_ok(f.data, f.len, &opts, &out, names[i]);
		png_test_raw a, b;
		png_test_read_raw(f.data, f.len, &a, names[i]);
		png_test_read_raw(out.data, out.len, &b, names[i]);
		cr_assert_eq(a.ct, b.ct, "%s", names[i]);
		cr_assert_eq(a.depth, b.depth, "%s", names[i]);
		assert_same_raw(&a, &b, names[i]);
		/* kiln's layout: more than one strip at this size */
		chunk_ref c[64];
		size_t nc = list_chunks(out.data, out.len, c, 64);
		cr_assert_eq(count_type(c, nc, "kiSt"), 1, "%s: no kiSt chunk", names[i]);
		cr_assert_gt(count_type(c, nc, "IDAT"), 1, "%s", names[i]);
		/* which kiln's decoder reads strip by strip to the same pixels */
		kiln_image x, y;
		char err[256];
		cr_assert_eq(kiln_png_decode(f.data, f.len, NULL, &x, err, sizeof err), KILN_OK, "%s", err);
		cr_assert_eq(kiln_png_read(out.data, out.len, KILN_PNG_DECODER_KILN, NULL, pool, &y, err, sizeof err),
			     KILN_OK, "%s: %s", names[i], err);
		for (uint32_t r = 0; r < x.height; r++)
			cr_assert(memcmp(kiln_image_row(&x, r), kiln_image_row(&y, r), 4 * (size_t)x.width) == 0,
				  "%s: kiln's decoder, row %u", names[i], r);
		kiln_image_free(&x);
		kiln_image_free(&y);
		free(a.px);
		free(b.px);
		kiln_buf_free(&out);
		kiln_buf_free(&f);
	}
	kiln_pool_destroy(pool);
}

/* ---- chunk rules ---------------------------------------------------------------------- */

/* f with a chunk of data[0, len) inserted at byte offset at (crc_ok false: a wrong CRC). */
static void insert_chunk(kiln_buf *f, size_t at, const char *type, const char *text, size_t size, bool crc_ok)
{
	uint32_t len = (uint32_t)size;
	size_t total = 12 + (size_t)len;
	uint8_t *c = malloc(total);
	cr_assert_not_null(c);
	put_be32(c, len);
	memcpy(c + 4, type, 4);
	memcpy(c + 8, text, len);
	uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), c + 4, len + 4);
	put_be32(c + 8 + len, crc_ok ? crc : crc ^ 1u);
	cr_assert_eq(kiln_buf_reserve(f, total), KILN_OK);
	memmove(f->data + at + total, f->data + at, f->len - at);
	memcpy(f->data + at, c, total);
	f->len += total;
	free(c);
}

/* Offset of the first chunk of this type. */
static size_t chunk_offset(const kiln_buf *f, const char *type)
{
	for (size_t pos = 8; pos + 12 <= f->len; pos += 12 + (size_t)be32(f->data + pos))
		if (memcmp(f->data + pos + 4, type, 4) == 0)
			return pos;
	cr_assert_fail("no %s chunk", type);
	return 0;
}

Test(png_transcode, chunk_copy_rules)
{
	char path[PATH_MAX];
	kiln_buf f, out;
	/* a palette image: PLTE, then IDAT */
	read_file(test_data_path(path, sizeof path, "pngsuite", "basn3p08.png"), &f);
#define LIT(s) s, sizeof(s) - 1
	size_t gamma_in = 0;
	{
		chunk_ref c[64];
		size_t nc = list_chunks(f.data, f.len, c, 64);
		gamma_in = count_type(c, nc, "gAMA");
		cr_assert_eq(count_type(c, nc, "tEXt"), 0);
	}
	insert_chunk(&f, chunk_offset(&f, "PLTE"), "prBf", LIT("before PLTE, safe to copy"), true);
	insert_chunk(&f, chunk_offset(&f, "IDAT"), "prVt", LIT("after PLTE, safe to copy"), true);
	insert_chunk(&f, chunk_offset(&f, "IDAT"), "prVT", LIT("after PLTE, unsafe to copy"), true);
	insert_chunk(&f, chunk_offset(&f, "IDAT"), "kiSt", LIT("not a valid kiSt"), true);
	insert_chunk(&f, chunk_offset(&f, "IDAT"), "tEXt", LIT("Title\0bad CRC"), false);
	insert_chunk(&f, chunk_offset(&f, "IDAT"), "gAMA", LIT("\x01\x02\x03\x04"), true); /* after PLTE */
	insert_chunk(&f, chunk_offset(&f, "IEND"), "tEXt", LIT("Comment\0after the image data"), true);
	insert_chunk(&f, chunk_offset(&f, "IEND"), "prAt", LIT("after IDAT, safe to copy"), true);
	insert_chunk(&f, chunk_offset(&f, "IEND"), "tIME", LIT("\x07\xea\x0b\x16\x06\x00\x00"), true);
	kiln_png_transcode_info info;
	char err[256] = "";
	kiln_buf_init(&out, (size_t)1 << 26);
	cr_assert_eq(kiln_png_transcode(f.data, f.len, NULL, NULL, &out, &info, err, sizeof err), KILN_OK, "%s", err);
	chunk_ref c[64];
	size_t nc = list_chunks(out.data, out.len, c, 64);
	cr_assert(has_chunk(c, nc, "prVt", (const uint8_t *)"after PLTE, safe to copy", 24));
	static const char comment[] = "Comment\0after the image data";
	cr_assert(has_chunk(c, nc, "tEXt", (const uint8_t *)comment, sizeof comment - 1));
	cr_assert_eq(count_type(c, nc, "tIME"), 1);
	cr_assert_eq(count_type(c, nc, "prBf"), 0, "moved across PLTE");
	cr_assert_eq(count_type(c, nc, "prAt"), 0, "moved across IDAT");
	cr_assert_eq(count_type(c, nc, "prVT"), 0, "unsafe-to-copy chunk copied");
	cr_assert_eq(count_type(c, nc, "tEXt"), 1, "the chunk with a CRC error was copied");
	cr_assert_eq(count_type(c, nc, "gAMA"), gamma_in, "a gAMA after PLTE was copied");
	cr_assert(!has_chunk(c, nc, "gAMA", (const uint8_t *)"\x01\x02\x03\x04", 4));
	cr_assert(has_chunk(c, nc, "tIME", (const uint8_t *)"\x07\xea\x0b\x16\x06\x00\x00", 7));
	cr_assert_eq(count_type(c, nc, "PLTE"), 1);
	cr_assert_leq(count_type(c, nc, "kiSt"), 1); /* the encoder's own, if any */
	cr_assert_eq(info.chunks_dropped, 6);
	assert_same_rgba(f.data, f.len, out.data, out.len, true, "basn3p08 + chunks");
	kiln_buf_free(&out);
	kiln_buf_free(&f);
}

/* ---- the binary ------------------------------------------------------------------------ */

static char tmp[64];
static char bin[PATH_MAX];
/* the kiln binary with args (a shell fragment), stdout and stderr to files in tmp */
#define kiln(...) proc_kiln(bin, NULL, tmp, "stdout", "stderr", __VA_ARGS__)
#define slurp(name) proc_slurp(tmp, name, NULL)

static void cli_setup(void)
{
	kiln_bin_abs(bin);
	strcpy(tmp, "/tmp/kiln-png-tc-XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
}

static void cli_teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
	(void)system(cmd);
}

static bool exists(const char *name)
{
	char path[256];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", tmp, name);
	return stat(path, &st) == 0;
}

static const char *const good[] = {"basi0g04", "basn2c16", "basi3p02", "tbrn2c08", "ct1n0g04"};
#define NGOOD (sizeof good / sizeof good[0])

Test(png_transcode, cli_folder_with_a_bad_file, .init = cli_setup, .fini = cli_teardown)
{
	char cmd[PATH_MAX * 2];
	snprintf(cmd, sizeof cmd, "mkdir -p %s/in && cd %s/pngsuite && cp basi0g04.png basn2c16.png basi3p02.png "
		 "tbrn2c08.png ct1n0g04.png %s/in/ && cp xcrn0g04.png %s/in/broken.png",
		 tmp, test_data_dir(), tmp, tmp);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(kiln("encode --format png --json -q --batch 2 %s/in/*.png -o %s/out", tmp, tmp), 1,
		     "%s", slurp("stderr"));
	for (size_t i = 0; i < NGOOD; i++) {
		char in[PATH_MAX], out[PATH_MAX];
		snprintf(in, sizeof in, "%s/in/%s.png", tmp, good[i]);
		snprintf(out, sizeof out, "%s/out/%s.png", tmp, good[i]);
		kiln_buf a, b;
		read_file(in, &a);
		read_file(out, &b);
		assert_same_rgba(a.data, a.len, b.data, b.len, true, good[i]);
		kiln_buf_free(&a);
		kiln_buf_free(&b);
	}
	cr_assert(!exists("out/broken.png"), "the bad file was written");
	cr_assert(strstr(slurp("stderr"), "broken.png"), "stderr does not name the bad file");
	json_error_t jerr;
	json_t *root = json_loads(slurp("stdout"), 0, &jerr);
	cr_assert_not_null(root, "not JSON: %s", jerr.text);
	cr_assert_eq(json_integer_value(json_object_get(root, "ok")), (json_int_t)NGOOD);
	cr_assert_eq(json_integer_value(json_object_get(root, "failed")), 1);
	json_t *outputs = json_object_get(root, "outputs");
	cr_assert_eq(json_array_size(outputs), NGOOD + 1);
	size_t errors = 0;
	for (size_t i = 0; i < json_array_size(outputs); i++) {
		json_t *o = json_array_get(outputs, i);
		const char *input = json_string_value(json_object_get(o, "input"));
		const char *status = json_string_value(json_object_get(o, "status"));
		cr_assert(input && status);
		if (strstr(input, "broken.png")) {
			errors++;
			cr_assert_str_eq(status, "error");
			cr_assert_not_null(json_object_get(o, "detail"));
		} else {
			cr_assert_str_eq(status, "ok", "%s", input);
			cr_assert_gt(json_integer_value(json_object_get(o, "bytes")), 0);
			cr_assert_str_eq(strrchr(json_string_value(json_object_get(o, "output")), '.'), ".png");
		}
	}
	cr_assert_eq(errors, 1);
	json_decref(root);

	/* one input to a named file, with the RGBA8 option */
	cr_assert_eq(kiln("encode --format png --png-rgba8 -q %s/in/basn2c16.png -o %s/one.png", tmp, tmp), 0,
		     "%s", slurp("stderr"));
	char one[PATH_MAX];
	snprintf(one, sizeof one, "%s/one.png", tmp);
	kiln_buf b;
	read_file(one, &b);
	png_test_raw r;
	png_test_read_raw(b.data, b.len, &r, "one.png");
	cr_assert_eq(r.ct, PNG_COLOR_TYPE_RGB);
	cr_assert_eq(r.depth, 8);
	free(r.px);
	kiln_buf_free(&b);
}

Test(png_transcode, cli_usage_errors, .init = cli_setup, .fini = cli_teardown)
{
	char cmd[PATH_MAX * 2];
	snprintf(cmd, sizeof cmd, "mkdir -p %s/in && cp %s/pngsuite/basn0g08.png %s/in/a.png", tmp, test_data_dir(), tmp);
	cr_assert_eq(system(cmd), 0);
	static const char *const bad[] = {"--mipmaps",	      "--block 4x4",	       "--container dds",
					  "--container ktx2", "--container astc", "--alpha-cutoff 10",
					  "--srgb"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(kiln("encode --format png %s %s/in/a.png -o %s/out/", bad[i], tmp, tmp), 2, "%s", bad[i]);
		char *err = slurp("stderr");
		cr_assert_gt(strlen(err), 10, "%s: no message", bad[i]);
		cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "%s: not one line: %s", bad[i], err);
		cr_assert(!exists("out/a.png"), "%s: something was written", bad[i]);
	}
	cr_assert_eq(kiln("encode --png-rgba8 %s/in/a.png -o %s/out/", tmp, tmp), 2);
	/* the GPU encodes PNG too; without one, asking for it is fatal */
	if (kiln_gpu_count() == 0)
		cr_assert_eq(kiln("encode --format png --device gpu %s/in/a.png -o %s/out/", tmp, tmp), 3);
	/* an output that is its own input */
	cr_assert_eq(kiln("encode --format png %s/in/a.png -o %s/in/", tmp, tmp), 2);
	cr_assert_eq(kiln("encode --format png -q %s/in/a.png -o %s/out/", tmp, tmp), 0, "%s", slurp("stderr"));
	cr_assert(exists("out/a.png"));
}
