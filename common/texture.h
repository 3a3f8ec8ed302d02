/* A compressed texture as the containers see it: a format, a colour space, and a chain of
 * mip levels of encoded blocks. Codecs fill it; DDS, KTX 2.0 and .astc writers serialise it;
 * their readers produce it again (with level data pointing into the file buffer). */
#ifndef KILN_TEXTURE_H
#define KILN_TEXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define KILN_MAX_LEVELS 16 /* 16384 needs 15 levels */

typedef enum kiln_texfmt {
	KILN_TEXFMT_NONE = 0,
	KILN_TEXFMT_BC1_RGB,   /* BC1 without alpha (decoders treat index 3 of 3-colour as black) */
	KILN_TEXFMT_BC1_RGBA,  /* BC1 with 1-bit alpha (index 3 of 3-colour blocks is transparent) */
	KILN_TEXFMT_ASTC,      /* ASTC LDR; footprint in block_w x block_h */
} kiln_texfmt;

typedef struct kiln_level {
	uint32_t width, height;  /* pixels */
	size_t size;             /* bytes of block data */
	uint8_t *data;
} kiln_level;

typedef struct kiln_texture {
	kiln_texfmt format;
	uint32_t block_w, block_h;  /* texel footprint of one block: 4x4 for BC1 */
	uint32_t block_bytes;       /* 8 for BC1, 16 for ASTC */
	bool srgb;
	uint32_t num_levels;
	kiln_level levels[KILN_MAX_LEVELS];
} kiln_texture;

/* Fills format, block size and block bytes for a format (block_w/h used for ASTC only). */
kiln_status kiln_texture_init(kiln_texture *tex, kiln_texfmt format, uint32_t block_w,
			      uint32_t block_h, bool srgb);
/* Bytes of block data for a w x h level of this texture's format (0 on overflow). */
size_t kiln_texture_level_size(const kiln_texture *tex, uint32_t width, uint32_t height);
/* Number of levels in the full chain down to 1x1 for a base of w x h. */
uint32_t kiln_mip_count(uint32_t width, uint32_t height);
/* Frees every level's data (for textures whose levels were malloc'ed). */
void kiln_texture_free_levels(kiln_texture *tex);

#endif
