/* Inflate (RFC 1951) for kiln's PNG decoder, written once for the CPU and the GPU (see
 * kiln_hd.h): the Huffman tables, the bit reader and the block decoder.
 *
 * Tables are single lookups of TB root bits (10 for literal/length, 8 for distance) plus
 * second-level tables for the longer codes: one 32-bit entry gives the symbol's kind, its
 * value (literal byte, length or distance base), extra-bit count and code length, so a
 * literal costs one lookup and one shift. The bit reader keeps up to 64 bits and refills a
 * word at a time while at least 8 input bytes remain, a byte at a time near the end, and
 * past the end feeds zero bits while counting them: a stream that needs those bits is
 * truncated, which is checked before any result is trusted.
 *
 * Acceptance follows zlib's inflate (what libpng uses): over-subscribed codes are refused,
 * incomplete codes only in the one-code-of-length-1 case, HLIT <= 286 and HDIST <= 30,
 * literal/length symbols 286/287 and distance symbols 30/31 are invalid, the end-of-block
 * code must exist, a repeat needs a previous length and must not overrun, a distance must
 * not reach before the start of the output, and a stored block's LEN must match NLEN. */
#ifndef KILN_PNG_INFLATE_H
#define KILN_PNG_INFLATE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __CUDACC__
#include <string.h>
#endif

#include "kernels/kiln_hd.h"

/* Tables read by __host__ __device__ functions: a host array in the host pass, constant
 * memory in the device pass (as kernels/bc1/bc1_tables.h does). */
#ifndef KILN_INFL_TABLE
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#define KILN_INFL_TABLE static __constant__ const
#else
#define KILN_INFL_TABLE static const
#endif
#endif

#define KILN_INFL_LIT_BITS 10
#define KILN_INFL_DIST_BITS 8
#define KILN_INFL_PRE_BITS 7
/* Root table plus the worst case of second-level tables for complete codes: a root entry
 * whose subtree reaches length L needs at least L - TB + 1 codes for 2^(L - TB) entries,
 * at most 32/6 entries per code for 288 literal/length codes (TB 10, L <= 15) and 128/8
 * per code for 30 distance codes (TB 8). */
#define KILN_INFL_LIT_SIZE (1024 + 1536)
#define KILN_INFL_DIST_SIZE (256 + 480)
#define KILN_INFL_PRE_SIZE 128

/* Entry: bits 0-7 bits to consume, 8-11 kind, 12-15 extra bits, 16-31 value. For a link,
 * value is the subtable's start and the extra field its index bits. */
#define KILN_INFL_INVALID 0u
#define KILN_INFL_LIT 1u
#define KILN_INFL_LEN 2u
#define KILN_INFL_EOB 4u
#define KILN_INFL_LINK 8u
#define KILN_INFL_KIND(e) (((e) >> 8) & 15u)
#define KILN_INFL_ENTRY(value, extra, kind, bits)                                             \
	(((uint32_t)(value) << 16) | ((uint32_t)(extra) << 12) | ((uint32_t)(kind) << 8) |   \
	 (uint32_t)(bits))

/* Results. */
enum {
	KILN_INFL_OK = 0,          /* the final block ended (or, strip mode, the range ended) */
	KILN_INFL_OUTPUT_FULL,     /* more output than out_cap: the image is complete */
	KILN_INFL_ERR_DATA,        /* invalid deflate data */
	KILN_INFL_ERR_TRUNCATED,   /* the input ends inside the stream */
	KILN_INFL_ERR_DISTANCE,    /* a match reaches before the start of the output */
	KILN_INFL_ERR_STRIP        /* strip mode: the range did not end at a block boundary */
};

typedef struct kiln_inflate_tables {
	uint32_t lit[KILN_INFL_LIT_SIZE];
	uint32_t dist[KILN_INFL_DIST_SIZE];
	uint32_t pre[KILN_INFL_PRE_SIZE];
} kiln_inflate_tables;

KILN_INFL_TABLE uint16_t kiln_infl_len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11, 13,
						   15, 17, 19, 23, 27, 31, 35, 43, 51, 59,
						   67, 83, 99, 115, 131, 163, 195, 227, 258};
KILN_INFL_TABLE uint8_t kiln_infl_len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
						  2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
