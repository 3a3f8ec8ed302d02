/* Texture containers: DDS, KTX 2.0, and .astc. Writers append the whole file to a kiln_buf;
 * readers validate every field and size against the buffer and fill a kiln_texture whose
 * level data points into the caller's buffer (nothing to free). */
#ifndef KILN_CONTAINER_H
#define KILN_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/texture.h"

typedef enum kiln_container {
	KILN_CONTAINER_DDS,
	KILN_CONTAINER_KTX2,
	KILN_CONTAINER_ASTC,
} kiln_container;

/* "dds", "ktx2", "astc" -> container; -1 otherwise. */
int kiln_container_parse(const char *name);
/* File extension without the dot: "dds", "ktx2", "astc". */
const char *kiln_container_ext(kiln_container c);
/* Guesses the container from the first bytes (magic numbers); -1 if none matches. */
int kiln_container_detect(const uint8_t *data, size_t size);

/* DDS: BC1 linear -> legacy header with FourCC DXT1; BC1 sRGB -> DX10 header with
 * DXGI_FORMAT_BC1_UNORM_SRGB (72). Mip levels as the texture holds them. */
kiln_status kiln_dds_write(const kiln_texture *tex, kiln_buf *out);
kiln_status kiln_dds_read(const uint8_t *data, size_t size, kiln_texture *out);

/* KTX 2.0: vkFormat from format + srgb (BC1 RGB/RGBA, ASTC footprints), a Basic data
 * format descriptor, the level index, no supercompression. */
kiln_status kiln_ktx2_write(const kiln_texture *tex, kiln_buf *out);
kiln_status kiln_ktx2_read(const uint8_t *data, size_t size, kiln_texture *out);

/* .astc: the 16-byte header (magic 0x5CA1AB13, footprint, 24-bit sizes) and level 0 only. */
kiln_status kiln_astc_file_write(const kiln_texture *tex, kiln_buf *out);
kiln_status kiln_astc_file_read(const uint8_t *data, size_t size, kiln_texture *out);

/* Dispatch by container. */
kiln_status kiln_container_write(kiln_container c, const kiln_texture *tex, kiln_buf *out);
kiln_status kiln_container_read(const uint8_t *data, size_t size, kiln_texture *out);

#endif
