/* PNG de-filtering and the conversion of de-filtered rows to RGBA8, written once for the
 * CPU and the GPU (see kiln_hd.h).
 *
 * The conversion reproduces common/png_io.c's libpng configuration exactly: png_set_expand
 * (palette -> RGB(A) with tRNS as alpha, gray 1/2/4 -> 8 by replication, a gray or RGB tRNS
 * colour -> alpha 0, compared before any scaling), png_set_scale_16 (libpng's rounding
 * formula, reproduced below), gray -> RGB, and alpha 0xff added when there is none. */
#ifndef KILN_PNG_DEFILTER_H
#define KILN_PNG_DEFILTER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kiln_hd.h"

/* Tables read by __host__ __device__ functions: a host array in the host pass, constant
 * memory in the device pass (as kernels/bc1/bc1_tables.h does). */
#ifndef KILN_PNG_TABLE
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#define KILN_PNG_TABLE static __constant__ const
#else
#define KILN_PNG_TABLE static const
#endif
#endif

#define KILN_PNG_FILTER_NONE 0
#define KILN_PNG_FILTER_SUB 1
#define KILN_PNG_FILTER_UP 2
#define KILN_PNG_FILTER_AVG 3
#define KILN_PNG_FILTER_PAETH 4

/* The Paeth predictor of the PNG specification. */
KILN_HD uint32_t kiln_png_paeth(uint32_t a, uint32_t b, uint32_t c)
{
	int32_t p = (int32_t)a + (int32_t)b - (int32_t)c;
	int32_t pa = p - (int32_t)a, pb = p - (int32_t)b, pc = p - (int32_t)c;
	pa = pa < 0 ? -pa : pa;
	pb = pb < 0 ? -pb : pb;
	pc = pc < 0 ? -pc : pc;
	if (pa <= pb && pa <= pc)
		return a;
	return pb <= pc ? b : c;
}

/* One de-filtered byte: x filtered, a left, b above, c above-left (0 where absent). */
KILN_HD uint8_t kiln_png_unfilter_byte(uint32_t type, uint32_t x, uint32_t a, uint32_t b, uint32_t c)
{
	switch (type) {
	case KILN_PNG_FILTER_SUB:
		return (uint8_t)(x + a);
	case KILN_PNG_FILTER_UP:
		return (uint8_t)(x + b);
	case KILN_PNG_FILTER_AVG:
		return (uint8_t)(x + ((a + b) >> 1));
	case KILN_PNG_FILTER_PAETH:
		return (uint8_t)(x + kiln_png_paeth(a, b, c));
	default:
		return (uint8_t)x;
	}
}

/* De-filters one row in place: row[0, n) filtered bytes (after the type byte), prev the
 * de-filtered row above or NULL for the first row of an image or pass, bpp bytes per
 * complete pixel (>= 1). The loops are per type so the compiler can vectorise None/Up and
 * keep Sub/Avg/Paeth tight; every byte is kiln_png_unfilter_byte's value. */
KILN_HD void kiln_png_unfilter_row(uint32_t type, uint8_t *row, const uint8_t *prev, size_t n,
				   uint32_t bpp)
{
	size_t i;
	switch (type) {
	case KILN_PNG_FILTER_SUB:
		for (i = bpp; i < n; i++)
			row[i] = (uint8_t)(row[i] + row[i - bpp]);
		break;
	case KILN_PNG_FILTER_UP:
		if (prev)
			for (i = 0; i < n; i++)
				row[i] = (uint8_t)(row[i] + prev[i]);
		break;
	case KILN_PNG_FILTER_AVG:
		if (prev) {
			for (i = 0; i < bpp && i < n; i++)
				row[i] = (uint8_t)(row[i] + (prev[i] >> 1));
			for (; i < n; i++)
				row[i] = (uint8_t)(row[i] + ((row[i - bpp] + prev[i]) >> 1));
		} else {
			for (i = bpp; i < n; i++)
				row[i] = (uint8_t)(row[i] + (row[i - bpp] >> 1));
		}
		break;
	case KILN_PNG_FILTER_PAETH:
		if (prev) {
			for (i = 0; i < bpp && i < n; i++)
				row[i] = (uint8_t)(row[i] + prev[i]);
#ifndef __CUDA_ARCH__
			if (bpp == 3 || bpp == 4) {
				/* Pixel at a time with a, c per channel in registers: bpp independent
				 * chains the CPU overlaps; same predictor, branch-free selects. */
				int32_t a[4], c[4];
				for (uint32_t k = 0; k < bpp; k++) {
					a[k] = row[k];
					c[k] = prev[k];
				}
				for (; i + bpp <= n; i += bpp) {
					for (uint32_t k = 0; k < bpp; k++) {
						int32_t b = prev[i + k];
						int32_t pa = b - c[k], pb = a[k] - c[k], pc = pa + pb;
						pa = pa < 0 ? -pa : pa;
						pb = pb < 0 ? -pb : pb;
						pc = pc < 0 ? -pc : pc;
						int32_t pred = pb <= pc ? b : c[k];
						pred = (pa <= pb && pa <= pc) ? a[k] : pred;
						a[k] = (uint8_t)(row[i + k] + pred);
						row[i + k] = (uint8_t)a[k];
						c[k] = b;
					}
				}
			}
#endif
			for (; i < n; i++)
				row[i] = (uint8_t)(row[i] + kiln_png_paeth(row[i - bpp], prev[i], prev[i - bpp]));
		} else {
			/* Paeth with no row above is Sub. */
			for (i = bpp; i < n; i++)
				row[i] = (uint8_t)(row[i] + row[i - bpp]);
		}
		break;
	default:
		break;
	}
}

