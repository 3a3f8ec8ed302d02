/* Deflate (RFC 1951) for kiln's PNG encoder, written once for the CPU and GPU backends
 * (see kiln_hd.h): match finding, Huffman code construction, the bit writer and the
 * block writer. One call compresses one strip of filtered rows (docs/PNG.md): a fresh
 * window at the strip's first byte, no match reaching before it, and the strip's data
 * ending either with a full flush (non-final blocks, then an empty stored block) or with
 * the final block.
 *
 * Everything here is integer arithmetic with fixed tie rules, so the same strip gives the
 * same bytes on any backend. In particular the hash table is updated at every position in
 * order, independently of the parse: the chain of position p (the earlier positions with
 * the same 4-byte hash, most recent first) is a function of the data alone.
 *
 * Quality:
 *   fast   : candidates at the fixed distances that filtered image data repeats at (1:
 *            runs, bpp: the pixel to the left, one row up), greedy parse; no hash table.
 *   medium : the same plus a hash chain of depth 16, lazy matching (as zlib's levels 4-9).
 *   high   : a list of candidates per position (fixed distances and a hash chain of depth
 *            256: each length with the nearest distance that gives it), and per block the
 *            parse of least cost in bits under the Huffman codes of the previous parse
 *            (png_deflate_strip_opt).
 * Each block (fast, medium: at most PNG_DEFL_BLOCK_TOKENS tokens; high: at most
 * PNG_OPT_BLOCK bytes) is written with the cheapest of stored, fixed and dynamic Huffman
 * codes, by exact bit count. */
#ifndef KILN_PNG_DEFLATE_H
#define KILN_PNG_DEFLATE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kiln_hd.h"

#define PNG_DEFL_WINDOW 32768u
#define PNG_DEFL_MIN_MATCH 3u
#define PNG_DEFL_MAX_MATCH 258u
/* Tokens per block (zlib's lit_bufsize at memLevel 8) and input bytes per block (a stored
 * block holds at most 65535: a block closes before a match could pass that). */
#define PNG_DEFL_BLOCK_TOKENS 16384u
#define PNG_DEFL_BLOCK_BYTES (65535u - PNG_DEFL_MAX_MATCH)
#define PNG_DEFL_HASH_BITS 15
#define PNG_DEFL_HASH_SIZE (1u << PNG_DEFL_HASH_BITS)
#define PNG_DEFL_NONE 0xFFFFFFFFu
#define PNG_DEFL_LITLEN 286
#define PNG_DEFL_DIST 30
#define PNG_DEFL_CODELEN 19

/* Worst case of one strip of n filtered bytes: every block stored (at most 42 bits of
 * header and padding each), blocks of at least PNG_DEFL_BLOCK_TOKENS - 1 bytes but the
 * last, plus the flush's empty stored block and the final padding. */
KILN_HD uint64_t png_deflate_strip_bound(uint64_t n)
{
	return n + 6 * (n / 16000 + 2) + 8;
}

/* ---- small integer helpers ---------------------------------------------------------- */

KILN_HD uint32_t png_log2(uint32_t x)  /* x > 0 */
{
#ifdef __CUDA_ARCH__
	return 31u - (uint32_t)__clz(x);
#else
	return 31u - (uint32_t)__builtin_clz(x);
#endif
}

/* log2(x) for x >= 1 in 16.16 fixed point, by integers alone (the mantissa squared 16
 * times, a bit of the fraction each), so every backend gets the same value. */
KILN_HD uint32_t png_log2_q16(uint32_t x)
{
	uint32_t e = png_log2(x);
	uint64_t m = e <= 30 ? (uint64_t)x << (30 - e) : (uint64_t)(x >> 1);  /* [1, 2) in Q30 */
	uint32_t frac = 0;
	for (int b = 15; b >= 0; b--) {
		m = (m * m) >> 30;
		if (m >= (1ull << 31)) {
			m >>= 1;
			frac |= 1u << b;
		}
	}
	return e << 16 | frac;
}

KILN_HD uint32_t png_bitrev(uint32_t code, uint32_t len)
{
	uint32_t r = 0;
	for (uint32_t i = 0; i < len; i++) {
		r = (r << 1) | (code & 1u);
		code >>= 1;
	}
	return r;
}

/* Length 3..258 -> literal/length symbol 257..285, its extra bits and their value. */
KILN_HD uint32_t png_len_code(uint32_t len, uint32_t *nextra, uint32_t *extra)
{
	uint32_t l = len - 3;
	if (len == 258) {
		*nextra = 0;
		*extra = 0;
		return 285;
	}
	if (l < 8) {
		*nextra = 0;
		*extra = 0;
		return 257 + l;
	}
	uint32_t e = png_log2(l) - 2;
	*nextra = e;
	*extra = l - ((4u | ((l >> e) & 3u)) << e);
	return 257 + 4 * (e + 1) + ((l >> e) & 3u);
}

/* Distance 1..32768 -> distance symbol 0..29, its extra bits and their value. */
KILN_HD uint32_t png_dist_code(uint32_t dist, uint32_t *nextra, uint32_t *extra)
{
	uint32_t x = dist - 1;
	if (x < 4) {
		*nextra = 0;
		*extra = 0;
		return x;
	}
	uint32_t e = png_log2(x) - 1;
	*nextra = e;
	*extra = x - ((2u | ((x >> e) & 1u)) << e);
	return 2 * e + 2 + ((x >> e) & 1u);
}

KILN_HD uint32_t png_len_extra_bits(uint32_t sym)  /* sym 257..285 */
{
	return (sym >= 265 && sym < 285) ? (sym - 261) / 4 : 0;
}

KILN_HD uint32_t png_dist_extra_bits(uint32_t sym)
{
	return sym >= 4 ? sym / 2 - 1 : 0;
}

KILN_HD uint32_t png_fixed_lit_len(uint32_t sym)
{
	return sym < 144 ? 8 : sym < 256 ? 9 : sym < 280 ? 7 : 8;
}

/* ---- Huffman codes -------------------------------------------------------------------- */

/* Code lengths of a minimum-redundancy code for weights A[0..n) sorted ascending, in
 * place (Moffat and Katajainen's in-place method): A[i] becomes the length of item i. */
