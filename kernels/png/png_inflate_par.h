/* One deflate stream inflated in parallel, for files without restart points (ordinary
 * PNGs as libpng and zlib write them), written once for the CPU and the GPU (kiln_hd.h).
 *
 * A deflate stream has no index. Two kinds of entry points make one:
 *  - header entries: a dynamic-Huffman block's header is a strong pattern (BTYPE 2,
 *    HLIT <= 286, HDIST <= 30, a complete code-length code, code lengths that decode with
 *    it into a literal/length code that has the end-of-block symbol and is neither
 *    over-subscribed nor incomplete); every bit offset where one starts is a candidate
 *    (kiln_infl_block_start), and bit 0 (the first block, of any type) always is. Random
 *    data rarely passes, and a false candidate costs only its own decode below;
 *  - mid entries, every `spacing` bits (kiln_infl_entries): decoding starts there inside
 *    a block, with the tables of the nearest header entry before it. A Huffman decode
 *    started at a wrong bit falls into step with the true one within a few symbols (the
 *    codes are complete: every bit string is a symbol sequence, and two decodes meet at
 *    a common symbol boundary soon), so each mid entry records the bit offsets of its
 *    first KILN_INFL_PROBES symbol boundaries and the output before each
 *    (kiln_infl_probe). A decode that reaches one of them in the same block, with the
 *    same tables, is from there on the same decode: it stops and hands over.
 * Entries split Kodak-like streams, whose blocks hold tens to hundreds of KB, into pieces
 * of about `spacing` bits, so that thousands of threads share the work evenly. The steps:
 *  1. candidates (kiln_infl_block_start), sorted, merged with the mid entries
 *     (kiln_infl_entries); the entries' probes (kiln_infl_probe); more mid entries where
 *     the probes' rate says a piece would make many symbols (kiln_infl_refine), probed in
 *     turn;
 *  2. count: from each entry, blocks are decoded until one ends exactly on a later header
 *     entry, the decode meets a later mid entry's probe (as above), the final block ends,
 *     or an error; the output length and the meeting point are noted, and the symbols go
 *     to the entry's slot (kiln_infl_slots) as step 4 writes them, except that a match
 *     reading one of a mid entry's first symbols writes a reference (KILN_INFL_REF);
 *  3. chain: from bit 0 the pieces that really follow each other (a false candidate or a
 *     mid entry no true decode meets is never reached), with their output offsets and
 *     the probe each is entered at (kiln_infl_chain);
 *  4. decode: each piece of the chain, from the probe it is entered at, as 16-bit symbols
 *     at its offset: a byte, or a marker for a byte of the 32 KiB before the piece, which
 *     another piece produces (a match reaching back copies the marker; KILN_INFL_MARK);
 *     taken from its slot where all of it is there (kiln_infl_placeable,
 *     kiln_infl_unslot), else decoded again;
 *  5. resolve: piece after piece, the markers are replaced by the bytes they name (all of
 *     which precede the piece, so the bytes of one piece resolve in parallel);
 *  6. verdict: the first piece in stream order that failed decides, as the serial
 *     inflater would have stopped there (kiln_infl_verdict).
 * A piece is entered at a symbol boundary of the true decode, in the state the serial
 * inflater has there (position, tables, output offset), and decodes with the same checks
 * in steps 2 and 4, so the bytes, the errors and the bytes consumed are those of
 * kiln_inflate_raw (strip == 0) on the same stream; tests/unit/test_png_inflate_par.c
 * checks that on many streams and spacings, and the fuzz target inflate_par on any
 * bytes. */
#ifndef KILN_PNG_INFLATE_PAR_H
#define KILN_PNG_INFLATE_PAR_H

#include "kernels/png/png_inflate.h"

#define KILN_INFL_WINDOW 32768u
/* A 16-bit output symbol: < 256 a byte; 256 + w the byte at piece start - 32768 + w. */
#define KILN_INFL_MARK(w) ((uint16_t)(256u + (w)))
/* In a slot (step 2): KILN_INFL_REF(r), the slot's symbol r, written where a match reads
 * one of the first symbols of a mid entry's decode, which are the true decode's only from
 * the probe the chain later enters the piece at (kiln_infl_unslot). */
#define KILN_INFL_REF0 (256u + KILN_INFL_WINDOW)
#define KILN_INFL_REF(r) ((uint16_t)(KILN_INFL_REF0 + (r)))
#define KILN_INFL_REFS_MAX (65536u - KILN_INFL_REF0)
/* A piece's output offset before the chain gives it one (step 2). */
#define KILN_INFL_BASE_UNKNOWN UINT64_MAX
#define KILN_INFL_NO_STOP 0xFFFFFFFFu
/* Symbol boundaries recorded per mid entry (128 symbols of at most 48 bits and 258 bytes:
 * offsets and outputs fit 16 bits). With 32, a third of the mid entries of zlib level 6
 * streams of image-like bytes were met by no decode; with 128, under 5 %. */
#define KILN_INFL_PROBES 128
/* Output the count pass of a mid entry may make before the true decode meets it (the
 * probes' symbols), added to its limit so that only a true overflow fails it. */
#define KILN_INFL_SLACK ((uint64_t)KILN_INFL_PROBES * 258u)
/* kiln_infl_huffman16 stopped at a symbol boundary at or past its limit (internal). */
#define KILN_INFL_PAUSE 100
/* A piece that began inside a block and then reads a block header that is no entry (a
 * fixed or stored block, or a wrong decode's idea of a header), or passes a header entry
 * inside a block (the entry is false, or the decode is), stops after this many more bits
 * with KILN_INFL_GAVE_UP: a wrong decode (one that the true one never meets) finds no
 * entry it may hand over to and rarely errs, so it would run on for hundreds of KB,
 * holding up its pass (a Kodak file had one of 460 Kbit). The true decode gives up only
 * where a long fixed or stored block follows a dynamic one, a false candidate lies in a
 * block (none in the Kodak files), or a true header is no entry (kept candidates past a
 * cap: kiln_infl_cand_cap says why that must not happen); the stream is then inflated
 * serially (the caller's fallback). */
#define KILN_INFL_ROAM 32768u
#define KILN_INFL_GAVE_UP 200
/* Slots of step 2 (kiln_infl_slots): a file's slot area holds, at the scale of 256, 8
 * symbols per stream byte and 4 per output symbol, and KILN_INFL_SLOT_PAD per entry; at
 * KILN_INFL_SLOT_SCALE, half that. A piece wants twice its estimate (kiln_infl_estimate)
 * or 4 symbols per stream byte if more (Kodak streams inflate 1.8x, 5.4x at the 99.9th
 * percentile of 4 KiB windows, 18.6x at most); one that does not fit is decoded again in
 * step 4. */
#define KILN_INFL_SLOT_SCALE 128u
#define KILN_INFL_SLOT_PAD 512u
#define KILN_INFL_UNPROBED 0xFFFFFFFFu
/* Bits between the mid entries kiln_infl_refine adds, at least (a few dozen symbols). */
#define KILN_INFL_REFINE_GAP 512u