/* What the conversion needs to know about the image. */
typedef struct kiln_png_format {
	uint32_t color_type;  /* 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA */
	uint32_t bit_depth;   /* 1, 2, 4, 8, 16 */
	uint32_t has_trns;    /* a valid tRNS chunk (gray/RGB key, or palette alphas) */
	uint32_t trns_key[3]; /* gray (in [0]) or R, G, B key, full sample values */
	uint8_t palette[256 * 4]; /* RGBA, tRNS applied; entries past PLTE are 0,0,0,255 */
} kiln_png_format;

KILN_HD uint32_t kiln_png_channels(uint32_t color_type)
{
	switch (color_type) {
	case 2:
		return 3;
	case 4:
		return 2;
	case 6:
		return 4;
	default:
		return 1;
	}
}

/* libpng's png_do_scale_16_to_8: hi + ((lo - hi + 128) * 65535 >> 24), signed. */
KILN_HD uint8_t kiln_png_scale16(uint32_t hi, uint32_t lo)
{
	int32_t tmp = (int32_t)hi;
	tmp += (((int32_t)lo - tmp + 128) * 65535) >> 24;
	return (uint8_t)tmp;
}

/* Sample k (0-based) of a row of samples of `depth` bits, as its full value. */
KILN_HD uint32_t kiln_png_sample(const uint8_t *row, size_t k, uint32_t depth)
{
	switch (depth) {
	case 1:
		return (row[k >> 3] >> (7 - (k & 7))) & 1u;
	case 2:
		return (row[k >> 2] >> (6 - 2 * (k & 3))) & 3u;
	case 4:
		return (row[k >> 1] >> (4 - 4 * (k & 1))) & 15u;
	case 8:
		return row[k];
	default:
		return ((uint32_t)row[2 * k] << 8) | row[2 * k + 1];
	}
}

/* A full sample value as 8 bits: replication for 1/2/4, the libpng scale for 16. */
KILN_HD uint8_t kiln_png_to8(uint32_t v, uint32_t depth)
{
	switch (depth) {
	case 1:
		return (uint8_t)(v * 255u);
	case 2:
		return (uint8_t)(v * 0x55u);
	case 4:
		return (uint8_t)(v * 0x11u);
	case 8:
		return (uint8_t)v;
	default:
		return kiln_png_scale16(v >> 8, v & 0xFFu);
	}
}

