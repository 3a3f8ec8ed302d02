/* One deflate stream inflated in parallel, for files without restart points (ordinary
 * PNGs as libpng and zlib write them), written once for the CPU and the GPU (kiln_hd.h).
 *
 * A deflate stream has no index, but a dynamic-Huffman block's header is a strong
 * pattern: BTYPE 2, HLIT <= 286, HDIST <= 30, a complete code-length code, and code lengths
 * that decode with it into a literal/length code that has the end-of-block symbol and is
 * neither over-subscribed nor incomplete. The steps:
 *  1. candidates: every bit offset where such a header starts (kiln_infl_block_start),
 *     sorted; bit 0 (the stream's first block, of any type) is always one. Random data
 *     rarely passes, and a false candidate costs only its own decode below;
 *  2. count: from each candidate, blocks are decoded (no output) until one ends exactly on
 *     a later candidate, the final block ends, or an error; the output length is noted;
 *  3. chain: from bit 0 the segments that really follow each other (a true block's end is
 *     a true block's start, so a false candidate is never reached), with their output
 *     offsets (kiln_infl_chain);
 *  4. decode: each segment of the chain again, now into 16-bit symbols at its offset: a
 *     byte, or a marker for a byte of the 32 KiB before the segment, which another segment
 *     produces (a match reaching back copies the marker; KILN_INFL_MARK);
 *  5. resolve: segment after segment, the markers are replaced by the bytes they name (all
 *     of which precede the segment, so the bytes of one segment resolve in parallel);
 *  6. verdict: the first segment in stream order that failed decides, as the serial
 *     inflater would have stopped there (kiln_infl_verdict).
 * Segments end where blocks end and decode with the same stops in steps 2 and 4, so the
 * bytes, the errors and the bytes consumed are those of kiln_inflate_raw (strip == 0) on
 * the same stream; tests/unit/test_png_inflate_par.c checks that on many streams. */
#ifndef KILN_PNG_INFLATE_PAR_H
#define KILN_PNG_INFLATE_PAR_H

#include "kernels/png/png_inflate.h"

#define KILN_INFL_WINDOW 32768u
/* A 16-bit output symbol: < 256 a byte; 256 + w the byte at segment start - 32768 + w. */
#define KILN_INFL_MARK(w) ((uint16_t)(256u + (w)))
/* A segment's output offset before the chain gives it one (step 2). */
#define KILN_INFL_BASE_UNKNOWN UINT64_MAX
#define KILN_INFL_NO_STOP 0xFFFFFFFFu

/* What decoding one segment gave (steps 2 and 4). */
typedef struct kiln_infl_seg {
	uint64_t out_len; /* symbols produced */
	uint64_t end_bit; /* stream bit offset after the last block decoded */
	uint32_t stop;    /* the candidate it ended on, or KILN_INFL_NO_STOP */
	int32_t rc;       /* KILN_INFL_OK, KILN_INFL_OUTPUT_FULL or an error */
	int32_t final;    /* the final block ended it */
	uint32_t pad;
} kiln_infl_seg;

/* Bits consumed from the reader's start. */
KILN_HD uint64_t kiln_bits_position(const kiln_bits *b)
{
	return 8 * (uint64_t)(b->pos + b->overrun) - b->count;
}

/* Starts a reader at bit `bit` of in[0, len) (bit / 8 < len). */
KILN_HD void kiln_bits_init_at(kiln_bits *b, const uint8_t *in, size_t len, uint64_t bit)
{
	kiln_bits_init(b, in, len);
	b->pos = (size_t)(bit >> 3);
	kiln_bits_refill(b);
	kiln_bits_drop(b, (uint32_t)(bit & 7u));
}

/* 1 when a dynamic-Huffman block header that kiln_infl_dynamic accepts starts at bit `bit`
 * of in[0, len) (BFINAL either way). Lengths are checked as they are read (a literal code
 * that is over-subscribed halfway is refused at once), without building tables beyond the
 * 128 entries of the code-length code. */
