/* The encoder's internals shared by its two backends (png_enc_cpu.c, png_enc_cuda.cu):
 * the plan of one image (strips, where each part of the file goes), the strip job
 * (filter the strip's rows, Adler-32 them, deflate them) and the assembly of the file.
 * Not part of the API (png_enc.h is).
 *
 * How a file is built, on either backend:
 *   1. the head: signature and IHDR, the passthrough chunks, room for kiSt;
 *   2. every strip, independently: its rows filtered into scratch, their Adler-32, the
 *      deflate data (CPU: written into the output at the strip's worst-case position, the
 *      layout kiln_pngenc_bound counts; GPU: into scratch), the CRC-32 of that data;
 *   3. per image, in strip order: each strip's data moves down to its final position (a
 *      move to lower addresses, in order, never overwrites data not yet moved), gets its
 *      IDAT chunk header and CRC (combined from the strip's CRC), the checksums combine
 *      into the zlib trailer; then kiSt and IEND.
 * One IDAT chunk per strip: the zlib header goes in the first, the Adler-32 in the last. */
#ifndef KILN_PNG_ENC_SHARED_H
#define KILN_PNG_ENC_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kiln_hd.h"
#include "kernels/png/png_check.h"
#include "kernels/png/png_deflate.h"
#include "kernels/png/png_enc.h"
#include "kernels/png/png_filter.h"

/* Filtered bytes a strip aims at when rows_per_strip is automatic, by quality: more strips
 * mean more warps for the GPU's deflate (one per strip, and it limits the GPU encoder) and
 * for every parallel decoder, fewer mean smaller files (each strip restarts the window and
 * writes its own tables). On the 24 Kodak images, against one strip at the same quality:
 * fast in 16 KiB strips (75 an image) +1.1 %, medium in 20 KiB strips (64) +3.9 %, 1.027x
 * libpng's size (in 32 KiB strips, 37, medium decoded 10% slower on the GPU: too few
 * warps). High takes medium's strips (64 KiB strips, 19 an image, decoded at 13 GB/s on
 * the GPU against medium's 20): its optimal parse and filters by trial make up for them,
 * 0.9999x libpng's size (docs/PNG.md). */
#define PNG_ENC_STRIP_TARGET(quality) ((quality) == KILN_QUALITY_FAST ? 16384u : 20480u)
/* IDAT data of one strip, at most (a chunk's length must stay below 2^31). */
#define PNG_ENC_STRIP_MAX (1u << 30)
#define PNG_ENC_HEAD 33u   /* signature + IHDR chunk */

typedef struct png_plan {
	const uint8_t *pixels;
	uint64_t stride;
	uint8_t *dst;
	uint32_t width, height;
	uint32_t rowbytes;        /* bytes of samples a row (without the filter byte) */
	uint32_t bpp;             /* filter distance: bytes a pixel, at least 1 */
	uint8_t color_type, bit_depth, from_rgba8, none_only;
	int32_t filter;           /* PNG_FILTER_ADAPTIVE or a forced type */
	int32_t quality;
	uint32_t rows_per_strip, strip_count;
	uint32_t kist;            /* write the kiSt chunk */
	uint64_t chunks_len;      /* passthrough chunks, from PNG_ENC_HEAD */
	uint64_t kist_off;        /* kiSt chunk (when kist) */
	uint64_t idat_off;        /* first IDAT chunk */
	uint64_t strip_cap;       /* deflate bound of a full strip */
	uint64_t last_cap;        /* deflate bound of the last strip */
	uint64_t bound;           /* the whole file, worst case */
	uint64_t first_strip;     /* index of strip 0 in the batch */
	uint64_t scratch_off;     /* GPU: where the image's strip scratch starts */
	uint64_t strip_scratch;   /* GPU: scratch bytes of each of its strips */
	uint32_t batch_index;     /* GPU: the image's index in the caller's batch */
} png_plan;

typedef struct png_strip_result {
	uint32_t size;   /* deflate bytes */
	uint32_t adler;  /* of the strip's filtered bytes */
	uint32_t crc;    /* of the deflate bytes alone */
	uint32_t ok;
} png_strip_result;

KILN_HD uint32_t png_plan_rowlen(const png_plan *pl)
{
	return pl->rowbytes + 1;
}

