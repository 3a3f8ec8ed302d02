/* The CPU backend of kiln's PNG decoder: png_parse.h for the container, png_inflate.h and
 * png_defilter.h (the functions the GPU backend runs too) for the data.
 *
 * Serial path: the IDAT data is gathered into one buffer (unless a single chunk holds it),
 * inflated into the filtered image (bounded by the exact size IHDR gives), checked against
 * its Adler-32, de-filtered row by row in place and converted to RGBA8.
 * Strip path (valid kiSt chunk): each strip is inflated from its own offset with an empty
 * window, checksummed (the strip Adler-32s are combined, png_check.h), de-filtered and
 * converted on its own, in parallel over the pool. A strip whose deflate data does not
 * end where the chunk says sends the whole file back to the serial path; a strip whose
 * first row needs the row above is de-filtered after its predecessor, in order. */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/alloc.h"
#include "kernels/png/png_check.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_defilter.h"
#include "kernels/png/png_inflate.h"
#include "kernels/png/png_parse.h"

kiln_status kiln_pngdec_probe(const uint8_t *data, size_t size, const kiln_image_limits *limits,
			      kiln_pngdec_info *info, char *err, size_t err_cap)
{
	kiln_pngdec_info local;
	return kiln_png_parse(data, size, limits, info ? info : &local, err, err_cap);
}

kiln_status kiln_pngdec_zlib_stream(const uint8_t *data, const kiln_pngdec_info *info, const uint8_t **z,
				    uint8_t **owned, char *err, size_t err_cap)
{
	*owned = NULL;
	*z = NULL;
	if (info->zlib_size < 2) {
		kiln_msgf(err, err_cap, "IDAT: not enough image data");
		return KILN_ERR_TRUNCATED;
	}
	size_t p = (size_t)info->idat_offset;
	const uint8_t *stream = data + p + 8;
	if (info->idat_chunks > 1) {
		/* The chunks' lengths follow the stream (big-endian, one per chunk): the replay of
		 * libpng's reads in kiln_pngdec_inflate needs the chunk boundaries. */
		uint8_t *buf = malloc((size_t)info->zlib_size + 4 * (size_t)info->idat_chunks);
		if (!buf) {
			kiln_msgf(err, err_cap, "cannot allocate the zlib stream");
			return KILN_ERR_NOMEM;
		}
		size_t o = 0;
		uint8_t *lens = buf + (size_t)info->zlib_size;
		for (uint32_t c = 0; c < info->idat_chunks; c++) {
			uint32_t l = kiln_png_be32(data + p);
			memcpy(buf + o, data + p + 8, l);
			memcpy(lens + 4 * (size_t)c, data + p, 4);
			o += l;
			p += 12 + (size_t)l;
		}
		stream = *owned = buf;
	}
	static const char *const header_err[] = {"", "unknown compression method", "invalid window size",
						  "incorrect header check", "preset dictionary not allowed"};
	int hc = kiln_zlib_header_check(stream[0], stream[1]);
	if (hc != 0) {
		kiln_msgf(err, err_cap, "IDAT: %s", header_err[hc]);
		free(*owned);
		*owned = NULL;
		return KILN_ERR_CORRUPT;
	}
	*z = stream;
	return KILN_OK;
}

static kiln_status infl_status(int rc, char *err, size_t cap)
{
	switch (rc) {
	case KILN_INFL_ERR_TRUNCATED:
		kiln_msgf(err, cap, "IDAT: not enough image data (the zlib stream is cut short)");
		return KILN_ERR_TRUNCATED;
	case KILN_INFL_ERR_DISTANCE:
		kiln_msgf(err, cap, "IDAT: invalid distance too far back");
		return KILN_ERR_CORRUPT;
	default:
		kiln_msgf(err, cap, "IDAT: invalid deflate data");
		return KILN_ERR_CORRUPT;
	}
}

