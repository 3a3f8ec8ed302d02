/* PNG files in and out of kiln_images with kiln's own codec (kernels/png). Reading can
 * choose the decoder: kiln's (png_dec.h, the default: faster, and the one the GPU runs)
 * or libpng (common/png_io.h, kept selectable with `--png-decoder libpng`); both give the
 * same pixels and flags for every file libpng accepts and refuse the same files. Writing
 * uses kiln's encoder (png_enc.h) in its parallel-decodable layout. */
#ifndef KILN_PNG_FILE_H
#define KILN_PNG_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/image.h"
#include "common/pool.h"
#include "kernels/codec.h"

typedef enum kiln_png_decoder {
	KILN_PNG_DECODER_KILN,
	KILN_PNG_DECODER_LIBPNG,
} kiln_png_decoder;

/* "kiln" or "libpng"; KILN_ERR_INVALID_ARG for anything else. */
kiln_status kiln_png_decoder_parse(const char *name, kiln_png_decoder *out);
const char *kiln_png_decoder_name(kiln_png_decoder decoder);

/* Decodes a PNG held in memory into *out (allocated; kiln_image_free releases it), with
 * the limits checked from the header before any allocation (NULL: defaults). pool (may be
 * NULL) runs the strips of kiln's parallel-decodable files. err receives a one-line
 * reason on failure. */
kiln_status kiln_png_read(const uint8_t *data, size_t size, kiln_png_decoder decoder,
			  const kiln_image_limits *limits, kiln_pool *pool, kiln_image *out,
			  char *err, size_t err_cap);

/* The same for a file (read whole, capped at 1 GiB). */
kiln_status kiln_png_read_path(const char *path, kiln_png_decoder decoder,
			       const kiln_image_limits *limits, kiln_pool *pool, kiln_image *out,
			       char *err, size_t err_cap);

/* Appends img as a PNG file to out: 8-bit RGBA when img->has_alpha, else RGB, with an
 * sRGB chunk (or gAMA 1.0 when img->srgb is false, so a linear image reads back linear). */
kiln_status kiln_png_write(const kiln_image *img, kiln_quality quality, kiln_buf *out);

/* The same into a file, atomically (temporary name in the same directory, then rename). */
kiln_status kiln_png_write_path(const char *path, const kiln_image *img, kiln_quality quality);

#endif
