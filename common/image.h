/* The canonical in-memory image: 8-bit RGBA, rows of `stride` bytes. Whatever the file held
 * (gray, palette, 16-bit, ...) is converted to this on read; `has_alpha` and `srgb` keep
 * what the codecs need to know about the original. */
#ifndef KILN_IMAGE_H
#define KILN_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct kiln_image {
	uint8_t *pixels;   /* RGBA8, owned by the image when allocated by kiln_image_alloc */
	uint32_t width;
	uint32_t height;
	size_t stride;     /* bytes per row, >= 4*width */
	bool has_alpha;    /* the source had an alpha channel or transparency (tRNS) */
	bool srgb;         /* colour values are sRGB-encoded (false: linear data) */
} kiln_image;

/* Limits checked before any pixel allocation (decompression bombs). */
typedef struct kiln_image_limits {
	uint32_t max_width;
	uint32_t max_height;
	uint64_t max_pixels;
} kiln_image_limits;

/* 16384 x 16384 and 256 Mpix. */
#define KILN_DEFAULT_MAX_SIDE 16384u
#define KILN_DEFAULT_MAX_PIXELS (256ull * 1024 * 1024)
void kiln_image_limits_default(kiln_image_limits *limits);

/* KILN_ERR_TOO_LARGE when w x h breaks the limits (NULL: defaults), INVALID_ARG for 0. */
kiln_status kiln_image_check_size(uint32_t width, uint32_t height, const kiln_image_limits *limits);

/* Allocates a tightly packed width x height image (stride = 4*width), zeroed; checks limits. */
kiln_status kiln_image_alloc(kiln_image *img, uint32_t width, uint32_t height,
			     const kiln_image_limits *limits);
/* Frees pixels; NULL and zeroed images are accepted. */
void kiln_image_free(kiln_image *img);

static inline uint8_t *kiln_image_row(const kiln_image *img, uint32_t y)
{
	return img->pixels + (size_t)y * img->stride;
}

#endif