/* Rows of strip i and its first row. */
KILN_HD uint32_t png_plan_strip_rows(const png_plan *pl, uint32_t i, uint32_t *y0)
{
	uint32_t first = i * pl->rows_per_strip;
	uint32_t rows = pl->height - first < pl->rows_per_strip ? pl->height - first : pl->rows_per_strip;
	*y0 = first;
	return rows;
}

/* Where strip i's deflate data goes before assembly (the worst-case layout). */
KILN_HD uint64_t png_plan_work_off(const png_plan *pl, uint32_t i)
{
	return pl->idat_off + 8 + 2 + (uint64_t)i * (pl->strip_cap + 12);
}

KILN_HD uint64_t png_plan_strip_cap(const png_plan *pl, uint32_t i)
{
	return i + 1 == pl->strip_count ? pl->last_cap : pl->strip_cap;
}

KILN_HD void png_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

KILN_HD uint32_t png_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The zlib header's second byte: FLEVEL from the quality, FCHECK so that the 16-bit
 * header is a multiple of 31 (CMF 0x78: deflate, 32 KiB window). */
KILN_HD uint32_t png_zlib_flg(int quality)
{
	uint32_t level = quality <= 0 ? 0 : quality == 1 ? 2 : 3;
	uint32_t flg = level << 6;
	return flg + (31 - (0x78u * 256 + flg) % 31) % 31;
}

/* Row y of the image as PNG samples: the pixels themselves, or RGBA8 converted to RGB8
 * into buf (rowbytes). */
KILN_HD const uint8_t *png_plan_row(const png_plan *pl, uint32_t y, uint8_t *buf)
{
	const uint8_t *src = pl->pixels + (uint64_t)y * pl->stride;
	if (!(pl->from_rgba8 && pl->color_type == KILN_PNG_COLOR_RGB))
		return src;
	for (uint32_t x = 0; x < pl->width; x++) {
		buf[3 * x] = src[4 * x];
		buf[3 * x + 1] = src[4 * x + 1];
		buf[3 * x + 2] = src[4 * x + 2];
	}
	return buf;
}

/* Filters the rows of strip i into filt (rows * rowlen bytes); rowbuf: 2 * rowbytes of
 * scratch for converted rows. The type of each row: force >= 0, that filter throughout (the
 * first row takes png_filter_first_row); else keys (high's trials, the type in the low 3
 * bits of each row's key) or, keys NULL, png_choose_filter. Returns the strip's byte
 * count. */
KILN_HD uint32_t png_filter_strip(const png_plan *pl, uint32_t i, int force, const uint64_t *keys, uint8_t *filt,
				  uint8_t *rowbuf)
{
	uint32_t y0, rows = png_plan_strip_rows(pl, i, &y0), rowlen = png_plan_rowlen(pl);
	const uint8_t *prev = NULL;
	for (uint32_t r = 0; r < rows; r++) {
		const uint8_t *row = png_plan_row(pl, y0 + r, rowbuf + (r & 1u) * pl->rowbytes);
		int type = force >= 0 ? png_choose_filter(row, prev, pl->rowbytes, pl->bpp, force, 0)
			 : keys ? (int)(keys[r] & 7u)
			 : png_choose_filter(row, prev, pl->rowbytes, pl->bpp, pl->filter, pl->none_only);
		png_filter_row(type, row, prev, pl->rowbytes, pl->bpp, filt + (uint64_t)r * rowlen);
		prev = row;
	}
	return rows * rowlen;
}

/* ---- high's filter choice ------------------------------------------------------------- */

/* High picks each row's filter by trial: the strip filtered with each of the five filters
 * throughout, its matches found (png_trial_matcher, over the whole strip: what the rows
 * above offer), and each row costed by png_trial_cost; each row keeps its cheapest filter.
 * On Kodak in 20 KiB strips that takes the optimal parse from 1.0089 to 1.0001 x libpng's
 * size (libpng's heuristic, the sum of the bytes as signed magnitudes, does not see
 * matches). Adaptive filters on whole bytes only (otherwise the rule is None). */
KILN_HD int png_plan_trials(const png_plan *pl)
{
	return png_defl_level_for(pl->quality).optimal && pl->filter == PNG_FILTER_ADAPTIVE && !pl->none_only;
}

/* A match's cost in a trial besides its distance's extra bits (the literals cost their
 * entropy): 0, 1, 2, 3 give 1.0008, 1.0006, 1.0004, 1.0003 x libpng in the measure above
 * (with medium's chains of 16; with chains of 1: 2, 3, 4 give 1.0003, 1.0001, 1.0001). */
