/* Image allocation with the size checks that guard every decoder. */
#include "image.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

void kiln_image_limits_default(kiln_image_limits *limits)
{
	limits->max_width = KILN_DEFAULT_MAX_SIDE;
	limits->max_height = KILN_DEFAULT_MAX_SIDE;
	limits->max_pixels = KILN_DEFAULT_MAX_PIXELS;
}

kiln_status kiln_image_check_size(uint32_t width, uint32_t height, const kiln_image_limits *limits)
{
	kiln_image_limits def;
	if (!limits) {
		kiln_image_limits_default(&def);
		limits = &def;
	}
	if (width == 0 || height == 0)
		return KILN_ERR_INVALID_ARG;
	if (width > limits->max_width || height > limits->max_height ||
	    (uint64_t)width * height > limits->max_pixels)
		return KILN_ERR_TOO_LARGE;
	return KILN_OK;
}

kiln_status kiln_image_alloc(kiln_image *img, uint32_t width, uint32_t height,
			     const kiln_image_limits *limits)
{
	memset(img, 0, sizeof *img);
	kiln_status st = kiln_image_check_size(width, height, limits);
	if (st != KILN_OK)
		return st;
	size_t bytes;
	if (!kiln_size_mul3(width, height, 4, &bytes))
		return KILN_ERR_OVERFLOW;
	img->pixels = calloc(1, bytes);
	if (!img->pixels)
		return KILN_ERR_NOMEM;
	img->width = width;
	img->height = height;
	img->stride = (size_t)width * 4;
	img->srgb = true;
	return KILN_OK;
}

void kiln_image_free(kiln_image *img)
{
	if (!img)
		return;
	free(img->pixels);
	img->pixels = NULL;
	img->width = img->height = 0;
	img->stride = 0;
}