KILN_INFL_TABLE uint16_t kiln_infl_dist_base[30] = {
	1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
	193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
KILN_INFL_TABLE uint8_t kiln_infl_dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
						   6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
/* The order of the code length code lengths in a dynamic block header. */
KILN_INFL_TABLE uint8_t kiln_infl_pre_order[19] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
						  11, 4,  12, 3, 13, 2, 14, 1, 15};

/* What symbol s of an alphabet decodes to. kind 0: literal/length, 1: distance, 2: code
 * length codes. */
KILN_HD uint32_t kiln_infl_symbol_entry(int kind, uint32_t s, uint32_t len)
{
	if (kind == 2)
		return KILN_INFL_ENTRY(s, 0, KILN_INFL_LIT, len);
	if (kind == 1) {
		if (s >= 30)
			return KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, len);
		return KILN_INFL_ENTRY(kiln_infl_dist_base[s], kiln_infl_dist_extra[s], KILN_INFL_LEN,
				       len);
	}
	if (s < 256)
		return KILN_INFL_ENTRY(s, 0, KILN_INFL_LIT, len);
	if (s == 256)
		return KILN_INFL_ENTRY(0, 0, KILN_INFL_EOB, len);
	if (s >= 286)
		return KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, len);
	return KILN_INFL_ENTRY(kiln_infl_len_base[s - 257], kiln_infl_len_extra[s - 257], KILN_INFL_LEN,
			       len);
}

KILN_HD uint32_t kiln_infl_reverse(uint32_t code, uint32_t len)
{
#ifdef __CUDA_ARCH__
	return len ? __brev(code) >> (32 - len) : 0; /* one instruction on the GPU */
#else
	uint32_t r = 0;
	for (uint32_t i = 0; i < len; i++) {
		r = (r << 1) | (code & 1u);
		code >>= 1;
	}
	return r;
#endif
}

/* Builds the table of an alphabet of n symbols with code lengths lens[] (0..15) into
 * table[] (cap entries), root bits tb. Returns 0, or -1 for a set zlib refuses. A code
 * without any symbol leaves every entry invalid (usable only if never read). */
KILN_HD int kiln_infl_build(uint32_t *table, uint32_t cap, uint32_t tb, const uint8_t *lens,
			    uint32_t n, int kind)
{
	uint16_t count[16];
	uint16_t next[16];
	for (int i = 0; i < 16; i++)
		count[i] = 0;
	for (uint32_t s = 0; s < n; s++)
		count[lens[s]]++;
	uint32_t root = 1u << tb;
	uint32_t maxlen = 0;
	for (int l = 15; l >= 1; l--)
		if (count[l]) {
			maxlen = (uint32_t)l;
			break;
		}
	/* Kraft sum: left < 0 over-subscribed (once negative at a length, it stays so);
	 * left > 0 incomplete. */
	int32_t left = 1;
	for (int l = 1; l <= 15; l++)
		left = 2 * left - count[l];
	/* A complete code writes every root entry below (a short code's copies or a long
	 * code's link): only an empty or incomplete one leaves entries to mark invalid (the
	 * parallel inflate builds tables for every piece it probes; the fill was a third of
	 * a build's stores). A refused code leaves the table undefined. */
	if (maxlen == 0 || left > 0)
		for (uint32_t i = 0; i < root; i++)
			table[i] = KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, 1);
	if (maxlen == 0)
		return 0;
	if (left < 0 || (left > 0 && (kind == 2 || maxlen != 1)))
		return -1;
	uint32_t code = 0;
	count[0] = 0;
	for (int l = 1; l <= 15; l++) {
		code = (code + count[l - 1]) << 1;
		next[l] = (uint16_t)code;
	}
	/* Pass 1: short codes fill the root; long codes note their subtree's depth. */
	uint8_t sub_bits[1024];
	if (maxlen > tb)
		for (uint32_t i = 0; i < root; i++)
			sub_bits[i] = 0;
	for (uint32_t s = 0; s < n; s++) {
		uint32_t l = lens[s];
		if (l == 0)
			continue;
		uint32_t rev = kiln_infl_reverse(next[l]++, l);
		if (l <= tb) {
			uint32_t e = kiln_infl_symbol_entry(kind, s, l);
			for (uint32_t i = rev; i < root; i += 1u << l)
				table[i] = e;
		} else {
			uint32_t p = rev & (root - 1);
			if (l - tb > sub_bits[p])
				sub_bits[p] = (uint8_t)(l - tb);
		}
	}
	if (maxlen > tb) {
		uint32_t pos = root;
		for (uint32_t p = 0; p < root; p++) {
			if (!sub_bits[p])
				continue;
			uint32_t size = 1u << sub_bits[p];
			if (pos + size > cap)
				return -1;
			table[p] = KILN_INFL_ENTRY(pos, sub_bits[p], KILN_INFL_LINK, tb);
			for (uint32_t i = 0; i < size; i++)
				table[pos + i] = KILN_INFL_ENTRY(0, 0, KILN_INFL_INVALID, 1);
			pos += size;
		}
		/* Pass 2: recompute the codes and fill the subtables. */
		code = 0;
		for (int l = 1; l <= 15; l++) {
			code = (code + count[l - 1]) << 1;
			next[l] = (uint16_t)code;
		}
		for (uint32_t s = 0; s < n; s++) {
			uint32_t l = lens[s];
			if (l == 0)
				continue;
			uint32_t c = next[l]++;
			if (l <= tb)
				continue;
			uint32_t rev = kiln_infl_reverse(c, l);
			uint32_t link = table[rev & (root - 1)];
			uint32_t start = link >> 16, sb = (link >> 12) & 15u;
			uint32_t e = kiln_infl_symbol_entry(kind, s, l - tb);
			for (uint32_t i = rev >> tb; i < (1u << sb); i += 1u << (l - tb))
				table[start + i] = e;
		}
	}
	return 0;
}

