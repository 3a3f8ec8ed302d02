/* The container half of kiln's PNG decoder (host code): signature, chunk walk with CRC
 * checks, IHDR / PLTE / tRNS / gAMA / sRGB / iCCP / kiSt, the IDAT run and IEND, with the
 * acceptance of common/png_io.c's libpng configuration:
 * - a CRC error in a critical chunk refuses the file, in an ancillary chunk drops the chunk;
 * - chunk lengths over 2^31 - 1, chunk types that are not letters, an unknown critical
 *   chunk before the image data, any chunk before IHDR, a second IHDR, a second PLTE before
 *   the image data, a palette image without PLTE
 *   before its IDATs, IEND before IDAT, a file ending before IEND: refused;
 * - the chunk size cap libpng applies (8 MiB for non-IDAT chunks, an image-derived bound
 *   for IDAT) is applied;
 * - misplaced or malformed ancillary chunks are ignored (libpng's benign errors);
 * - the colour-space flags follow libpng's colorspace rules: a gAMA out of range, a second
 *   gAMA, a second sRGB or one with a bad intent make the colour space "invalid" (later
 *   gAMA and sRGB chunks are ignored and sRGB no longer counts, but a gamma stored before
 *   stays, as libpng's getter returns it); an sRGB's gamma replaces a gAMA's; srgb is 0
 *   only for a stored gamma within 5% of 1.0 without a valid sRGB and without a valid
 *   iCCP. An iCCP counts only where libpng 1.6.39 would keep its profile
 *   (kiln_png_iccp_verdict); one it refuses makes the colour space invalid, one it drops
 *   unread (shorter than 92 bytes) changes nothing. Known difference: libpng recognises
 *   the ICC's published sRGB profiles (by checksums) inside an iCCP and then also sets
 *   sRGB's gamma and intent; kiln does not, which shows only when such a file also has a
 *   gAMA near 1.0 and a later chunk that invalidates the colour space (libpng: sRGB,
 *   kiln: linear).
 * Only chunks before the first IDAT affect the result, as in kiln_png_decode (libpng's
 * png_read_info stops there). The IDAT data is the first run of consecutive IDAT chunks;
 * IDATs after another chunk are ignored, as libpng does once the image is complete. */
