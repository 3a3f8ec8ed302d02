/* PNG files in and out through libpng's low-level API.
 *
 * Reading: the caller's buffer is fed to libpng through a bounded read callback; every
 * libpng error longjmps back to one place, where its message becomes the caller's err
 * text and the cause becomes a kiln_status. The size in IHDR is checked against the
 * image limits the moment IHDR has been parsed (before any other chunk is read and long
 * before pixel memory exists), and ancillary chunks are capped so that a compressed text
 * or ICC chunk cannot inflate into gigabytes. Every PNG kind becomes 8-bit RGBA.
 *
 * Writing: 8-bit RGBA (or RGB when the image has no alpha) appended to a kiln_buf, with
 * an sRGB chunk, or gAMA 1.0 for linear data, so that a reader sees the colour space. */
#include "common/png_io.h"

#include <inttypes.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fileio.h"

/* The signature (8) plus the IHDR chunk: length and type (8), 13 data bytes, CRC (4). */
#define IHDR_END 33u
/* kiln_png_read_file refuses files larger than this. */
#define PNG_FILE_MAX ((size_t)1 << 30)
/* Largest ancillary chunk libpng may buffer or inflate (ICC profiles are far smaller). */
#define CHUNK_MALLOC_MAX ((png_alloc_size_t)8 << 20)
/* Most ancillary chunks libpng may keep (sPLT, unknown chunks). */
#define CHUNK_CACHE_MAX 128u
/* gAMA within 5% of 1.0 (libpng's own "insignificant gamma" tolerance) means linear. */
#define LINEAR_GAMMA_LO 95000
#define LINEAR_GAMMA_HI 105000
/* setjmp's value when the probe stops on purpose after IHDR. */
#define PROBE_DONE 2

/* Chunks we never use and that may be large or compressed: libpng skips them unread
 * (their CRC is still checked), so a zTXt bomb is never inflated. */
static const png_byte ignored_chunks[] = {
	't', 'E', 'X', 't', '\0',
	'z', 'T', 'X', 't', '\0',
	'i', 'T', 'X', 't', '\0',
	's', 'P', 'L', 'T', '\0',
	'e', 'X', 'I', 'f', '\0',
};

struct png_reader {
	const uint8_t *data;
	size_t size;
	size_t pos;
	const kiln_image_limits *limits;
	bool probe;          /* stop as soon as IHDR has been read */
	bool ihdr_seen;
	bool over_limit;     /* libpng refused IHDR for exceeding the user limits */
	kiln_status status;  /* our own cause of failure; KILN_OK when libpng raised it */
	char msg[192];
	char warning[128];   /* the latest libpng warning */
	size_t warning_pos;  /* read position when it was issued */
	png_structp png;
	png_infop info;
	kiln_image img;
	png_bytep *rows;
};

static void set_err(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t cap, const char *fmt, ...)
{
	if (!err || cap == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
}

/* Fails the decode with our own status and message; never returns. */
static void reader_fail(struct png_reader *r, kiln_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));
static void reader_fail(struct png_reader *r, kiln_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof r->msg, fmt, ap);
	va_end(ap);
	r->status = st;
	png_error(r->png, r->msg);
}

static void on_error(png_structp png, png_const_charp msg)
{
	struct png_reader *r = png_get_error_ptr(png);
	if (r->status == KILN_OK) {
		/* Some IHDR errors do not name the chunk ("PNG unsigned integer out of range"). */
		const char *where = !r->ihdr_seen && r->pos > 8 && !strstr(msg, "IHDR") ? "IHDR: " : "";
		/* libpng often warns with the reason, then errors with a summary ("Invalid IHDR
		 * data"): a warning issued without reading further belongs to this error. */
		if (r->warning[0] && r->warning_pos == r->pos)
			snprintf(r->msg, sizeof r->msg, "%s%s (%s)", where, msg, r->warning);
		else
			snprintf(r->msg, sizeof r->msg, "%s%s", where, msg);
	}
	png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
	struct png_reader *r = png_get_error_ptr(png);
	snprintf(r->warning, sizeof r->warning, "%s", msg);
	r->warning_pos = r->pos;
	if (strstr(msg, "exceeds user limit"))
		r->over_limit = true;
}

/* Runs at the first read past the IHDR chunk, which the PNG spec puts first: libpng has
 * read and validated it by then. The probe ends here, and the decoder checks the size
 * before libpng reads (and possibly inflates) any other chunk. */