#define PNG_TRIAL_MATCH_BITS 3u

/* best[p]: png_match_at of p under m as len | dist << 16 (0: none), found on first use
 * where best holds PNG_DEFL_NONE: the CPU's way, as a parse visits a fraction of the
 * positions (a strip of long runs, every position's match is 258 bytes long); the GPU
 * fills best for every position first, all at once. */
KILN_HD uint32_t png_trial_best(const png_matcher *m, uint32_t *best, uint32_t p)
{
	if (best[p] == PNG_DEFL_NONE) {
		uint32_t dist = 0, len = png_match_at(m, p, &dist);
		best[p] = len ? (dist << 16 | len) : 0;
	}
	return best[p];
}

/* The estimated bits (16.16) of m's bytes [from, to) under a lazy parse with the matches
 * png_trial_best gives (a match stops at `to`): the entropy of the literals within the
 * range plus, for each match, its distance's extra bits and PNG_TRIAL_MATCH_BITS. */
KILN_HD uint64_t png_trial_cost(const png_matcher *m, uint32_t *best, uint32_t from, uint32_t to)
{
	uint32_t hist[256];
	for (uint32_t v = 0; v < 256; v++)
		hist[v] = 0;
	uint32_t literals = 0;
	uint64_t match_bits = 0;
	for (uint32_t p = from; p < to;) {
		uint32_t b = png_trial_best(m, best, p), len = b & 0xFFFFu, ne, ev;
		len = len < to - p ? len : to - p;
		if (len >= PNG_DEFL_MIN_MATCH && p + 1 < to && (png_trial_best(m, best, p + 1) & 0xFFFFu) > len)
			len = 0;
		if (len < PNG_DEFL_MIN_MATCH) {
			hist[m->d[p]]++;
			literals++;
			p++;
			continue;
		}
		png_dist_code(b >> 16, &ne, &ev);
		match_bits += PNG_TRIAL_MATCH_BITS + ne;
		p += len;
	}
	uint64_t bits = match_bits << 16;
	uint32_t total = literals ? png_log2_q16(literals) : 0;
	for (uint32_t v = 0; v < 256; v++)
		if (hist[v])
			bits += (uint64_t)hist[v] * (total - png_log2_q16(hist[v]));
	return bits;
}

/* The search of high's trials: medium's with a chain of PNG_TRIAL_CHAIN entries (1, 2, 4,
 * 16 give 1.0001, 1.0002, 1.0002, 1.0003 x libpng with 3 parses: the trials judge a
 * filter by the matches close at hand, and a deeper search costs time for nothing). */
#define PNG_TRIAL_CHAIN 1u

KILN_HD void png_trial_matcher(png_matcher *m, const uint8_t *u, uint32_t n, uint32_t rowlen, uint32_t bpp,
			       uint32_t *head, uint32_t *prev)
{
	png_matcher_init(m, u, n, rowlen, bpp, KILN_QUALITY_MEDIUM, head, prev);
	m->level.chain = PNG_TRIAL_CHAIN;
}

/* Trial `type` of row r (rows of rowlen bytes, the strip filtered throughout with type in
 * m's data, png_trial_matcher's chains complete, matches in best): keys[r] (cost << 3 |
 * type) keeps the cheaper of it and the earlier trials (ties to the lower type, tried
 * first). The first row of a strip tries None and Sub alone (the layout rule). */
KILN_HD void png_trial_row(const png_matcher *m, uint32_t *best, uint32_t r, uint32_t rowlen, int type,
			   uint64_t *keys)
{
	if (r == 0 && type > PNG_FILTER_SUB)
		return;
	uint64_t from = (uint64_t)r * rowlen;
	uint64_t key = png_trial_cost(m, best, (uint32_t)from + 1, (uint32_t)(from + rowlen)) << 3 | (uint32_t)type;
	if (type == 0 || key < keys[r])
		keys[r] = key;
}

/* High's trials for strip i on one thread: each filter in turn into filt, the chains (s:
 * head and prev), each row costed into keys (a key a row) with the matches it needs
 * found as it goes (best: n entries). */
