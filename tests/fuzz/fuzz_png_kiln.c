/* libFuzzer target over kiln's own PNG decoder (kernels/png/png_dec.h): arbitrary bytes
 * through kiln_pngdec_probe and kiln_pngdec_decode_image (serial and, for kiSt files, the
 * strip path), checked against kiln_png_decode (libpng): whenever both decode, the pixels
 * and flags must be identical, and each refuses exactly what the other refuses. Limits
 * are scaled down as in fuzz_png.c so that one input cannot allocate a gigabyte.
 * Built and run by `make fuzz` (FUZZ_TARGETS png_kiln); tests/unit/test_png_dec.c replays
 * tests/fuzz/corpus/png_kiln and tests/fuzz/regressions/png_kiln through the same
 * function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/image.h"
#include "common/png_io.h"
#include "kernels/png/png_dec.h"

#define KILN_FUZZ_KILN_CHECK(cond)                                                          \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, \
				__LINE__);                                                  \
			abort();                                                            \
		}                                                                           \
	} while (0)

static inline kiln_status kiln_fuzz_png_kiln(const uint8_t *data, size_t size)
{
	kiln_image_limits limits = {.max_width = 4096, .max_height = 4096, .max_pixels = 4u << 20};
	kiln_image img, ref;
	char err[256], rerr[256];
	kiln_pngdec_info info;
	kiln_status pst = kiln_pngdec_probe(data, size, &limits, &info, err, sizeof err);
	kiln_status st = kiln_pngdec_decode_image(data, size, &limits, &img, NULL, err, sizeof err);
	if (st != KILN_OK) {
		KILN_FUZZ_KILN_CHECK(img.pixels == NULL);
		KILN_FUZZ_KILN_CHECK(err[0] != '\0');
	} else {
		KILN_FUZZ_KILN_CHECK(pst == KILN_OK);
		KILN_FUZZ_KILN_CHECK(img.width == info.width && img.height == info.height);
		KILN_FUZZ_KILN_CHECK((uint64_t)img.width * img.height <= limits.max_pixels);
	}
	kiln_status rst = kiln_png_decode(data, size, &limits, &ref, rerr, sizeof rerr);
	if (st == KILN_OK && rst == KILN_OK) {
		KILN_FUZZ_KILN_CHECK(img.has_alpha == ref.has_alpha && img.srgb == ref.srgb);
		for (uint32_t y = 0; y < img.height; y++)
			KILN_FUZZ_KILN_CHECK(memcmp(kiln_image_row(&img, y), kiln_image_row(&ref, y),
						    4 * (size_t)img.width) == 0);
	}
	/* The verdicts agree both ways, also where the zlib stream ends irregularly (kiln
	 * decides those as libpng does: docs/PNG.md). */
	if (rst == KILN_OK && st != KILN_OK)
		KILN_FUZZ_KILN_CHECK(!"libpng decodes a file kiln refuses");
	if (rst != KILN_OK && st == KILN_OK)
		KILN_FUZZ_KILN_CHECK(!"kiln decodes a file libpng refuses");
	kiln_image_free(&img);
	kiln_image_free(&ref);
	return st;
}

/* The same input with every complete chunk's CRC recomputed: mutations of chunk data
 * then reach the inflater, the de-filter and the kiSt logic instead of stopping at the
 * CRC check. Returns the second decode's status. */
static inline kiln_status kiln_fuzz_png_kiln_fixed(const uint8_t *data, size_t size)
{
	kiln_status st = kiln_fuzz_png_kiln(data, size);
	if (size < 8)
		return st;
	uint8_t *copy = malloc(size);
	if (!copy)
		return st;
	memcpy(copy, data, size);
	size_t pos = 8;
	while (size - pos >= 12) {
		uint32_t len = (uint32_t)copy[pos] << 24 | (uint32_t)copy[pos + 1] << 16 |
			       (uint32_t)copy[pos + 2] << 8 | copy[pos + 3];
		if (len > size - pos - 12)
			break;
		uint32_t crc = (uint32_t)crc32(0, copy + pos + 4, len + 4);
		copy[pos + 8 + len] = (uint8_t)(crc >> 24);
		copy[pos + 9 + len] = (uint8_t)(crc >> 16);
		copy[pos + 10 + len] = (uint8_t)(crc >> 8);
		copy[pos + 11 + len] = (uint8_t)crc;
		pos += 12 + (size_t)len;
	}
	st = kiln_fuzz_png_kiln(copy, size);
	free(copy);
	return st;
}

#ifndef KILN_FUZZ_PNG_KILN_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kiln_fuzz_png_kiln_fixed(data, size);
	return 0;
}
#endif
