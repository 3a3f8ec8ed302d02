/* The container half of kiln's PNG decoder (host code): signature, chunk walk with CRC
 * checks, IHDR / PLTE / tRNS / gAMA / sRGB / iCCP / kiSt, the IDAT run and IEND, with the
 * acceptance of common/png_io.c's libpng configuration:
 * - a CRC error in a critical chunk refuses the file, in an ancillary chunk drops the chunk;
 * - chunk lengths over 2^31 - 1, chunk types that are not letters, an unknown critical
 *   chunk before the image data, any chunk before IHDR, a second IHDR or PLTE, a palette image without PLTE
 *   before its IDATs, IEND before IDAT, a file ending before IEND: refused;
 * - the chunk size cap libpng applies (8 MiB for non-IDAT chunks, an image-derived bound
 *   for IDAT) is applied;
 * - misplaced or malformed ancillary chunks are ignored (libpng's benign errors);
 * - the colour-space flags follow libpng's colorspace rules: a gAMA out of range, a second
 *   gAMA, a second sRGB or one with a bad intent make the colour space "invalid" (later
 *   gAMA and sRGB chunks are ignored and sRGB no longer counts, but a gamma stored before
 *   stays, as libpng's getter returns it); an sRGB's gamma replaces a gAMA's; srgb is 0
 *   only for a stored gamma within 5% of 1.0 without a valid sRGB and without iCCP.
 *   iCCP chunks shorter than 14 bytes are ignored, as libpng does. Known difference:
 *   libpng also ignores a longer iCCP whose profile it cannot parse, kiln counts it (such
 *   a file with gAMA 1.0 reads as sRGB here, linear through libpng).
 * Only chunks before the first IDAT affect the result, as in kiln_png_decode (libpng's
 * png_read_info stops there). The IDAT data is the first run of consecutive IDAT chunks;
 * IDATs after another chunk are ignored, as libpng does once the image is complete. */
#ifndef KILN_PNG_PARSE_H
#define KILN_PNG_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "common/error.h"
#include "common/image.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_inflate.h"

#define KILN_PNG_SIG_LEN 8
#define KILN_PNG_CHUNK_MALLOC_MAX ((uint64_t)8 << 20)
#define KILN_PNG_LINEAR_LO 95000u
#define KILN_PNG_LINEAR_HI 105000u

static const uint8_t kiln_png_signature[8] = {137, 80, 78, 71, 13, 10, 26, 10};