KILN_HD void png_trial_strip(const png_plan *pl, uint32_t i, uint8_t *filt, uint8_t *rowbuf, png_defl_scratch *s,
			     uint32_t *best, uint64_t *keys)
{
	uint32_t y0, rows = png_plan_strip_rows(pl, i, &y0), rowlen = png_plan_rowlen(pl);
	for (int type = 0; type < 5; type++) {
		uint32_t n = png_filter_strip(pl, i, type, NULL, filt, rowbuf);
		for (uint32_t h = 0; h < PNG_DEFL_HASH_SIZE; h++)
			s->head[h] = PNG_DEFL_NONE;
		png_matcher m;
		png_trial_matcher(&m, filt, n, rowlen, pl->bpp, s->head, s->prev);
		png_matcher_insert(&m, n);
		for (uint32_t p = 0; p < n; p++)
			best[p] = PNG_DEFL_NONE;
		for (uint32_t r = 0; r < rows; r++)
			png_trial_row(&m, best, r, rowlen, type, keys);
	}
	for (uint32_t h = 0; h < PNG_DEFL_HASH_SIZE; h++)
		s->head[h] = PNG_DEFL_NONE;
}

/* Strip i end to end on one thread: (high) the filter trials, filter, Adler-32, deflate
 * into the output at its work offset, CRC-32 of the deflate data. keys: a key per row
 * (png_plan_trials only). */
KILN_HD void png_strip_job(const png_plan *pl, uint32_t i, uint8_t *filt, uint8_t *rowbuf, png_defl_scratch *s,
			   uint64_t *keys, const uint32_t *crc_table, png_strip_result *res)
{
	int trials = png_plan_trials(pl);
	if (trials)
		png_trial_strip(pl, i, filt, rowbuf, s, s->cands, keys);
	uint32_t n = png_filter_strip(pl, i, -1, trials ? keys : NULL, filt, rowbuf);
	res->adler = kiln_adler32_update(1, filt, n);
	uint8_t *out = pl->dst + png_plan_work_off(pl, i);
	size_t size = png_deflate_strip(filt, n, png_plan_rowlen(pl), pl->bpp, pl->quality,
					i + 1 == pl->strip_count, s, out, (size_t)png_plan_strip_cap(pl, i));
	res->size = (uint32_t)size;
	res->ok = size != 0;
	res->crc = kiln_crc32_update_table(crc_table, 0, out, size);
}

/* ---- assembly ------------------------------------------------------------------------- */

/* Signature and IHDR at the start of the file. */
KILN_HD void png_write_head(const png_plan *pl, const uint32_t *crc_table)
{
	uint8_t *d = pl->dst;
	const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
	for (int k = 0; k < 8; k++)
		d[k] = sig[k];
	png_put_be32(d + 8, 13);
	d[12] = 'I';
	d[13] = 'H';
	d[14] = 'D';
	d[15] = 'R';
	png_put_be32(d + 16, pl->width);
	png_put_be32(d + 20, pl->height);
	d[24] = pl->bit_depth;
	d[25] = pl->color_type;
	d[26] = 0;
	d[27] = 0;
	d[28] = 0;
	png_put_be32(d + 29, kiln_crc32_update_table(crc_table, 0, d + 12, 17));
}

/* Running state of one image's assembly. */
typedef struct png_asm {
	uint64_t pos;     /* next chunk starts here */
	uint32_t adler;
	uint32_t zoff;    /* offset of the next strip in the zlib stream */
} png_asm;

KILN_HD void png_asm_init(const png_plan *pl, png_asm *a)
{
	a->pos = pl->idat_off;
	a->adler = 1;
	a->zoff = 2;
}

/* Where strip i's data lands in the final file (call before png_asm_strip). */
KILN_HD uint64_t png_asm_data_off(const png_asm *a, uint32_t i)
{
	return a->pos + 8 + (i == 0 ? 2 : 0);
}

/* Bytes of strip i's IDAT chunk around r->size bytes of deflate data (the first also
 * holds the zlib header, the last the Adler-32 trailer). */
KILN_HD uint64_t png_asm_chunk_size(const png_plan *pl, uint32_t i, const png_strip_result *r)
{
	return 12 + (uint64_t)r->size + (i == 0 ? 2 : 0) + (i + 1 == pl->strip_count ? 4 : 0);
}

/* Once strip i's data sits in its chunk at pos (data at pos + 8, after the zlib header for
 * strip 0): the chunk's header, the zlib header / trailer (adler: the whole stream's, used
 * by the last strip), the CRC, and its kiSt offset zoff. Depends on no other strip's
 * chunk, so the GPU writes all of them at once. */
