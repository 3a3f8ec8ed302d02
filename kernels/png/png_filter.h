/* PNG row filters (the encoder half) and the per-row filter choice, written once for the
 * CPU and GPU backends (see kiln_hd.h).
 *
 * Filters work on bytes: `bpp` is the distance to the corresponding byte of the pixel to
 * the left (bytes per pixel, at least 1 for bit depths below 8). `prev` is the unfiltered
 * row above, or NULL for none (the first row of a strip: see docs/PNG.md, kiSt).
 *
 * The choice is libpng's default heuristic: filter the row all five ways and keep the
 * one whose bytes, read as signed, have the smallest sum of absolute values; ties go to
 * the lower filter type. Palette images and bit depths below 8 always use None, as libpng
 * does by default. The first row of a strip may only use None or Sub (no dependency on
 * the row above), which is what makes strips decodable independently. */
#ifndef KILN_PNG_FILTER_H
#define KILN_PNG_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kiln_hd.h"
#include "kernels/png/png_defilter.h" /* kiln_png_paeth: one predictor for both directions */

#define PNG_FILTER_NONE 0
#define PNG_FILTER_SUB 1
#define PNG_FILTER_UP 2
#define PNG_FILTER_AVG 3
#define PNG_FILTER_PAETH 4
/* The mode value meaning "choose per row" (png_choose_filter). */
#define PNG_FILTER_ADAPTIVE (-1)

/* Byte i of `row` filtered with `type` (prev NULL: a row of zeros above). */
KILN_HD uint8_t png_filter_byte(int type, const uint8_t *row, const uint8_t *prev, uint32_t i,
				uint32_t bpp)
{
	uint32_t x = row[i];
	uint32_t a = i >= bpp ? row[i - bpp] : 0;
	uint32_t b = prev ? prev[i] : 0;
	uint32_t c = prev && i >= bpp ? prev[i - bpp] : 0;
	switch (type) {
	case PNG_FILTER_SUB:
		return (uint8_t)(x - a);
	case PNG_FILTER_UP:
		return (uint8_t)(x - b);
	case PNG_FILTER_AVG:
		return (uint8_t)(x - ((a + b) >> 1));
	case PNG_FILTER_PAETH:
		return (uint8_t)(x - kiln_png_paeth(a, b, c));
	default:
		return (uint8_t)x;
	}
}

/* |byte as signed|: libpng's cost of one filtered byte. */
KILN_HD uint32_t png_filter_cost_byte(uint8_t v)
{
	return v < 128 ? v : 256u - v;
}

/* The five costs of a row at once (one pass over the bytes): cost[t] for filter t.
 * first_of_strip: only None and Sub are computed, the others get UINT32_MAX. */
KILN_HD void png_filter_costs(const uint8_t *row, const uint8_t *prev, uint32_t rowbytes,
			      uint32_t bpp, uint32_t cost[5])
{
	uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0;
	for (uint32_t i = 0; i < rowbytes; i++) {
		uint32_t x = row[i];
		uint32_t a = i >= bpp ? row[i - bpp] : 0;
		c0 += png_filter_cost_byte((uint8_t)x);
		c1 += png_filter_cost_byte((uint8_t)(x - a));
		if (prev) {
			uint32_t b = prev[i];
			uint32_t c = i >= bpp ? prev[i - bpp] : 0;
			c2 += png_filter_cost_byte((uint8_t)(x - b));
			c3 += png_filter_cost_byte((uint8_t)(x - ((a + b) >> 1)));
			c4 += png_filter_cost_byte((uint8_t)(x - kiln_png_paeth(a, b, c)));
		}
	}
	cost[0] = c0;
	cost[1] = c1;
	cost[2] = prev ? c2 : UINT32_MAX;
	cost[3] = prev ? c3 : UINT32_MAX;
	cost[4] = prev ? c4 : UINT32_MAX;
}

/* The lowest cost, ties to the lowest type. */
KILN_HD int png_filter_pick(const uint32_t cost[5])
{
	int best = 0;
	for (int t = 1; t < 5; t++)
		if (cost[t] < cost[best])
			best = t;
	return best;
}

/* The filter a forced mode becomes on the first row of a strip (no row above): Up is
 * None there, Avg and Paeth predict from the left only, so Sub. */
KILN_HD int png_filter_first_row(int mode)
{
	if (mode == PNG_FILTER_SUB || mode == PNG_FILTER_AVG || mode == PNG_FILTER_PAETH)
		return PNG_FILTER_SUB;
	return PNG_FILTER_NONE;
}

/* The filter for one row. mode: PNG_FILTER_ADAPTIVE or a forced type; none_only: palette
 * or sub-byte samples (always None, as libpng). prev NULL: first row of a strip. */
KILN_HD int png_choose_filter(const uint8_t *row, const uint8_t *prev, uint32_t rowbytes,
			      uint32_t bpp, int mode, int none_only)
{
	if (mode != PNG_FILTER_ADAPTIVE)
		return prev ? mode : png_filter_first_row(mode);
	if (none_only)
		return PNG_FILTER_NONE;
	uint32_t cost[5];
	png_filter_costs(row, prev, rowbytes, bpp, cost);
	return png_filter_pick(cost);
}

/* Writes the filter type byte and the filtered row: out gets 1 + rowbytes bytes. */
KILN_HD void png_filter_row(int type, const uint8_t *row, const uint8_t *prev, uint32_t rowbytes,
			    uint32_t bpp, uint8_t *out)
{
	out[0] = (uint8_t)type;
	uint8_t *o = out + 1;
	switch (type) {
	case PNG_FILTER_SUB:
		for (uint32_t i = 0; i < rowbytes; i++)
			o[i] = (uint8_t)(row[i] - (i >= bpp ? row[i - bpp] : 0));
		break;
	case PNG_FILTER_UP:
		for (uint32_t i = 0; i < rowbytes; i++)
			o[i] = (uint8_t)(row[i] - (prev ? prev[i] : 0));
		break;
	case PNG_FILTER_NONE:
		for (uint32_t i = 0; i < rowbytes; i++)
			o[i] = row[i];
		break;
	default:
		for (uint32_t i = 0; i < rowbytes; i++)
			o[i] = png_filter_byte(type, row, prev, i, bpp);
		break;
	}
}

#endif