/* De-filters rows [r0, r1) of the (non-interlaced) image in place and converts them. */
static kiln_status defilter_rows(const kiln_pngdec_info *info, uint8_t *filt, uint32_t r0, uint32_t r1,
				 uint8_t *rgba, size_t stride)
{
	size_t rb = (size_t)info->rowbytes;
	for (uint32_t y = r0; y < r1; y++) {
		uint8_t *row = filt + (size_t)y * (rb + 1);
		uint32_t type = row[0];
		if (type > 4)
			return KILN_ERR_CORRUPT;
		const uint8_t *prev = y > 0 ? row - rb : NULL;
		kiln_png_unfilter_row(type, row + 1, prev, rb, info->bpp);
		kiln_png_expand_row(&info->format, row + 1, info->width, rgba + (size_t)y * stride, 4);
	}
	return KILN_OK;
}

/* Adam7: the passes lie one after another in filt. */
static kiln_status defilter_adam7(const kiln_pngdec_info *info, uint8_t *filt, uint8_t *rgba,
				  size_t stride)
{
	size_t off = 0;
	for (uint32_t p = 0; p < 7; p++) {
		uint32_t pw, ph;
		kiln_adam7_pass_size(p, info->width, info->height, &pw, &ph);
		if (pw == 0)
			continue;
		size_t rb = (size_t)kiln_png_row_bytes(info->format.color_type, info->format.bit_depth, pw);
		for (uint32_t j = 0; j < ph; j++) {
			uint8_t *row = filt + off + (size_t)j * (rb + 1);
			if (row[0] > 4)
				return KILN_ERR_CORRUPT;
			kiln_png_unfilter_row(row[0], row + 1, j > 0 ? row - rb : NULL, rb, info->bpp);
			uint32_t y = kiln_adam7_y0[p] + j * kiln_adam7_dy[p];
			uint8_t *dst = rgba + (size_t)y * stride + 4 * (size_t)kiln_adam7_x0[p];
			kiln_png_expand_row(&info->format, row + 1, pw, dst, 4 * (size_t)kiln_adam7_dx[p]);
		}
		off += (rb + 1) * ph;
	}
	return KILN_OK;
}

/* ---- libpng's reading of the IDAT data, replayed -------------------------------------
 *
 * libpng 1.6.39 (png_read_IDAT_data and png_read_finish_IDAT in pngrutil.c, with
 * common/png_io.c's settings) reads the image data thus:
 * - the IDAT run is handed to zlib's inflate (Z_NO_FLUSH) in pieces of at most 8192 bytes
 *   (PNG_IDAT_READ_SIZE), never across a chunk boundary, one call sequence per row (per
 *   row of each Adam7 pass) with exactly the row's bytes as output space; a new piece is
 *   read whenever the previous one is used up at the start of a step, and if the chunk
 *   after the run is not an IDAT that is the error "Not enough image data" (a refusal);
 * - any zlib error while rows are read (bad data, a wrong Adler-32 that zlib reaches while
 *   finishing the last row's call) refuses the file; so does a stream ending before the
 *   last row;
 * - after the last row, unless zlib already returned Z_STREAM_END, it "finishes" the
 *   stream: it inflates into a 1024-byte scratch (reading a piece first if none is left,
 *   with the same refusal when the IDAT run is over), and
 *   . stops at Z_STREAM_END (extra data is only a warning), or at a zlib error (also only a
 *     warning: a bad trailer or bad data past the image is accepted),
 *   . stops silently when that first call produced no output: the stream is taken as
 *     ended, even without its final block or Adler-32, whatever chunk follows (IEND, an
 *     unknown critical chunk: png_read_end reads the chunks after the image data without
 *     an info struct, checking only their CRCs);
 *   . when it did produce output (data past the image), goes on reading pieces until one
 *     of the two stops above, and refuses the file ("Not enough image data") when the IDAT
 *     run ends first.
 * kiln's own inflater decides the common case itself: a stream with a 32 KiB window
 * (CINFO 7) whose final block ends with the image's last byte and whose Adler-32 follows
 * and matches is accepted by libpng whatever the piece boundaries. Every other stream that
 * yields the whole image is replayed here with zlib (the library libpng drives), piece by
 * piece and row by row, and the replay's verdict and bytes stand. A smaller window counts
 * as "other" because zlib then refuses distances beyond it that reach out of the current
 * row call, which kiln's inflater does not model. */