/* An entry point (step 1). A header entry has src == its own index. */
typedef struct kiln_infl_entry {
	uint64_t bit;      /* where decoding starts */
	uint64_t slot;     /* step 2: where its symbols go in the file's slot area ... */
	uint32_t slot_cap; /* ... and how many fit (kiln_infl_slots) */
	uint32_t src;      /* mid entry: the header entry whose tables it decodes with */
	uint32_t block;    /* header entry: its block's tables in the caller's kiln_infl_block
			      array, or KILN_INFL_NO_BLOCK (the pieces build them) */
	uint32_t probes;   /* boundaries recorded (0: none; KILN_INFL_UNPROBED: added by
			      kiln_infl_refine, not probed yet); a mid entry's are where a
			      decode may meet it, a header entry's (after its header) only
			      tell its rate (kiln_infl_estimate) */
	uint16_t off[KILN_INFL_PROBES]; /* the boundaries, in bits after `bit` (off[0] = 0) */
	uint16_t cum[KILN_INFL_PROBES]; /* output symbols before each */
} kiln_infl_entry;

/* What decoding one piece gave (steps 2 and 4). */
typedef struct kiln_infl_seg {
	uint64_t out_len; /* symbols produced */
	uint64_t end_bit; /* stream bit offset where it stopped */
	uint32_t stop;    /* the entry it handed over to, or KILN_INFL_NO_STOP */
	uint32_t probe;   /* ... at that entry's probe (0 for a header entry) */
	int32_t rc;       /* KILN_INFL_OK, KILN_INFL_OUTPUT_FULL or an error */
	int32_t final;    /* the final block ended it */
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

/* The Kraft sums of three code-length-code lengths (9 bits, the first length lowest):
 * the sum of 128 >> l over the lengths l that are not 0 (kiln_infl_header_shape). */
KILN_HD void kiln_infl_kraft3_init(uint16_t *kraft3)
{
	for (uint32_t v = 0; v < 512; v++) {
		uint32_t sum = 0;
		for (uint32_t i = 0; i < 3; i++) {
			uint32_t l = (v >> (3 * i)) & 7u;
			sum += l ? 128u >> l : 0u;
		}
		kraft3[v] = (uint16_t)sum;
	}
}

/* The cheap half of kiln_infl_block_start's test on the 96 stream bits from an offset
 * (w0 first; the test reads 74 of them): BTYPE 2, HLIT <= 286, HDIST <= 30 and a complete
 * code-length code. Passed by about 0.1 % of the bit offsets of Kodak streams; the GPU's
 * scan tests the rest only there. Without branches, and the code-length code's Kraft sum
 * in 7 look-ups of 3 lengths (kraft3: kiln_infl_kraft3_init; unused lengths masked to 0):
 * the scan runs it at every bit offset, where a loop over the lengths (for the quarter of
 * offsets with BTYPE 2) kept the other lanes of a warp waiting. In 32-bit words: a GPU
 * shifts a 64-bit word by a variable amount in several instructions, and with 64-bit
 * words this test was most of the scan's instructions. */
KILN_HD int kiln_infl_header_shape(uint32_t w0, uint32_t w1, uint32_t w2, const uint16_t *kraft3)
{
	uint32_t hclen = ((w0 >> 13) & 15u) + 4; /* at most 19 lengths of 3 bits, from bit 17 */
	uint32_t l0 = (w0 >> 17 | w1 << 15) & ((1u << 27) - 1u); /* lengths 0-8: bits 17-43 */
	uint32_t l1 = (w1 >> 12 | w2 << 20) & ((1u << 30) - 1u); /* lengths 9-18: bits 44-73 */
	l0 &= hclen >= 9 ? (1u << 27) - 1u : (1u << (3 * hclen)) - 1u;
	l1 &= hclen > 9 ? (1u << (3 * (hclen - 9))) - 1u : 0u;
	uint32_t kraft = kraft3[l0 & 511u] + kraft3[(l0 >> 9) & 511u] + kraft3[l0 >> 18] + kraft3[l1 & 511u] +
			 kraft3[(l1 >> 9) & 511u] + kraft3[(l1 >> 18) & 511u] + kraft3[l1 >> 27];
	return (((w0 >> 1) & 3u) == 2u) & (((w0 >> 3) & 31u) <= 29u) & (((w0 >> 8) & 31u) <= 29u) & (kraft == 128u);
}

/* The bits the header test reads at the 8 bit offsets of one stream byte: the 96 from the
 * byte on (81 are read), zero past len. */
typedef struct kiln_infl_window {
	uint32_t w[3];
} kiln_infl_window;

KILN_HD kiln_infl_window kiln_infl_window_at(const uint8_t *in, uint64_t len, uint64_t byte)
{
	kiln_infl_window w = {{0, 0, 0}};
	for (int i = 11; i >= 0; i--) {
		uint32_t v = byte + (uint64_t)i < len ? in[byte + i] : 0u;
		w.w[i >> 2] = w.w[i >> 2] << 8 | v;
	}
	return w;
}

/* The 32 bits of hi:lo from bit k (0..31). */
KILN_HD uint32_t kiln_infl_funnel(uint32_t lo, uint32_t hi, uint32_t k)
{
#ifdef __CUDA_ARCH__
	return __funnelshift_r(lo, hi, k);
#else
	return k ? lo >> k | hi << (32 - k) : lo;
#endif
}

/* The offsets k (bit k, 0..7) of the window's byte whose BTYPE, HLIT and HDIST pass
 * kiln_infl_header_shape's tests, all 8 at once: about a fifth of them. The scan takes
 * the Kraft sum only there (its look-ups are most of the test). */
KILN_HD uint32_t kiln_infl_window_fields(const kiln_infl_window *w)
{
	uint32_t b = w->w[0];
	uint32_t btype2 = ~b >> 1 & b >> 2;                       /* bits k+1, k+2: 0, 1 */
	uint32_t hlit_over = b >> 4 & b >> 5 & b >> 6 & b >> 7;   /* HLIT (bits k+3..k+7) >= 30 */
	uint32_t hdist_over = b >> 9 & b >> 10 & b >> 11 & b >> 12; /* HDIST (k+8..k+12) >= 30 */
	return btype2 & ~hlit_over & ~hdist_over & 255u;
}

/* kiln_infl_header_shape at bit k (0..7) of the window's byte. */
KILN_HD int kiln_infl_window_shape(const kiln_infl_window *w, uint32_t k, const uint16_t *kraft3)
{
	return kiln_infl_header_shape(kiln_infl_funnel(w->w[0], w->w[1], k), kiln_infl_funnel(w->w[1], w->w[2], k),
				      w->w[2] >> k, kraft3);
}

/* 1 when a dynamic-Huffman block header that kiln_infl_dynamic accepts starts at bit `bit`
 * of in[0, len) (BFINAL either way). Lengths are checked as they are read (a literal code
 * that is over-subscribed halfway is refused at once), without building tables: the
 * code-length code is decoded canonically from its counts per length and its symbols in
 * code order (35 bytes), the symbols and bits kiln_infl_dynamic's table gives. A
 * 128-entry table per test (and kiln_infl_build's scratch) sat in the GPU threads' local
 * memory: the full test of Kodak's candidates waited on it. */
KILN_HD int kiln_infl_block_start(const uint8_t *in, size_t len, uint64_t bit)
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
	/* zlib wants a complete code-length code (kiln_infl_build then accepts it) */
	if (kraft != 128 || !kiln_bits_ok(&b))
		return 0;
	uint8_t count[8] = {0, 0, 0, 0, 0, 0, 0, 0}, next[8], sorted[19];
	for (int i = 0; i < 19; i++)
		count[pre[i]]++;
	next[1] = 0;
	for (int l = 1; l < 7; l++)
		next[l + 1] = (uint8_t)(next[l] + count[l]);
	for (int i = 0; i < 19; i++) /* canonical order: by length, then symbol */
		if (pre[i])
			sorted[next[pre[i]]++] = (uint8_t)i;
	/* Kraft sums of the two codes in units of 2^-15, their longest lengths, and code 256. */
	uint32_t sum[2] = {0, 0}, maxlen[2] = {0, 0}, eob = 0;
	uint32_t n = 0, total = hlit + hdist, last = 0;
	while (n < total) {
		kiln_bits_refill(&b);
		if (!kiln_bits_ok(&b))
			return 0;
		/* a code's bits come first bit first: the code value grows a bit at a time, and
		 * the codes of length l are count[l] values from first (a complete code: always
		 * found within 7 bits) */
		uint32_t code = 0, first = 0, index = 0, sym = 0, clen = 0;
		for (uint32_t l = 1; l <= 7; l++) {
			code |= (uint32_t)(b.buf >> (l - 1)) & 1u;
			if (!clen && code < first + count[l]) {
				sym = sorted[index + code - first];
				clen = l;
			}
			index += count[l];
			first = (first + count[l]) << 1;
			code <<= 1;
		}
		kiln_bits_drop(&b, clen);
		uint32_t rep;
		if (kiln_infl_len_sym_run(sym, &b, n, total, &rep, &last) != KILN_INFL_OK)
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

/* Where a piece's symbols go: out[0, wcap) (out NULL: counted only; symbols past wcap are
 * counted, not written); a match that reads one of the first `refs` symbols writes a
 * reference to it (KILN_INFL_REF) instead of its value. */
typedef struct kiln_infl_sink {
	uint16_t *out;
	size_t wcap;
	uint32_t refs;
} kiln_infl_sink;

/* Symbols [o, o + w) of a match of distance dist into out (w > 0). A symbol whose source
 * lies before the piece is a marker, KILN_INFL_MARK(KILN_INFL_WINDOW - (dist - s)), and
 * one whose source is among the first `refs` a reference, KILN_INFL_REF(s - dist): both
 * are KILN_INFL_REF0 + s - dist, and both are the symbols with s < dist + refs, which come
 * first in the match. So the match is a run of such names followed by a copy, instead of
 * two tests per symbol (they cost a match symbol about 10 instructions of the count
 * pass). Where dist >= w the copy reads only symbols written before the match: its
 * loads go four at a time ahead of their stores, one memory round trip per four symbols
 * instead of one per symbol (libpng's Kodak matches are 4.6 symbols long on average, 99 %
 * of them shorter than their distance); a copy of an overlapping match goes symbol by
 * symbol, as it must. */
KILN_HD void kiln_infl_copy16(uint16_t *out, size_t o, uint32_t w, uint32_t dist, uint32_t refs)
{
	/* counts of at most 258 in 32 bits (the GPU does 64-bit arithmetic in two instructions)
	 * and pointers that step (x86 widens a 32-bit index at every use) */
	uint32_t named = dist + refs, a = 0; /* below 2^17, so o too when a > 0 */
	if (o < named) {
		a = named - (uint32_t)o;
		a = a < w ? a : w;
	}
	uint16_t *d = out + o;
	uint32_t v = KILN_INFL_REF0 + (uint32_t)o - dist; /* the first name, mod 2^32 */
	for (uint32_t i = 0; i < a; i++)
		*d++ = (uint16_t)v++;
	if (a == w)
		return;
	const uint16_t *s = out + (o + a - dist); /* o + a >= dist + refs: inside out */
	uint32_t r = w - a;
	if (dist < w) {
		do
			*d++ = *s++;
		while (--r);
		return;
	}
	for (;;) {
		uint16_t x0 = s[0], x1 = r > 1 ? s[1] : 0, x2 = r > 2 ? s[2] : 0, x3 = r > 3 ? s[3] : 0;
		d[0] = x0;
		if (r > 1)
			d[1] = x1;
		if (r > 2)
			d[2] = x2;
		if (r > 3)
			d[3] = x3;
		if (r <= 4)
			return;
		r -= 4;
		d += 4;
		s += 4;
	}
}

/* The end of a lookup of the literal/length table whose root entry e is no literal of up
 * to 10 bits (kiln_infl_lookup_rest on a whole table). */
KILN_HD uint32_t kiln_infl_lit_rest(const uint32_t *lit, kiln_bits *b, uint32_t e)
{
	return kiln_infl_lookup_rest(lit + (1u << KILN_INFL_LIT_BITS), KILN_INFL_LIT_BITS, b, e);
}

/* kiln_infl_len_dist for kiln_infl_huffman16, a distance code of up to 8 bits (most of
 * them) taken apart first, as the literals are: the second level's instructions stay out of
 * the path of those matches. */
KILN_HD int kiln_infl_len_dist16(const kiln_inflate_tables *t, kiln_bits *b, uint32_t e, uint32_t *len,
				 uint32_t *dist)
{
	*len = kiln_infl_base_extra(b, e);
	uint32_t d = t->dist[b->buf & ((1u << KILN_INFL_DIST_BITS) - 1)];
	if (KILN_INFL_KIND(d) != KILN_INFL_LEN) {
		d = kiln_infl_link(t->dist + (1u << KILN_INFL_DIST_BITS), KILN_INFL_DIST_BITS, b, d);
		if (KILN_INFL_KIND(d) != KILN_INFL_LEN) {
			kiln_bits_drop(b, d & 0xFFu);
			return 0;
		}
	}
	kiln_bits_drop(b, d & 0xFFu);
	*dist = kiln_infl_base_extra(b, d);
	return 1;
}

/* One literal v at *o into out, with kiln_infl_huffman16's tests: none while *room lasts
 * (symbols below cap and wcap, with out), else cap (0: the output is full), out and wcap. */
KILN_HD int kiln_infl_put16(uint16_t *out, size_t *o, uint32_t *room, size_t cap, size_t wcap, uint32_t v)
{
	if (*room) {
		(*room)--;
		out[*o] = (uint16_t)v;
	} else {
		if (*o >= cap)
			return 0;
		if (out && *o < wcap)
			out[*o] = (uint16_t)v;
	}
	(*o)++;
	return 1;
}

/* The reader's bit count at or below which its position is at or past stream bit lim
 * (kiln_bits_position(b) >= lim <=> b->count <= it), at least -KILN_INFL_STOP_FAR (lim
 * further away) and at most 64 (lim passed). The position moves only with the count between
 * refills, so the test before each symbol is one compare of the count instead of a 64-bit
 * position (4 more dependent instructions a symbol on the GPU, after the count the symbol's
 * code length gives). */
#define KILN_INFL_STOP_FAR 0x40000000
KILN_HD int32_t kiln_infl_stop_count(const kiln_bits *b, uint64_t lim)
{
	uint64_t top = 8 * (uint64_t)(b->pos + b->overrun);
	if (lim > top)
		return lim - top < KILN_INFL_STOP_FAR ? -(int32_t)(lim - top) : -KILN_INFL_STOP_FAR;
	return top - lim < 64 ? (int32_t)(top - lim) : 64;
}

/* The count at or below which the top of kiln_infl_huffman16's loop has more to do than a
 * lookup: a refill (below 48), the limit (stop), the truncation test (overrun past 8). */
KILN_HD int32_t kiln_infl_top_count(const kiln_bits *b, int32_t stop)
{
	return b->overrun > 8 ? 64 : stop > 47 ? stop : 47;
}

/* A refill of kiln_infl_huffman16, its thresholds moved along. The bits loaded end at the
 * position plus the count, before a refill and after, so the stop count (kiln_infl_stop_count)
 * moves by the count's change: no 64-bit arithmetic at every refill (every step or two),
 * except while lim is more than KILN_INFL_STOP_FAR bits away. A stop count of 64 is one the
 * loop pauses at before it refills again. */
KILN_HD void kiln_infl_refill16(kiln_bits *b, uint64_t lim, int32_t *stop, int32_t *top)
{
	uint32_t before = b->count;
	kiln_bits_refill(b);
	if (*stop > -KILN_INFL_STOP_FAR)
		*stop += (int32_t)(b->count - before);
	else
		*stop = kiln_infl_stop_count(b, lim);
	*top = kiln_infl_top_count(b, *stop);
}

/* The Huffman data of one block into the sink k from *opos, with at most cap symbols in
 * all, as 16-bit symbols, up to the end-of-block code, an error, or the first symbol boundary at or past
 * stream bit `lim` (KILN_INFL_PAUSE; called again, it goes on). base is the piece's output
 * offset in the stream (KILN_INFL_BASE_UNKNOWN while counting): a match that reaches
 * before the stream's start is then KILN_INFL_ERR_DISTANCE, as kiln_infl_huffman says;
 * one that reaches before the piece copies markers. The loop is kiln_infl_huffman's, for
 * 16-bit symbols, with its refills where that one has them (the bits consumed past the
 * input's end depend on them) and its tests in its order; the tests that repeat at every
 * symbol are cut to one compare each: the top's three (refill, truncation, limit) to one of
 * the count (kiln_infl_top_count), a literal's three (cap, out, wcap) to one of `room`
 * (kiln_infl_put16). */
KILN_HD int kiln_infl_huffman16(const kiln_inflate_tables *t, kiln_bits *b, const kiln_infl_sink *k,
				size_t *opos, size_t cap, uint64_t base, uint64_t lim)
{
	uint16_t *out = k->out;
	size_t o = *opos, wcap = k->wcap;
	size_t fast = !out ? 0 : cap < wcap ? cap : wcap;
	/* symbols that fit under cap and wcap (with out) from o, a 32-bit count the loop carries:
	 * held as a 64-bit bound, the GPU recomputed it from cap and wcap at every step (8
	 * instructions: its registers were short) */
	uint32_t room = o >= fast ? 0u : fast - o < 0xFFFFFFFFu ? (uint32_t)(fast - o) : 0xFFFFFFFFu;
	int32_t stop = kiln_infl_stop_count(b, lim), top = kiln_infl_top_count(b, stop);
	int rc = KILN_INFL_OK;
	for (;;) {
		if ((int32_t)b->count <= top) {
			if (b->count < 48)
				kiln_infl_refill16(b, lim, &stop, &top);
			if (b->overrun > 8) {
				rc = KILN_INFL_ERR_TRUNCATED;
				break;
			}
			if ((int32_t)b->count <= stop) {
				rc = KILN_INFL_PAUSE;
				break;
			}
			/* here only after a refill (else the count was at most the stop count, or
			 * the overrun past 8), which moved top */
		}
		/* A step: a literal and a second symbol without a refill (48 - 15 bits remain), or
		 * another symbol. A literal of up to 10 bits, most symbols, takes only the root
		 * table's test: nvcc predicated the second level's 11 instructions (a load among
		 * them) into the path of every step's first symbol. */
		uint32_t e = t->lit[b->buf & ((1u << KILN_INFL_LIT_BITS) - 1)];
		if (KILN_INFL_KIND(e) == KILN_INFL_LIT) {
			kiln_bits_drop(b, e & 0xFFu);
		} else {
			e = kiln_infl_lit_rest(t->lit, b, e);
			if (KILN_INFL_KIND(e) != KILN_INFL_LIT)
				goto other;
		}
		if (!kiln_infl_put16(out, &o, &room, cap, wcap, e >> 16)) {
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
		if ((int32_t)b->count <= stop) {
			rc = KILN_INFL_PAUSE;
			break;
		}
		e = t->lit[b->buf & ((1u << KILN_INFL_LIT_BITS) - 1)];
		if (KILN_INFL_KIND(e) == KILN_INFL_LIT) {
			kiln_bits_drop(b, e & 0xFFu);
		} else {
			e = kiln_infl_lit_rest(t->lit, b, e);
			if (KILN_INFL_KIND(e) != KILN_INFL_LIT) {
				if (b->count < 48)
					kiln_infl_refill16(b, lim, &stop, &top);
				goto other;
			}
		}
		if (!kiln_infl_put16(out, &o, &room, cap, wcap, e >> 16)) {
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
		continue;
	other:;
		/* a length code with room (so o < cap) passes the three tests at once */
		uint32_t kind = KILN_INFL_KIND(e);
		if (kind != KILN_INFL_LEN || !room) {
			if (kind == KILN_INFL_EOB)
				break;
			rc = kiln_infl_match_ok(kind, o, cap);
			if (rc != KILN_INFL_OK)
				break;
		}
		uint32_t len, dist;
		if (!kiln_infl_len_dist16(t, b, e, &len, &dist)) {
			rc = KILN_INFL_ERR_DATA;
			break;
		}
		if (base != KILN_INFL_BASE_UNKNOWN && dist > base + o) {
			rc = KILN_INFL_ERR_DISTANCE;
			break;
		}
		if (len <= room) {
			room -= len;
			kiln_infl_copy16(out, o, len, dist, k->refs);
			o += len;
			continue;
		}
		/* the match meets cap or wcap, or nothing is written */
		room = 0;
		size_t n = len < cap - o ? len : cap - o;
		size_t w = !out || o >= wcap ? 0 : n < wcap - o ? n : wcap - o;
		if (w)
			kiln_infl_copy16(out, o, (uint32_t)w, dist, k->refs);
		o += n;
		if (n < len) {
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
	}
	*opos = o;
	return rc;
}

/* A stored block's len bytes into the sink k from *opos, with at most cap symbols in all,
 * with kiln_infl_stored's checks in its order. */
KILN_HD int kiln_infl_stored16(kiln_bits *b, uint32_t len, const kiln_infl_sink *k, size_t *opos, size_t cap)
{
	uint16_t *out = k->out;
	size_t wcap = k->wcap;
	size_t o = *opos;
	while (len > 0 && b->count >= 8) {
		if (o >= cap) {
			*opos = o;
			return KILN_INFL_OUTPUT_FULL;
		}
		if (out && o < wcap)
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
		for (size_t i = 0; i < m && o + i < wcap; i++)
			out[o + i] = b->in[b->pos + i];
	*opos = o + m;
	b->pos += m;
	if (m < n)
		return KILN_INFL_OUTPUT_FULL;
	return n < len ? KILN_INFL_ERR_TRUNCATED : KILN_INFL_OK;
}

/* The tables of the block whose header starts at stream bit `bit` (*bfinal: its BFINAL;
 * *data: where its Huffman data starts); 0 when that is not a Huffman block with a valid
 * header. */
KILN_HD int kiln_infl_tables_at(kiln_inflate_tables *t, const uint8_t *in, size_t len, uint64_t bit,
				uint32_t *bfinal, uint64_t *data)
{
	kiln_bits b;
	uint32_t btype, stored;
	kiln_bits_init_at(&b, in, len, bit);
	int ok = kiln_infl_block_header(t, &b, bfinal, &btype, &stored) == KILN_INFL_OK && btype != 0 &&
		 kiln_bits_ok(&b);
	*data = kiln_bits_position(&b);
	return ok;
}

/* The tables of a block, built from its header once (kiln_infl_block_build) for every
 * probe and piece that decodes in it: a GPU batch builds them for its header entries
 * before the probes, so that the mid entries (most pieces, each of which built the
 * block's tables in both passes, most of the probes' time) look them up. */
typedef struct kiln_infl_block {
	kiln_inflate_tables t;
	uint64_t data;   /* kiln_infl_tables_at's: where the Huffman data starts ... */
	uint32_t bfinal; /* ... BFINAL ... */
	int32_t ok;      /* ... and its verdict */
} kiln_infl_block;

#define KILN_INFL_NO_BLOCK 0xFFFFFFFFu

KILN_HD void kiln_infl_block_build(kiln_infl_block *k, const uint8_t *in, size_t len, uint64_t bit)
{
	k->ok = kiln_infl_tables_at(&k->t, in, len, bit, &k->bfinal, &k->data);
}

/* The tables a probe or piece of entry i starts with: its block's built ones in blocks
 * (NULL: none given), else built into t; kiln_infl_tables_at's verdict, BFINAL and data
 * bit. */
KILN_HD const kiln_inflate_tables *kiln_infl_first_tables(kiln_inflate_tables *t, const kiln_infl_block *blocks,
							const uint8_t *in, size_t len, const kiln_infl_entry *e,
							uint32_t i, int *ok, uint32_t *bfinal, uint64_t *data)
{
	uint32_t kb = e[e[i].src].block;
	if (!blocks || kb == KILN_INFL_NO_BLOCK) {
		*ok = kiln_infl_tables_at(t, in, len, e[e[i].src].bit, bfinal, data);
		return t;
	}
	const kiln_infl_block *k = &blocks[kb];
	*ok = k->ok;
	*bfinal = k->bfinal;
	*data = k->data;
	return &k->t;
}

/* Step 1: the sorted candidates cand[0, ncand) (cand[0] == 0) and a mid entry every
 * `spacing` bits (0: none) of a stream of len bytes into e[0, cap), in stream order;
 * returns how many. A mid entry at a candidate's bit is left out; so are mid entries in
 * the last 1 KiB, and whatever would pass cap (pieces then only grow longer). */
KILN_HD uint32_t kiln_infl_entries(const uint64_t *cand, uint32_t ncand, size_t len, uint64_t spacing,
				   kiln_infl_entry *e, uint32_t cap)
{
	uint64_t bits = 8 * (uint64_t)len, mid = spacing;
	uint32_t n = 0, c = 0, src = 0;
	while (n < cap && (c < ncand || (spacing > 0 && mid + 8192 < bits))) {
		int take_cand = c < ncand && (spacing == 0 || mid + 8192 >= bits || cand[c] <= mid);
		kiln_infl_entry *x = &e[n];
		x->probes = 0;
		x->block = KILN_INFL_NO_BLOCK;
		x->off[0] = 0;
		x->cum[0] = 0;
		if (take_cand) {
			if (spacing > 0 && cand[c] == mid)
				mid += spacing;
			x->bit = cand[c++];
			x->src = src = n;
		} else {
			x->bit = mid;
			x->src = src;
			mid += spacing;
		}
		n++;
	}
	return n;
}

/* Step 1 for entry i of e[0, n): its first symbol boundaries (a mid entry's with the
 * tables of its header entry; a header entry's after its header) before the next entry
 * and 64 bits before the input's end, and the output before each; none when the header
 * is no Huffman block's. The block's tables come from blocks (kiln_infl_first_tables), else
 * are built into scratch. */
KILN_HD void kiln_infl_probe(kiln_inflate_tables *scratch, const kiln_infl_block *blocks, const uint8_t *in,
			     size_t len, kiln_infl_entry *e, uint32_t n, uint32_t i)
{
	kiln_infl_entry *m = &e[i];
	uint32_t bfinal;
	uint64_t data;
	int ok;
	m->probes = 0;
	m->off[0] = 0; /* where a count from the entry starts, probed or not */
	m->cum[0] = 0;
	const kiln_inflate_tables *t = kiln_infl_first_tables(scratch, blocks, in, len, e, i, &ok, &bfinal, &data);
	if (!ok || (m->src != i && m->bit < data))
		return; /* no Huffman block, or a mid entry inside its header: no decode meets it */
	kiln_bits b;
	kiln_bits_init_at(&b, in, len, m->src == i ? data : m->bit);
	uint64_t end = 8 * (uint64_t)len;
	end = end > 64 ? end - 64 : 0;
	if (i + 1 < n && e[i + 1].bit < end)
		end = e[i + 1].bit;
	uint32_t out = 0;
	for (uint32_t k = 0; k < KILN_INFL_PROBES; k++) {
		uint64_t at = kiln_bits_position(&b);
		if (at >= end)
			break;
		if (at - m->bit > 0xFFFFu)
			break;
		m->off[k] = (uint16_t)(at - m->bit);
		m->cum[k] = (uint16_t)out;
		m->probes = k + 1;
		kiln_bits_refill(&b);
		uint32_t s = kiln_infl_lookup(t->lit, KILN_INFL_LIT_BITS, &b), len_, dist;
		if (KILN_INFL_KIND(s) == KILN_INFL_LIT)
			out++;
		else if (KILN_INFL_KIND(s) == KILN_INFL_LEN && kiln_infl_len_dist(t, &b, s, &len_, &dist))
			out += len_;
		else
			break; /* the block's end or bad data: the probes end here */
	}
}

/* The next probe a decode at stream bit q in the block whose header is at bit hdr may meet:
 * from mid entry *k on (its probe *p on), the first entry of that block with a probe at
 * or past q; its bit. While the next such entry belongs to a later block (entries' header
 * entries only grow along the stream), that block's header bit: a decode that gets there
 * inside its block has passed a header entry (*passed = 1 on the next call), and the
 * entries of that block are skipped. */
KILN_HD uint64_t kiln_infl_next_probe(const kiln_infl_entry *e, uint32_t n, uint64_t hdr, uint64_t q,
				      uint32_t *k, uint32_t *p, int *passed)
{
	for (; *k < n; (*k)++, *p = 0) {
		const kiln_infl_entry *x = &e[*k];
		uint64_t h = e[x->src].bit;
		if (x->src == *k || x->probes == 0 || h < hdr)
			continue;
		if (h > hdr) {
			if (h > q)
				return h;
			*passed = 1;
			continue;
		}
		while (*p < x->probes && x->bit + x->off[*p] < q)
			(*p)++;
		if (*p < x->probes)
			return x->bit + x->off[*p];
	}
	return UINT64_MAX;
}

/* The symbols of mid entry i's decode that a match may read before the chain says where
 * the true decode enters it (its last probe's output; 0 for a header entry). */
KILN_HD uint32_t kiln_infl_refs(const kiln_infl_entry *e, uint32_t i)
{
	const kiln_infl_entry *m = &e[i];
	if (m->src == i || m->probes == 0)
		return 0;
	uint32_t last = m->cum[m->probes - 1];
	return last < KILN_INFL_REFS_MAX ? last : KILN_INFL_REFS_MAX;
}

/* Steps 2 and 4: decodes the piece of entry i of e[0, n), from its probe `skip` (a header
 * entry: 0, its header), into out[0, wcap) (out NULL: count only; past wcap: counted)
 * until it hands over to a later entry (a block ends on a header entry, or the decode
 * meets a mid entry's probe in the block that entry assumes), the final block ends, or an
 * error. total is the stream's output limit (the filtered bytes); base the piece's output
 * offset, or KILN_INFL_BASE_UNKNOWN (step 2: the limit is then total + KILN_INFL_SLACK,
 * and a mid entry's symbols go to its slot with references for its first ones,
 * kiln_infl_unslot). Per block, what kiln_inflate_raw does. A mid entry's first block
 * decodes with its tables from blocks (kiln_infl_first_tables) where they are built; every
 * other block's tables are built into t. */
KILN_HD void kiln_infl_piece(kiln_inflate_tables *t, const kiln_infl_block *blocks, const uint8_t *in, size_t len,
			     const kiln_infl_entry *e, uint32_t n, uint32_t i, uint32_t skip, uint16_t *out, size_t wcap,
			     uint64_t base, uint64_t total, kiln_infl_seg *r)
{
	const kiln_infl_entry *me = &e[i];
	const int from_mid = me->src != i; /* the entry is a mid entry */
	const kiln_infl_sink sink = {out, wcap, base == KILN_INFL_BASE_UNKNOWN ? kiln_infl_refs(e, i) : 0};
	int inside = from_mid;             /* the decode is inside a block */
	uint64_t roam_end = UINT64_MAX;
	uint64_t known = base == KILN_INFL_BASE_UNKNOWN ? 0 : base;
	size_t cap = base == KILN_INFL_BASE_UNKNOWN ? (size_t)(total + KILN_INFL_SLACK)
						    : known < total ? (size_t)(total - known) : 0;
	size_t o = 0;
	uint64_t hdr = e[me->src].bit; /* the current block's header */
	uint32_t bfinal = 0, k = i + 1, p = 0, j = i + 1;
	int rc = KILN_INFL_OK;
	kiln_bits b;
	r->final = 0;
	r->stop = KILN_INFL_NO_STOP;
	r->probe = 0;
	uint64_t data;
	int ok = 1;
	const kiln_inflate_tables *cur = t; /* the current block's tables: its built ones, or t */
	if (inside)
		cur = kiln_infl_first_tables(t, blocks, in, len, e, i, &ok, &bfinal, &data);
	if (!ok) {
		rc = KILN_INFL_ERR_DATA; /* a mid entry after a stored block's header: no decode meets it */
		kiln_bits_init_at(&b, in, len, me->bit);
		goto done;
	}
	kiln_bits_init_at(&b, in, len, me->bit + (inside ? me->off[skip] : 0));
	for (;;) {
		if (!inside) {
			uint32_t btype, stored = 0;
			hdr = kiln_bits_position(&b);
			if (from_mid && roam_end == UINT64_MAX)
				roam_end = hdr + KILN_INFL_ROAM; /* no entry here (else the piece had stopped) */
			rc = kiln_infl_block_header(t, &b, &bfinal, &btype, &stored);
			cur = t;
			if (rc == KILN_INFL_ERR_DATA && known + o >= total && total > 0)
				rc = KILN_INFL_OUTPUT_FULL; /* a bad block after the image, as kiln_inflate_raw */
			if (rc != KILN_INFL_OK)
				break;
			if (btype == 0) {
				rc = kiln_infl_stored16(&b, stored, &sink, &o, cap);
				goto block_end;
			}
		}
		inside = 0;
		for (;;) {
			uint64_t q = kiln_bits_position(&b);
			int passed = 0;
			uint64_t lim = kiln_infl_next_probe(e, n, hdr, q, &k, &p, &passed);
			if (passed && from_mid && roam_end == UINT64_MAX)
				roam_end = q + KILN_INFL_ROAM;
			if (q >= roam_end) {
				rc = KILN_INFL_GAVE_UP;
				goto done;
			}
			if (lim == q) { /* the decode meets entry k: from here on it is k's */
				rc = KILN_INFL_OK;
				r->stop = k;
				r->probe = p;
				goto done;
			}
			rc = kiln_infl_huffman16(cur, &b, &sink, &o, cap, base, lim < roam_end ? lim : roam_end);
			if (rc != KILN_INFL_PAUSE)
				break;
		}
	block_end:
		if (rc == KILN_INFL_OK && !kiln_bits_ok(&b))
			rc = KILN_INFL_ERR_TRUNCATED;
		if (rc != KILN_INFL_OK)
			break;
		if (bfinal) {
			r->final = 1;
			break;
		}
		uint64_t at = kiln_bits_position(&b);
		if (at >= roam_end) {
			rc = KILN_INFL_GAVE_UP;
			break;
		}
		while (j < n && e[j].bit < at)
			j++;
		if (j < n && e[j].bit == at && e[j].src == j) {
			r->stop = j;
			break;
		}
	}
done:
	r->rc = rc;
	r->out_len = o;
	r->end_bit = kiln_bits_position(&b);
}

/* Step 3: the chain from entry 0 (bit 0) through the counted pieces seg[0, n) of e[0, n):
 * writes the entries in stream order to order[], and, indexed by entry, their output
 * offsets to base[] and the probes they are entered at to skip[]; returns how many. The
 * chain ends at a piece that did not hand over (final, error, the output full) or whose
 * output reaches past total. */
KILN_HD uint32_t kiln_infl_chain(const kiln_infl_seg *seg, const kiln_infl_entry *e, uint32_t n, uint64_t total,
				 uint32_t *order, uint64_t *base, uint32_t *skip)
{
	uint32_t k = 0, i = 0, s = 0;
	uint64_t off = 0;
	while (n > 0) {
		order[k++] = i;
		base[i] = off;
		skip[i] = s;
		off += seg[i].out_len - (e[i].src != i ? e[i].cum[s] : 0);
		uint32_t next = seg[i].stop;
		if (seg[i].rc != KILN_INFL_OK || seg[i].final || next == KILN_INFL_NO_STOP || next <= i ||
		    next >= n || off > total || k >= n)
			break;
		s = seg[i].probe;
		i = next;
	}
	return k;
}

/* Where piece i of e[0, n) (a stream of len bytes) is expected to hand over: the next
 * entry a decode can meet (a header entry, or a mid entry with probes or not probed yet;
 * a mid entry inside a block's header has none, and the piece of that header's entry
 * runs past it). */
KILN_HD uint64_t kiln_infl_reach(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len)
{
	uint32_t j = i + 1;
	while (j < n && e[j].src != j && e[j].probes == 0)
		j++;
	return j < n ? e[j].bit : 8 * (uint64_t)len;
}

/* The symbols a decode from entry m is expected to make in `span` stream bits: its probes'
 * symbols per bit times span; 0 when there is nothing to go by. */
KILN_HD uint64_t kiln_infl_syms_in(const kiln_infl_entry *m, uint64_t span)
{
	if (m->probes < 2 || m->probes == KILN_INFL_UNPROBED)
		return 0;
	uint32_t bits = m->off[m->probes - 1] - m->off[0], syms = m->cum[m->probes - 1] - m->cum[0];
	return bits ? span * syms / bits : 0;
}

/* The symbols piece i of e[0, n) (a stream of len bytes) is expected to make: up to its
 * reach (kiln_infl_reach). */
KILN_HD uint64_t kiln_infl_estimate(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len)
{
	return kiln_infl_syms_in(&e[i], kiln_infl_reach(e, n, i, len) - e[i].bit);
}

/* Where the mid entries kiln_infl_refine adds after entry i of e[0, n) end: the next
 * entry, or 1 KiB before the stream's end (len bytes), whichever is first. */
KILN_HD uint64_t kiln_infl_refine_end(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len)
{
	uint64_t bits = 8 * (uint64_t)len, last = bits > 8192 ? bits - 8192 : 0;
	uint64_t next = i + 1 < n ? e[i + 1].bit : bits;
	return next < last ? next : last;
}

/* Step 1b, after the probes: a pass lasts as long as its longest piece, and pieces of
 * equal stream length differ in output as the data's compression ratio does (Kodak
 * streams: 4 KiB windows inflate 1.8x at the median, 18.6x at most). Piece i, expected to
 * make more than `target` symbols (kiln_infl_estimate), gets this many mid entries evenly
 * between its entry and kiln_infl_refine_end (at least KILN_INFL_REFINE_GAP bits apart);
 * 0 if not. */
KILN_HD uint64_t kiln_infl_refine_adds(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len,
				       uint64_t target)
{
	uint64_t end = kiln_infl_refine_end(e, n, i, len);
	uint64_t est = target ? kiln_infl_estimate(e, n, i, len) : 0;
	if (est <= target || end <= e[i].bit)
		return 0;
	uint64_t add = (est + target - 1) / target - 1, room = (end - e[i].bit) / KILN_INFL_REFINE_GAP;
	return add < room ? add : room;
}

/* Step 1b for entry i of e[0, n): itself to out[at[i]] (header indices in src through at[])
 * and `add` new mid entries after it, with probes == KILN_INFL_UNPROBED until
 * kiln_infl_probe runs for them; its own probes then end before them (as
 * kiln_infl_probe's: a decode meets the first entry it can). */
KILN_HD void kiln_infl_refine_move(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len,
				   const uint32_t *at, uint32_t add, kiln_infl_entry *out)
{
	uint64_t next = kiln_infl_refine_end(e, n, i, len);
	kiln_infl_entry *m = &out[at[i]];
	*m = e[i];
	m->src = at[e[i].src];
	for (uint32_t j = 1; j <= add; j++) {
		kiln_infl_entry *x = &m[j];
		x->bit = e[i].bit + (next - e[i].bit) * j / (add + 1);
		x->src = m->src;
		x->probes = KILN_INFL_UNPROBED;
		x->block = KILN_INFL_NO_BLOCK;
		x->off[0] = 0;
		x->cum[0] = 0;
	}
	while (add > 0 && m->probes > 0 && m->bit + m->off[m->probes - 1] >= m[1].bit)
		m->probes--;
}

/* Step 1b for all of e[0, n) into out[], up to cap entries in all (the first entries'
 * additions first); at: n words (the entries' new indices). Returns the new count. The
 * GPU runs the same steps with a thread per entry and a scan (png_dec_cuda.cu). */
KILN_HD uint32_t kiln_infl_refine(const kiln_infl_entry *e, uint32_t n, uint32_t cap, size_t len, uint64_t target,
				  uint32_t *at, kiln_infl_entry *out)
{
	uint64_t added = 0;
	for (uint32_t i = 0; i < n; i++) {
		at[i] = i + (uint32_t)(added < cap - n ? added : cap - n);
		added += kiln_infl_refine_adds(e, n, i, len, target);
	}
	uint32_t total = n + (uint32_t)(added < cap - n ? added : cap - n);
	for (uint32_t i = 0; i < n; i++)
		kiln_infl_refine_move(e, n, i, len, at, (i + 1 < n ? at[i + 1] : total) - at[i] - 1, out);
	return total;
}

/* The GPU driver's parameters and caps (png_dec_cuda.cu), here so that the unit tests run
 * these steps with them. Mid entries every KILN_INFL_PAR_SPACING bits (A/B runs may ask
 * for any power of 2 down to KILN_INFL_PAR_SPACING_MIN, which the entry cap is sized for);
 * pieces split past KILN_INFL_PAR_TARGET symbols (kiln_infl_refine). */
#define KILN_INFL_PAR_SPACING 32768u
#define KILN_INFL_PAR_SPACING_MIN 4096u
#define KILN_INFL_PAR_TARGET 16384u

/* Candidates kept (bit 0 included) for a stream of len bytes that inflates to total bytes:
 * one per KILN_INFL_CAND_OUT bytes of output, one per 16 KiB of stream (false candidates)
 * and 16. Every true block header must be an entry when there are mid entries: a decode
 * from a mid entry that reads a header that is none gives up (KILN_INFL_ROAM), and the mid
 * entries after that header (which assume the tables before it) are met by no decode.
 * zlib (libpng, Go, Python...) ends a block every lit_bufsize - 1 symbols, 16,383 at its
 * default memLevel 8, each at least a byte of output: at most total / 16383 + 1 blocks
 * (plus one per flush); the cap holds 4 times that (zlib down to memLevel 6, encoders with
 * blocks of 4 KiB of output). The cap was one per 16 KiB of stream (Kodak streams: 10 to
 * 43 blocks of 0.6 MB), below that bound for streams of more than about 2 MB of output:
 * 2048x2048 libpng files (12.6 MB, 7.4 MB of stream) have 561 blocks of 12-16 KB of stream
 * against 469 kept, and every such file gave up to the serial inflate. Past the cap
 * (kiln_infl_cand_overflow) the parallel inflate still runs, on the candidates kept. */
#define KILN_INFL_CAND_OUT 4096u
KILN_HD uint32_t kiln_infl_cand_cap(uint64_t len, uint64_t total)
{
	uint64_t cap = 16 + len / 16384 + total / KILN_INFL_CAND_OUT;
	return cap < 0x7FFFFFFFu ? (uint32_t)cap : 0x7FFFFFFFu;
}

/* Entries of a stream (kiln_infl_entries and kiln_infl_refine's cap): every candidate kept
 * and a mid entry every KILN_INFL_PAR_SPACING_MIN bits, so that kiln_infl_entries never
 * drops one (a mid entry left last before a dropped header would give up). */
KILN_HD uint32_t kiln_infl_ent_cap(uint64_t len, uint64_t total)
{
	uint64_t cap = (uint64_t)kiln_infl_cand_cap(len, total) + 8 * len / KILN_INFL_PAR_SPACING_MIN + 1;
	return cap < 0x7FFFFFFFu ? (uint32_t)cap : 0x7FFFFFFFu;
}

/* 1 when a stream's candidates (found: block headers found, bit 0 included) passed the
 * cap, so that those kept are some of them (the GPU's atomics decide which): the stream
 * then gets no mid entries (spacing 0, and no kiln_infl_refine: target 0). Pieces from
 * header entries decode through a header that is no entry and never give up (only a
 * decode that began inside a block roams), so the chain still runs from bit 0, in pieces
 * of a block or more, instead of giving up to one serial inflate of the whole stream. */
KILN_HD int kiln_infl_cand_overflow(uint64_t found, uint32_t cap)
{
	return found > cap;
}

/* Symbols of a file's slot area for a stream of len bytes, total output symbols and cap
 * entries at most. */
KILN_HD uint64_t kiln_infl_slot_area(size_t len, uint64_t total, uint32_t cap, uint32_t scale, uint32_t pad)
{
	return ((8 * (uint64_t)len + 4 * total) * scale >> 8) + (uint64_t)cap * pad;
}

/* Step 2's slots: the room piece i needs: scale / 256 symbols per stream bit to its reach
 * (kiln_infl_reach), or twice the estimate if more (kiln_infl_estimate), and pad more (a piece goes on
 * past the next entry to meet one of its probes). */
KILN_HD uint64_t kiln_infl_slot_want(const kiln_infl_entry *e, uint32_t n, uint32_t i, size_t len, uint32_t scale,
				     uint32_t pad)
{
	uint64_t span = kiln_infl_reach(e, n, i, len) - e[i].bit;
	uint64_t want = span * scale >> 8, est = 2 * kiln_infl_syms_in(&e[i], span);
	want = (want > est ? want : est) + pad;
	return want < 0xFFFFFFFFu ? want : 0xFFFFFFFFu;
}

/* Step 2's slot of entry i of n, whose slot starts after `wants` symbols of the earlier
 * entries' wants, in the file's slot area of `area` symbols: what no longer fits gets less
 * or none (those pieces are decoded again in step 4); the last entry gets what is left
 * (the stream's last piece, whose rate often changes with the image's last rows, outgrew
 * twice its estimate in 3 of 24 Kodak files). */
KILN_HD void kiln_infl_slot_at(kiln_infl_entry *e, uint32_t n, uint32_t i, uint64_t wants, uint64_t want,
			       uint64_t area)
{
	uint64_t from = wants < area ? wants : area, to = i + 1 == n ? area : wants + want;
	to = to < area ? to : area;
	e[i].slot = from;
	e[i].slot_cap = (uint32_t)(to - from < 0xFFFFFFFFu ? to - from : 0xFFFFFFFFu);
}

/* Step 2's slots, entry after entry (kiln_infl_slot_at). */
KILN_HD void kiln_infl_slots(kiln_infl_entry *e, uint32_t n, size_t len, uint32_t scale, uint32_t pad,
			     uint64_t area)
{
	uint64_t wants = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t want = kiln_infl_slot_want(e, n, i, len, scale, pad);
		kiln_infl_slot_at(e, n, i, wants, want, area);
		wants += want;
	}
}

/* Symbols of piece c's count (step 2) that precede the probe s it is entered at. */
KILN_HD uint32_t kiln_infl_before(const kiln_infl_entry *e, uint32_t c, uint32_t s)
{
	return e[c].src != c ? e[c].cum[s] : 0;
}

/* Step 4 without a second decode: 1 when piece c of the chain, entered at probe s at
 * output offset base, has all the decode from there would write in its slot: its count ended without error (an error is decoded again, for its exact
 * position), every symbol fitted, none passes total, and the references cover the probe.
 * The decode from probe s is the count's from there on, symbol for symbol. */
KILN_HD int kiln_infl_placeable(const kiln_infl_entry *e, const kiln_infl_seg *seg, uint32_t c, uint32_t s,
				uint64_t base, uint64_t total)
{
	const kiln_infl_seg *g = &seg[c];
	uint32_t before = kiln_infl_before(e, c, s);
	return g->rc == KILN_INFL_OK && g->out_len <= e[c].slot_cap && before <= kiln_infl_refs(e, c) &&
	       base + (g->out_len - before) <= total;
}

/* Step 4 from a slot: symbol v of a slot whose piece is entered after `before` of its
 * symbols, as the decode from there writes it (markers counted from there), except that a
 * reference to a symbol at or after the entry stays a reference (KILN_INFL_REF of its slot
 * index): the caller reads that symbol, already placed, at index r - before. */
KILN_HD uint16_t kiln_infl_unslot(uint16_t v, uint32_t before)
{
	if (v < 256u)
		return v;
	if (v < KILN_INFL_REF0)
		return (uint16_t)(v - before);
	uint32_t r = v - KILN_INFL_REF0;
	return r < before ? KILN_INFL_MARK(KILN_INFL_WINDOW - before + r) : v;
}

/* 1 when a placed symbol of a piece at output offset base names a byte before the
 * stream's start (the decode would have failed there: the piece is decoded again). */
KILN_HD int kiln_infl_before_start(uint16_t v, uint64_t base)
{
	return v >= 256u && v < KILN_INFL_REF0 && base + (v - 256u) < KILN_INFL_WINDOW;
}

/* Step 6: the stream's result from the decoded pieces in chain order (dec[order[i]]):
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

/* Step 5 for one symbol v of the piece at output offset seg_base: its byte, reading
 * earlier pieces' resolved bytes in out. */
KILN_HD uint8_t kiln_infl_resolve(uint16_t v, const uint8_t *out, uint64_t seg_base)
{
	return v < 256 ? (uint8_t)v : out[seg_base - KILN_INFL_WINDOW + (v - 256u)];
}

#endif