KILN_HD void png_huff_inplace(uint32_t *A, uint32_t n)
{
	if (n == 0)
		return;
	if (n == 1) {
		A[0] = 0;
		return;
	}
	/* pass 1, left to right: internal node weights and parent pointers */
	A[0] += A[1];
	uint32_t root = 0, leaf = 2;
	for (uint32_t next = 1; next < n - 1; next++) {
		if (leaf >= n || A[root] < A[leaf]) {
			A[next] = A[root];
			A[root++] = next;
		} else {
			A[next] = A[leaf++];
		}
		if (leaf >= n || (root < next && A[root] < A[leaf])) {
			A[next] += A[root];
			A[root++] = next;
		} else {
			A[next] += A[leaf++];
		}
	}
	/* pass 2, right to left: depths of the internal nodes */
	A[n - 2] = 0;
	for (int32_t next = (int32_t)n - 3; next >= 0; next--)
		A[next] = A[A[next]] + 1;
	/* pass 3, right to left: depths of the leaves */
	int32_t avail = 1, used = 0, depth = 0, r = (int32_t)n - 2, nx = (int32_t)n - 1;
	while (avail > 0) {
		while (r >= 0 && (int32_t)A[r] == depth) {
			used++;
			r--;
		}
		while (avail > used) {
			A[nx--] = (uint32_t)depth;
			avail--;
		}
		avail = 2 * used;
		depth++;
		used = 0;
	}
}

/* Lengths from the m >= 2 used symbols as keys (freq << 9 | symbol) sorted ascending:
 * a minimum-redundancy code, then (too deep) clamped to `limit` and the Kraft equality
 * restored by moving leaves down from the deepest shallower level, one unit of 2^-limit
 * per step; the longest codes go to the rarest symbols again. A: scratch of m entries.
 * Both backends sort their own way (the keys are distinct) and call this. */
KILN_HD void png_huff_from_sorted(const uint32_t *keys, uint32_t m, uint32_t limit, uint8_t *lens, uint32_t *A)
{
	for (uint32_t i = 0; i < m; i++)
		A[i] = keys[i] >> 9;
	png_huff_inplace(A, m);
	if (A[0] > limit) {
		uint32_t bl[16] = {0};
		for (uint32_t i = 0; i < m; i++)
			bl[A[i] > limit ? limit : A[i]]++;
		uint32_t kraft = 0;
		for (uint32_t l = 1; l <= limit; l++)
			kraft += bl[l] << (limit - l);
		while (kraft > (1u << limit)) {
			bl[limit]--;
			uint32_t l = limit - 1;
			while (bl[l] == 0)
				l--;
			bl[l]--;
			bl[l + 1] += 2;
			kraft--;
		}
		uint32_t i = 0;
		for (uint32_t l = limit; l >= 1; l--)
			for (uint32_t k = 0; k < bl[l]; k++)
				A[i++] = l;
	}
	for (uint32_t i = 0; i < m; i++)
		lens[keys[i] & 511u] = (uint8_t)A[i];
}

/* One or no used symbol: still a complete code of two 1-bit codes (as zlib does). */
KILN_HD void png_huff_tiny(const uint32_t *keys, uint32_t m, uint8_t *lens)
{
	uint32_t s = m ? (keys[0] & 511u) : 0;
	lens[s] = 1;
	lens[s == 0 ? 1 : 0] = 1;
}

/* Code lengths (at most `limit`) for freq[0..nsym): symbols of zero frequency get 0.
 * keys and A are scratch of nsym entries each. Frequencies must be below 2^23. */
KILN_HD void png_huff_lengths(const uint32_t *freq, uint32_t nsym, uint32_t limit, uint8_t *lens,
			      uint32_t *keys, uint32_t *A)
{
	uint32_t m = 0;
	for (uint32_t s = 0; s < nsym; s++) {
		lens[s] = 0;
		if (freq[s])
			keys[m++] = freq[s] << 9 | s;
	}
	if (m < 2) {
		png_huff_tiny(keys, m, lens);
		return;
	}
	/* ascending (frequency, symbol): insertion sort, m <= 286 */
	for (uint32_t i = 1; i < m; i++) {
		uint32_t k = keys[i], j = i;
		while (j > 0 && keys[j - 1] > k) {
			keys[j] = keys[j - 1];
			j--;
		}
		keys[j] = k;
	}
	png_huff_from_sorted(keys, m, limit, lens, A);
}

/* Canonical codes (RFC 1951 3.2.2), bit-reversed for the LSB-first writer. */
KILN_HD void png_huff_codes(const uint8_t *lens, uint32_t nsym, uint16_t *codes)
{
	uint32_t bl[16] = {0}, next[16];
	for (uint32_t s = 0; s < nsym; s++)
		bl[lens[s]]++;
	bl[0] = 0;
	uint32_t code = 0;
	for (uint32_t b = 1; b < 16; b++) {
		code = (code + bl[b - 1]) << 1;
		next[b] = code;
	}
	for (uint32_t s = 0; s < nsym; s++)
		codes[s] = lens[s] ? (uint16_t)png_bitrev(next[lens[s]]++, lens[s]) : 0;
}

/* ---- bit writer --------------------------------------------------------------------- */

#ifndef __CUDA_ARCH__
/* Host: a 64-bit accumulator flushed 4 bytes at a time into out. */
typedef struct png_bitw {
	uint8_t *out;
	size_t pos, cap;
	uint64_t acc;
	uint32_t n;      /* bits in acc */
	int overflow;    /* a write went past cap (never with a correct bound) */
} png_bitw;

KILN_HD void png_bw_init(png_bitw *w, uint8_t *out, size_t cap)
{
	w->out = out;
	w->pos = 0;
	w->cap = cap;
	w->acc = 0;
	w->n = 0;
	w->overflow = 0;
}

KILN_HD void png_bw_byte(png_bitw *w, uint32_t b)
{
	if (w->pos < w->cap)
		w->out[w->pos++] = (uint8_t)b;
	else
		w->overflow = 1;
}

/* nb <= 32 bits, LSB first. */
KILN_HD void png_bw_put(png_bitw *w, uint32_t bits, uint32_t nb)
{
	w->acc |= (uint64_t)bits << w->n;
	w->n += nb;
	if (w->n >= 32) {
		if (w->pos + 4 <= w->cap) {
			w->out[w->pos] = (uint8_t)w->acc;
			w->out[w->pos + 1] = (uint8_t)(w->acc >> 8);
			w->out[w->pos + 2] = (uint8_t)(w->acc >> 16);
			w->out[w->pos + 3] = (uint8_t)(w->acc >> 24);
			w->pos += 4;
		} else {
			w->overflow = 1;
		}
		w->acc >>= 32;
		w->n -= 32;
	}
}

/* Pads with zero bits to a byte boundary and writes out every pending bit. */
KILN_HD void png_bw_align(png_bitw *w)
{
	while (w->n > 0) {
		png_bw_byte(w, (uint32_t)(w->acc & 0xFFu));
		w->acc >>= 8;
		w->n = w->n > 8 ? w->n - 8 : 0;
	}
	w->acc = 0;
}

KILN_HD uint64_t png_bw_bits(const png_bitw *w)
{
	return (uint64_t)w->pos * 8 + w->n;
}