KILN_HD void png_asm_chunk(const png_plan *pl, uint64_t pos, uint32_t zoff, uint32_t adler, uint32_t i,
			   const png_strip_result *r, const uint32_t *crc_table)
{
	uint8_t *d = pl->dst;
	int first = i == 0, last = i + 1 == pl->strip_count;
	uint8_t *h = d + pos;
	uint32_t len = r->size + (first ? 2 : 0) + (last ? 4 : 0);
	png_put_be32(h, len);
	h[4] = 'I';
	h[5] = 'D';
	h[6] = 'A';
	h[7] = 'T';
	if (first) {
		h[8] = 0x78;
		h[9] = (uint8_t)png_zlib_flg(pl->quality);
	}
	uint32_t crc = kiln_crc32_update_table(crc_table, 0, h + 4, first ? 6 : 4);
	crc = kiln_crc32_combine(crc, r->crc, r->size);
	uint8_t *end = h + 8 + (first ? 2 : 0) + r->size;
	if (last) {
		png_put_be32(end, adler);
		crc = kiln_crc32_update_table(crc_table, crc, end, 4);
		end += 4;
	}
	png_put_be32(end, crc);
	if (pl->kist)
		png_put_be32(d + pl->kist_off + 8 + 20 + 4 * (uint64_t)i, zoff);
}

/* Adler-32 of strip i's filtered bytes appended to `adler`, that of the strips before. */
KILN_HD uint32_t png_asm_adler(const png_plan *pl, uint32_t adler, uint32_t i, const png_strip_result *r)
{
	uint32_t y0, rows = png_plan_strip_rows(pl, i, &y0);
	return kiln_adler32_combine(adler, r->adler, (uint64_t)rows * png_plan_rowlen(pl));
}

/* Strip i in order, after strips 0 .. i - 1 (the serial form of png_asm_chunk). */
KILN_HD void png_asm_strip(const png_plan *pl, png_asm *a, uint32_t i, const png_strip_result *r,
			   const uint32_t *crc_table)
{
	a->adler = png_asm_adler(pl, a->adler, i, r);
	png_asm_chunk(pl, a->pos, a->zoff, a->adler, i, r, crc_table);
	a->zoff += r->size;
	a->pos += png_asm_chunk_size(pl, i, r);
}

/* After the last strip: kiSt (its offsets are already in place) and IEND. Returns the
 * file's size. */
KILN_HD uint64_t png_asm_finish(const png_plan *pl, const png_asm *a, const uint32_t *crc_table)
{
	uint8_t *d = pl->dst;
	if (pl->kist) {
		uint8_t *k = d + pl->kist_off;
		uint32_t len = 20 + 4 * pl->strip_count;
		png_put_be32(k, len);
		k[4] = 'k';
		k[5] = 'i';
		k[6] = 'S';
		k[7] = 't';
		k[8] = 1;
		k[9] = 0;
		k[10] = 0;
		k[11] = 0;
		png_put_be32(k + 12, a->zoff + 4);
		png_put_be32(k + 16, a->adler);
		png_put_be32(k + 20, pl->rows_per_strip);
		png_put_be32(k + 24, pl->strip_count);
		png_put_be32(k + 8 + len, kiln_crc32_update_table(crc_table, 0, k + 4, 4 + (size_t)len));
	}
	uint8_t *e = d + a->pos;
	png_put_be32(e, 0);
	e[4] = 'I';
	e[5] = 'E';
	e[6] = 'N';
	e[7] = 'D';
	png_put_be32(e + 8, 0xAE426082u);
	return a->pos + 12;
}

/* Host side, png_enc_cpu.c: the plan of one image (status KILN_OK or why refused), and
 * the passthrough chunks in file order, each as header / data / CRC pieces handed to
 * put(ctx, offset in the file, bytes, size). */
kiln_status png_enc_plan(const kiln_pngenc_params *params, const kiln_pngenc_image *img, png_plan *pl);
typedef int (*png_enc_put_fn)(void *ctx, uint64_t off, const void *p, size_t n);
int png_enc_put_chunks(const kiln_pngenc_image *img, png_enc_put_fn put, void *ctx);
/* The host CRC table. */
const uint32_t *png_enc_crc_table(void);

#endif