static void after_ihdr(struct png_reader *r)
{
	r->ihdr_seen = true;
	uint32_t w = png_get_image_width(r->png, r->info);
	uint32_t h = png_get_image_height(r->png, r->info);
	/* libpng sets the width only from a valid IHDR. */
	if (w == 0)
		reader_fail(r, KILN_ERR_CORRUPT, "IHDR is not the first chunk");
	if (r->probe)
		png_longjmp(r->png, PROBE_DONE);
	kiln_status st = kiln_image_check_size(w, h, r->limits);
	if (st != KILN_OK)
		reader_fail(r, st, "IHDR: %" PRIu32 "x%" PRIu32 " pixels is over the image limits", w, h);
}

static void read_mem(png_structp png, png_bytep out, size_t len)
{
	struct png_reader *r = png_get_io_ptr(png);
	if (r->pos >= IHDR_END && !r->ihdr_seen)
		after_ihdr(r);
	if (len > r->size - r->pos)
		reader_fail(r, KILN_ERR_TRUNCATED, "file ends early: %zu bytes, needs at least %zu",
			    r->size, r->pos + len);
	memcpy(out, r->data + r->pos, len);
	r->pos += len;
}

/* The status for an error that libpng raised itself. */
static kiln_status classify(const struct png_reader *r)
{
	if (r->status != KILN_OK)
		return r->status;
	if (r->over_limit)
		return KILN_ERR_TOO_LARGE;
	/* The compressed image data stops before the image does. */
	if (strstr(r->msg, "Not enough image data") || strstr(r->msg, "Not enough compressed data") ||
	    strstr(r->msg, "Truncated compressed data") || strstr(r->msg, "unexpected end of"))
		return KILN_ERR_TRUNCATED;
	if (strstr(r->msg, "memory") || strstr(r->msg, "Memory"))
		return KILN_ERR_NOMEM;
	return KILN_ERR_CORRUPT;
}

static void reader_limits(struct png_reader *r)
{
	png_uint_32 max_w = PNG_UINT_31_MAX, max_h = PNG_UINT_31_MAX;
	if (!r->probe) {
		kiln_image_limits def;
		const kiln_image_limits *l = r->limits;
		if (!l) {
			kiln_image_limits_default(&def);
			l = &def;
		}
		if (l->max_width < max_w)
			max_w = l->max_width;
		if (l->max_height < max_h)
			max_h = l->max_height;
	}
	/* A second line behind after_ihdr(): libpng itself refuses a larger IHDR. */
	png_set_user_limits(r->png, max_w, max_h);
	png_set_chunk_malloc_max(r->png, CHUNK_MALLOC_MAX);
	png_set_chunk_cache_max(r->png, CHUNK_CACHE_MAX);
	png_set_keep_unknown_chunks(r->png, PNG_HANDLE_CHUNK_NEVER, ignored_chunks,
				    (int)(sizeof ignored_chunks / 5));
	/* libpng's defaults, stated: a CRC error in a critical chunk ends the decode, one in an
	 * ancillary chunk drops that chunk; benign errors (ancillary chunk problems, extra
	 * image data) are warnings, as every other PNG reader treats them. */
	png_set_crc_action(r->png, PNG_CRC_ERROR_QUIT, PNG_CRC_WARN_DISCARD);
	png_set_benign_errors(r->png, 1);
}

static bool is_linear(png_structp png, png_infop info)
{
	png_fixed_point gamma;
	if (png_get_valid(png, info, PNG_INFO_sRGB) || png_get_valid(png, info, PNG_INFO_iCCP))
		return false;
	return png_get_gAMA_fixed(png, info, &gamma) && gamma >= LINEAR_GAMMA_LO &&
	       gamma <= LINEAR_GAMMA_HI;
}

/* The part of the decode that libpng may longjmp out of. Everything it acquires is kept in
 * *r (not in locals, whose values would be indeterminate after the longjmp) and freed by
 * the caller. Returns setjmp's value: 0 when the image was read. */