KILN_HD void png_bw_bytes(png_bitw *w, const uint8_t *p, uint32_t len)
{
	if (w->pos + len <= w->cap) {
		memcpy(w->out + w->pos, p, len);
		w->pos += len;
	} else {
		w->overflow = 1;
	}
}
#else
/* Device: a bit position into zeroed, 4-byte aligned words; bits are ORed in (atomically:
 * the lanes of a warp write the tokens of a block at once, each at its own position).
 * The bytes are those of the host writer: the stream is LSB first, the words little
 * endian. */
typedef struct png_bitw {
	uint32_t *words;
	uint64_t bits, cap_bits;
	int overflow;
} png_bitw;

KILN_HD void png_bw_init(png_bitw *w, uint8_t *out, size_t cap)
{
	w->words = (uint32_t *)out;
	w->bits = 0;
	w->cap_bits = (uint64_t)cap * 8;
	w->overflow = 0;
}

/* nb <= 32 bits at bit position pos (not moving w). */
KILN_HD void png_bw_put_at(png_bitw *w, uint64_t pos, uint32_t bits, uint32_t nb)
{
	if (nb == 0)
		return;
	if (pos + nb > w->cap_bits) {
		w->overflow = 1;
		return;
	}
	uint64_t v = (uint64_t)bits << (pos & 31u);
	atomicOr(&w->words[pos >> 5], (uint32_t)v);
	if ((pos & 31u) + nb > 32)
		atomicOr(&w->words[(pos >> 5) + 1], (uint32_t)(v >> 32));
}

KILN_HD void png_bw_put(png_bitw *w, uint32_t bits, uint32_t nb)
{
	png_bw_put_at(w, w->bits, bits, nb);
	w->bits += nb;
}

KILN_HD void png_bw_byte(png_bitw *w, uint32_t b)
{
	png_bw_put(w, b & 0xFFu, 8);
}

KILN_HD void png_bw_align(png_bitw *w)
{
	w->bits = (w->bits + 7) & ~(uint64_t)7;
}

KILN_HD uint64_t png_bw_bits(const png_bitw *w)
{
	return w->bits;
}

KILN_HD void png_bw_bytes(png_bitw *w, const uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		png_bw_byte(w, p[i]);
}
#endif

/* Ends a strip's deflate data: the last strip ends with its final block, any other with a
 * full flush (an empty stored block: 3 header bits, padding to a byte, 00 00 FF FF), so the
 * next strip starts byte-aligned with a fresh window. Both writers, so both backends. */
KILN_HD void png_bw_end_strip(png_bitw *w, int last)
{
	if (!last) {
		png_bw_put(w, 0, 3);
		png_bw_align(w);
		png_bw_byte(w, 0x00);
		png_bw_byte(w, 0x00);
		png_bw_byte(w, 0xFF);
		png_bw_byte(w, 0xFF);
	} else {
		png_bw_align(w);
	}
}

/* ---- blocks ----------------------------------------------------------------------------- */

/* A token: a literal byte (dist 0) or a match: dist << 16 | length. */
#define PNG_TOK_LIT(b) ((uint32_t)(b))
#define PNG_TOK_MATCH(len, dist) ((uint32_t)(dist) << 16 | (uint32_t)(len))

/* Per-block scratch (about 4.5 KiB): the host's stack, the GPU's shared memory. */
typedef struct png_block_tables {
	uint32_t lfreq[PNG_DEFL_LITLEN], dfreq[PNG_DEFL_DIST];
	uint8_t llen[PNG_DEFL_LITLEN + PNG_DEFL_DIST]; /* lit/len lengths, then distance lengths */
	uint8_t flen[288];
	uint16_t lcode[288], dcode[PNG_DEFL_DIST];
	uint32_t keys[PNG_DEFL_LITLEN], A[PNG_DEFL_LITLEN];
	uint16_t clsym[PNG_DEFL_LITLEN + PNG_DEFL_DIST]; /* code-length symbols: sym | extra << 5 */
} png_block_tables;

/* An empty histogram, for the next block's symbols. */
KILN_HD void png_block_tables_clear(png_block_tables *t)
{
	for (uint32_t s = 0; s < PNG_DEFL_LITLEN; s++)
		t->lfreq[s] = 0;
	for (uint32_t s = 0; s < PNG_DEFL_DIST; s++)
		t->dfreq[s] = 0;
}

KILN_HD void png_emit_tokens(png_bitw *w, const uint32_t *tokens, uint32_t ntok, const uint8_t *llen,
			     const uint16_t *lcode, const uint8_t *dlen, const uint16_t *dcode)
{
	for (uint32_t i = 0; i < ntok; i++) {
		uint32_t t = tokens[i], dist = t >> 16;
		if (dist == 0) {
			png_bw_put(w, lcode[t], llen[t]);
			continue;
		}
		uint32_t ne, ev, de, dv;
		uint32_t ls = png_len_code(t & 0xFFFFu, &ne, &ev);
		uint32_t ds = png_dist_code(dist, &de, &dv);
		png_bw_put(w, lcode[ls] | ev << llen[ls], llen[ls] + ne);
		png_bw_put(w, dcode[ds] | dv << dlen[ds], dlen[ds] + de);
	}
	png_bw_put(w, lcode[256], llen[256]);
}