KILN_HD int kiln_infl_block_start(const uint8_t *in, size_t len, uint64_t bit, uint32_t *pre_table)
{
	if ((bit >> 3) >= len)
		return 0;
	kiln_bits b;
	kiln_bits_init_at(&b, in, len, bit);
	if (((b.buf >> 1) & 3u) != 2u)
		return 0;
	uint32_t hlit = (uint32_t)((b.buf >> 3) & 31u) + 257;
	uint32_t hdist = (uint32_t)((b.buf >> 8) & 31u) + 1;
	uint32_t hclen = (uint32_t)((b.buf >> 13) & 15u) + 4;
	if (hlit > 286 || hdist > 30)
		return 0;
	kiln_bits_drop(&b, 17);
	uint8_t pre[19];
	for (int i = 0; i < 19; i++)
		pre[i] = 0;
	uint32_t kraft = 0; /* in units of 2^-7 */
	kiln_bits_refill(&b);
	for (uint32_t i = 0; i < hclen; i++) {
		if (b.count < 3)
			kiln_bits_refill(&b);
		uint32_t l = (uint32_t)(b.buf & 7u);
		pre[kiln_infl_pre_order[i]] = (uint8_t)l;
		kraft += l ? 128u >> l : 0u;
		kiln_bits_drop(&b, 3);
	}
	if (kraft != 128 || !kiln_bits_ok(&b)) /* zlib wants a complete code-length code */
		return 0;
	if (kiln_infl_build(pre_table, KILN_INFL_PRE_SIZE, KILN_INFL_PRE_BITS, pre, 19, 2) != 0)
		return 0;
	/* Kraft sums of the two codes in units of 2^-15, their longest lengths, and code 256. */
	uint32_t sum[2] = {0, 0}, maxlen[2] = {0, 0}, eob = 0;
	uint32_t n = 0, total = hlit + hdist, last = 0;
	while (n < total) {
		uint32_t rep;
		if (kiln_infl_len_run(pre_table, &b, n, total, &rep, &last) != KILN_INFL_OK)
			return 0;
		for (; rep > 0; rep--, n++) {
			uint32_t c = n < hlit ? 0u : 1u;
			if (n == 256)
				eob = last;
			if (last == 0)
				continue;
			sum[c] += 1u << (15 - last);
			maxlen[c] = last > maxlen[c] ? last : maxlen[c];
			if (sum[c] > (1u << 15))
				return 0;
		}
	}
	if (!kiln_bits_ok(&b) || eob == 0)
		return 0;
	/* kiln_infl_build: incomplete only with one code of length 1; no distance codes is fine. */
	if (sum[0] != (1u << 15) && maxlen[0] != 1)
		return 0;
	if (sum[1] != (1u << 15) && maxlen[1] > 1)
		return 0;
	return 1;
}

/* The symbol dist back from out[s]: a marker when that is before the segment (a match
 * copies markers as they are). */
KILN_HD uint16_t kiln_infl_back16(const uint16_t *out, size_t s, uint32_t dist)
{
	return s >= dist ? out[s - dist] : KILN_INFL_MARK(KILN_INFL_WINDOW - (dist - s));
}

/* The Huffman data of one block into out[*opos, cap) as 16-bit symbols (out NULL: only
 * counted). base is the segment's output offset in the stream (KILN_INFL_BASE_UNKNOWN
 * while counting): a match that reaches before the stream's start is then
 * KILN_INFL_ERR_DISTANCE, as kiln_infl_huffman says; one that reaches before the segment
 * copies markers. The loop is kiln_infl_huffman's, for 16-bit symbols. */