#define LIBPNG_IDAT_READ_SIZE 8192u
#define LIBPNG_INFLATE_BUF_SIZE 1024u

typedef struct idat_reader {
	z_stream zs;
	const uint8_t *z;    /* the zlib stream */
	const uint8_t *lens; /* big-endian chunk lengths after the stream; NULL: one chunk */
	uint64_t size;       /* bytes of the stream */
	uint32_t chunks, chunk;
	uint64_t chunk_pos;  /* offset in z of the current chunk's data */
	uint64_t left;       /* bytes of the current chunk not yet handed to zlib (idat_size) */
	const char *why;     /* libpng's reason for a refusal */
	kiln_status st;
} idat_reader;

static uint64_t reader_chunk_len(const idat_reader *r, uint32_t c)
{
	return r->lens ? kiln_png_be32(r->lens + 4 * (size_t)c) : r->size;
}

/* libpng's "read a piece when none is left": false when the IDAT run is over. */
static bool reader_fetch(idat_reader *r)
{
	while (r->left == 0) {
		if (r->chunk + 1 >= r->chunks) {
			r->why = "not enough image data (the zlib stream is cut short)";
			r->st = KILN_ERR_TRUNCATED;
			return false;
		}
		r->chunk_pos += reader_chunk_len(r, r->chunk);
		r->chunk++;
		r->left = reader_chunk_len(r, r->chunk);
	}
	uint64_t len = reader_chunk_len(r, r->chunk);
	uint32_t n = r->left < LIBPNG_IDAT_READ_SIZE ? (uint32_t)r->left : LIBPNG_IDAT_READ_SIZE;
	r->zs.next_in = (Bytef *)(r->z + r->chunk_pos + (len - r->left));
	r->zs.avail_in = n;
	r->left -= n;
	return true;
}

static const char *reader_zmsg(const idat_reader *r, int ret)
{
	if (r->zs.msg && strcmp(r->zs.msg, "incorrect data check") == 0)
		return "incorrect data check (Adler-32)";
	if (r->zs.msg)
		return r->zs.msg;
	return ret == Z_NEED_DICT ? "preset dictionary not allowed" : "invalid deflate data";
}

/* One row call (png_read_IDAT_data with output): false on libpng's error. *ended is set
 * at Z_STREAM_END. */
static bool reader_row(idat_reader *r, uint8_t *out, size_t n, bool *ended)
{
	r->zs.next_out = out;
	do {
		if (r->zs.avail_in == 0 && !reader_fetch(r))
			return false;
		uInt step = n > (size_t)UINT_MAX ? UINT_MAX : (uInt)n;
		r->zs.avail_out = step;
		int ret = inflate(&r->zs, Z_NO_FLUSH);
		n -= step - r->zs.avail_out;
		if (ret == Z_STREAM_END) {
			*ended = true;
			break;
		}
		if (ret != Z_OK) {
			r->why = reader_zmsg(r, ret);
			r->st = KILN_ERR_CORRUPT;
			return false;
		}
	} while (n > 0);
	if (n > 0) {
		r->why = "not enough image data";
		r->st = KILN_ERR_TRUNCATED;
		return false;
	}
	return true;
}

/* png_read_finish_IDAT: false on libpng's error (the IDAT run ends while zlib still
 * needs data, after the first call or once output past the image appeared). */
static bool reader_finish(idat_reader *r)
{
	uint8_t tmp[LIBPNG_INFLATE_BUF_SIZE];
	uint64_t extra = 0;
	do {
		if (r->zs.avail_in == 0 && !reader_fetch(r))
			return false;
		r->zs.next_out = tmp;
		r->zs.avail_out = sizeof tmp;
		int ret = inflate(&r->zs, Z_NO_FLUSH);
		extra += sizeof tmp - r->zs.avail_out;
		if (ret != Z_OK)
			return true; /* Z_STREAM_END, or an error libpng only warns about */
	} while (extra > 0);
	return true;
}

/* Replays libpng's reads of the whole IDAT run into filt (the image's filtered bytes, in
 * kiln's layout: rows, or the Adam7 passes one after another). */