/* A big-endian 32-bit field (PNG chunk lengths, CRCs, the Adler-32 trailer). */
KILN_HD uint32_t kiln_png_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* ---- bit reader ---------------------------------------------------------------------- */

typedef struct kiln_bits {
	const uint8_t *in;
	size_t pos;       /* next byte to load */
	size_t end;       /* input length */
	uint64_t buf;     /* low bits first */
	uint32_t count;   /* valid bits in buf */
	uint32_t overrun; /* zero bytes fed past the end */
} kiln_bits;

KILN_HD void kiln_bits_init(kiln_bits *b, const uint8_t *in, size_t len)
{
	b->in = in;
	b->pos = 0;
	b->end = len;
	b->buf = 0;
	b->count = 0;
	b->overrun = 0;
}

/* Makes at least 56 bits available. */
KILN_HD void kiln_bits_refill(kiln_bits *b)
{
	if (b->end - b->pos >= 8) {
		uint64_t w;
#ifdef __CUDA_ARCH__
		/* Three aligned word loads and two funnel shifts instead of eight byte loads. The
		 * last word may extend up to 3 bytes past the input, never past the aligned word
		 * that holds its last byte (so never past the allocation). */
		uintptr_t at = (uintptr_t)(b->in + b->pos);
		const uint32_t *q = (const uint32_t *)(at & ~(uintptr_t)3);
		uint32_t sh = (uint32_t)(at & 3u) * 8u;
		uint32_t w0 = __ldg(q), w1 = __ldg(q + 1), w2 = sh ? __ldg(q + 2) : 0u;
		w = (uint64_t)__funnelshift_r(w0, w1, sh) | (uint64_t)__funnelshift_r(w1, w2, sh) << 32;
#else
		memcpy(&w, b->in + b->pos, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		w = __builtin_bswap64(w);
#endif
#endif
		b->buf |= w << b->count;
		b->pos += (63 - b->count) >> 3;
		b->count |= 56;
		return;
	}
	while (b->count <= 56) {
		uint64_t byte = 0;
		if (b->pos < b->end)
			byte = b->in[b->pos++];
		else
			b->overrun++;
		b->buf |= byte << b->count;
		b->count += 8;
	}
}

KILN_HD void kiln_bits_drop(kiln_bits *b, uint32_t n)
{
	b->buf >>= n;
	b->count -= n;
}

/* Bytes consumed so far (the bits in the buffer given back), rounded up to whole bytes. */
KILN_HD size_t kiln_bits_consumed(const kiln_bits *b)
{
	return b->pos + b->overrun - b->count / 8;
}

/* True when the bits consumed so far all came from the input. */
KILN_HD int kiln_bits_ok(const kiln_bits *b)
{
	return b->count / 8 >= b->overrun;
}

/* The entry of a code whose root entry e (read at the reader's bits) is in hand: e, or
 * where e links to a second level (entries 1 << tb onwards of kiln_infl_build's array, at
 * sub) that level's entry, with the root's tb bits consumed. */
KILN_HD uint32_t kiln_infl_link(const uint32_t *sub, uint32_t tb, kiln_bits *b, uint32_t e)
{
	if (KILN_INFL_KIND(e) == KILN_INFL_LINK) {
		uint32_t sb = (e >> 12) & 15u;
		e = sub[(e >> 16) - (1u << tb) + ((uint32_t)(b->buf >> tb) & ((1u << sb) - 1))];
		kiln_bits_drop(b, tb);
	}
	return e;
}

/* The end of that lookup: kiln_infl_link, then the code's bits consumed. */
KILN_HD uint32_t kiln_infl_lookup_rest(const uint32_t *sub, uint32_t tb, kiln_bits *b, uint32_t e)
{
	e = kiln_infl_link(sub, tb, b, e);
	kiln_bits_drop(b, e & 0xFFu);
	return e;
}

/* Decodes one symbol of a table whose second levels are at sub: the same array past its
 * root for a whole table, device memory for the GPU warp inflater's split ones (bits must
 * hold >= 15). */
KILN_HD uint32_t kiln_infl_lookup_split(const uint32_t *table, const uint32_t *sub, uint32_t tb, kiln_bits *b)
{
	return kiln_infl_lookup_rest(sub, tb, b, table[b->buf & ((1u << tb) - 1)]);
}

/* The tests on a symbol of kind `kind` (no literal, no end of block) at output position
 * o of cap, in kiln_inflate_raw's order: KILN_INFL_OK for a length code the output has
 * room after, else a full output (past the last image byte libpng only drains the stream
 * and reports its errors as warnings: the image stands), else bad data. */
KILN_HD int kiln_infl_match_ok(uint32_t kind, size_t o, size_t cap)
{
	if (o >= cap)
		return KILN_INFL_OUTPUT_FULL;
	return kind == KILN_INFL_LEN ? KILN_INFL_OK : KILN_INFL_ERR_DATA;
}

/* Decodes one symbol of a table (bits must hold >= 15). */
KILN_HD uint32_t kiln_infl_lookup(const uint32_t *table, uint32_t tb, kiln_bits *b)
{
	return kiln_infl_lookup_split(table, table + (1u << tb), tb, b);
}

/* The run of code-length symbol sym (its code already consumed; the extra bits follow in
 * b, refilled): kiln_infl_len_run's second half. */
KILN_HD int kiln_infl_len_sym_run(uint32_t sym, kiln_bits *b, uint32_t n, uint32_t total, uint32_t *rep,
				  uint32_t *last)
{
	if (sym < 16) {
		*last = sym;
		*rep = 1;
		return KILN_INFL_OK;
	}
	if (sym == 16) {
		if (n == 0)
			return KILN_INFL_ERR_DATA;
		*rep = 3 + (uint32_t)(b->buf & 3u);
		kiln_bits_drop(b, 2);
	} else if (sym == 17) {
		*last = 0;
		*rep = 3 + (uint32_t)(b->buf & 7u);
		kiln_bits_drop(b, 3);
	} else {
		*last = 0;
		*rep = 11 + (uint32_t)(b->buf & 127u);
		kiln_bits_drop(b, 7);
	}
	return *rep > total - n ? KILN_INFL_ERR_DATA : KILN_INFL_OK;
}

/* The next run of a dynamic header's code lengths, after n of its total: one symbol of
 * the code-length code (pre), a length (a run of one) or a repeat code with its extra
 * bits, as *rep lengths of *last. *last is the previous length on entry (the callers keep
 * it in a register rather than read it back): 16 repeats it, 17 and 18 repeat 0.
 * KILN_INFL_OK, or why the header is bad (a missing previous length, a run past total).
 * kiln_infl_dynamic and the GPU decoder's warp-wide header (png_dec_cuda.cu) read their
 * lengths here; each stores the run its own way. */
KILN_HD int kiln_infl_len_run(const uint32_t *pre, kiln_bits *b, uint32_t n, uint32_t total, uint32_t *rep,
			      uint32_t *last)
{
	kiln_bits_refill(b);
	if (!kiln_bits_ok(b))
		return KILN_INFL_ERR_TRUNCATED;
	uint32_t e = kiln_infl_lookup(pre, KILN_INFL_PRE_BITS, b);
	if (KILN_INFL_KIND(e) != KILN_INFL_LIT)
		return KILN_INFL_ERR_DATA;
	return kiln_infl_len_sym_run(e >> 16, b, n, total, rep, last);
}

/* Reads a dynamic block's header and builds its tables. */
KILN_HD int kiln_infl_dynamic(kiln_inflate_tables *t, kiln_bits *b)
{
	uint8_t lens[288 + 32];
	uint8_t pre[19];
	kiln_bits_refill(b);
	uint32_t hlit = (uint32_t)(b->buf & 31u) + 257;
	uint32_t hdist = (uint32_t)((b->buf >> 5) & 31u) + 1;
	uint32_t hclen = (uint32_t)((b->buf >> 10) & 15u) + 4;
	kiln_bits_drop(b, 14);
	if (hlit > 286 || hdist > 30)
		return KILN_INFL_ERR_DATA;
	for (int i = 0; i < 19; i++)
		pre[i] = 0;
	kiln_bits_refill(b);
	for (uint32_t i = 0; i < hclen; i++) {
		if (b->count < 3)
			kiln_bits_refill(b);
		pre[kiln_infl_pre_order[i]] = (uint8_t)(b->buf & 7u);
		kiln_bits_drop(b, 3);
	}
	if (kiln_infl_build(t->pre, KILN_INFL_PRE_SIZE, KILN_INFL_PRE_BITS, pre, 19, 2) != 0)
		return KILN_INFL_ERR_DATA;
	uint32_t n = 0, total = hlit + hdist, len = 0;
	while (n < total) {
		uint32_t rep;
		int rc = kiln_infl_len_run(t->pre, b, n, total, &rep, &len);
		if (rc != KILN_INFL_OK)
			return rc;
		while (rep--)
			lens[n++] = (uint8_t)len;
	}
	if (lens[256] == 0)
		return KILN_INFL_ERR_DATA;
	if (kiln_infl_build(t->lit, KILN_INFL_LIT_SIZE, KILN_INFL_LIT_BITS, lens, hlit, 0) != 0)
		return KILN_INFL_ERR_DATA;
	if (kiln_infl_build(t->dist, KILN_INFL_DIST_SIZE, KILN_INFL_DIST_BITS, lens + hlit, hdist, 1) != 0)
		return KILN_INFL_ERR_DATA;
	return KILN_INFL_OK;
}

/* The fixed code of BTYPE 01. */
KILN_HD void kiln_infl_fixed(kiln_inflate_tables *t)
{
	uint8_t lens[288 + 32];
	for (int i = 0; i < 144; i++)
		lens[i] = 8;
	for (int i = 144; i < 256; i++)
		lens[i] = 9;
	for (int i = 256; i < 280; i++)
		lens[i] = 7;
	for (int i = 280; i < 288; i++)
		lens[i] = 8;
	for (int i = 0; i < 32; i++)
		lens[288 + i] = 5;
	kiln_infl_build(t->lit, KILN_INFL_LIT_SIZE, KILN_INFL_LIT_BITS, lens, 288, 0);
	kiln_infl_build(t->dist, KILN_INFL_DIST_SIZE, KILN_INFL_DIST_BITS, lens + 288, 32, 1);
}

/* A block's first bits: BFINAL, BTYPE and, for a stored block, LEN/NLEN (*stored_len),
 * for the CPU's and the GPU's block headers. KILN_INFL_OK, or why a stored block's header
 * is bad; the tables of types 1 and 2 are the caller's. */
KILN_HD int kiln_infl_block_type(kiln_bits *b, uint32_t *bfinal, uint32_t *btype, uint32_t *stored_len)
{
	kiln_bits_refill(b);
	*bfinal = (uint32_t)(b->buf & 1u);
	*btype = (uint32_t)((b->buf >> 1) & 3u);
	kiln_bits_drop(b, 3);
	if (*btype == 0) {
		kiln_bits_drop(b, b->count & 7u);
		kiln_bits_refill(b);
		uint32_t len = (uint32_t)(b->buf & 0xFFFFu), nlen = (uint32_t)((b->buf >> 16) & 0xFFFFu);
		kiln_bits_drop(b, 32);
		if (!kiln_bits_ok(b))
			return KILN_INFL_ERR_TRUNCATED;
		if ((len ^ 0xFFFFu) != nlen)
			return KILN_INFL_ERR_DATA;
		*stored_len = len;
	}
	return KILN_INFL_OK;
}

/* Reads a block header: bfinal and btype; for a stored block also aligns and checks
 * LEN/NLEN (*stored_len). Tables are built for types 1 and 2. */
KILN_HD int kiln_infl_block_header(kiln_inflate_tables *t, kiln_bits *b, uint32_t *bfinal,
				   uint32_t *btype, uint32_t *stored_len)
{
	int rc = kiln_infl_block_type(b, bfinal, btype, stored_len);
	if (rc != KILN_INFL_OK || *btype == 0)
		return rc;
	if (*btype == 1) {
		kiln_infl_fixed(t);
		return KILN_INFL_OK;
	}
	if (*btype == 2)
		return kiln_infl_dynamic(t, b);
	return KILN_INFL_ERR_DATA;
}

/* Copies a stored block's len bytes from the bit reader (byte aligned) to out. */
KILN_HD int kiln_infl_stored(kiln_bits *b, uint32_t len, uint8_t *out, size_t *opos, size_t cap)
{
	size_t o = *opos;
	/* First the whole bytes still in the bit buffer. */
	while (len > 0 && b->count >= 8) {
		if (o >= cap)
			return KILN_INFL_OUTPUT_FULL;
		out[o++] = (uint8_t)b->buf;
		kiln_bits_drop(b, 8);
		len--;
	}
	if (!kiln_bits_ok(b))
		return KILN_INFL_ERR_TRUNCATED;
	if (len > 0) {
		/* The buffer is empty here (count < 8 means it is 0 after an aligned drop). */
		b->buf = 0;
		b->count = 0;
		size_t avail = b->end - b->pos;
		size_t n = len < avail ? len : avail;
		size_t room = cap - o;
		size_t m = n < room ? n : room;
		for (size_t i = 0; i < m; i++)
			out[o + i] = b->in[b->pos + i];
		o += m;
		b->pos += m;
		*opos = o;
		if (m < n)
			return KILN_INFL_OUTPUT_FULL;
		if (n < len)
			return KILN_INFL_ERR_TRUNCATED;
		return KILN_INFL_OK;
	}
	*opos = o;
	return KILN_INFL_OK;
}

/* The length or distance of a length or distance entry e (base and extra-bit count) with
 * its extra bits, which the reader holds, consumed. */
KILN_HD uint32_t kiln_infl_base_extra(kiln_bits *b, uint32_t e)
{
	uint32_t extra = (e >> 12) & 15u;
	uint32_t v = (e >> 16) + (uint32_t)(b->buf & ((1u << extra) - 1));
	kiln_bits_drop(b, extra);
	return v;
}

/* A match's length (its extra bits after the length code e) and distance (code and extra
 * bits) from a distance table split as for kiln_infl_lookup_split; 0 for an invalid
 * distance code. */
KILN_HD int kiln_infl_len_dist_split(const uint32_t *dist_table, const uint32_t *dist_sub, kiln_bits *b, uint32_t e,
				     uint32_t *len, uint32_t *dist)
{
	*len = kiln_infl_base_extra(b, e);
	uint32_t d = kiln_infl_lookup_split(dist_table, dist_sub, KILN_INFL_DIST_BITS, b);
	if (KILN_INFL_KIND(d) != KILN_INFL_LEN)
		return 0;
	*dist = kiln_infl_base_extra(b, d);
	return 1;
}

/* The same from a whole table. */
KILN_HD int kiln_infl_len_dist(const kiln_inflate_tables *t, kiln_bits *b, uint32_t e, uint32_t *len,
			       uint32_t *dist)
{
	return kiln_infl_len_dist_split(t->dist, t->dist + (1u << KILN_INFL_DIST_BITS), b, e, len, dist);
}

/* Decodes the Huffman data of one block into out[*opos, cap) with the window starting at
 * out[0]. Returns OK at the end-of-block code. */
KILN_HD int kiln_infl_huffman(const kiln_inflate_tables *t, kiln_bits *b, uint8_t *out, size_t *opos,
			      size_t cap)
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
			out[o++] = (uint8_t)(e >> 16);
			/* A second literal without a refill: 48 - 15 bits remain. */
			e = kiln_infl_lookup(t->lit, KILN_INFL_LIT_BITS, b);
			kind = KILN_INFL_KIND(e);
			if (kind == KILN_INFL_LIT) {
				if (o >= cap) {
					rc = KILN_INFL_OUTPUT_FULL;
					break;
				}
				out[o++] = (uint8_t)(e >> 16);
				continue;
			}
			if (b->count < 48)
				kiln_bits_refill(b);
		}
		if (kind == KILN_INFL_EOB)
			break;
		rc = kiln_infl_match_ok(kind, o, cap);
		if (rc != KILN_INFL_OK)
			break;
		uint32_t len, dist;
		if (!kiln_infl_len_dist(t, b, e, &len, &dist)) {
			rc = KILN_INFL_ERR_DATA;
			break;
		}
		if (dist > o) {
			rc = KILN_INFL_ERR_DISTANCE;
			break;
		}
		uint8_t *dst = out + o;
		const uint8_t *src = dst - dist;
		if (len > cap - o) {
			/* The image ends inside this match: write what fits. */
			for (size_t i = 0; i < cap - o; i++)
				dst[i] = src[i];
			o = cap;
			rc = KILN_INFL_OUTPUT_FULL;
			break;
		}
