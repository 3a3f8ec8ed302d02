/* PNG -> PNG with kiln's codec (see png_transcode.h).
 *
 * The probe has checked the whole container (every chunk's length and CRC, IHDR, the IDAT
 * run, IEND) before anything here reads it, so the chunk walk below can trust the lengths.
 * The image data is inflated and de-filtered with the decoder's shared functions, not
 * through kiln_pngdec_decode_cpu, because that one converts to RGBA8 and the default here
 * keeps the samples as they are. */
#include "kernels/png/png_transcode.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/alloc.h"
#include "common/fileio.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_defilter.h"
#include "kernels/png/png_enc.h"
#include "kernels/png/png_inflate.h"
#include "kernels/png/png_runner.h"

#define TRANSCODE_FILE_MAX ((size_t)1 << 30) /* as kiln_png_read_path */
#define TRANSCODE_OUT_MAX ((size_t)1 << 34)

void kiln_png_transcode_opts_default(kiln_png_transcode_opts *opts)
{
	memset(opts, 0, sizeof *opts);
	opts->quality = KILN_QUALITY_MEDIUM;
	opts->decoder = KILN_PNG_DECODER_KILN;
}

/* ---- which chunks go along --------------------------------------------------------- */

/* Where a known chunk may stand, as readers check it: a chunk out of its place is ignored
 * by libpng, so carrying it into the encoder's (valid) order would change what a reader
 * sees. ANYWHERE chunks are carried from anywhere; the encoder writes them before IDAT. */
enum place { BEFORE_PLTE, AFTER_PLTE, BEFORE_IDAT, ANYWHERE };

typedef struct known_chunk {
	char type[5];
	uint8_t place;
	uint8_t multiple;     /* may repeat; else only the first is carried */
	uint8_t sample_bound; /* describes the samples as stored: not carried by rgba8 */
} known_chunk;

static const known_chunk known_chunks[] = {
	{"gAMA", BEFORE_PLTE, 0, 0}, {"cHRM", BEFORE_PLTE, 0, 0}, {"sRGB", BEFORE_PLTE, 0, 0},
	{"iCCP", BEFORE_PLTE, 0, 0}, {"sBIT", BEFORE_PLTE, 0, 1}, {"cICP", BEFORE_PLTE, 0, 0},
	{"mDCv", BEFORE_PLTE, 0, 0}, {"cLLI", BEFORE_PLTE, 0, 0}, {"tRNS", AFTER_PLTE, 0, 1},
	{"bKGD", AFTER_PLTE, 0, 1},  {"hIST", AFTER_PLTE, 0, 1},  {"pHYs", BEFORE_IDAT, 0, 0},
	{"sCAL", BEFORE_IDAT, 0, 0}, {"sPLT", BEFORE_IDAT, 1, 0}, {"tEXt", ANYWHERE, 1, 0},
	{"zTXt", ANYWHERE, 1, 0},    {"iTXt", ANYWHERE, 1, 0},    {"tIME", ANYWHERE, 0, 0},
	{"eXIf", ANYWHERE, 0, 0},
};
#define KNOWN_COUNT (sizeof known_chunks / sizeof known_chunks[0])

static int known_index(const uint8_t *type)
{
	for (size_t k = 0; k < KNOWN_COUNT; k++)
		if (memcmp(type, known_chunks[k].type, 4) == 0)
			return (int)k;
	return -1;
}

/* The chunks to carry, pointing into the file (the caller frees *out). */
typedef struct chunk_plan {
	kiln_png_chunk *chunks;
	size_t count;
	uint32_t dropped;
} chunk_plan;

/* Whether a tRNS of len bytes is one the decoder (and libpng) use: the same tests as the
 * probe's, so the output has transparency exactly when the input had it. */
static bool trns_valid(const kiln_pngdec_info *pi, uint32_t len, uint32_t num_palette)
{
	switch (pi->format.color_type) {
	case KILN_PNG_COLOR_GRAY:
		return len == 2;
	case KILN_PNG_COLOR_RGB:
		return len == 6;
	case KILN_PNG_COLOR_PALETTE:
		return num_palette > 0 && len > 0 && len <= num_palette;
	default:
		return false;
	}
}

