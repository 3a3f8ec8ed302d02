/* PNG files in and out with kiln's codec, and the choice of decoder (see png_file.h). */
#include "kernels/png/png_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fileio.h"
#include "common/png_io.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_enc.h"

#define PNG_FILE_MAX ((size_t)1 << 30) /* as common/png_io.c's kiln_png_read_file */

kiln_status kiln_png_decoder_parse(const char *name, kiln_png_decoder *out)
{
	if (name && strcmp(name, "kiln") == 0)
		*out = KILN_PNG_DECODER_KILN;
	else if (name && strcmp(name, "libpng") == 0)
		*out = KILN_PNG_DECODER_LIBPNG;
	else
		return KILN_ERR_INVALID_ARG;
	return KILN_OK;
}

const char *kiln_png_decoder_name(kiln_png_decoder decoder)
{
	return decoder == KILN_PNG_DECODER_LIBPNG ? "libpng" : "kiln";
}

kiln_status kiln_png_read(const uint8_t *data, size_t size, kiln_png_decoder decoder,
			  const kiln_image_limits *limits, kiln_pool *pool, kiln_image *out,
			  char *err, size_t err_cap)
{
	if (decoder == KILN_PNG_DECODER_LIBPNG)
		return kiln_png_decode(data, size, limits, out, err, err_cap);
	return kiln_pngdec_decode_image(data, size, limits, out, pool, err, err_cap);
}

kiln_status kiln_png_read_path(const char *path, kiln_png_decoder decoder,
			       const kiln_image_limits *limits, kiln_pool *pool, kiln_image *out,
			       char *err, size_t err_cap)
{
	kiln_buf buf;
	kiln_buf_init(&buf, PNG_FILE_MAX);
	memset(out, 0, sizeof *out);
	kiln_status st = kiln_buf_read_file(&buf, path);
	if (st != KILN_OK) {
		if (err && err_cap)
			snprintf(err, err_cap, "%s: %s", path, kiln_strerror(st));
		goto fail;
	}
	st = kiln_png_read(buf.data, buf.len, decoder, limits, pool, out, err, err_cap);
fail:
	kiln_buf_free(&buf);
	return st;
}

kiln_status kiln_png_write(const kiln_image *img, kiln_quality quality, kiln_buf *out)
{
	if (!img || !img->pixels || !out || img->stride < (size_t)img->width * 4 || img->stride > UINT32_MAX)
		return KILN_ERR_INVALID_ARG;
	kiln_surface s = {img->pixels, img->width, img->height, (uint32_t)img->stride, img->has_alpha};
	kiln_pngenc_image pi;
	kiln_pngenc_image_from_surface(&s, &pi);
	/* what a reader needs to treat the values as kiln did: sRGB (perceptual), or linear */
	static const uint8_t srgb_intent[1] = {0};
	static const uint8_t gamma_linear[4] = {0, 1, 0x86, 0xa0}; /* 100000: gamma 1.0 */
	kiln_png_chunk colour = img->srgb ? (kiln_png_chunk){{'s', 'R', 'G', 'B'}, srgb_intent, 1}
					  : (kiln_png_chunk){{'g', 'A', 'M', 'A'}, gamma_linear, 4};
	pi.chunks = &colour;
	pi.chunk_count = 1;
	kiln_pngenc_params params;
	kiln_pngenc_params_default(&params);
	params.quality = quality;
	kiln_status st = kiln_pngenc_check(&params, &pi);
	if (st != KILN_OK)
		return st;
	size_t bound = kiln_pngenc_bound(&params, &pi);
	size_t temp_size = kiln_pngenc_cpu_temp_size(&params, &pi, 1, NULL);
	void *temp = kiln_malloc(temp_size ? temp_size : 1);
	uint8_t *dst = NULL;
	size_t start = out->len, written = 0;
	if (!temp) {
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	if ((st = kiln_buf_extend(out, bound, &dst)) != KILN_OK)
		goto fail;
	kiln_status img_st;
	st = kiln_pngenc_encode_cpu(&params, &pi, &dst, &bound, &written, 1, &img_st, temp, temp_size, NULL);
	if (st == KILN_OK)
		st = img_st;
	out->len = start + (st == KILN_OK ? written : 0);
fail:
	free(temp);
	return st;
}

kiln_status kiln_png_write_path(const char *path, const kiln_image *img, kiln_quality quality)
{
	kiln_buf file;
	kiln_buf_init(&file, (size_t)1 << 34);
	kiln_status st = kiln_png_write(img, quality, &file);
	if (st == KILN_OK)
		st = kiln_file_write_atomic(path, file.data, file.len);
	kiln_buf_free(&file);
	return st;
}