static kiln_status libpng_replay(const kiln_pngdec_info *info, const uint8_t *z, uint8_t *filt, char *err,
				 size_t cap)
{
	idat_reader r;
	memset(&r, 0, sizeof r);
	r.z = z;
	r.size = info->zlib_size;
	r.chunks = info->idat_chunks;
	r.lens = info->idat_chunks > 1 ? z + (size_t)info->zlib_size : NULL;
	r.left = reader_chunk_len(&r, 0);
	/* windowBits 0: the window the stream's header declares, as png_inflate_claim */
	if (inflateInit2(&r.zs, 0) != Z_OK) {
		kiln_msgf(err, cap, "cannot set up zlib");
		return KILN_ERR_NOMEM;
	}
	bool ok = true, ended = false;
	size_t off = 0;
	for (uint32_t p = 0; p < (info->interlace ? 7u : 1u) && ok; p++) {
		uint32_t pw = info->width, ph = info->height;
		if (info->interlace)
			kiln_adam7_pass_size(p, info->width, info->height, &pw, &ph);
		if (pw == 0 || ph == 0)
			continue;
		size_t rb = (size_t)kiln_png_row_bytes(info->format.color_type, info->format.bit_depth, pw) + 1;
		for (uint32_t j = 0; j < ph && ok; j++, off += rb)
			ok = reader_row(&r, filt + off, rb, &ended);
	}
	if (ok && !ended)
		ok = reader_finish(&r);
	inflateEnd(&r.zs);
	if (!ok) {
		kiln_msgf(err, cap, "IDAT: %s", r.why);
		return r.st;
	}
	return KILN_OK;
}

/* Inflates the whole stream (z from kiln_pngdec_zlib_stream) and decides as libpng does
 * (see above): kiln's inflater for a clean stream, the replay for anything else that
 * yields the whole image. */
kiln_status kiln_pngdec_inflate(const kiln_pngdec_info *info, const uint8_t *z, uint8_t *filt, char *err,
				size_t cap)
{
	kiln_inflate_tables *t = malloc(sizeof *t);
	if (!t)
		return KILN_ERR_NOMEM;
	size_t out_len = 0, used = 0;
	int final = 0;
	size_t zlen = (size_t)info->zlib_size;
	int rc = kiln_inflate_raw(t, z + 2, zlen - 2, filt, (size_t)info->filtered_size, &out_len, &used,
				  0, &final);
	free(t);
	uint32_t adler = (uint32_t)adler32(0L, Z_NULL, 0);
	for (size_t done = 0, total = (size_t)info->filtered_size; out_len >= total && done < total;) {
		size_t n = total - done > (1u << 30) ? (1u << 30) : total - done;
		adler = (uint32_t)adler32(adler, filt + done, (uInt)n);
		done += n;
	}
	/* the rule the GPU decoder follows too (png_dec.h) */
	kiln_status v = kiln_pngdec_stream_verdict(rc, out_len, used, adler, z, zlen, info->filtered_size);
	if (v == KILN_OK)
		return KILN_OK;
	if (v == KILN_ERR_UNSUPPORTED)
		return libpng_replay(info, z, filt, err, cap);
	/* an error or the end of the data before the image's end: zlib's too */
	if (rc != KILN_INFL_OK && rc != KILN_INFL_OUTPUT_FULL)
		return infl_status(rc, err, cap);
	kiln_msgf(err, cap, "IDAT: not enough image data (%zu of %llu bytes)", out_len,
		  (unsigned long long)info->filtered_size);
	return KILN_ERR_TRUNCATED;
}

struct strip_job {
	const kiln_pngdec_info *info;
	const uint8_t *z;
	const uint8_t *offsets; /* big-endian table in the file */
	uint8_t *filt;
	uint8_t *rgba;
	size_t stride;
	uint32_t *adler;     /* per strip */
	uint8_t *state;      /* per strip: 0 done, 1 inflate failed, 2 needs the row above, 3 bad filter */
};

