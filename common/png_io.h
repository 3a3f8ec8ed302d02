/* PNG files in and out through libpng: every PNG kind libpng reads (gray, palette, RGB,
 * RGBA, gray+alpha, 1-16 bit, Adam7) becomes a kiln_image (RGBA8). The header's size is
 * checked against the limits before any pixel memory is allocated, and libpng's own
 * errors (corrupt, truncated, CRC) come back as a status plus a one-line message. */
#ifndef KILN_PNG_IO_H
#define KILN_PNG_IO_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/image.h"

/* Decodes a PNG held in memory into *out (allocated here; kiln_image_free releases it).
 * limits NULL means the defaults. err (may be NULL) receives a one-line reason. On error
 * *out is empty. has_alpha: the file has an alpha channel or tRNS. srgb: false only when
 * the file says its samples are linear (gAMA of 1.0 without sRGB/iCCP). */
kiln_status kiln_png_decode(const uint8_t *data, size_t size, const kiln_image_limits *limits,
			    kiln_image *out, char *err, size_t err_cap);

/* Reads a file (capped at 1 GiB) and decodes it. */
kiln_status kiln_png_read_file(const char *path, const kiln_image_limits *limits,
			       kiln_image *out, char *err, size_t err_cap);

/* Reads only the header: width, height (and validates the signature and IHDR). */
kiln_status kiln_png_probe(const uint8_t *data, size_t size, uint32_t *width, uint32_t *height);

/* Encodes an image as 8-bit RGBA (RGB when !has_alpha) into out (appended). */
kiln_status kiln_png_encode(const kiln_image *img, kiln_buf *out);

/* Encodes and writes atomically (temporary name in the same directory, then rename). */
kiln_status kiln_png_write_file(const char *path, const kiln_image *img);

#endif