#ifdef __CUDACC__
__device__ __constant__ static const uint8_t png_codelen_order_dev[PNG_DEFL_CODELEN] = {
	16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
#endif
#define PNG_BLOCK_STORED 0
#define PNG_BLOCK_FIXED 1
#define PNG_BLOCK_DYNAMIC 2

/* The code tables and header of one block, decided from its histogram and lengths. */
typedef struct png_block_plan {
	int type;
	uint32_t hlit, hdist, hclen, ncl;
	uint8_t cllen[PNG_DEFL_CODELEN];
	uint16_t clcode[PNG_DEFL_CODELEN];
} png_block_plan;

KILN_HD const uint8_t *png_codelen_order(void)
{
#ifdef __CUDA_ARCH__
	return png_codelen_order_dev;
#else
	static const uint8_t order[PNG_DEFL_CODELEN] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
	return order;
#endif
}

/* With t->llen / dlen holding the block's dynamic code lengths (from t->lfreq / dfreq,
 * EOB counted): the cheapest of stored, fixed and dynamic by exact bit count at bit
 * position `at` (stored pads to a byte), and for the winner t->lcode / dcode (and the
 * fixed lengths in t->llen). */
KILN_HD void png_block_choose(png_block_tables *t, png_block_plan *bp, uint64_t at, uint32_t raw_len)
{
	uint8_t *llen = t->llen, *dlen = t->llen + PNG_DEFL_LITLEN;
	uint64_t extra = 0, data_dyn = 0, data_fix = 0;
	for (uint32_t s = 0; s < PNG_DEFL_LITLEN; s++) {
		uint32_t f = t->lfreq[s];
		if (!f)
			continue;
		uint64_t e = s > 256 ? png_len_extra_bits(s) : 0;
		extra += f * e;
		data_dyn += (uint64_t)f * llen[s];
		data_fix += (uint64_t)f * png_fixed_lit_len(s);
	}
	for (uint32_t s = 0; s < PNG_DEFL_DIST; s++) {
		uint32_t f = t->dfreq[s];
		if (!f)
			continue;
		extra += (uint64_t)f * png_dist_extra_bits(s);
		data_dyn += (uint64_t)f * dlen[s];
		data_fix += (uint64_t)f * 5;
	}

	uint32_t hlit = PNG_DEFL_LITLEN, hdist = PNG_DEFL_DIST;
	while (hlit > 257 && llen[hlit - 1] == 0)
		hlit--;
	while (hdist > 1 && dlen[hdist - 1] == 0)
		hdist--;
	/* the code lengths as one sequence (runs may cross from one table to the other) */
	uint8_t seq[PNG_DEFL_LITLEN + PNG_DEFL_DIST];
	for (uint32_t i = 0; i < hlit; i++)
		seq[i] = llen[i];
	for (uint32_t i = 0; i < hdist; i++)
		seq[hlit + i] = dlen[i];
	uint32_t nseq = hlit + hdist, ncl = 0;
	uint32_t clfreq[PNG_DEFL_CODELEN] = {0};
	for (uint32_t i = 0; i < nseq;) {
		uint32_t v = seq[i], run = 1;
		while (i + run < nseq && seq[i + run] == v)
			run++;
		i += run;
		if (v == 0) {
			while (run >= 11) {
				uint32_t r = run > 138 ? 138 : run;
				t->clsym[ncl++] = (uint16_t)(18 | (r - 11) << 5);
				clfreq[18]++;
				run -= r;
			}
			if (run >= 3) {
				t->clsym[ncl++] = (uint16_t)(17 | (run - 3) << 5);
				clfreq[17]++;
				run = 0;
			}
		} else {
			t->clsym[ncl++] = (uint16_t)v;
			clfreq[v]++;
			run--;
			while (run >= 3) {
				uint32_t r = run > 6 ? 6 : run;
				t->clsym[ncl++] = (uint16_t)(16 | (r - 3) << 5);
				clfreq[16]++;
				run -= r;
			}
		}
		while (run > 0) {
			t->clsym[ncl++] = (uint16_t)v;
			clfreq[v]++;
			run--;
		}
	}
	png_huff_lengths(clfreq, PNG_DEFL_CODELEN, 7, bp->cllen, t->keys, t->A);
	png_huff_codes(bp->cllen, PNG_DEFL_CODELEN, bp->clcode);
	const uint8_t *order = png_codelen_order();
	uint32_t hclen = PNG_DEFL_CODELEN;
	while (hclen > 4 && bp->cllen[order[hclen - 1]] == 0)
		hclen--;
	uint64_t header = 3 + 5 + 5 + 4 + 3 * (uint64_t)hclen;
	for (uint32_t s = 0; s < PNG_DEFL_CODELEN; s++)
		header += (uint64_t)clfreq[s] * bp->cllen[s];
	header += 2 * (uint64_t)clfreq[16] + 3 * (uint64_t)clfreq[17] + 7 * (uint64_t)clfreq[18];

	uint64_t dyn_bits = header + data_dyn + extra;
	uint64_t fix_bits = 3 + data_fix + extra;
	uint64_t pad = (8 - (at + 3) % 8) % 8;
	uint64_t stored_bits = 3 + pad + 32 + 8 * (uint64_t)raw_len;
	bp->hlit = hlit;
	bp->hdist = hdist;
	bp->hclen = hclen;
	bp->ncl = ncl;
	if (stored_bits <= fix_bits && stored_bits <= dyn_bits) {
		bp->type = PNG_BLOCK_STORED;
	} else if (fix_bits <= dyn_bits) {
		/* the fixed code has 288 literal/length symbols (286 and 287 never occur but
		 * shift the canonical 9-bit codes) and 32 distance symbols */
		bp->type = PNG_BLOCK_FIXED;
		for (uint32_t s = 0; s < 288; s++)
			t->flen[s] = (uint8_t)png_fixed_lit_len(s);
		png_huff_codes(t->flen, 288, t->lcode);
		for (uint32_t s = 0; s < PNG_DEFL_LITLEN; s++)
			llen[s] = t->flen[s];
		for (uint32_t s = 0; s < PNG_DEFL_DIST; s++)
			dlen[s] = 5;
		png_huff_codes(dlen, PNG_DEFL_DIST, t->dcode);
	} else {
		bp->type = PNG_BLOCK_DYNAMIC;
		png_huff_codes(llen, PNG_DEFL_LITLEN, t->lcode);
		png_huff_codes(dlen, PNG_DEFL_DIST, t->dcode);
	}
}

/* The block header: BFINAL and BTYPE, then for stored the padding and LEN / NLEN, for
 * dynamic the code-length code and the run-length coded code lengths. */
KILN_HD void png_block_header(png_bitw *w, const png_block_tables *t, const png_block_plan *bp, uint32_t raw_len,
			      int final)
{
	if (bp->type == PNG_BLOCK_STORED) {
		png_bw_put(w, final ? 1u : 0u, 3);
		png_bw_align(w);
		png_bw_byte(w, raw_len & 0xFFu);
		png_bw_byte(w, raw_len >> 8);
		png_bw_byte(w, ~raw_len & 0xFFu);
		png_bw_byte(w, (~raw_len >> 8) & 0xFFu);
		return;
	}
	if (bp->type == PNG_BLOCK_FIXED) {
		png_bw_put(w, (final ? 1u : 0u) | 1u << 1, 3);
		return;
	}
	const uint8_t *order = png_codelen_order();
	png_bw_put(w, (final ? 1u : 0u) | 2u << 1, 3);
	png_bw_put(w, bp->hlit - 257, 5);
	png_bw_put(w, bp->hdist - 1, 5);
	png_bw_put(w, bp->hclen - 4, 4);
	for (uint32_t i = 0; i < bp->hclen; i++)
		png_bw_put(w, bp->cllen[order[i]], 3);
	for (uint32_t i = 0; i < bp->ncl; i++) {
		uint32_t s = t->clsym[i] & 31u, x = t->clsym[i] >> 5;
		png_bw_put(w, bp->clcode[s], bp->cllen[s]);
		if (s == 16)
			png_bw_put(w, x, 2);
		else if (s == 17)
			png_bw_put(w, x, 3);
		else if (s == 18)
			png_bw_put(w, x, 7);
	}
}

/* Writes one block of ntok tokens covering raw[0..raw_len) with the cheapest of stored,
 * fixed and dynamic codes. t->lfreq / t->dfreq hold the block's histogram (EOB not
 * counted yet); they are consumed. */
KILN_HD void png_write_block(png_bitw *w, png_block_tables *t, const uint32_t *tokens, uint32_t ntok,
			     const uint8_t *raw, uint32_t raw_len, int final)
{
	t->lfreq[256] = 1;
	png_huff_lengths(t->lfreq, PNG_DEFL_LITLEN, 15, t->llen, t->keys, t->A);
	png_huff_lengths(t->dfreq, PNG_DEFL_DIST, 15, t->llen + PNG_DEFL_LITLEN, t->keys, t->A);
	png_block_plan bp;
	png_block_choose(t, &bp, png_bw_bits(w), raw_len);
	png_block_header(w, t, &bp, raw_len, final);
	if (bp.type == PNG_BLOCK_STORED)
		png_bw_bytes(w, raw, raw_len);
	else
		png_emit_tokens(w, tokens, ntok, t->llen, t->lcode, t->llen + PNG_DEFL_LITLEN, t->dcode);
	png_block_tables_clear(t);
}

/* ---- match finding -------------------------------------------------------------------- */

KILN_HD uint32_t png_hash4(const uint8_t *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return (v * 2654435761u) >> (32 - PNG_DEFL_HASH_BITS);
}

/* Bytes equal at a[i] and b[i] from 0, at most max. */
KILN_HD uint32_t png_match_len(const uint8_t *a, const uint8_t *b, uint32_t max)
{
	uint32_t l = 0;
#ifndef __CUDA_ARCH__
	while (l + 8 <= max) {
		uint64_t x, y;
		memcpy(&x, a + l, 8);
		memcpy(&y, b + l, 8);
		if (x != y)
			return l + (uint32_t)(__builtin_ctzll(x ^ y) >> 3);
		l += 8;
	}
#endif
	while (l < max && a[l] == b[l])
		l++;
	return l;
}

/* How hard each quality searches. */
typedef struct png_defl_level {
	uint32_t chain;     /* hash-chain candidates per position; 0: no hash table */
	uint32_t lazy;      /* try the next position when the match is shorter than this; 0: greedy */
	uint32_t nice;      /* stop searching at a match this long */
	uint32_t optimal;   /* parse by png_deflate_strip_opt (candidate lists, cost passes) */
} png_defl_level;

KILN_HD png_defl_level png_defl_level_for(int quality)
{
	png_defl_level l;
	if (quality <= 0) {
		l.chain = 0;
		l.lazy = 0;
		l.nice = 64;
		l.optimal = 0;
	} else if (quality == 1) {
		/* (4 / 16 / 64 until session 14: this search pays for medium's 20 KiB strips,
		 * which decode 10% faster on the GPU than 32 KiB ones, within the 1.03 size
		 * target: docs/PERFORMANCE.md, PNG, session 14) */
		l.chain = 16;
		l.lazy = 32;
		l.nice = 128;
		l.optimal = 0;
	} else {
		l.chain = 256;
		l.lazy = PNG_DEFL_MAX_MATCH + 1;
		l.nice = PNG_DEFL_MAX_MATCH;
		l.optimal = 1;
	}
	return l;
}

/* The state of one strip's match finder. head (PNG_DEFL_HASH_SIZE entries) and prev (n
 * entries) are the caller's scratch, needed only when level.chain > 0; head must hold
 * PNG_DEFL_NONE everywhere on entry. */
typedef struct png_matcher {
	const uint8_t *d;
	uint32_t n;
	uint32_t dists[3];  /* fixed candidate distances, 0 = unused */
	uint32_t *head, *prev;
	uint32_t inserted;  /* positions below this are in the hash table */
	const uint32_t *best;  /* NULL, or png_match_at of every position */
	png_defl_level level;
} png_matcher;

KILN_HD void png_matcher_init(png_matcher *m, const uint8_t *d, uint32_t n, uint32_t rowlen, uint32_t bpp,
			      int quality, uint32_t *head, uint32_t *prev)
{
	m->d = d;
	m->n = n;
	m->level = png_defl_level_for(quality);
	m->dists[0] = 1;
	m->dists[1] = bpp > 1 ? bpp : 0;
	m->dists[2] = rowlen > 1 && rowlen != bpp && rowlen <= PNG_DEFL_WINDOW ? rowlen : 0;
	m->head = head;
	m->prev = prev;
	m->inserted = 0;
	m->best = NULL;
}

/* Puts positions [inserted, end) in the hash table, in order. */
KILN_HD void png_matcher_insert(png_matcher *m, uint32_t end)
{
	uint32_t lim = m->n > 3 ? m->n - 3 : 0;  /* positions with 4 bytes to hash */
	if (end > lim)
		end = lim;
	for (uint32_t p = m->inserted; p < end; p++) {
		uint32_t h = png_hash4(m->d + p);
		m->prev[p] = m->head[h];
		m->head[h] = p;
	}
	if (end > m->inserted)
		m->inserted = end;
}

/* The longest match the data allows at p: up to the strip's end, at most 258. */
KILN_HD uint32_t png_max_match(const png_matcher *m, uint32_t p)
{
	uint32_t maxlen = m->n - p;
	return maxlen > PNG_DEFL_MAX_MATCH ? PNG_DEFL_MAX_MATCH : maxlen;
}

/* The longest match at p (0 if none worth taking), its distance in *dist. Candidates in
 * order: the fixed distances, then the hash chain, most recent first; a candidate
 * replaces the best only when strictly longer. The chain tables must already hold every
 * position up to p (png_matcher_insert): the result is then a function of the data and p
 * alone, which lets the GPU search all positions at once. */
KILN_HD uint32_t png_match_at(const png_matcher *m, uint32_t p, uint32_t *dist)
{
	uint32_t maxlen = png_max_match(m, p);
	if (maxlen < PNG_DEFL_MIN_MATCH)
		return 0;
	const uint8_t *cur = m->d + p;
	uint32_t best = 0, bestd = 0;
	for (int k = 0; k < 3; k++) {
		uint32_t dd = m->dists[k];
		if (dd == 0 || dd > p)
			continue;
		if (best >= maxlen)
			break;
		if (cur[best] != (cur - dd)[best])
			continue;
		uint32_t len = png_match_len(cur, cur - dd, maxlen);
		if (len > best) {
			best = len;
			bestd = dd;
		}
	}
	if (m->level.chain > 0 && best < m->level.nice && best < maxlen) {
		uint32_t q = p + 3 < m->n ? m->prev[p] : PNG_DEFL_NONE;
		for (uint32_t c = m->level.chain; c > 0 && q != PNG_DEFL_NONE && p - q <= PNG_DEFL_WINDOW; c--) {
			const uint8_t *cand = m->d + q;
			if (cand[best] == cur[best]) {
				uint32_t len = png_match_len(cur, cand, maxlen);
				if (len > best) {
					best = len;
					bestd = p - q;
					if (best >= m->level.nice || best >= maxlen)
						break;
				}
			}
			q = m->prev[q];
		}
	}
	if (best < PNG_DEFL_MIN_MATCH || (best == PNG_DEFL_MIN_MATCH && bestd > 4096))
		return 0;
	*dist = bestd;
	return best;
}

/* png_match_at, first putting the positions up to p in the chain tables. With
 * m->best (precomputed png_match_at of every position, len | dist << 16) just a look-up. */
KILN_HD uint32_t png_find_match(png_matcher *m, uint32_t p, uint32_t *dist)
{
	if (m->best) {
		uint32_t b = m->best[p];
		*dist = b >> 16;
		return b & 0xFFFFu;
	}
	if (m->level.chain > 0)
		png_matcher_insert(m, p + 1);
	return png_match_at(m, p, dist);
}

/* ---- one strip ---------------------------------------------------------------------------- */

/* Scratch of one strip job: tokens (PNG_DEFL_BLOCK_TOKENS), and for medium/high the
 * hash head (PNG_DEFL_HASH_SIZE, all PNG_DEFL_NONE) and chain (n) tables; or, instead of
 * head and prev, best: the precomputed matches of every position (the GPU's way). */
typedef struct png_defl_scratch {
	uint32_t *tokens;
	uint32_t *cands;
	uint32_t *head;
	uint32_t *prev;
	const uint32_t *best;
} png_defl_scratch;

KILN_HD void png_add_literal(png_block_tables *t, uint32_t *tokens, uint32_t *ntok, uint32_t b)
{
	tokens[(*ntok)++] = PNG_TOK_LIT(b);
	t->lfreq[b]++;
}

KILN_HD void png_add_match(png_block_tables *t, uint32_t *tokens, uint32_t *ntok, uint32_t len, uint32_t dist)
{
	uint32_t ne, ev;
	tokens[(*ntok)++] = PNG_TOK_MATCH(len, dist);
	t->lfreq[png_len_code(len, &ne, &ev)]++;
	t->dfreq[png_dist_code(dist, &ne, &ev)]++;
}

/* ---- optimal parse (high) ------------------------------------------------------------ */

/* Candidates kept per position: on Kodak in 20 KiB strips (libpng's filter heuristic,
 * chains of 128) 1, 2, 3, 4, 8 give 1.0106, 1.0093, 1.0089, 1.0089, 1.0089 x libpng's
 * size (the GPU keeps them all in scratch, 4 bytes each). */
#define PNG_OPT_CANDS 3
/* Parses per block: in the same measure 1, 2, 3, 4, 6 give 1.0113, 1.0093, 1.0089, 1.0089,
 * 1.0088; with filters by trial 3 and 4 give 1.0001 and 1.0000. */
#define PNG_OPT_PASSES 4
/* A symbol without a code in the previous parse costs as the longest code plus this. */
#define PNG_OPT_UNUSED 2
/* Bytes of a block, at most: a strip longer than this is cut into equal blocks. */
#define PNG_OPT_BLOCK 32768u
#define PNG_OPT_RING 512u
/* A candidate this long is taken whole (png_opt_long). */
#define PNG_OPT_LONG 128u

/* The fixed distances usable at p, ascending, into fd; returns how many. */
KILN_HD uint32_t png_fixed_dists_sorted(const png_matcher *m, uint32_t p, uint32_t fd[3])
{
	uint32_t nf = 0;
	for (int k = 0; k < 3; k++) {
		uint32_t dd = m->dists[k];
		if (dd == 0 || dd > p)
			continue;
		uint32_t j = nf++;
		while (j > 0 && fd[j - 1] > dd) {
			fd[j] = fd[j - 1];
			j--;
		}
		fd[j] = dd;
	}
	return nf;
}

/* Walks the distances to try at p in ascending order: the fixed ones merged into the hash
 * chain (most recent first, so nearest first; a chain entry at a fixed distance is tried
 * once). */
typedef struct png_cand_walk {
	uint32_t fd[3], nf, fi;
	uint32_t q;       /* next chain position, PNG_DEFL_NONE: none */
	uint32_t chain;   /* chain entries left */
} png_cand_walk;

KILN_HD void png_cand_walk_init(png_cand_walk *cw, const png_matcher *m, uint32_t p)
{
	cw->nf = png_fixed_dists_sorted(m, p, cw->fd);
	cw->fi = 0;
	cw->q = p + 3 < m->n ? m->prev[p] : PNG_DEFL_NONE;
	cw->chain = m->level.chain;
}

/* The next distance, 0 when there is none. */
KILN_HD uint32_t png_cand_walk_next(png_cand_walk *cw, const png_matcher *m, uint32_t p)
{
	uint32_t qd = 0xFFFFFFFFu;
	if (cw->chain > 0 && cw->q != PNG_DEFL_NONE && p - cw->q <= PNG_DEFL_WINDOW)
		qd = p - cw->q;
	uint32_t fixed = cw->fi < cw->nf ? cw->fd[cw->fi] : 0xFFFFFFFFu;
	if (fixed == 0xFFFFFFFFu && qd == 0xFFFFFFFFu)
		return 0;
	if (fixed < qd) {
		cw->fi++;
		return fixed;
	}
	cw->fi += fixed == qd;
	cw->chain--;
	cw->q = m->prev[cw->q];
	return qd;
}

/* The candidates of p: up to PNG_OPT_CANDS matches as len | dist << 16, lengths strictly
 * increasing, each with the smallest distance found for its length (png_cand_walk: when
 * the list is full a longer match replaces its last entry); the rest of c zero. A
 * function of the data and p alone once the chains hold every position up to p. */
KILN_HD uint32_t png_match_cands(const png_matcher *m, uint32_t p, uint32_t *c)
{
	uint32_t nc = 0;
	for (uint32_t k = 0; k < PNG_OPT_CANDS; k++)
		c[k] = 0;
	uint32_t maxlen = png_max_match(m, p);
	if (maxlen < PNG_DEFL_MIN_MATCH)
		return 0;
	const uint8_t *cur = m->d + p;
	uint32_t best = PNG_DEFL_MIN_MATCH - 1;
	png_cand_walk cw;
	png_cand_walk_init(&cw, m, p);
	for (uint32_t dd; best < maxlen && (dd = png_cand_walk_next(&cw, m, p)) != 0;) {
		const uint8_t *cand = cur - dd;
		if (cand[best] != cur[best])
			continue;
		uint32_t len = png_match_len(cur, cand, maxlen);
		if (len <= best)
			continue;
		best = len;
		nc -= nc == PNG_OPT_CANDS;
		c[nc++] = dd << 16 | len;
	}
	return nc;
}

/* Integer bit costs of a block's symbols under one set of Huffman code lengths. */
typedef struct png_opt_costs {
	uint16_t lit[256];
	uint16_t len[PNG_DEFL_MAX_MATCH + 1];  /* length code + extra bits, 3..258 */
	uint16_t dist[PNG_DEFL_DIST];          /* distance code + extra bits */
} png_opt_costs;

/* Costs from code lengths; a symbol without a code costs as the longest code plus
 * PNG_OPT_UNUSED (it would need one). */
KILN_HD void png_opt_costs_from_lengths(png_opt_costs *c, const uint8_t *llen, const uint8_t *dlen)
{
	uint32_t lmax = 0, dmax = 0;
	for (uint32_t s = 0; s < PNG_DEFL_LITLEN; s++)
		lmax = llen[s] > lmax ? llen[s] : lmax;
	for (uint32_t s = 0; s < PNG_DEFL_DIST; s++)
		dmax = dlen[s] > dmax ? dlen[s] : dmax;
	lmax += PNG_OPT_UNUSED;
	dmax += PNG_OPT_UNUSED;
	for (uint32_t s = 0; s < 256; s++)
		c->lit[s] = (uint16_t)(llen[s] ? llen[s] : lmax);
	for (uint32_t l = PNG_DEFL_MIN_MATCH; l <= PNG_DEFL_MAX_MATCH; l++) {
		uint32_t ne, ev, sym = png_len_code(l, &ne, &ev);
		c->len[l] = (uint16_t)((llen[sym] ? llen[sym] : lmax) + ne);
	}
	for (uint32_t s = 0; s < PNG_DEFL_DIST; s++)
		c->dist[s] = (uint16_t)((dlen[s] ? dlen[s] : dmax) + png_dist_extra_bits(s));
}

/* Costs from the block's histogram in t (consumed: zeroed afterwards). */
KILN_HD void png_opt_costs_from_freq(png_opt_costs *c, png_block_tables *t)
{
	t->lfreq[256] = 1;
	png_huff_lengths(t->lfreq, PNG_DEFL_LITLEN, 15, t->llen, t->keys, t->A);
	png_huff_lengths(t->dfreq, PNG_DEFL_DIST, 15, t->llen + PNG_DEFL_LITLEN, t->keys, t->A);
	png_opt_costs_from_lengths(c, t->llen, t->llen + PNG_DEFL_LITLEN);
	png_block_tables_clear(t);
}

/* The cheapest parse of d[start, end) under costs c, as the choice at each position
 * (1: a literal, else len | dist << 16), found backwards: the cost from p to the end is
 * the least of a literal or any length 3..len of a candidate (with its distance) plus
 * the cost from where it ends; ties go to the longer token. ring (PNG_OPT_RING entries):
 * the costs from the positions after p. */
/* How many candidates a position has (its list ends at the first zero). */
KILN_HD uint32_t png_opt_cand_count(const uint32_t *cp)
{
	uint32_t nc = 0;
	while (nc < PNG_OPT_CANDS && cp[nc])
		nc++;
	return nc;
}

/* A long match (runs, flat areas) is taken whole, so such a strip costs a step a position
 * rather than one a length: whether the last of the nc candidates cp of a position with
 * `room` bytes left in the block is one, and then its cost from the position (the cost
 * ring holds those of the positions after it) and its choice. */
KILN_HD int png_opt_long(const uint32_t *cp, uint32_t nc, uint32_t p, uint32_t room, const png_opt_costs *c,
			 const uint32_t *ring, uint32_t *cost, uint32_t *pick)
{
	if (!nc || (cp[nc - 1] & 0xFFFFu) < PNG_OPT_LONG || room < PNG_OPT_LONG)
		return 0;
	uint32_t len = cp[nc - 1] & 0xFFFFu, dist = cp[nc - 1] >> 16, ne, ev;
	len = len < room ? len : room;
	*cost = ring[(p + len) & (PNG_OPT_RING - 1)] + c->len[len] + c->dist[png_dist_code(dist, &ne, &ev)];
	*pick = dist << 16 | len;
	return 1;
}

KILN_HD void png_opt_parse(const uint8_t *d, uint32_t start, uint32_t end, const uint32_t *cands,
			   const png_opt_costs *c, uint32_t *ring, uint32_t *choice)
{
	ring[end & (PNG_OPT_RING - 1)] = 0;
	for (uint32_t p = end; p-- > start;) {
		uint32_t best = ring[(p + 1) & (PNG_OPT_RING - 1)] + c->lit[d[p]], pick = 1;
		const uint32_t *cp = cands + (uint64_t)p * PNG_OPT_CANDS;
		uint32_t lo = PNG_DEFL_MIN_MATCH, room = end - p;
		uint32_t nc = png_opt_cand_count(cp);
		if (png_opt_long(cp, nc, p, room, c, ring, &ring[p & (PNG_OPT_RING - 1)], &choice[p]))
			continue;
		for (uint32_t k = 0; k < nc && lo <= room; k++) {
			uint32_t len = cp[k] & 0xFFFFu, dist = cp[k] >> 16, ne, ev;
			if (len > room)
				len = room;
			uint32_t dc = c->dist[png_dist_code(dist, &ne, &ev)];
			for (uint32_t l = lo; l <= len; l++) {
				uint32_t x = ring[(p + l) & (PNG_OPT_RING - 1)] + c->len[l] + dc;
				if (x <= best) {
					best = x;
					pick = dist << 16 | l;
				}
			}
			lo = len + 1;
		}
		ring[p & (PNG_OPT_RING - 1)] = best;
		choice[p] = pick;
	}
}

/* Follows the choices from start: the tokens (written over choice from index start on:
 * a token never lands after the position it is read from) and their histogram in t.
 * Returns the token count. */
KILN_HD uint32_t png_opt_walk(const uint8_t *d, uint32_t start, uint32_t end, uint32_t *choice,
			      png_block_tables *t)
{
	uint32_t ntok = 0, *tokens = choice + start;
	for (uint32_t p = start; p < end;) {
		uint32_t x = choice[p];
		if (x == 1) {
			png_add_literal(t, tokens, &ntok, d[p]);
			p++;
		} else {
			png_add_match(t, tokens, &ntok, x & 0xFFFFu, x >> 16);
			p += x & 0xFFFFu;
		}
	}
	return ntok;
}

/* The first cost model: the histogram of a greedy parse (the longest candidate at every
 * position). */
KILN_HD void png_opt_first_costs(const uint8_t *d, uint32_t start, uint32_t end, const uint32_t *cands,
				 png_block_tables *t, png_opt_costs *c)
{
	uint32_t ne, ev;
	for (uint32_t p = start; p < end;) {
		const uint32_t *cp = cands + (uint64_t)p * PNG_OPT_CANDS;
		uint32_t k = 0;
		while (k < PNG_OPT_CANDS && cp[k])
			k++;
		uint32_t len = k ? (cp[k - 1] & 0xFFFFu) : 0;
		if (len > end - p)
			len = end - p;
		if (len < PNG_DEFL_MIN_MATCH) {
			t->lfreq[d[p]]++;
			p++;
			continue;
		}
		t->lfreq[png_len_code(len, &ne, &ev)]++;
		t->dfreq[png_dist_code(cp[k - 1] >> 16, &ne, &ev)]++;
		p += len;
	}
	png_opt_costs_from_freq(c, t);
}

/* Blocks of an optimal-parse strip: equal parts of at most PNG_OPT_BLOCK bytes. */
KILN_HD uint32_t png_opt_blocks(uint32_t n)
{
	return (n + PNG_OPT_BLOCK - 1) / PNG_OPT_BLOCK;
}

/* Block b of the nb blocks of a strip of n bytes: [*start, *end). */
KILN_HD void png_opt_block_range(uint32_t n, uint32_t nb, uint32_t b, uint32_t *start, uint32_t *end)
{
	*start = (uint32_t)((uint64_t)n * b / nb);
	*end = (uint32_t)((uint64_t)n * (b + 1) / nb);
}

/* The working state of png_deflate_strip_opt (about 9 KiB: the host's stack, the GPU's
 * shared memory). */
typedef struct png_opt_work {
	png_block_tables t;
	png_opt_costs c;
	uint32_t ring[PNG_OPT_RING];
} png_opt_work;

/* png_deflate_strip for high: each block parsed by png_opt_parse, first with the costs of
 * a greedy parse, then again with the costs of the previous parse, PNG_OPT_PASSES in all.
 * cands: png_match_cands of every position; choice: n entries of scratch. */
KILN_HD size_t png_deflate_strip_opt(const uint8_t *d, uint32_t n, int last, const uint32_t *cands,
				     uint32_t *choice, png_opt_work *wk, uint8_t *out, size_t cap)
{
	png_bitw w;
	png_bw_init(&w, out, cap);
	png_block_tables *t = &wk->t;
	png_block_tables_clear(t);
	uint32_t nb = png_opt_blocks(n);
	for (uint32_t b = 0; b < nb; b++) {
		uint32_t start, end;
		png_opt_block_range(n, nb, b, &start, &end);
		png_opt_first_costs(d, start, end, cands, t, &wk->c);
		uint32_t ntok = 0;
		for (uint32_t pass = 0; pass < PNG_OPT_PASSES; pass++) {
			if (pass > 0)
				png_opt_costs_from_freq(&wk->c, t);
			png_opt_parse(d, start, end, cands, &wk->c, wk->ring, choice);
			ntok = png_opt_walk(d, start, end, choice, t);
		}
		png_write_block(&w, t, choice + start, ntok, d + start, end - start, last && b + 1 == nb);
	}
	png_bw_end_strip(&w, last);
	return w.overflow ? 0 : (size_t)((png_bw_bits(&w) + 7) / 8);
}

/* High on one thread: every position into the chains, the candidates of every position
 * (s->cands), then png_deflate_strip_opt (choices in s->tokens, n entries). */
KILN_HD size_t png_deflate_strip_high(const uint8_t *d, uint32_t n, uint32_t rowlen, uint32_t bpp, int quality,
				      int last, png_defl_scratch *s, uint8_t *out, size_t cap)
{
	png_matcher m;
	png_matcher_init(&m, d, n, rowlen, bpp, quality, s->head, s->prev);
	png_matcher_insert(&m, n);
	for (uint32_t p = 0; p < n; p++)
		png_match_cands(&m, p, s->cands + (uint64_t)p * PNG_OPT_CANDS);
	png_opt_work wk;
	return png_deflate_strip_opt(d, n, last, s->cands, s->tokens, &wk, out, cap);
}

/* Compresses the n filtered bytes of a strip (n >= 1) into out (cap bytes, at least
 * png_deflate_strip_bound(n)). last: the final strip (ends with BFINAL=1 and padding);
 * otherwise the strip ends with a full flush. Returns the bytes written, 0 on overflow. */
KILN_HD size_t png_deflate_strip(const uint8_t *d, uint32_t n, uint32_t rowlen, uint32_t bpp, int quality,
				 int last, png_defl_scratch *s, uint8_t *out, size_t cap)
{
	if (png_defl_level_for(quality).optimal)
		return png_deflate_strip_high(d, n, rowlen, bpp, quality, last, s, out, cap);
	png_bitw w;
	png_bw_init(&w, out, cap);
	png_block_tables t;
	png_block_tables_clear(&t);
	png_matcher m;
	png_matcher_init(&m, d, n, rowlen, bpp, quality, s->head, s->prev);
	m.best = s->best;
	uint32_t *tokens = s->tokens, ntok = 0, block_start = 0;
	uint32_t p = 0, dist = 0;
	uint32_t len = png_find_match(&m, 0, &dist);
	while (p < n) {
		if (ntok + 2 > PNG_DEFL_BLOCK_TOKENS || p - block_start > PNG_DEFL_BLOCK_BYTES) {
			png_write_block(&w, &t, tokens, ntok, d + block_start, p - block_start, 0);
			ntok = 0;
			block_start = p;
		}
		if (len == 0) {
			png_add_literal(&t, tokens, &ntok, d[p]);
			p++;
			len = p < n ? png_find_match(&m, p, &dist) : 0;
			continue;
		}
		if (len < m.level.lazy && p + 1 < n) {
			uint32_t dist2 = 0;
			uint32_t len2 = png_find_match(&m, p + 1, &dist2);
			if (len2 > len) {
				png_add_literal(&t, tokens, &ntok, d[p]);
				p++;
				len = len2;
				dist = dist2;
				continue;
			}
		}
		png_add_match(&t, tokens, &ntok, len, dist);
		p += len;
		len = p < n ? png_find_match(&m, p, &dist) : 0;
	}
	png_write_block(&w, &t, tokens, ntok, d + block_start, n - block_start, last);
	png_bw_end_strip(&w, last);
	return w.overflow ? 0 : (size_t)((png_bw_bits(&w) + 7) / 8);
}

#endif