#define KILN_PNG_TYPE(a, b, c, d) \
	(((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))
#define KILN_PNG_IHDR KILN_PNG_TYPE('I', 'H', 'D', 'R')
#define KILN_PNG_PLTE KILN_PNG_TYPE('P', 'L', 'T', 'E')
#define KILN_PNG_IDAT KILN_PNG_TYPE('I', 'D', 'A', 'T')
#define KILN_PNG_IEND KILN_PNG_TYPE('I', 'E', 'N', 'D')
#define KILN_PNG_tRNS KILN_PNG_TYPE('t', 'R', 'N', 'S')
#define KILN_PNG_gAMA KILN_PNG_TYPE('g', 'A', 'M', 'A')
#define KILN_PNG_sRGB KILN_PNG_TYPE('s', 'R', 'G', 'B')
#define KILN_PNG_iCCP KILN_PNG_TYPE('i', 'C', 'C', 'P')
#define KILN_PNG_kiSt KILN_PNG_TYPE('k', 'i', 'S', 't')

/* Bits per pixel of a colour type and depth. */
static inline uint32_t kiln_png_bits_per_pixel(uint32_t color_type, uint32_t depth)
{
	return kiln_png_channels(color_type) * depth;
}

/* Bytes of a row of w pixels (without the filter byte), or 0 on overflow. */
static inline uint64_t kiln_png_row_bytes(uint32_t color_type, uint32_t depth, uint32_t w)
{
	uint64_t bits = (uint64_t)w * kiln_png_bits_per_pixel(color_type, depth);
	return (bits + 7) / 8;
}

static bool kiln_png_valid_depth(uint32_t color_type, uint32_t depth)
{
	switch (color_type) {
	case 0:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
	case 3:
		return depth == 1 || depth == 2 || depth == 4 || depth == 8;
	case 2:
	case 4:
	case 6:
		return depth == 8 || depth == 16;
	default:
		return false;
	}
}

/* Filtered bytes of the whole image (all Adam7 passes), with overflow checks. */
static kiln_status kiln_png_filtered_size(uint32_t color_type, uint32_t depth, uint32_t w,
					  uint32_t h, uint32_t interlace, uint64_t *out)
{
	uint64_t total = 0;
	for (uint32_t p = 0; p < (interlace ? 7u : 1u); p++) {
		uint32_t pw = w, ph = h;
		if (interlace)
			kiln_adam7_pass_size(p, w, h, &pw, &ph);
		if (pw == 0)
			continue;
		uint64_t row = kiln_png_row_bytes(color_type, depth, pw) + 1;
		if (row > UINT64_MAX / ph)
			return KILN_ERR_OVERFLOW;
		uint64_t bytes = row * ph;
		if (total > UINT64_MAX - bytes)
			return KILN_ERR_OVERFLOW;
		total += bytes;
	}
	if (total > (uint64_t)SIZE_MAX / 2)
		return KILN_ERR_OVERFLOW;
	*out = total;
	return KILN_OK;
}

/* libpng's png_check_chunk_length bound for IDAT chunks. */
static uint64_t kiln_png_idat_limit(const kiln_pngdec_info *in, uint32_t depth, uint32_t channels)
{
	uint64_t limit = 0x7FFFFFFFu;
	uint64_t row_factor = (uint64_t)in->width * channels * (depth > 8 ? 2 : 1) + 1 + (in->interlace ? 6 : 0);
	uint64_t idat = 0x7FFFFFFFu;
	if (in->height <= 0xFFFFFFFFu / row_factor)
		idat = in->height * row_factor;
	if (row_factor > 32566)
		row_factor = 32566;
	idat += 6 + 5 * (idat / row_factor + 1);
	if (idat > 0x7FFFFFFFu)
		idat = 0x7FFFFFFFu;
	uint64_t base = KILN_PNG_CHUNK_MALLOC_MAX < limit ? KILN_PNG_CHUNK_MALLOC_MAX : limit;
	return idat > base ? idat : base;
}

static void kiln_png_chunk_name(uint32_t type, char name[5])
{
	for (int i = 0; i < 4; i++) {
		char c = (char)(type >> (24 - 8 * i));
		name[i] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ? c : '?';
	}
	name[4] = '\0';
}

static bool kiln_png_is_letter(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* Parses the whole container. On success info is complete. */
static kiln_status kiln_png_parse(const uint8_t *data, size_t size, const kiln_image_limits *limits,
				  kiln_pngdec_info *info, char *err, size_t err_cap)
{
	memset(info, 0, sizeof *info);
	kiln_msgf(err, err_cap, "%s", "");
	if (!data && size)
		return kiln_msgf(err, err_cap, "no input"), KILN_ERR_INVALID_ARG;
	if (size == 0)
		return kiln_msgf(err, err_cap, "empty input"), KILN_ERR_TRUNCATED;
	size_t sig = size < KILN_PNG_SIG_LEN ? size : KILN_PNG_SIG_LEN;
	if (memcmp(data, kiln_png_signature, sig) != 0)
		return kiln_msgf(err, err_cap, "not a PNG file (bad signature)"), KILN_ERR_CORRUPT;

	bool have_ihdr = false, have_plte = false, have_idat = false, idat_run_over = false;
	bool have_trns = false, gamma_set = false, from_gamma = false, cs_invalid = false;
	bool have_srgb = false, have_intent = false, iccp = false;
	uint32_t gamma = 0, depth = 0, color = 0, num_palette = 0;
	uint64_t kist_pos = 0;
	uint32_t kist_len = 0;
	uint64_t idat_limit = 0;
	size_t pos = KILN_PNG_SIG_LEN;
	char name[5];
	for (int i = 0; i < 256; i++) {
		uint8_t *p = info->format.palette + 4 * i;
		p[0] = p[1] = p[2] = 0;
		p[3] = 255;
	}
	for (;;) {
		if (size < pos || size - pos < 8)
			return kiln_msgf(err, err_cap, "file ends early: %zu bytes, no IEND chunk", size),
			       KILN_ERR_TRUNCATED;
		const uint8_t *h = data + pos;
		uint32_t len = kiln_png_be32(h);
		uint32_t type = kiln_png_be32(h + 4);
		kiln_png_chunk_name(type, name);
		if (len > 0x7FFFFFFFu)
			return kiln_msgf(err, err_cap, "%s: chunk length out of range", name), KILN_ERR_CORRUPT;
		if (!kiln_png_is_letter(h[4]) || !kiln_png_is_letter(h[5]) || !kiln_png_is_letter(h[6]) ||
		    !kiln_png_is_letter(h[7]))
			return kiln_msgf(err, err_cap, "invalid chunk type"), KILN_ERR_CORRUPT;
		uint64_t cap = type == KILN_PNG_IDAT && have_ihdr ? idat_limit : KILN_PNG_CHUNK_MALLOC_MAX;
		if (len > cap)
			return kiln_msgf(err, err_cap, "%s: chunk data is too large", name), KILN_ERR_CORRUPT;
		if (size - pos - 8 < (uint64_t)len + 4)
			return kiln_msgf(err, err_cap, "%s: file ends early: %zu bytes, needs at least %llu",
					 name, size, (unsigned long long)(pos + 12 + (uint64_t)len)),
			       KILN_ERR_TRUNCATED;
		const uint8_t *d = h + 8;
		bool critical = !(h[4] & 0x20);
		bool crc_ok = (uint32_t)crc32(crc32(0L, Z_NULL, 0), h + 4, len + 4) == kiln_png_be32(d + len);
		if (!crc_ok && critical)
			return kiln_msgf(err, err_cap, "%s: CRC error", name), KILN_ERR_CORRUPT;
		size_t chunk_start = pos;
		pos += 12 + (size_t)len;

		if (!have_ihdr && type != KILN_PNG_IHDR)
			return kiln_msgf(err, err_cap, "IHDR is not the first chunk"), KILN_ERR_CORRUPT;
		if (type != KILN_PNG_IDAT && have_idat)
			idat_run_over = true;

		if (type == KILN_PNG_IHDR) {
			if (have_ihdr)
				return kiln_msgf(err, err_cap, "IHDR: out of place"), KILN_ERR_CORRUPT;
			if (len != 13)
				return kiln_msgf(err, err_cap, "IHDR: invalid length"), KILN_ERR_CORRUPT;
			uint32_t w = kiln_png_be32(d), hh = kiln_png_be32(d + 4);
			depth = d[8];
			color = d[9];
			if (w == 0 || hh == 0 || w > 0x7FFFFFFFu || hh > 0x7FFFFFFFu)
				return kiln_msgf(err, err_cap, "IHDR: invalid image size %ux%u", w, hh),
				       KILN_ERR_CORRUPT;
			if (!kiln_png_valid_depth(color, depth))
				return kiln_msgf(err, err_cap, "IHDR: invalid colour type %u / bit depth %u",
						 color, depth),
				       KILN_ERR_CORRUPT;
			if (d[10] != 0 || d[11] != 0 || d[12] > 1)
				return kiln_msgf(err, err_cap, "IHDR: unknown compression, filter or interlace method"),
				       KILN_ERR_CORRUPT;
			kiln_status st = kiln_image_check_size(w, hh, limits);
			if (st != KILN_OK)
				return kiln_msgf(err, err_cap, "IHDR: %ux%u pixels is over the image limits", w, hh),
				       st;
			info->width = w;
			info->height = hh;
			info->interlace = d[12];
			info->format.color_type = color;
			info->format.bit_depth = depth;
			uint32_t bits = kiln_png_bits_per_pixel(color, depth);
			info->bpp = bits >= 8 ? bits / 8 : 1;
			info->rowbytes = kiln_png_row_bytes(color, depth, w);
			st = kiln_png_filtered_size(color, depth, w, hh, info->interlace, &info->filtered_size);
			if (st != KILN_OK)
				return kiln_msgf(err, err_cap, "IHDR: image too large"), st;
			idat_limit = kiln_png_idat_limit(info, depth, kiln_png_channels(color));
			have_ihdr = true;
		} else if (type == KILN_PNG_PLTE) {
			if (have_plte)
				return kiln_msgf(err, err_cap, "PLTE: duplicate"), KILN_ERR_CORRUPT;
			if (have_idat)
				continue; /* out of place: ignored */
			have_plte = true;
			if (!(color & 2))
				continue; /* ignored in grayscale PNG */
			if (len > 3 * 256 || len % 3 != 0) {
				if (color == 3)
					return kiln_msgf(err, err_cap, "PLTE: invalid length"), KILN_ERR_CORRUPT;
				continue;
			}
			uint32_t n = len / 3, maxn = color == 3 ? 1u << depth : 256u;
			if (n > maxn)
				n = maxn;
			if (n == 0)
				return kiln_msgf(err, err_cap, "PLTE: invalid palette"), KILN_ERR_CORRUPT;
			num_palette = n;
			for (uint32_t i = 0; i < n; i++) {
				info->format.palette[4 * i] = d[3 * i];
				info->format.palette[4 * i + 1] = d[3 * i + 1];
				info->format.palette[4 * i + 2] = d[3 * i + 2];
			}
		} else if (type == KILN_PNG_IDAT) {
			if (color == 3 && !have_plte)
				return kiln_msgf(err, err_cap, "IDAT: missing PLTE"), KILN_ERR_CORRUPT;
			if (idat_run_over)
				continue; /* extra IDATs after the image data: ignored */
			if (!have_idat)
				info->idat_offset = chunk_start;
			have_idat = true;
			info->idat_chunks++;
			info->zlib_size += len;
		} else if (type == KILN_PNG_IEND) {
			if (!have_idat)
				return kiln_msgf(err, err_cap, "IEND: out of place (no image data)"), KILN_ERR_CORRUPT;
			break;
		} else if (critical && !have_idat) {
			return kiln_msgf(err, err_cap, "%s: unknown critical chunk", name), KILN_ERR_CORRUPT;
		} else if (have_idat) {
			/* after the image data: no effect on the result; libpng's png_read_end
			 * (without an info struct) skips any chunk there, critical or not, once its
			 * CRC is checked */
			continue;
		} else if (type == KILN_PNG_tRNS) {
			if (have_trns)
				continue;
			if (color == 0) {
				if (len != 2 || !crc_ok)
					continue;
				info->format.trns_key[0] = (uint32_t)d[0] << 8 | d[1];
			} else if (color == 2) {
				if (len != 6 || !crc_ok)
					continue;
				for (int c = 0; c < 3; c++)
					info->format.trns_key[c] = (uint32_t)d[2 * c] << 8 | d[2 * c + 1];
			} else if (color == 3) {
				if (!have_plte || len > num_palette || len > 256 || len == 0 || !crc_ok)
					continue;
				for (uint32_t i = 0; i < len; i++)
					info->format.palette[4 * i + 3] = d[i];
			} else {
				continue; /* invalid with an alpha channel */
			}
			have_trns = true;
		} else if (type == KILN_PNG_gAMA) {
			if (have_plte || len != 4 || !crc_ok)
				continue;
			uint32_t g = kiln_png_be32(d);
			if (g > 0x7FFFFFFFu || g < 16 || g > 625000000u || from_gamma) {
				cs_invalid = true;
				continue;
			}
			if (cs_invalid)
				continue;
			if (have_srgb) {
				/* libpng keeps sRGB's gamma and warns when they differ */
				continue;
			}
			gamma = g;
			gamma_set = true;
			from_gamma = true;
		} else if (type == KILN_PNG_sRGB) {
			if (have_plte || len != 1 || !crc_ok || cs_invalid)
				continue;
			if (have_intent || d[0] > 3) {
				cs_invalid = true;
				continue;
			}
			have_srgb = true;
			have_intent = true;
			gamma = 45455; /* libpng: sRGB's gamma replaces a gAMA's */
			gamma_set = true;
		} else if (type == KILN_PNG_iCCP) {
			/* libpng drops a chunk shorter than a keyword, its terminator, the method
			 * and the smallest zlib stream (14 bytes) without touching the colour space */
			if (have_plte || len < 14 || !crc_ok)
				continue;
			/* Valid or not (libpng's profile checks fail into an invalid colour space),
			 * a profile means the data is not declared linear. */
			have_intent = true;
			iccp = true;
		} else if (type == KILN_PNG_kiSt) {
			if (crc_ok && !kist_pos) {
				kist_pos = (uint64_t)(d - data);
				kist_len = len;
			}
		}
	}
	/* An invalid colour space drops sRGB (libpng's valid bits) but keeps the gamma stored
	 * before it (libpng's getter still returns that: a duplicate gAMA after gAMA 1.0 reads
	 * as linear) */
	bool srgb_valid = have_srgb && !cs_invalid;
	bool linear = !srgb_valid && !iccp && gamma_set && gamma >= KILN_PNG_LINEAR_LO && gamma <= KILN_PNG_LINEAR_HI;
	info->srgb = linear ? 0 : 1;
	info->format.has_trns = have_trns;
	info->has_alpha = (color & 4) || have_trns;
	info->gpu_ok = depth == 8 && !info->interlace;
	info->strips = 1;
	info->rows_per_strip = info->height;

	/* The zlib header and trailer, when the IDATs hold them (checked again at decode). */
	if (info->zlib_size >= 4) {
		/* Read the last 4 bytes of the IDAT data: walk the run once more. */
		uint8_t tail[4];
		uint64_t need = info->zlib_size - 4, seen = 0;
		size_t p = (size_t)info->idat_offset;
		int got = 0;
		for (uint32_t c = 0; c < info->idat_chunks; c++) {
			uint32_t l = kiln_png_be32(data + p);
			for (uint32_t i = 0; i < l; i++, seen++)
				if (seen >= need)
					tail[got++] = data[p + 8 + i];
			p += 12 + (size_t)l;
		}
		info->zlib_adler = kiln_png_be32(tail);
	}

	/* kiSt: used only when fully consistent (.dev/kist.md). */
	if (kist_pos && !info->interlace && info->zlib_size > 6 && kist_len >= 20) {
		const uint8_t *k = data + kist_pos;
		uint32_t rps = kiln_png_be32(k + 12), count = kiln_png_be32(k + 16);
		bool ok = k[0] == 1 && k[1] == 0 && k[2] == 0 && k[3] == 0 && rps >= 1 &&
			  kiln_png_be32(k + 4) == info->zlib_size && kiln_png_be32(k + 8) == info->zlib_adler;
		ok = ok && count == (uint32_t)(((uint64_t)info->height + rps - 1) / rps) &&
		     (uint64_t)kist_len == 20 + 4 * (uint64_t)count;
		uint32_t prev = 0;
		for (uint32_t i = 0; ok && i < count; i++) {
			uint32_t off = kiln_png_be32(k + 20 + 4 * (size_t)i);
			ok = (i == 0 ? off == 2 : off > prev) && (uint64_t)off < info->zlib_size - 4;
			prev = off;
		}
		if (ok && count > 1) {
			info->strips = count;
			info->rows_per_strip = rps;
			info->kist_offsets = kist_pos + 20;
		}
	}
	return KILN_OK;
}

#endif