#ifndef KILN_PNG_PARSE_H
#define KILN_PNG_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* libpng 1.6.39's handling of an iCCP chunk (png_handle_iCCP, png_inflate_read and the
 * png_icc_check_* functions), as common/png_io.c configures it: the profile counts (the
 * iCCP bit of the info struct is set) only when all of this holds:
 * - the chunk is at least 92 bytes long: libpng reads the keyword area (81 bytes) first
 *   and drops the chunk unread, without touching the colour space, when fewer than 11
 *   bytes remain after it; this and the 14-byte minimum are checked by the caller;
 * - a keyword of 1 to 79 bytes ends in a NUL, the compression method after it is 0;
 * - the zlib data yields, in order, the 132-byte header, the 12-byte tag entries and the
 *   rest of the profile (the length in its first 4 bytes) before zlib reports an error or
 *   the end of the stream; what follows the profile's last byte (the Adler-32, extra data,
 *   even bad data) is never looked at;
 * - the header: length >= 132 and <= 8 MiB (png_io's chunk malloc limit), a multiple of 4
 *   when the major version (byte 8) is above 3, tag count <= 357913930 with the table
 *   inside the length, rendering intent < 0xffff, 'acsp' at byte 36, colour space 'RGB '
 *   for colour images or 'GRAY' for grey ones, class not 'abst' nor 'link', PCS 'XYZ ' or
 *   'Lab ' (other fields only give warnings);
 * - every tag's start and length lie inside the profile.
 * The chunk's CRC plays no part (png_handle_iCCP ignores the result of its CRC check), and
 * everything else makes the colour space invalid. zlib is driven as libpng drives it: the
 * window the stream's header declares, input in libpng's pieces, and, when that window is
 * under 32 KiB, the same output buffers (whether a distance reaches outside the window
 * then depends on them); the profile is held in memory only in that case, at most 8 MiB,
 * as libpng holds it. Returns 1: the profile counts, -1: the colour space becomes
 * invalid. d/len: the chunk data, len >= 92; color: IHDR's colour type. */
#define KILN_PNG_ICC_MAX ((uint32_t)8 << 20)
#define KILN_PNG_ICC_READ 1024u

typedef struct kiln_png_icc_reader {
	z_stream zs;
	const uint8_t *rest;
	uint32_t rest_len;
} kiln_png_icc_reader;

/* png_inflate_read: size bytes into out; returns the bytes it could not produce. */
static uint64_t kiln_png_icc_read(kiln_png_icc_reader *r, uint8_t *out, uint64_t size, int finish)
{
	int ret;
	r->zs.next_out = out;
	r->zs.avail_out = 0;
	do {
		if (r->zs.avail_in == 0) {
			uint32_t n = r->rest_len < KILN_PNG_ICC_READ ? r->rest_len : KILN_PNG_ICC_READ;
			r->zs.next_in = (Bytef *)r->rest;
			r->zs.avail_in = n;
			r->rest += n;
			r->rest_len -= n;
		}
		if (r->zs.avail_out == 0) {
			uInt n = size > UINT32_MAX ? UINT32_MAX : (uInt)size;
			size -= n;
			r->zs.avail_out = n;
		}
		ret = inflate(&r->zs, r->rest_len > 0 ? Z_NO_FLUSH : finish ? Z_FINISH : Z_SYNC_FLUSH);
	} while (ret == Z_OK && (size > 0 || r->zs.avail_out > 0));
	size += r->zs.avail_out;
	r->zs.avail_out = 0;
	return size;
}

/* Whether the 12-byte tag table entry e lies inside a profile of plen bytes. */
static bool kiln_png_icc_tag_ok(const uint8_t *e, uint32_t plen)
{
	uint32_t start = kiln_png_be32(e + 4), tlen = kiln_png_be32(e + 8);
	return start <= plen && tlen <= plen - start;
}

/* Reads size bytes through a small buffer (the window is 32 KiB: the output buffers make
 * no difference), passing each complete 12-byte tag entry to the check when tags != 0.
 * False when zlib stops before size bytes or a tag lies outside the profile. */
static bool kiln_png_icc_stream(kiln_png_icc_reader *r, uint64_t size, int finish, bool tags,
				uint32_t profile_length)
{
	uint8_t buf[85 * 12];
	while (size > 0) {
		uint64_t n = size < sizeof buf ? size : sizeof buf;
		if (kiln_png_icc_read(r, buf, n, finish) != 0)
			return false;
		for (uint64_t i = 0; tags && i + 12 <= n; i += 12)
			if (!kiln_png_icc_tag_ok(buf + i, profile_length))
				return false;
		size -= n;
	}
	return true;
}

static int kiln_png_iccp_verdict(const uint8_t *d, uint32_t len, uint32_t color)
{
	uint32_t kl = 0;
	while (kl < 80 && d[kl] != 0)
		kl++;
	if (kl < 1 || kl > 79 || d[kl + 1] != 0)
		return -1; /* bad keyword, bad compression method */
	kiln_png_icc_reader r;
	memset(&r, 0, sizeof r);
	r.zs.next_in = (Bytef *)(d + kl + 2);
	r.zs.avail_in = 81 - (kl + 2);
	r.rest = d + 81;
	r.rest_len = len - 81;
	bool small_window = (d[kl + 2] >> 4) < 7;
	if (inflateInit2(&r.zs, 0) != Z_OK)
		return -1; /* libpng: the claim fails, the same verdict */
	int verdict = -1;
	uint8_t *profile = NULL;
	uint8_t h[132];
	if (kiln_png_icc_read(&r, h, sizeof h, 0) != 0)
		goto done;
	uint32_t plen = kiln_png_be32(h), tags = kiln_png_be32(h + 128), cs = kiln_png_be32(h + 16);
	uint32_t cls = kiln_png_be32(h + 12), pcs = kiln_png_be32(h + 20);
	if (plen < 132 || plen > KILN_PNG_ICC_MAX || (h[8] > 3 && (plen & 3)) || tags > 357913930u ||
	    plen < 132 + 12 * (uint64_t)tags || kiln_png_be32(h + 64) >= 0xffffu ||
	    kiln_png_be32(h + 36) != 0x61637370u /* acsp */)
		goto done;
	if (cs == 0x52474220u /* 'RGB ' */ ? !(color & 2) : cs == 0x47524159u /* GRAY */ ? (color & 2) != 0 : true)
		goto done;
	if (cls == 0x61627374u /* abst */ || cls == 0x6c696e6bu /* link */)
		goto done;
	if (pcs != 0x58595a20u /* 'XYZ ' */ && pcs != 0x4c616220u /* 'Lab ' */)
		goto done;
	uint64_t table = 12 * (uint64_t)tags, rest = plen - 132 - table;
	if (!small_window) {
		if (kiln_png_icc_stream(&r, table, 0, true, plen) && kiln_png_icc_stream(&r, rest, 1, false, plen))
			verdict = 1;
		goto done;
	}
	profile = malloc(plen); /* plen <= 8 MiB */
	if (!profile || (table && kiln_png_icc_read(&r, profile + 132, table, 0) != 0))
		goto done;
	for (uint64_t i = 0; i < table; i += 12)
		if (!kiln_png_icc_tag_ok(profile + 132 + i, plen))
			goto done;
	if (rest && kiln_png_icc_read(&r, profile + 132 + table, rest, 1) != 0)
		goto done;
	verdict = 1;
done:
	free(profile);
	inflateEnd(&r.zs);
	return verdict;
}

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
			if (have_idat)
				continue; /* after the image data png_read_end skips it, even a second one */
			if (have_plte)
				return kiln_msgf(err, err_cap, "PLTE: duplicate"), KILN_ERR_CORRUPT;
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
			/* png_handle_iCCP's order: dropped when shorter than a keyword, its
			 * terminator, the method and the smallest zlib stream (14 bytes); skipped
			 * once the colour space is invalid; after sRGB "too many profiles"; dropped
			 * again when under 92 bytes (see kiln_png_iccp_verdict); then the profile.
			 * A profile it keeps does not set the intent (only a known sRGB profile
			 * would). The CRC is not consulted. */
			if (have_plte || len < 14 || cs_invalid)
				continue;
			if (have_intent) {
				cs_invalid = true;
				continue;
			}
			if (len < 92)
				continue;
			if (kiln_png_iccp_verdict(d, len, color) > 0)
				iccp = true;
			else
				cs_invalid = true;
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
	bool iccp_valid = iccp && !cs_invalid;
	bool linear = !srgb_valid && !iccp_valid && gamma_set && gamma >= KILN_PNG_LINEAR_LO && gamma <= KILN_PNG_LINEAR_HI;
	info->srgb = linear ? 0 : 1;
	info->format.has_trns = have_trns;
	info->has_alpha = (color & 4) || have_trns;
	info->gpu_ok = depth == 8 && !info->interlace;
	info->strips = 1;
	info->rows_per_strip = info->height;

	/* The zlib header and trailer, when the IDATs hold them (checked again at decode). */
	if (info->zlib_size >= 4) {
		/* Read the last 4 bytes of the IDAT data (they may span chunks): walk the run's
		 * chunk headers once more. */
		uint8_t tail[4];
		uint64_t need = info->zlib_size - 4, seen = 0;
		size_t p = (size_t)info->idat_offset;
		int got = 0;
		for (uint32_t c = 0; c < info->idat_chunks; c++) {
			uint32_t l = kiln_png_be32(data + p);
			for (uint64_t i = seen >= need ? 0 : (need - seen < l ? need - seen : l); i < l; i++)
				tail[got++] = data[p + 8 + i];
			seen += l;
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