/* The first PLTE before the image data (NULL: none), its length in *len. */
static const uint8_t *first_plte(const uint8_t *data, size_t size, uint32_t *len)
{
	for (size_t pos = 8; pos + 12 <= size; pos += 12 + (size_t)kiln_png_be32(data + pos)) {
		const uint8_t *type = data + pos + 4;
		if (memcmp(type, "IDAT", 4) == 0 || memcmp(type, "IEND", 4) == 0)
			break;
		if (memcmp(type, "PLTE", 4) == 0) {
			*len = kiln_png_be32(data + pos);
			return data + pos + 8;
		}
	}
	return NULL;
}

static kiln_status plan_chunks(const uint8_t *data, size_t size, const kiln_pngdec_info *pi, bool rgba8,
			       chunk_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	/* at most one entry per chunk: (size - 8) / 12 bounds the count */
	size_t cap = (size - 8) / 12 + 1;
	plan->chunks = kiln_calloc(cap, sizeof *plan->chunks);
	if (!plan->chunks)
		return KILN_ERR_NOMEM;
	uint32_t color = pi->format.color_type, depth = pi->format.bit_depth;
	bool gray = !(color & 2);
	/* Once, before the image data, in a colour image (a palette image's entries past
	 * 2^depth are never used, and the encoder refuses them). The probe has refused a bad
	 * PLTE in a palette image; a bad suggested palette is ignored by readers. */
	uint32_t plte_len = 0, num_palette = 0;
	const uint8_t *plte = first_plte(data, size, &plte_len);
	bool palette_out = plte && !gray && !rgba8 && plte_len > 0 && plte_len % 3 == 0 && plte_len <= 768;
	if (palette_out) {
		uint32_t n = plte_len / 3, maxn = color == KILN_PNG_COLOR_PALETTE ? 1u << depth : 256u;
		num_palette = n < maxn ? n : maxn;
	} else if (color == KILN_PNG_COLOR_PALETTE && !rgba8) {
		return KILN_ERR_CORRUPT; /* the probe lets none of these through */
	}
	bool seen_plte = false, seen_idat = false;
	bool seen[KNOWN_COUNT] = {false};
	size_t pos = 8;
	while (pos + 12 <= size) {
		const uint8_t *h = data + pos;
		uint32_t len = kiln_png_be32(h);
		const uint8_t *type = h + 4, *d = h + 8;
		pos += 12 + (size_t)len;
		if (memcmp(type, "IEND", 4) == 0)
			break;
		if (memcmp(type, "IHDR", 4) == 0)
			continue;
		if (memcmp(type, "IDAT", 4) == 0) {
			seen_idat = true;
			continue;
		}
		bool crc_ok = (uint32_t)crc32(crc32(0L, Z_NULL, 0), type, len + 4) == kiln_png_be32(d + len);
		bool carry = false;
		if (memcmp(type, "PLTE", 4) == 0) {
			seen_plte = true;
			if (d == plte && palette_out)
				plan->chunks[plan->count++] = (kiln_png_chunk){{'P', 'L', 'T', 'E'}, d, 3 * num_palette};
			else
				plan->dropped++;
			continue;
		}
		if (!crc_ok || memcmp(type, "kiSt", 4) == 0) {
			plan->dropped++;
			continue;
		}
		int k = known_index(type);
		if (k >= 0) {
			const known_chunk *kc = &known_chunks[k];
			switch (kc->place) {
			case BEFORE_PLTE:
				carry = !seen_plte && !seen_idat;
				break;
			case AFTER_PLTE:
				carry = !seen_idat && (seen_plte || color != KILN_PNG_COLOR_PALETTE);
				if (memcmp(type, "hIST", 4) == 0)
					carry = carry && palette_out;
				break;
			case BEFORE_IDAT:
				carry = !seen_idat;
				break;
			default:
				carry = true;
			}
			carry = carry && (kc->multiple || !seen[k]);
			if (carry && memcmp(type, "tRNS", 4) == 0)
				carry = trns_valid(pi, len, num_palette);
			if (rgba8 && (kc->sample_bound || (gray && memcmp(type, "iCCP", 4) == 0)))
				carry = false;
			if (carry)
				seen[k] = true;
		} else {
			/* Unknown: safe-to-copy ones (bit 5 of the last letter) only where the
			 * encoder puts them, between PLTE (or IHDR) and IDAT; the PNG rules forbid
			 * moving them across a critical chunk. */
			carry = (type[3] & 0x20) && !seen_idat && (seen_plte || !palette_out);
		}
		if (!carry) {
			plan->dropped++;
			continue;
		}
		plan->chunks[plan->count++] = (kiln_png_chunk){{(char)type[0], (char)type[1], (char)type[2], (char)type[3]},
							       d, len};
	}
	return KILN_OK;
}