KILN_HD int kiln_infl_huffman16(const kiln_inflate_tables *t, kiln_bits *b, uint16_t *out, size_t *opos,
				size_t cap, uint64_t base)
{
	size_t o = *opos;
	int rc = KILN_INFL_OK;
	for (;;) {
		if (b->count < 48)
			kiln_bits_refill(b);
		if (b->overrun > 8) {
			rc = KILN_INFL_ERR_TRUNCATED;
			break;
		}
		uint32_t e = kiln_infl_lookup(t->lit, KILN_INFL_LIT_BITS, b);
		uint32_t kind = KILN_INFL_KIND(e);
		if (kind == KILN_INFL_LIT) {
			if (o >= cap) {
				rc = KILN_INFL_OUTPUT_FULL;
				break;
			}
			if (out)
				out[o] = (uint16_t)(e >> 16);
			o++;
			e = kiln_infl_lookup(t->lit, KILN_INFL_LIT_BITS, b);
			kind = KILN_INFL_KIND(e);
			if (kind == KILN_INFL_LIT) {
				if (o >= cap) {
					rc = KILN_INFL_OUTPUT_FULL;
					break;
				}
				if (out)
					out[o] = (uint16_t)(e >> 16);
				o++;
				continue;
			}
			if (b->count < 48)
				kiln_bits_refill(b);
		}
		if (kind == KILN_INFL_EOB)
			break;
		if (o >= cap) {
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
		if (kind != KILN_INFL_LEN) {
			rc = KILN_INFL_ERR_DATA;
			break;
		}
		uint32_t len, dist;
		if (!kiln_infl_len_dist(t, b, e, &len, &dist)) {
			rc = KILN_INFL_ERR_DATA;
			break;
		}
		if (base != KILN_INFL_BASE_UNKNOWN && dist > base + o) {
			rc = KILN_INFL_ERR_DISTANCE;
			break;
		}
		size_t n = len < cap - o ? len : cap - o;
		if (out)
			for (size_t i = 0; i < n; i++)
				out[o + i] = kiln_infl_back16(out, o + i, dist);
		o += n;
		if (n < len) {
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
	}
	*opos = o;
	return rc;
}

/* A stored block's len bytes into out[*opos, cap) as symbols (out NULL: counted), with
 * kiln_infl_stored's checks in its order. */
KILN_HD int kiln_infl_stored16(kiln_bits *b, uint32_t len, uint16_t *out, size_t *opos, size_t cap)
{
	size_t o = *opos;
	while (len > 0 && b->count >= 8) {
		if (o >= cap) {
			*opos = o;
			return KILN_INFL_OUTPUT_FULL;
		}
		if (out)
			out[o] = (uint16_t)(b->buf & 0xFFu);
		o++;
		kiln_bits_drop(b, 8);
		len--;
	}
	*opos = o;
	if (!kiln_bits_ok(b))
		return KILN_INFL_ERR_TRUNCATED;
	if (len == 0)
		return KILN_INFL_OK;
	b->buf = 0;
	b->count = 0;
	size_t avail = b->end - b->pos;
	size_t n = len < avail ? len : avail;
	size_t m = n < cap - o ? n : cap - o;
	if (out)
		for (size_t i = 0; i < m; i++)
			out[o + i] = b->in[b->pos + i];
	*opos = o + m;
	b->pos += m;
	if (m < n)
		return KILN_INFL_OUTPUT_FULL;
	return n < len ? KILN_INFL_ERR_TRUNCATED : KILN_INFL_OK;
}

/* Steps 2 and 4: decodes blocks from stream bit `start` of in[0, len) into out (NULL: count
 * only) until a block ends on one of the sorted candidates stops[0, nstops) after start,
 * the final block ends, or an error. total is the stream's output limit (the filtered
 * bytes); base the segment's output offset, or KILN_INFL_BASE_UNKNOWN, when the limit is
 * taken as total. Per block, what kiln_inflate_raw does. */
KILN_HD void kiln_infl_segment(kiln_inflate_tables *t, const uint8_t *in, size_t len, uint64_t start,
			       const uint64_t *stops, uint32_t nstops, uint16_t *out, uint64_t base,
			       uint64_t total, kiln_infl_seg *r)
{
	kiln_bits b;
	kiln_bits_init_at(&b, in, len, start);
	uint64_t known = base == KILN_INFL_BASE_UNKNOWN ? 0 : base;
	size_t cap = known < total ? (size_t)(total - known) : 0, o = 0;
	uint32_t j = 0; /* the first stop not before the reader */
	int rc = KILN_INFL_OK;
	r->final = 0;
	r->stop = KILN_INFL_NO_STOP;
	for (;;) {
		uint32_t bfinal, btype, stored = 0;
		rc = kiln_infl_block_header(t, &b, &bfinal, &btype, &stored);
		if (rc == KILN_INFL_ERR_DATA && known + o >= total && total > 0)
			rc = KILN_INFL_OUTPUT_FULL; /* a bad block after the image, as kiln_inflate_raw */
		if (rc != KILN_INFL_OK)
			break;
		if (btype == 0)
			rc = kiln_infl_stored16(&b, stored, out, &o, cap);
		else
			rc = kiln_infl_huffman16(t, &b, out, &o, cap, base);
		if (rc == KILN_INFL_OK && !kiln_bits_ok(&b))
			rc = KILN_INFL_ERR_TRUNCATED;
		if (rc != KILN_INFL_OK)
			break;
		if (bfinal) {
			r->final = 1;
			break;
		}
		uint64_t at = kiln_bits_position(&b);
		while (j < nstops && stops[j] < at)
			j++;
		if (j < nstops && stops[j] == at) {
			r->stop = j;
			break;
		}
	}
	r->rc = rc;
	r->out_len = o;
	r->end_bit = kiln_bits_position(&b);
}

/* Step 3: the chain from candidate 0 (bit 0) through the counted segments seg[0, n): writes
 * the candidates in stream order to order[] and their output offsets to base[] (indexed
 * by candidate), returns how many. The chain ends at a segment that did not end on a
 * candidate (final, error, the output full) or whose output reaches total. */
KILN_HD uint32_t kiln_infl_chain(const kiln_infl_seg *seg, uint32_t n, uint64_t total, uint32_t *order,
				 uint64_t *base)
{
	uint32_t k = 0, i = 0;
	uint64_t off = 0;
	while (n > 0) {
		order[k++] = i;
		base[i] = off;
		off += seg[i].out_len;
		uint32_t next = seg[i].stop;
		if (seg[i].rc != KILN_INFL_OK || seg[i].final || next == KILN_INFL_NO_STOP || next <= i ||
		    next >= n || off > total || k >= n)
			break;
		i = next;
	}
	return k;
}

/* Step 6: the stream's result from the decoded segments in chain order (dec[order[i]]):
 * the first failure, else the final block's end or the chain's end. *out_len: symbols up
 * to there; *used: whole bytes consumed (kiln_inflate_raw's *used). */
KILN_HD int kiln_infl_verdict(const kiln_infl_seg *dec, const uint32_t *order, uint32_t k, uint64_t *out_len,
			      uint64_t *used)
{
	uint64_t o = 0, end = 0;
	int rc = KILN_INFL_OK;
	for (uint32_t i = 0; i < k; i++) {
		const kiln_infl_seg *s = &dec[order[i]];
		o += s->out_len;
		end = s->end_bit;
		if (s->rc != KILN_INFL_OK) {
			rc = s->rc;
			break;
		}
		if (s->final)
			break;
	}
	*out_len = o;
	*used = (end + 7) / 8;
	return rc;
}

/* Step 5 for one symbol: the byte at stream position p (seg_base: its segment's offset),
 * reading earlier segments' resolved bytes in out. */
KILN_HD uint8_t kiln_infl_resolve(const uint16_t *sym, const uint8_t *out, uint64_t seg_base, uint64_t p)
{
	uint16_t v = sym[p];
	return v < 256 ? (uint8_t)v : out[seg_base - KILN_INFL_WINDOW + (v - 256u)];
}

#endif