static int decode_run(struct png_reader *r)
{
	int jumped = setjmp(png_jmpbuf(r->png));
	if (jumped)
		return jumped;

	png_set_read_fn(r->png, r, read_mem);
	reader_limits(r);
	png_read_info(r->png, r->info);
	if (r->probe)
		return 0;

	png_uint_32 w, h;
	int depth, color, interlace;
	png_get_IHDR(r->png, r->info, &w, &h, &depth, &color, &interlace, NULL, NULL);
	bool alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid(r->png, r->info, PNG_INFO_tRNS);

	/* Palette -> RGB, gray 1/2/4 -> 8, tRNS -> alpha channel. */
	png_set_expand(r->png);
	/* scale (not strip): v*255/65535 rounded, the accurate 16 -> 8 conversion. */
	if (depth == 16)
		png_set_scale_16(r->png);
	if (!(color & PNG_COLOR_MASK_COLOR))
		png_set_gray_to_rgb(r->png);
	if (!alpha)
		png_set_add_alpha(r->png, 0xffff, PNG_FILLER_AFTER);
	png_set_interlace_handling(r->png);
	png_read_update_info(r->png, r->info);

	if (png_get_channels(r->png, r->info) != 4 || png_get_bit_depth(r->png, r->info) != 8 ||
	    png_get_rowbytes(r->png, r->info) != (size_t)w * 4)
		reader_fail(r, KILN_ERR_UNSUPPORTED, "libpng did not produce RGBA8 rows");

	kiln_status st = kiln_image_alloc(&r->img, w, h, r->limits);
	if (st != KILN_OK)
		reader_fail(r, st, "cannot allocate %" PRIu32 "x%" PRIu32 " pixels", w, h);
	r->img.has_alpha = alpha;
	r->img.srgb = !is_linear(r->png, r->info);
	r->rows = kiln_malloc_array(h, sizeof *r->rows);
	if (!r->rows)
		reader_fail(r, KILN_ERR_NOMEM, "cannot allocate row pointers");
	for (png_uint_32 y = 0; y < h; y++)
		r->rows[y] = kiln_image_row(&r->img, y);
	png_read_image(r->png, r->rows);
	/* Reads up to IEND, so a file cut after its last IDAT is still reported. */
	png_read_end(r->png, NULL);
	return 0;
}

/* Sets up libpng over data[0..size) and runs the decode (or the probe). */
static kiln_status reader_run(struct png_reader *r)
{
	if (!r->data && r->size) {
		snprintf(r->msg, sizeof r->msg, "no input");
		return KILN_ERR_INVALID_ARG;
	}
	if (r->size == 0) {
		snprintf(r->msg, sizeof r->msg, "empty input");
		return KILN_ERR_TRUNCATED;
	}
	/* Say "not a PNG" rather than "truncated" for short inputs that are not one. */
	size_t sig = r->size < 8 ? r->size : 8;
	if (png_sig_cmp(r->data, 0, sig) != 0) {
		snprintf(r->msg, sizeof r->msg, "not a PNG file (bad signature)");
		return KILN_ERR_CORRUPT;
	}
	r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, on_error, on_warning);
	if (!r->png) {
		snprintf(r->msg, sizeof r->msg, "cannot create a libpng reader");
		return KILN_ERR_NOMEM;
	}
	r->info = png_create_info_struct(r->png);
	if (!r->info) {
		snprintf(r->msg, sizeof r->msg, "cannot create a libpng info struct");
		return KILN_ERR_NOMEM;
	}
	int jumped = decode_run(r);
	if (jumped == 0 || (jumped == PROBE_DONE && r->probe))
		return KILN_OK;
	return classify(r);
}

static void reader_free(struct png_reader *r)
{
	png_destroy_read_struct(&r->png, &r->info, NULL);
	free(r->rows);
	r->rows = NULL;
}

kiln_status kiln_png_decode(const uint8_t *data, size_t size, const kiln_image_limits *limits,
			    kiln_image *out, char *err, size_t err_cap)
{
	struct png_reader r = {.data = data, .size = size, .limits = limits};
	set_err(err, err_cap, "%s", "");
	if (!out)
		return KILN_ERR_INVALID_ARG;
	memset(out, 0, sizeof *out);
	kiln_status st = reader_run(&r);
	reader_free(&r);
	if (st != KILN_OK) {
		kiln_image_free(&r.img);
		set_err(err, err_cap, "%s", r.msg[0] ? r.msg : kiln_strerror(st));
		return st;
	}
	*out = r.img;
	return KILN_OK;
}

kiln_status kiln_png_read_file(const char *path, const kiln_image_limits *limits,
			       kiln_image *out, char *err, size_t err_cap)
{
	kiln_buf buf;
	kiln_buf_init(&buf, PNG_FILE_MAX);
	if (out)
		memset(out, 0, sizeof *out);
	if (!path || !out)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = kiln_buf_read_file(&buf, path);
	if (st != KILN_OK) {
		set_err(err, err_cap, "%s: %s", path, kiln_strerror(st));
		goto fail;
	}
	st = kiln_png_decode(buf.data, buf.len, limits, out, err, err_cap);
fail:
	kiln_buf_free(&buf);
	return st;
}