#ifndef __CUDA_ARCH__
		if (dist >= 8 && cap - o >= (size_t)len + 8) {
			/* Word copies may write up to 7 bytes past the match, inside out[0, cap). */
			uint8_t *end = dst + len;
			do {
				uint64_t w;
				memcpy(&w, src, 8);
				memcpy(dst, &w, 8);
				src += 8;
				dst += 8;
			} while (dst < end);
		} else if (dist == 1) {
			memset(dst, *src, len);
		} else
#endif
		{
			for (uint32_t i = 0; i < len; i++)
				dst[i] = src[i];
		}
		o += len;
	}
	*opos = o;
	return rc;
}

/* Inflates raw deflate data in[0, len) into out[0, cap).
 * strip == 0: up to the final block; *used is then the byte-aligned end (where a zlib
 * stream's Adler-32 trailer starts). strip != 0: blocks until the input is consumed
 * exactly at a block boundary (a full flush) or the final block ends there; anything else
 * is KILN_INFL_ERR_STRIP. *final says whether the last block was final. */
KILN_HD int kiln_inflate_raw(kiln_inflate_tables *t, const uint8_t *in, size_t len, uint8_t *out,
			     size_t cap, size_t *out_len, size_t *used, int strip, int *final)
{
	kiln_bits b;
	kiln_bits_init(&b, in, len);
	size_t o = 0;
	int rc = KILN_INFL_OK;
	*final = 0;
	for (;;) {
		uint32_t bfinal, btype, stored = 0;
		rc = kiln_infl_block_header(t, &b, &bfinal, &btype, &stored);
		if (rc == KILN_INFL_ERR_DATA && o >= cap && cap > 0)
			rc = KILN_INFL_OUTPUT_FULL; /* a bad block after the image: see above */
		if (rc != KILN_INFL_OK)
			break;
		if (btype == 0)
			rc = kiln_infl_stored(&b, stored, out, &o, cap);
		else
			rc = kiln_infl_huffman(t, &b, out, &o, cap);
		if (rc == KILN_INFL_OK && !kiln_bits_ok(&b))
			rc = KILN_INFL_ERR_TRUNCATED;
		if (rc != KILN_INFL_OK)
			break;
		if (bfinal) {
			*final = 1;
			break;
		}
		if (strip && (b.count & 7u) == 0 && kiln_bits_consumed(&b) == len)
			break;
	}
	if (rc == KILN_INFL_OK && !kiln_bits_ok(&b))
		rc = KILN_INFL_ERR_TRUNCATED;
	*out_len = o;
	*used = kiln_bits_consumed(&b);
	if (rc == KILN_INFL_OK && strip && *used != len)
		rc = KILN_INFL_ERR_STRIP;
	return rc;
}

/* The 2-byte zlib header: 0 when acceptable for PNG (CM 8, CINFO <= 7, FCHECK, no preset
 * dictionary), else a reason index (1: method, 2: window, 3: check, 4: dictionary). */
KILN_HD int kiln_zlib_header_check(uint8_t cmf, uint8_t flg)
{
	if ((cmf & 15u) != 8)
		return 1;
	if ((cmf >> 4) > 7)
		return 2;
	if ((((uint32_t)cmf << 8) | flg) % 31u != 0)
		return 3;
	if (flg & 0x20u)
		return 4;
	return 0;
}

#endif