static void strip_run(void *ctx, size_t begin, size_t end)
{
	struct strip_job *j = ctx;
	const kiln_pngdec_info *info = j->info;
	kiln_inflate_tables *t = malloc(sizeof *t);
	size_t rowlen = (size_t)info->rowbytes + 1;
	for (size_t i = begin; i < end; i++) {
		if (!t) {
			j->state[i] = 1;
			continue;
		}
		uint32_t r0 = (uint32_t)i * info->rows_per_strip;
		uint32_t r1 = r0 + info->rows_per_strip;
		if (r1 > info->height || r1 < r0)
			r1 = info->height;
		size_t off = kiln_png_be32(j->offsets + 4 * i);
		size_t next = i + 1 < info->strips ? kiln_png_be32(j->offsets + 4 * (i + 1))
						   : (size_t)info->zlib_size - 4;
		uint8_t *out = j->filt + (size_t)r0 * rowlen;
		size_t want = (size_t)(r1 - r0) * rowlen, out_len = 0, used = 0;
		int final = 0;
		int rc = kiln_inflate_raw(t, j->z + off, next - off, out, want, &out_len, &used, 1, &final);
		bool last = i + 1 == info->strips;
		if (rc != KILN_INFL_OK || out_len != want || final != (int)last) {
			j->state[i] = 1;
			continue;
		}
		j->adler[i] = (uint32_t)adler32(adler32(0L, Z_NULL, 0), out, (uInt)want);
		if (out[0] > 1 && i > 0) {
			j->state[i] = 2;
			continue;
		}
		j->state[i] = defilter_rows(info, j->filt, r0, r1, j->rgba, j->stride) == KILN_OK ? 0 : 3;
	}
	free(t);
}

/* 1: decoded; 0: the strips do not match the chunk (decode serially); <0: a status. */
static int decode_strips(const uint8_t *data, const kiln_pngdec_info *info, const uint8_t *z,
			 uint8_t *filt, uint8_t *rgba, size_t stride, kiln_pool *pool, kiln_status *st,
			 char *err, size_t cap)
{
	size_t n = info->strips;
	uint32_t *adler = malloc(n * sizeof *adler);
	uint8_t *state = malloc(n);
	if (!adler || !state) {
		free(adler);
		free(state);
		*st = KILN_ERR_NOMEM;
		return -1;
	}
	struct strip_job job = {info, z, data + info->kist_offsets, filt, rgba, stride, adler, state};
	kiln_pool_for(pool, n, 1, strip_run, &job);
	int result = 1;
	uint32_t total = 1;
	uint64_t rowlen = info->rowbytes + 1;
	for (size_t i = 0; i < n && result == 1; i++) {
		if (state[i] == 1) {
			result = 0;
			break;
		}
		uint32_t r0 = (uint32_t)i * info->rows_per_strip;
		uint32_t r1 = r0 + info->rows_per_strip;
		if (r1 > info->height || r1 < r0)
			r1 = info->height;
		total = kiln_adler32_combine(total, adler[i], (uint64_t)(r1 - r0) * rowlen);
	}
	if (result == 1 && total != info->zlib_adler) {
		/* The strips decoded but the data is not what the trailer says: the serial path
		 * reaches the same verdict with libpng's wording. */
		result = 0;
	}
	for (size_t i = 0; i < n && result == 1; i++) {
		if (state[i] == 2) {
			uint32_t r0 = (uint32_t)i * info->rows_per_strip;
			uint32_t r1 = r0 + info->rows_per_strip;
			if (r1 > info->height || r1 < r0)
				r1 = info->height;
			state[i] = defilter_rows(info, filt, r0, r1, rgba, stride) == KILN_OK ? 0 : 3;
		}
		if (state[i] == 3) {
			kiln_msgf(err, cap, "IDAT: bad adaptive filter value");
			*st = KILN_ERR_CORRUPT;
			result = -1;
		}
	}
	free(adler);
	free(state);
	return result;
}