kiln_status kiln_png_probe(const uint8_t *data, size_t size, uint32_t *width, uint32_t *height)
{
	struct png_reader r = {.data = data, .size = size, .probe = true};
	kiln_status st = reader_run(&r);
	if (st == KILN_OK) {
		if (width)
			*width = png_get_image_width(r.png, r.info);
		if (height)
			*height = png_get_image_height(r.png, r.info);
	}
	reader_free(&r);
	return st;
}

struct png_writer {
	kiln_buf *out;
	kiln_status status;  /* the buffer's refusal, when that is what stopped libpng */
	png_structp png;
	png_infop info;
};

static void write_error(png_structp png, png_const_charp msg)
{
	struct png_writer *w = png_get_error_ptr(png);
	if (w->status == KILN_OK)
		w->status = (strstr(msg, "memory") || strstr(msg, "Memory")) ? KILN_ERR_NOMEM
									      : KILN_ERR_INVALID_ARG;
	png_longjmp(png, 1);
}

static void write_warning(png_structp png, png_const_charp msg)
{
	/* Nothing we write can draw a warning worth surfacing. */
}

static void write_mem(png_structp png, png_bytep data, size_t len)
{
	struct png_writer *w = png_get_io_ptr(png);
	kiln_status st = kiln_buf_append(w->out, data, len);
	if (st != KILN_OK) {
		w->status = st;
		png_error(png, "output buffer refused the data");
	}
}

static void flush_mem(png_structp png)
{
}

/* The part of the encode that libpng may longjmp out of; see decode_run. */
static int encode_run(struct png_writer *w, const kiln_image *img)
{
	if (setjmp(png_jmpbuf(w->png)))
		return 1;
	png_set_write_fn(w->png, w, write_mem, flush_mem);
	/* The image was already checked against kiln's limits; do not add libpng's 1M-pixel
	 * default side limit on top. */
	png_set_user_limits(w->png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
	png_set_IHDR(w->png, w->info, img->width, img->height, 8,
		     img->has_alpha ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB,
		     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (img->srgb)
		png_set_sRGB(w->png, w->info, PNG_sRGB_INTENT_PERCEPTUAL);
	else
		png_set_gAMA_fixed(w->png, w->info, PNG_GAMMA_LINEAR);
	png_write_info(w->png, w->info);
	/* Rows stay RGBA in memory; libpng drops the fourth byte for an RGB file. */
	if (!img->has_alpha)
		png_set_filler(w->png, 0, PNG_FILLER_AFTER);
	for (uint32_t y = 0; y < img->height; y++) {
		/* libpng copies the row before transforming it; the cast only satisfies its
		 * non-const prototype. */
		png_write_row(w->png, (png_bytep)kiln_image_row(img, y));
	}
	png_write_end(w->png, NULL);
	return 0;
}

kiln_status kiln_png_encode(const kiln_image *img, kiln_buf *out)
{
	if (!img || !out || !img->pixels || img->width == 0 || img->height == 0 ||
	    img->width > PNG_UINT_31_MAX || img->height > PNG_UINT_31_MAX ||
	    img->stride / 4 < img->width)
		return KILN_ERR_INVALID_ARG;
	struct png_writer w = {.out = out};
	size_t start = out->len;
	kiln_status st = KILN_ERR_NOMEM;
	w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, write_error, write_warning);
	if (!w.png)
		goto fail;
	w.info = png_create_info_struct(w.png);
	if (!w.info)
		goto fail;
	st = encode_run(&w, img) ? w.status : KILN_OK;
fail:
	png_destroy_write_struct(&w.png, &w.info);
	if (st != KILN_OK)
		out->len = start;  /* appended nothing */
	return st;
}

kiln_status kiln_png_write_file(const char *path, const kiln_image *img)
{
	/* Encoder output is bounded by the image itself, which was already size-checked. */
	kiln_buf buf;
	kiln_buf_init(&buf, SIZE_MAX);
	if (!path)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = kiln_png_encode(img, &buf);
	if (st == KILN_OK)
		st = kiln_file_write_atomic(path, buf.data, buf.len);
	kiln_buf_free(&buf);
	return st;
}