/* ---- the raw samples ---------------------------------------------------------------- */

/* Inflates the IDAT run into *filt (filtered_size bytes, allocated here) and checks the
 * Adler-32, with the decoder's acceptance. */
static kiln_status inflate_idat(const uint8_t *data, const kiln_pngdec_info *pi, uint8_t **filt_out,
				char *err, size_t err_cap)
{
	*filt_out = NULL;
	const uint8_t *z = NULL;
	uint8_t *owned = NULL;
	kiln_status st = kiln_pngdec_zlib_stream(data, pi, &z, &owned, err, err_cap);
	if (st != KILN_OK)
		return st;
	/* slack: the inflater's word copies may write a few bytes past a match */
	uint8_t *filt = kiln_malloc((size_t)pi->filtered_size + 16);
	if (!filt) {
		kiln_msgf(err, err_cap, "cannot allocate %llu bytes for the image data",
			  (unsigned long long)pi->filtered_size);
		st = KILN_ERR_NOMEM;
	} else {
		st = kiln_pngdec_inflate(pi, z, filt, err, err_cap);
	}
	if (st == KILN_OK) {
		*filt_out = filt;
		filt = NULL;
	}
	free(filt);
	free(owned);
	return st;
}

/* De-filters rows [0, rows) of rb bytes (each after its filter-type byte) in place. */
static kiln_status defilter(uint8_t *filt, size_t rb, uint32_t rows, uint32_t bpp)
{
	for (uint32_t y = 0; y < rows; y++) {
		uint8_t *row = filt + (size_t)y * (rb + 1);
		if (row[0] > KILN_PNG_FILTER_PAETH)
			return KILN_ERR_CORRUPT;
		kiln_png_unfilter_row(row[0], row + 1, y > 0 ? row - rb : NULL, rb, bpp);
	}
	return KILN_OK;
}

static size_t row_bytes(uint32_t color, uint32_t depth, uint32_t w)
{
	return (size_t)(((uint64_t)w * kiln_png_channels(color) * depth + 7) / 8);
}

/* Adam7 passes (one after another in filt) -> rows of the whole image in raw (zeroed,
 * height rows of rb bytes). Below 8 bits a pixel is one sample of `depth` bits (gray or
 * palette), placed by bit position; from 8 bits on whole bytes move. */