/* Decodes a file whose probe is `info` (the container was checked there: not again). */
static kiln_status decode_probed(const uint8_t *data, const kiln_pngdec_info *probed, uint8_t *rgba,
				 size_t stride, kiln_pool *pool, char *err, size_t err_cap)
{
	kiln_pngdec_info info = *probed;
	if (!rgba || stride < 4 * (size_t)info.width) {
		kiln_msgf(err, err_cap, "output buffer too small");
		return KILN_ERR_INVALID_ARG;
	}
	const uint8_t *z = NULL;
	uint8_t *owned = NULL, *filt = NULL;
	kiln_status st = kiln_pngdec_zlib_stream(data, &info, &z, &owned, err, err_cap);
	if (st != KILN_OK)
		return st;
	/* The word-copy fast path of the inflater may write 7 bytes past a match inside the
	 * output; the slack keeps even the last strip's writes inside the allocation. */
	filt = malloc((size_t)info.filtered_size + 16);
	if (!filt) {
		kiln_msgf(err, err_cap, "cannot allocate %llu bytes for the image data",
			  (unsigned long long)info.filtered_size);
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	if (info.strips > 1 && kiln_pngdec_full_window(z)) { /* other windows: see kiln_pngdec_inflate */
		int r = decode_strips(data, &info, z, filt, rgba, stride, pool, &st, err, err_cap);
		if (r != 0)
			goto fail; /* decoded (st OK) or a definite error */
	}
	st = kiln_pngdec_inflate(&info, z, filt, err, err_cap);
	if (st != KILN_OK)
		goto fail;
	st = info.interlace ? defilter_adam7(&info, filt, rgba, stride)
			    : defilter_rows(&info, filt, 0, info.height, rgba, stride);
	if (st != KILN_OK)
		kiln_msgf(err, err_cap, "IDAT: bad adaptive filter value");
fail:
	free(filt);
	free(owned);
	return st;
}

kiln_status kiln_pngdec_decode_cpu_pool(const uint8_t *data, size_t size,
					const kiln_image_limits *limits, uint8_t *rgba,
					size_t stride, kiln_pngdec_info *info_out, kiln_pool *pool,
					char *err, size_t err_cap)
{
	kiln_pngdec_info info;
	kiln_status st = kiln_png_parse(data, size, limits, &info, err, err_cap);
	if (info_out)
		*info_out = info;
	if (st != KILN_OK)
		return st;
	return decode_probed(data, &info, rgba, stride, pool, err, err_cap);
}

kiln_status kiln_pngdec_decode_cpu(const uint8_t *data, size_t size, const kiln_image_limits *limits,
				   uint8_t *rgba, size_t stride, kiln_pngdec_info *info, char *err,
				   size_t err_cap)
{
	return kiln_pngdec_decode_cpu_pool(data, size, limits, rgba, stride, info, NULL, err, err_cap);
}

kiln_status kiln_pngdec_decode_probed_image(const uint8_t *data, const kiln_pngdec_info *info,
					   const kiln_image_limits *limits, kiln_image *out,
					   kiln_pool *pool, char *err, size_t err_cap)
{
	memset(out, 0, sizeof *out);
	kiln_image img;
	kiln_status st = kiln_image_alloc(&img, info->width, info->height, limits);
	if (st != KILN_OK) {
		kiln_msgf(err, err_cap, "cannot allocate %ux%u pixels", info->width, info->height);
		return st;
	}
	st = decode_probed(data, info, img.pixels, img.stride, pool, err, err_cap);
	if (st != KILN_OK) {
		kiln_image_free(&img);
		return st;
	}
	img.has_alpha = info->has_alpha != 0;
	img.srgb = info->srgb != 0;
	*out = img;
	return KILN_OK;
}

kiln_status kiln_pngdec_decode_image(const uint8_t *data, size_t size,
				     const kiln_image_limits *limits, kiln_image *out,
				     kiln_pool *pool, char *err, size_t err_cap)
{
	if (!out)
		return KILN_ERR_INVALID_ARG;
	memset(out, 0, sizeof *out);
	kiln_pngdec_info info;
	kiln_status st = kiln_png_parse(data, size, limits, &info, err, err_cap);
	if (st != KILN_OK)
		return st;
	return kiln_pngdec_decode_probed_image(data, &info, limits, out, pool, err, err_cap);
}
