/* Texture bookkeeping shared by codecs and containers. */
#include "texture.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

kiln_status kiln_texture_init(kiln_texture *tex, kiln_texfmt format, uint32_t block_w,
			      uint32_t block_h, bool srgb)
{
	memset(tex, 0, sizeof *tex);
	tex->format = format;
	tex->srgb = srgb;
	switch (format) {
	case KILN_TEXFMT_BC1_RGB:
	case KILN_TEXFMT_BC1_RGBA:
		tex->block_w = tex->block_h = 4;
		tex->block_bytes = 8;
		return KILN_OK;
	case KILN_TEXFMT_ASTC:
		if (block_w < 4 || block_w > 12 || block_h < 4 || block_h > 12)
			return KILN_ERR_INVALID_ARG;
		tex->block_w = block_w;
		tex->block_h = block_h;
		tex->block_bytes = 16;
		return KILN_OK;
	default:
		return KILN_ERR_INVALID_ARG;
	}
}

size_t kiln_texture_level_size(const kiln_texture *tex, uint32_t width, uint32_t height)
{
	if (!tex->block_w || !tex->block_h)
		return 0;
	size_t bx = (width + (size_t)tex->block_w - 1) / tex->block_w;
	size_t by = (height + (size_t)tex->block_h - 1) / tex->block_h;
	size_t size;
	return kiln_size_mul3(bx, by, tex->block_bytes, &size) ? size : 0;
}

uint32_t kiln_mip_count(uint32_t width, uint32_t height)
{
	uint32_t n = 1;
	while (width > 1 || height > 1) {
		width = width > 1 ? width / 2 : 1;
		height = height > 1 ? height / 2 : 1;
		n++;
	}
	return n;
}

void kiln_texture_free_levels(kiln_texture *tex)
{
	if (!tex)
		return;
	for (uint32_t i = 0; i < KILN_MAX_LEVELS; i++) {
		free(tex->levels[i].data);
		tex->levels[i].data = NULL;
	}
}