static kiln_status deinterlace(const kiln_pngdec_info *pi, uint8_t *filt, uint8_t *raw, size_t rb)
{
	uint32_t color = pi->format.color_type, depth = pi->format.bit_depth;
	uint32_t bits = kiln_png_channels(color) * depth;
	size_t off = 0;
	for (uint32_t p = 0; p < 7; p++) {
		uint32_t pw, ph;
		kiln_adam7_pass_size(p, pi->width, pi->height, &pw, &ph);
		if (pw == 0)
			continue;
		size_t prb = row_bytes(color, depth, pw);
		if (defilter(filt + off, prb, ph, pi->bpp) != KILN_OK)
			return KILN_ERR_CORRUPT;
		for (uint32_t j = 0; j < ph; j++) {
			const uint8_t *src = filt + off + (size_t)j * (prb + 1) + 1;
			uint8_t *dst = raw + (size_t)(kiln_adam7_y0[p] + j * kiln_adam7_dy[p]) * rb;
			for (uint32_t i = 0; i < pw; i++) {
				size_t x = kiln_adam7_x0[p] + (size_t)i * kiln_adam7_dx[p];
				if (bits >= 8) {
					memcpy(dst + x * (bits / 8), src + (size_t)i * (bits / 8), bits / 8);
				} else {
					uint32_t v = kiln_png_sample(src, i, depth);
					size_t bit = x * depth;
					dst[bit >> 3] |= (uint8_t)(v << (8 - depth - (bit & 7)));
				}
			}
		}
		off += (prb + 1) * ph;
	}
	return KILN_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

size_t kiln_png_source_memory(const kiln_pngdec_info *pi, bool rgba8)
{
	if (rgba8)
		return (size_t)pi->width * pi->height * 4;
	/* the inflated image data, and the de-interlaced copy of an Adam7 image */
	size_t rb = row_bytes(pi->format.color_type, pi->format.bit_depth, pi->width);
	return (size_t)pi->filtered_size + (pi->interlace ? rb * pi->height : 0);
}

kiln_status kiln_png_source_read(const uint8_t *data, size_t size, const kiln_pngdec_info *probed,
				 const kiln_png_transcode_opts *opts, kiln_pool *pool, kiln_png_source *src,
				 char *err, size_t err_cap)
{
	memset(src, 0, sizeof *src);
	kiln_pngdec_info pi;
	kiln_status st = KILN_OK;
	if (probed)
		pi = *probed;
	else if ((st = kiln_pngdec_probe(data, size, opts->limits, &pi, err, err_cap)) != KILN_OK)
		return st;
	chunk_plan plan;
	st = plan_chunks(data, size, &pi, opts->rgba8 != 0, &plan);
	src->chunks = plan.chunks;
	if (st != KILN_OK) {
		kiln_msgf(err, err_cap, st == KILN_ERR_NOMEM ? "out of memory" : "PLTE: invalid palette");
		goto fail;
	}
	kiln_pngenc_image *img = &src->image;
	if (opts->rgba8) {
		st = kiln_png_read(data, size, opts->decoder, opts->limits, pool, &src->rgba, err, err_cap);
		if (st != KILN_OK)
			goto fail;
		if (src->rgba.stride > UINT32_MAX) {
			kiln_msgf(err, err_cap, "%ux%u pixels: rows too long for the encoder", src->rgba.width,
				  src->rgba.height);
			st = KILN_ERR_TOO_LARGE;
			goto fail;
		}
		kiln_surface s = {src->rgba.pixels, src->rgba.width, src->rgba.height, (uint32_t)src->rgba.stride,
				  src->rgba.has_alpha};
		kiln_pngenc_image_from_surface(&s, img);
	} else {
		st = inflate_idat(data, &pi, &src->filt, err, err_cap);
		if (st != KILN_OK)
			goto fail;
		size_t rb = row_bytes(pi.format.color_type, pi.format.bit_depth, pi.width);
		img->width = pi.width;
		img->height = pi.height;
		img->color_type = (uint8_t)pi.format.color_type;
		img->bit_depth = (uint8_t)pi.format.bit_depth;
		if (pi.interlace) {
			size_t raw_size;
			if (!kiln_size_mul(rb, pi.height, &raw_size) ||
			    !(src->raw = kiln_calloc(raw_size ? raw_size : 1, 1))) {
				kiln_msgf(err, err_cap, "cannot allocate the de-interlaced image");
				st = KILN_ERR_NOMEM;
				goto fail;
			}
			st = deinterlace(&pi, src->filt, src->raw, rb);
			img->pixels = src->raw;
			img->stride = rb;
		} else {
			st = defilter(src->filt, rb, pi.height, pi.bpp);
			img->pixels = src->filt + 1; /* rows stay behind their filter-type bytes */
			img->stride = rb + 1;
		}
		if (st != KILN_OK) {
			kiln_msgf(err, err_cap, "IDAT: bad adaptive filter value");
			goto fail;
		}
	}
	img->chunks = plan.chunks;
	img->chunk_count = plan.count;
	src->info.width = img->width;
	src->info.height = img->height;
	src->info.color_type = img->color_type;
	src->info.bit_depth = img->bit_depth;
	src->info.interlaced = pi.interlace != 0;
	src->info.chunks_kept = (uint32_t)plan.count;
	src->info.chunks_dropped = plan.dropped;
	return KILN_OK;
fail:
	kiln_png_source_free(src);
	return st;
}

void kiln_png_source_free(kiln_png_source *src)
{
	kiln_image_free(&src->rgba);
	free(src->raw);
	free(src->filt);
	free(src->chunks);
	memset(src, 0, sizeof *src);
}

/* ---- encoding ---------------------------------------------------------------------- */

kiln_status kiln_png_source_encode(kiln_pngenc_runner *runner, const kiln_png_transcode_opts *opts,
				   kiln_png_source *const *srcs, size_t count, kiln_buf *out, kiln_status *status,
				   char *err, size_t err_cap)
{
	kiln_pngenc_params params;
	kiln_pngenc_params_default(&params);
	params.quality = opts->quality;
	kiln_pngenc_image *imgs = kiln_calloc(count ? count : 1, sizeof *imgs);
	if (!imgs) {
		kiln_msgf(err, err_cap, "out of memory");
		return KILN_ERR_NOMEM;
	}
	for (size_t i = 0; i < count; i++)
		imgs[i] = srcs[i]->image;
	size_t *start = kiln_calloc(count ? count : 1, sizeof *start);
	kiln_status st = start ? KILN_OK : KILN_ERR_NOMEM;
	for (size_t i = 0; i < count && start; i++)
		start[i] = out[i].len;
	if (st == KILN_OK)
		st = kiln_pngenc_runner_encode(runner, &params, imgs, count, out, status);
	if (st != KILN_OK)
		kiln_msgf(err, err_cap, "%s", start ? kiln_pngenc_runner_last_error(runner) : "out of memory");
	for (size_t i = 0; i < count && st == KILN_OK; i++)
		if (status[i] == KILN_OK)
			srcs[i]->info.bytes = out[i].len - start[i];
	free(start);
	free(imgs);
	return st;
}

kiln_status kiln_png_transcode(const uint8_t *data, size_t size, const kiln_png_transcode_opts *opts,
			       kiln_pool *pool, kiln_buf *out, kiln_png_transcode_info *info,
			       char *err, size_t err_cap)
{
	if (!out) {
		kiln_msgf(err, err_cap, "no output buffer");
		return KILN_ERR_INVALID_ARG;
	}
	kiln_png_transcode_opts defaults;
	if (!opts) {
		kiln_png_transcode_opts_default(&defaults);
		opts = &defaults;
	}
	kiln_png_source src;
	kiln_status st = kiln_png_source_read(data, size, NULL, opts, pool, &src, err, err_cap);
	if (st != KILN_OK)
		return st;
	kiln_pngenc_runner *runner = NULL;
	kiln_device cpu = {.kind = KILN_DEVICE_CPU};
	st = kiln_pngenc_runner_create(&cpu, pool, &runner);
	if (st != KILN_OK) {
		kiln_msgf(err, err_cap, "out of memory");
		goto fail;
	}
	kiln_png_source *one = &src;
	kiln_status img_st = KILN_OK;
	st = kiln_png_source_encode(runner, opts, &one, 1, out, &img_st, err, err_cap);
	if (st == KILN_OK && img_st != KILN_OK) {
		st = img_st;
		kiln_msgf(err, err_cap, "encoding: %s", kiln_strerror(st));
	}
	if (st == KILN_OK && info)
		*info = src.info;
fail:
	kiln_pngenc_runner_destroy(runner);
	kiln_png_source_free(&src);
	return st;
}

kiln_status kiln_png_transcode_path(const char *in_path, const char *out_path,
				    const kiln_png_transcode_opts *opts, kiln_pool *pool,
				    kiln_png_transcode_info *info, char *err, size_t err_cap)
{
	kiln_buf in, out;
	kiln_buf_init(&in, TRANSCODE_FILE_MAX);
	kiln_buf_init(&out, TRANSCODE_OUT_MAX);
	kiln_status st = kiln_buf_read_file(&in, in_path);
	if (st != KILN_OK) {
		kiln_msgf(err, err_cap, "%s: %s", in_path, kiln_strerror(st));
		goto fail;
	}
	st = kiln_png_transcode(in.data, in.len, opts, pool, &out, info, err, err_cap);
	if (st != KILN_OK)
		goto fail;
	st = kiln_file_write_atomic(out_path, out.data, out.len);
	if (st != KILN_OK)
		kiln_msgf(err, err_cap, "writing %s: %s", out_path, kiln_strerror(st));
fail:
	kiln_buf_free(&in);
	kiln_buf_free(&out);
	return st;
}
