/* The choice of PNG decoder for every input kiln reads (see png_read.h). */
#include "kernels/png/png_read.h"

#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/png_io.h"
#include "kernels/png/png_dec.h"

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
