/* Test helper shared by the unit and GPU tests: breaks the deflate data of a PNG's first
 * IDAT while keeping the chunk's CRC right, so the container probes as sound and only the
 * stream is bad (what the decoders must catch in the image data itself). */
#ifndef KILN_TESTS_PNG_BREAKER_H
#define KILN_TESTS_PNG_BREAKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/png/png_check.h"
#include "tests/png_testutil.h"

/* XORs every `step`-th byte of the first IDAT's data from `first` on with `mask`, then
 * rewrites the chunk's CRC. false when the file has no IDAT long enough. */
static bool png_break_idat(uint8_t *png, size_t len, size_t first, size_t step, uint8_t mask)
{
	for (size_t pos = 8; pos + 12 <= len; pos += 12 + (size_t)png_test_be32(png + pos)) {
		uint32_t n = png_test_be32(png + pos);
		if (memcmp(png + pos + 4, "IDAT", 4) != 0)
			continue;
		if (n <= first + 4 || pos + 12 + (size_t)n > len)
			return false;
		for (size_t k = first; k < n - 4; k += step)
			png[pos + 8 + k] ^= mask;
		uint32_t table[256];
		for (uint32_t i = 0; i < 256; i++)
			table[i] = kiln_crc32_table_entry(i);
		uint32_t crc = kiln_crc32_update_table(table, 0, png + pos + 4, (size_t)n + 4);
		uint8_t *c = png + pos + 8 + n;
		c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16), c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
		return true;
	}
	return false;
}

#endif