/* Pixel x of a de-filtered row as packed RGBA8 (R in the low byte). */
KILN_HD uint32_t kiln_png_pixel(const kiln_png_format *f, const uint8_t *row, size_t x)
{
	uint32_t d = f->bit_depth;
	uint32_t r, g, b, a = 255;
	switch (f->color_type) {
	case 0: {
		uint32_t v = kiln_png_sample(row, x, d);
		/* libpng compares the key masked to the bit depth (16: all bits). */
		uint32_t key = d == 16 ? f->trns_key[0] : (f->trns_key[0] & ((1u << d) - 1));
		if (f->has_trns && v == key)
			a = 0;
		r = g = b = kiln_png_to8(v, d);
		break;
	}
	case 2: {
		uint32_t vr = kiln_png_sample(row, 3 * x, d), vg = kiln_png_sample(row, 3 * x + 1, d),
			 vb = kiln_png_sample(row, 3 * x + 2, d);
		uint32_t m = d == 16 ? 0xFFFFu : 0xFFu;
		if (f->has_trns && vr == (f->trns_key[0] & m) && vg == (f->trns_key[1] & m) &&
		    vb == (f->trns_key[2] & m))
			a = 0;
		r = kiln_png_to8(vr, d);
		g = kiln_png_to8(vg, d);
		b = kiln_png_to8(vb, d);
		break;
	}
	case 3: {
		uint32_t i = kiln_png_sample(row, x, d);
		const uint8_t *p = f->palette + 4 * i;
		r = p[0];
		g = p[1];
		b = p[2];
		a = p[3];
		break;
	}
	case 4:
		r = g = b = kiln_png_to8(kiln_png_sample(row, 2 * x, d), d);
		a = kiln_png_to8(kiln_png_sample(row, 2 * x + 1, d), d);
		break;
	default:
		r = kiln_png_to8(kiln_png_sample(row, 4 * x, d), d);
		g = kiln_png_to8(kiln_png_sample(row, 4 * x + 1, d), d);
		b = kiln_png_to8(kiln_png_sample(row, 4 * x + 2, d), d);
		a = kiln_png_to8(kiln_png_sample(row, 4 * x + 3, d), d);
		break;
	}
	return r | (g << 8) | (b << 16) | (a << 24);
}

KILN_HD void kiln_png_store_pixel(uint8_t *dst, uint32_t p)
{
	dst[0] = (uint8_t)p;
	dst[1] = (uint8_t)(p >> 8);
	dst[2] = (uint8_t)(p >> 16);
	dst[3] = (uint8_t)(p >> 24);
}

/* Converts a de-filtered row of `width` pixels to RGBA8 at dst, pixel i going to
 * dst + i * dst_step (4 for a full row, 4 * Adam7 step for a pass). Common 8-bit formats
 * take direct loops that produce the same bytes as kiln_png_pixel. */
KILN_HD void kiln_png_expand_row(const kiln_png_format *f, const uint8_t *row, uint32_t width,
				 uint8_t *dst, size_t dst_step)
{
	if (f->bit_depth == 8 && dst_step == 4) {
		if (f->color_type == 6) {
			for (uint32_t x = 0; x < width; x++) {
				dst[4 * x] = row[4 * x];
				dst[4 * x + 1] = row[4 * x + 1];
				dst[4 * x + 2] = row[4 * x + 2];
				dst[4 * x + 3] = row[4 * x + 3];
			}
			return;
		}
		if (f->color_type == 2 && !f->has_trns) {
			for (uint32_t x = 0; x < width; x++) {
				dst[4 * x] = row[3 * x];
				dst[4 * x + 1] = row[3 * x + 1];
				dst[4 * x + 2] = row[3 * x + 2];
				dst[4 * x + 3] = 255;
			}
			return;
		}
	}
	for (uint32_t x = 0; x < width; x++)
		kiln_png_store_pixel(dst + (size_t)x * dst_step, kiln_png_pixel(f, row, x));
}

/* Adam7 pass geometry: start and step in x and y. */
KILN_PNG_TABLE uint8_t kiln_adam7_x0[7] = {0, 4, 0, 2, 0, 1, 0};
KILN_PNG_TABLE uint8_t kiln_adam7_y0[7] = {0, 0, 4, 0, 2, 0, 1};
KILN_PNG_TABLE uint8_t kiln_adam7_dx[7] = {8, 8, 4, 4, 2, 2, 1};
KILN_PNG_TABLE uint8_t kiln_adam7_dy[7] = {8, 8, 8, 4, 4, 2, 2};

/* Size of pass p of a w x h image (0 when the pass is empty). */
KILN_HD void kiln_adam7_pass_size(uint32_t p, uint32_t w, uint32_t h, uint32_t *pw, uint32_t *ph)
{
	uint32_t x0 = kiln_adam7_x0[p], y0 = kiln_adam7_y0[p];
	uint32_t dx = kiln_adam7_dx[p], dy = kiln_adam7_dy[p];
	*pw = w > x0 ? (w - x0 + dx - 1) / dx : 0;
	*ph = h > y0 ? (h - y0 + dy - 1) / dy : 0;
	if (*pw == 0 || *ph == 0)
		*pw = *ph = 0;
}

#endif
