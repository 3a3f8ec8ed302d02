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
		uint8_t *buf = malloc((size_t)info->zlib_size);
		if (!buf) {
			kiln_msgf(err, err_cap, "cannot allocate the zlib stream");
			return KILN_ERR_NOMEM;
		}
		size_t o = 0;
		for (uint32_t c = 0; c < info->idat_chunks; c++) {
			uint32_t l = kiln_png_be32(data + p);
			memcpy(buf + o, data + p + 8, l);
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

/* Inflates the whole stream and checks its Adler-32 trailer; a stream holding more data
 * than the image is accepted without that check, as libpng accepts it. */
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
	if (rc == KILN_INFL_OUTPUT_FULL)
		return KILN_OK; /* extra compressed data after the image: ignored, as libpng */
	if (rc != KILN_INFL_OK)
		return infl_status(rc, err, cap);
	if (out_len < info->filtered_size) {
		kiln_msgf(err, cap, "IDAT: not enough image data (%zu of %llu bytes)", out_len,
			  (unsigned long long)info->filtered_size);
		return KILN_ERR_TRUNCATED;
	}
	if (zlen - 2 - used < 4) {
		kiln_msgf(err, cap, "IDAT: the zlib stream ends without its checksum");
		return KILN_ERR_TRUNCATED;
	}
	uint32_t want = kiln_png_be32(z + 2 + used);
	uint32_t got = (uint32_t)adler32(adler32(0L, Z_NULL, 0), filt, (uInt)0);
	size_t done = 0, total = (size_t)info->filtered_size;
	while (done < total) {
		size_t n = total - done > (1u << 30) ? (1u << 30) : total - done;
		got = (uint32_t)adler32(got, filt + done, (uInt)n);
		done += n;
	}
	if (got != want) {
		kiln_msgf(err, cap, "IDAT: incorrect data check (Adler-32)");
		return KILN_ERR_CORRUPT;
	}
	return KILN_OK;
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
	if (info.strips > 1) {
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
