/* ASTC (LDR, 2D) per-block logic shared by both backends: the physical block format as the
 * ASTC chapter of the Khronos Data Format Specification defines it. Bounded integer
 * sequence encoding (BISE) for all 21 ranges, the block-mode field, the partition hash,
 * the LDR colour endpoint modes, weight infill, void-extent blocks, and a decoder exact to
 * the specification. Everything that decides output bits is integer arithmetic.
 *
 * Decoded output is RGBA8 as ARM's astcenc writes it for an 8-bit image:
 *  - linear (astcenc -dl): the UNORM16 interpolation result C goes to FP16 with
 *    round-to-zero (C/65536, or exactly 1.0 for 65535), as the specification prescribes
 *    for linear LDR decoding, and that value times 255 is rounded to nearest;
 *  - sRGB (astcenc -ds): the top 8 bits of the interpolation result (endpoints expanded
 *    with 0x80 below), the value the specification hands to the sRGB conversion; it is
 *    returned still sRGB-encoded.
 * Void-extent colours take the same path (their UNORM16 value is C). Error blocks decode
 * to opaque magenta. tests/unit/test_astc.c compares with `astcenc -dl` / `-ds` on every
 * footprint. */
#ifndef KILN_ASTC_BLOCK_H
#define KILN_ASTC_BLOCK_H

#include <stdint.h>
#include <string.h>

#include "kernels/astc/astc_tables.h"
#include "kernels/kiln_hd.h"

#define ASTC_BLOCK_BYTES 16
#define ASTC_MAX_TEXELS 144   /* 12x12 */
#define ASTC_MAX_WEIGHTS 64   /* per block, both planes together */
#define ASTC_MAX_VALUES 18    /* colour endpoint integers per block */
#define ASTC_RANGES 21
#define ASTC_WEIGHT_RANGES 12
#define ASTC_MIN_COLOR_RANGE 4 /* 0..5: fewer levels cannot hold endpoints */

/* Ranges of the integer sequence encoding, numbered as ASTC does (0: 0..1 ... 20: 0..255):
 * levels, trits, quints, plain bits per value. */
typedef struct astc_range {
	uint16_t levels;
	uint8_t trits, quints, bits;
} astc_range;

ASTC_TABLE astc_range astc_ranges[ASTC_RANGES] = {
	{2, 0, 0, 1},   {3, 1, 0, 0},   {4, 0, 0, 2},   {5, 0, 1, 0},   {6, 1, 0, 1},
	{8, 0, 0, 3},   {10, 0, 1, 1},  {12, 1, 0, 2},  {16, 0, 0, 4},  {20, 0, 1, 2},
	{24, 1, 0, 3},  {32, 0, 0, 5},  {40, 0, 1, 3},  {48, 1, 0, 4},  {64, 0, 0, 6},
	{80, 0, 1, 4},  {96, 1, 0, 5},  {128, 0, 0, 7}, {160, 0, 1, 5}, {192, 1, 0, 6},
	{256, 0, 0, 8},
};

/* ---- bit access ------------------------------------------------------------------------ */

/* n (<= 25) bits at bit position pos of a 128-bit little-endian block; bits at or beyond
 * `end` read as zero (a BISE stream ends where its last value does). */
KILN_HD uint32_t astc_bits_get(const uint8_t *b, int pos, int n, int end)
{
	uint32_t v = 0;
	KILN_ROLLED for (int i = 0; i < n; i++) {
		int p = pos + i;
		if (p >= end || p >= 128)
			break;
		v |= (uint32_t)((b[p >> 3] >> (p & 7)) & 1u) << i;
	}
	return v;
}

/* A block of 128 bits held as two words (bit k of the block is bit k % 64 of w[k / 64]):
 * what astc_pack builds the block in, bit fields ORed in with shifts rather than byte by
 * byte (a GPU thread keeps it in registers, where bytes indexed at run time are local
 * memory). */
typedef struct astc_bits128 {
	uint64_t w[2];
} astc_bits128;

/* ORs n (<= 31) bits of v in at pos; bits at or past 128 are dropped. */
KILN_HD void astc_bits128_put(astc_bits128 *a, int pos, int n, uint32_t v)
{
	uint64_t x = v & ((1u << n) - 1u);
	if (pos >= 128)
		return;
	if (pos >= 64) {
		a->w[1] |= x << (pos - 64);
		return;
	}
	a->w[0] |= x << pos;
	if (pos + n > 64)
		a->w[1] |= x >> (64 - pos);
}

/* ORs the bits of a into the 16 bytes at b (little-endian). */
KILN_HD void astc_bits128_or(const astc_bits128 *a, uint8_t *b)
{
	for (int i = 0; i < 16; i++)
		b[i] |= (uint8_t)(a->w[i >> 3] >> (8 * (i & 7)));
}

KILN_HD uint8_t astc_rev8(uint8_t x)
{
	x = (uint8_t)(((x & 0xF0u) >> 4) | ((x & 0x0Fu) << 4));
	x = (uint8_t)(((x & 0xCCu) >> 2) | ((x & 0x33u) << 2));
	x = (uint8_t)(((x & 0xAAu) >> 1) | ((x & 0x55u) << 1));
	return x;
}

/* The bits of x in reverse order. */
KILN_HD uint64_t astc_rev64(uint64_t x)
{
	x = (x >> 32) | (x << 32);
	x = ((x & 0xFFFF0000FFFF0000ull) >> 16) | ((x & 0x0000FFFF0000FFFFull) << 16);
	x = ((x & 0xFF00FF00FF00FF00ull) >> 8) | ((x & 0x00FF00FF00FF00FFull) << 8);
	x = ((x & 0xF0F0F0F0F0F0F0F0ull) >> 4) | ((x & 0x0F0F0F0F0F0F0F0Full) << 4);
	x = ((x & 0xCCCCCCCCCCCCCCCCull) >> 2) | ((x & 0x3333333333333333ull) << 2);
	x = ((x & 0xAAAAAAAAAAAAAAAAull) >> 1) | ((x & 0x5555555555555555ull) << 1);
	return x;
}

/* The weight stream grows downwards from bit 127: bit n of the stream is bit 127 - n. */
KILN_HD void astc_reverse128(const uint8_t *in, uint8_t *out)
{
	for (int i = 0; i < 16; i++)
		out[15 - i] = astc_rev8(in[i]);
}

/* ---- bounded integer sequence encoding ------------------------------------------------- */

/* Bits that count values of range r occupy. */
KILN_HD int astc_bise_bits(int r, int count)
{
	const astc_range *q = &astc_ranges[r];
	return count * q->bits + (q->trits ? (8 * count + 4) / 5 : 0) + (q->quints ? (7 * count + 2) / 3 : 0);
}

/* The five trits of a packed byte (the specification's procedure). */
KILN_HD void astc_trit_decode(uint32_t t, uint8_t *out)
{
	uint32_t c, t0, t1, t2, t3, t4;
	if (((t >> 2) & 7u) == 7u) {
		c = (((t >> 5) & 7u) << 2) | (t & 3u);
		t4 = t3 = 2;
	} else {
		c = t & 0x1Fu;
		if (((t >> 5) & 3u) == 3u) {
			t4 = 2;
			t3 = (t >> 7) & 1u;
		} else {
			t4 = (t >> 7) & 1u;
			t3 = (t >> 5) & 3u;
		}
	}
	if ((c & 3u) == 3u) {
		t2 = 2;
		t1 = (c >> 4) & 1u;
		t0 = (((c >> 3) & 1u) << 1) | (((c >> 2) & 1u) & ~(c >> 3) & 1u);
	} else if (((c >> 2) & 3u) == 3u) {
		t2 = 2;
		t1 = 2;
		t0 = c & 3u;
	} else {
		t2 = (c >> 4) & 1u;
		t1 = (c >> 2) & 3u;
		t0 = (((c >> 1) & 1u) << 1) | ((c & 1u) & ~(c >> 1) & 1u);
	}
	out[0] = (uint8_t)t0;
	out[1] = (uint8_t)t1;
	out[2] = (uint8_t)t2;
	out[3] = (uint8_t)t3;
	out[4] = (uint8_t)t4;
}

/* The three quints of 7 packed bits. */
KILN_HD void astc_quint_decode(uint32_t q, uint8_t *out)
{
	uint32_t c, q0, q1, q2;
	if (((q >> 1) & 3u) == 3u && ((q >> 5) & 3u) == 0) {
		uint32_t nq0 = ~q & 1u;
		out[0] = 4;
		out[1] = 4;
		out[2] = (uint8_t)(((q & 1u) << 2) | ((((q >> 4) & 1u) & nq0) << 1) | (((q >> 3) & 1u) & nq0));
		return;
	}
	if (((q >> 1) & 3u) == 3u) {
		q2 = 4;
		c = (((q >> 3) & 3u) << 3) | (((~q >> 5) & 3u) << 1) | (q & 1u);
	} else {
		q2 = (q >> 5) & 3u;
		c = q & 0x1Fu;
	}
	if ((c & 7u) == 5u) {
		q1 = 4;
		q0 = (c >> 3) & 3u;
	} else {
		q1 = (c >> 3) & 3u;
		q0 = c & 7u;
	}
	out[0] = (uint8_t)q0;
	out[1] = (uint8_t)q1;
	out[2] = (uint8_t)q2;
}

/* Where the packed trit/quint bits sit inside a group: after value i's plain bits come
 * tbits[i] bits of the packed byte (trits: 2,2,1,2,1; quints: 3,2,2). */
ASTC_TABLE uint8_t astc_trit_split[5] = {2, 2, 1, 2, 1};
ASTC_TABLE uint8_t astc_quint_split[3] = {3, 2, 2};

/* Decodes count values of range r from the stream starting at bit pos of b; the stream
 * ends at pos + astc_bise_bits(r, count) (later bits read as zero). */
KILN_HD void astc_bise_decode(const uint8_t *b, int pos, int r, int count, uint8_t *out)
{
	const astc_range *q = &astc_ranges[r];
	int nb = q->bits;
	int end = pos + astc_bise_bits(r, count);
	if (!q->trits && !q->quints) {
		KILN_ROLLED for (int i = 0; i < count; i++)
			out[i] = (uint8_t)astc_bits_get(b, pos + i * nb, nb, end);
		return;
	}
	int group = q->trits ? 5 : 3;
	const uint8_t *split = q->trits ? astc_trit_split : astc_quint_split;
	KILN_ROLLED for (int g = 0; g < count; g += group) {
		uint32_t m[5], packed = 0;
		int shift = 0;
		KILN_ROLLED for (int i = 0; i < group; i++) {
			m[i] = astc_bits_get(b, pos, nb, end);
			pos += nb;
			packed |= astc_bits_get(b, pos, split[i], end) << shift;
			pos += split[i];
			shift += split[i];
		}
		uint8_t hi[5];
		if (q->trits)
			astc_trit_decode(packed, hi);
		else
			astc_quint_decode(packed, hi);
		KILN_ROLLED for (int i = 0; i < group && g + i < count; i++)
			out[g + i] = (uint8_t)((hi[i] << nb) | m[i]);
	}
}

/* Encodes count values (each < levels of r) at bit pos of b (ORed into a zeroed area). */
KILN_HD void astc_bise_put(astc_bits128 *b, int pos, int r, int count, const uint8_t *vals)
{
	const astc_range *q = &astc_ranges[r];
	int nb = q->bits;
	if (!q->trits && !q->quints) {
		KILN_ROLLED for (int i = 0; i < count; i++)
			astc_bits128_put(b, pos + i * nb, nb, vals[i]);
		return;
	}
	int group = q->trits ? 5 : 3;
	const uint8_t *split = q->trits ? astc_trit_split : astc_quint_split;
	KILN_ROLLED for (int g = 0; g < count; g += group) {
		uint32_t idx = 0, mul = 1, packed;
		KILN_ROLLED for (int i = 0; i < group; i++) {
			uint32_t hi = g + i < count ? (uint32_t)vals[g + i] >> nb : 0;
			idx += hi * mul;
			mul *= q->trits ? 3u : 5u;
		}
		packed = q->trits ? astc_trit_enc[idx] : astc_quint_enc[idx];
		/* each value's bits and its share of the group's trit or quint bits in one field;
		 * past the stream's end (a short final group) both are zero (the values are 0 and
		 * the table keeps those bits zero), so the whole group is ORed in */
		KILN_ROLLED for (int i = 0; i < group; i++) {
			uint32_t lo = g + i < count ? vals[g + i] & ((1u << nb) - 1u) : 0;
			astc_bits128_put(b, pos, nb + split[i], lo | (packed & ((1u << split[i]) - 1u)) << nb);
			packed >>= split[i];
			pos += nb + split[i];
		}
	}
}

/* astc_bise_put into the 16 bytes at b. */
KILN_HD void astc_bise_encode(uint8_t *b, int pos, int r, int count, const uint8_t *vals)
{
	astc_bits128 a = {{0, 0}};
	astc_bise_put(&a, pos, r, count, vals);
	astc_bits128_or(&a, b);
}

/* ---- block mode ------------------------------------------------------------------------ */

typedef struct astc_mode {
	uint8_t grid_w, grid_h;
	uint8_t dual;        /* two weight planes */
	uint8_t wrange;      /* weight range 0..11 */
	uint8_t weight_bits; /* bits of the weight stream */
} astc_mode;

/* Decodes the 11-bit block-mode field for a bw x bh footprint; 0 for reserved modes and
 * for modes the specification makes illegal (grid larger than the footprint, more than 64
 * weights, weight stream outside 24..96 bits). Void-extent is handled by the caller. */
KILN_HD int astc_mode_decode(uint32_t m, int bw, int bh, astc_mode *out)
{
	uint32_t a = (m >> 5) & 3u, b = (m >> 7) & 3u;
	uint32_t r, h = (m >> 9) & 1u, d = (m >> 10) & 1u;
	int gw, gh;
	if (m & 3u) {
		r = ((m >> 4) & 1u) | ((m & 1u) << 1) | (((m >> 1) & 1u) << 2);
		switch ((m >> 2) & 3u) {
		case 0: gw = (int)b + 4; gh = (int)a + 2; break;
		case 1: gw = (int)b + 8; gh = (int)a + 2; break;
		case 2: gw = (int)a + 2; gh = (int)b + 8; break;
		default:
			if (m & 0x100u) {
				gw = (int)(b & 1u) + 2;
				gh = (int)a + 2;
			} else {
				gw = (int)a + 2;
				gh = (int)(b & 1u) + 6;
			}
			break;
		}
	} else {
		if (((m >> 2) & 3u) == 0)
			return 0;
		r = ((m >> 4) & 1u) | (((m >> 2) & 1u) << 1) | (((m >> 3) & 1u) << 2);
		switch (b) {
		case 0: gw = 12; gh = (int)a + 2; break;
		case 1: gw = (int)a + 2; gh = 12; break;
		case 2:
			gw = (int)a + 6;
			gh = (int)((m >> 9) & 3u) + 6;
			h = d = 0;
			break;
		default:
			if (a == 0) {
				gw = 6; gh = 10;
			} else if (a == 1) {
				gw = 10; gh = 6;
			} else {
				return 0;
			}
			break;
		}
	}
	if (gw > bw || gh > bh)
		return 0;
	int n = gw * gh * (d ? 2 : 1);
	if (n > ASTC_MAX_WEIGHTS)
		return 0;
	int wr = (int)(r - 2) + 6 * (int)h;
	int bits = astc_bise_bits(wr, n);
	if (bits < 24 || bits > 96)
		return 0;
	out->grid_w = (uint8_t)gw;
	out->grid_h = (uint8_t)gh;
	out->dual = (uint8_t)d;
	out->wrange = (uint8_t)wr;
	out->weight_bits = (uint8_t)bits;
	return 1;
}

/* The largest colour range whose `values` integers fit in `bits`; -1 if not even 0..5. */
KILN_HD int astc_color_range(int values, int bits)
{
	KILN_ROLLED for (int r = ASTC_RANGES - 1; r >= ASTC_MIN_COLOR_RANGE; r--)
		if (astc_bise_bits(r, values) <= bits)
			return r;
	return -1;
}

/* ---- partitions ------------------------------------------------------------------------ */

KILN_HD uint32_t astc_hash52(uint32_t p)
{
	p ^= p >> 15;
	p -= p << 17;
	p += p << 7;
	p += p << 4;
	p ^= p >> 5;
	p += p << 16;
	p ^= p >> 7;
	p ^= p >> 3;
	p ^= p << 6;
	p ^= p >> 17;
	return p;
}

/* Partition (0..count-1) of texel (x, y) under a seed 0..1023, for a block of `texels`
 * texels (blocks of fewer than 31 texels double their coordinates). */
KILN_HD int astc_partition(int seed, int x, int y, int count, int texels)
{
	if (count <= 1)
		return 0;
	if (texels < 31) {
		x <<= 1;
		y <<= 1;
	}
	seed += (count - 1) * 1024;
	uint32_t rnum = astc_hash52((uint32_t)seed);
	uint32_t s1 = rnum & 0xFu, s2 = (rnum >> 4) & 0xFu, s3 = (rnum >> 8) & 0xFu;
	uint32_t s4 = (rnum >> 12) & 0xFu, s5 = (rnum >> 16) & 0xFu, s6 = (rnum >> 20) & 0xFu;
	uint32_t s7 = (rnum >> 24) & 0xFu, s8 = (rnum >> 28) & 0xFu;
	s1 *= s1; s2 *= s2; s3 *= s3; s4 *= s4;
	s5 *= s5; s6 *= s6; s7 *= s7; s8 *= s8;
	int sh1, sh2;
	if (seed & 1) {
		sh1 = (seed & 2) ? 4 : 5;
		sh2 = count == 3 ? 6 : 5;
	} else {
		sh1 = count == 3 ? 6 : 5;
		sh2 = (seed & 2) ? 4 : 5;
	}
	s1 >>= sh1; s2 >>= sh2; s3 >>= sh1; s4 >>= sh2;
	s5 >>= sh1; s6 >>= sh2; s7 >>= sh1; s8 >>= sh2;
	/* z is 0 in 2D: the seeds that multiply it drop out */
	uint32_t a = (s1 * (uint32_t)x + s2 * (uint32_t)y + (rnum >> 14)) & 0x3Fu;
	uint32_t b = (s3 * (uint32_t)x + s4 * (uint32_t)y + (rnum >> 10)) & 0x3Fu;
	uint32_t c = (s5 * (uint32_t)x + s6 * (uint32_t)y + (rnum >> 6)) & 0x3Fu;
	uint32_t d = (s7 * (uint32_t)x + s8 * (uint32_t)y + (rnum >> 2)) & 0x3Fu;
	if (count < 4)
		d = 0;
	if (count < 3)
		c = 0;
	if (a >= b && a >= c && a >= d)
		return 0;
	if (b >= c && b >= d)
		return 1;
	if (c >= d)
		return 2;
	return 3;
}

/* ---- colour endpoints ------------------------------------------------------------------ */

/* Endpoint integers of a colour endpoint mode: 2 per class step (0: 2 ... 3: 8). */
KILN_HD int astc_cem_values(int cem) { return ((cem >> 2) + 1) * 2; }

KILN_HD int astc_cem_is_hdr(int cem)
{
	return cem == 2 || cem == 3 || cem == 7 || cem == 11 || cem == 14 || cem == 15;
}

KILN_HD void astc_bit_transfer_signed(int *a, int *b)
{
	*b >>= 1;
	*b |= *a & 0x80;
	*a >>= 1;
	*a &= 0x3F;
	if (*a & 0x20)
		*a -= 0x40;
}

KILN_HD int astc_clamp255(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

KILN_HD void astc_set4(int *e, int r, int g, int b, int a)
{
	e[0] = r;
	e[1] = g;
	e[2] = b;
	e[3] = a;
}

/* blue_contract of the specification */
KILN_HD void astc_set4_bc(int *e, int r, int g, int b, int a)
{
	astc_set4(e, (r + b) >> 1, (g + b) >> 1, b, a);
}

/* Unquantised integers v (0..255) of one LDR mode -> endpoints e0, e1 (RGBA 0..255).
 * Returns 0 for an HDR mode (its texels decode to the error colour in LDR). */
KILN_HD int astc_decode_endpoints(int cem, const uint8_t *vin, int *e0, int *e1)
{
	/* the modes with bit transfer (odd CEMs) work on a copy of their values; the others
	 * read them where they are. The copy's loop runs to 8 (the values past the mode's
	 * left 0) so that a GPU keeps v in registers: indexed at run time, it was an array in
	 * local memory. */
	int v[8];
	if (cem & 1) {
		int n = astc_cem_values(cem);
		for (int i = 0; i < 8; i++)
			v[i] = i < n ? vin[i] : 0;
	}
	switch (cem) {
	case 0:
		astc_set4(e0, vin[0], vin[0], vin[0], 255);
		astc_set4(e1, vin[1], vin[1], vin[1], 255);
		return 1;
	case 1: {
		int l0 = (v[0] >> 2) | (v[1] & 0xC0);
		int l1 = l0 + (v[1] & 0x3F);
		if (l1 > 255)
			l1 = 255;
		astc_set4(e0, l0, l0, l0, 255);
		astc_set4(e1, l1, l1, l1, 255);
		return 1;
	}
	case 4:
		astc_set4(e0, vin[0], vin[0], vin[0], vin[2]);
		astc_set4(e1, vin[1], vin[1], vin[1], vin[3]);
		return 1;
	case 5:
		astc_bit_transfer_signed(&v[1], &v[0]);
		astc_bit_transfer_signed(&v[3], &v[2]);
		astc_set4(e0, v[0], v[0], v[0], v[2]);
		astc_set4(e1, v[0] + v[1], v[0] + v[1], v[0] + v[1], v[2] + v[3]);
		break;
	case 6:
		astc_set4(e0, (vin[0] * vin[3]) >> 8, (vin[1] * vin[3]) >> 8, (vin[2] * vin[3]) >> 8, 255);
		astc_set4(e1, vin[0], vin[1], vin[2], 255);
		return 1;
	case 8:
	case 12: {
		int a0 = cem == 12 ? vin[6] : 255, a1 = cem == 12 ? vin[7] : 255;
		if (vin[1] + vin[3] + vin[5] >= vin[0] + vin[2] + vin[4]) {
			astc_set4(e0, vin[0], vin[2], vin[4], a0);
			astc_set4(e1, vin[1], vin[3], vin[5], a1);
		} else {
			astc_set4_bc(e0, vin[1], vin[3], vin[5], a1);
			astc_set4_bc(e1, vin[0], vin[2], vin[4], a0);
		}
		return 1;
	}
	case 9:
	case 13: {
		astc_bit_transfer_signed(&v[1], &v[0]);
		astc_bit_transfer_signed(&v[3], &v[2]);
		astc_bit_transfer_signed(&v[5], &v[4]);
		int a0 = 255, a1 = 255;
		if (cem == 13) {
			astc_bit_transfer_signed(&v[7], &v[6]);
			a0 = v[6];
			a1 = v[6] + v[7];
		}
		if (v[1] + v[3] + v[5] >= 0) {
			astc_set4(e0, v[0], v[2], v[4], a0);
			astc_set4(e1, v[0] + v[1], v[2] + v[3], v[4] + v[5], a1);
		} else {
			astc_set4_bc(e0, v[0] + v[1], v[2] + v[3], v[4] + v[5], a1);
			astc_set4_bc(e1, v[0], v[2], v[4], a0);
		}
		break;
	}
	case 10:
		astc_set4(e0, (vin[0] * vin[3]) >> 8, (vin[1] * vin[3]) >> 8, (vin[2] * vin[3]) >> 8, vin[4]);
		astc_set4(e1, vin[0], vin[1], vin[2], vin[5]);
		return 1;
	default:
		return 0;
	}
	for (int c = 0; c < 4; c++) {
		e0[c] = astc_clamp255(e0[c]);
		e1[c] = astc_clamp255(e1[c]);
	}
	return 1;
}

/* ---- texel output ---------------------------------------------------------------------- */

/* A UNORM16 LDR result as 8 bits, the way astcenc writes a linear 8-bit image: to FP16
 * rounding towards zero (11 significant bits; 65535 is exactly 1.0), then times 255,
 * rounded to nearest. */
KILN_HD uint8_t astc_unorm16_to_u8(uint32_t c)
{
	if (c >= 65535u)
		return 255;
	uint32_t t = c;
	if (t >= 2048u) {
		int top = 11;
		while ((t >> (top + 1)) != 0)
			top++;
		t &= ~((1u << (top - 10)) - 1u);
	}
	return (uint8_t)((t * 255u + 32768u) >> 16);
}

/* One channel interpolated from 8-bit endpoints with weight w (0..64). */
KILN_HD uint8_t astc_interpolate(int e0, int e1, int w, int srgb)
{
	if (srgb) {
		uint32_t c0 = ((uint32_t)e0 << 8) | 0x80u, c1 = ((uint32_t)e1 << 8) | 0x80u;
		return (uint8_t)(((c0 * (uint32_t)(64 - w) + c1 * (uint32_t)w + 32u) >> 6) >> 8);
	}
	uint32_t c0 = (uint32_t)e0 * 257u, c1 = (uint32_t)e1 * 257u;
	return astc_unorm16_to_u8((c0 * (uint32_t)(64 - w) + c1 * (uint32_t)w + 32u) >> 6);
}

/* ---- the decoded form of a block ------------------------------------------------------- */

enum { ASTC_KIND_ERROR = 0, ASTC_KIND_VOID = 1, ASTC_KIND_NORMAL = 2 };

/* A block with its fields decoded: what the encoder builds and the packer serialises,
 * and what the unpacker gives the texel decoder. Weights are codes of wrange in grid
 * raster order, plane 1 (dual plane) right after plane 0's grid: the 64 a block can hold
 * in all, as the specification bounds them, so that a copy moves no second 64-byte plane
 * that most blocks leave unused (medium 4x4 on an H100 2.7% faster than with weights[2][64],
 * docs/PERFORMANCE.md); colour values are codes of crange. */
typedef struct astc_symbolic {
	KILN_ALIGN16 uint8_t kind; /* 16-byte aligned for astc_symbolic_copy */
	uint8_t partitions;   /* 1..4 */
	uint8_t crange;       /* colour range */
	uint8_t ccs;          /* dual plane: the channel of plane 1 */
	uint16_t seed;        /* partition seed 0..1023 */
	uint16_t void_color[4];
	astc_mode mode;
	uint32_t block_mode;  /* the 11-bit field */
	uint8_t cem[4];
	uint8_t colors[ASTC_MAX_VALUES];
	uint8_t weights[ASTC_MAX_WEIGHTS];
} astc_symbolic;

/* *d = *s. A struct assignment between two of a GPU thread's local-memory copies became a
 * load and a store per word, each store waiting for its load: 44 waits on local memory a
 * copy, 19% of the ASTC kernel's stall samples at medium 4x4 (ncu, docs/PERFORMANCE.md).
 * Here the loads of 64 bytes go out before their stores. */
KILN_HD void astc_symbolic_copy(astc_symbolic *d, const astc_symbolic *s)
{
#ifdef __CUDA_ARCH__
	enum { PIECES = sizeof(astc_symbolic) / 16, BATCH = 4 };
	static_assert(sizeof(astc_symbolic) % 16 == 0, "astc_symbolic is whole 16-byte pieces");
	const uint4 *from = (const uint4 *)s;
	uint4 *to = (uint4 *)d;
#pragma unroll
	for (int k = 0; k < PIECES; k += BATCH) {
		uint4 v[BATCH];
#pragma unroll
		for (int j = 0; j < BATCH; j++)
			if (k + j < PIECES)
				v[j] = from[k + j];
#pragma unroll
		for (int j = 0; j < BATCH; j++)
			if (k + j < PIECES)
				to[k + j] = v[j];
	}
#else
	*d = *s;
#endif
}

/* Bits above the colour data taken by extra CEM bits (multi-partition, mixed modes). */
KILN_HD int astc_extra_cem_bits(int partitions, int mixed)
{
	return partitions > 1 && mixed ? 3 * partitions - 4 : 0;
}

/* Parses 16 bytes into s. Illegal encodings give kind ASTC_KIND_ERROR. */
KILN_HD void astc_unpack(const uint8_t *blk, int bw, int bh, astc_symbolic *s)
{
	uint32_t mode = astc_bits_get(blk, 0, 11, 128);
	s->kind = ASTC_KIND_ERROR;
	if ((mode & 0x1FFu) == 0x1FCu) {
		if (mode & 0x200u)
			return; /* HDR void extent: the error colour in LDR */
		if (astc_bits_get(blk, 10, 2, 128) != 3u)
			return; /* bits 10 and 11 are fixed ones */
		uint32_t s0 = astc_bits_get(blk, 12, 13, 128), s1 = astc_bits_get(blk, 25, 13, 128);
		uint32_t t0 = astc_bits_get(blk, 38, 13, 128), t1 = astc_bits_get(blk, 51, 13, 128);
		int all_ones = s0 == 0x1FFFu && s1 == 0x1FFFu && t0 == 0x1FFFu && t1 == 0x1FFFu;
		if (!all_ones && (s0 >= s1 || t0 >= t1))
			return;
		for (int c = 0; c < 4; c++)
			s->void_color[c] = (uint16_t)astc_bits_get(blk, 64 + 16 * c, 16, 128);
		s->kind = ASTC_KIND_VOID;
		return;
	}
	if (!astc_mode_decode(mode, bw, bh, &s->mode))
		return;
	s->block_mode = mode;
	int parts = (int)astc_bits_get(blk, 11, 2, 128) + 1;
	if (parts == 4 && s->mode.dual)
		return;
	s->partitions = (uint8_t)parts;
	int wbits = s->mode.weight_bits;
	int below = 128 - wbits; /* first bit above the configuration below the weights */
	int color_pos, config;
	if (parts == 1) {
		s->seed = 0;
		s->cem[0] = (uint8_t)astc_bits_get(blk, 13, 4, 128);
		color_pos = 17;
		config = 17;
	} else {
		s->seed = (uint16_t)astc_bits_get(blk, 13, 10, 128);
		uint32_t field = astc_bits_get(blk, 23, 6, 128);
		color_pos = 29;
		if ((field & 3u) == 0) {
			KILN_ROLLED for (int p = 0; p < parts; p++)
				s->cem[p] = (uint8_t)(field >> 2);
			config = 29;
		} else {
			int extra = astc_extra_cem_bits(parts, 1);
			below -= extra;
			field |= astc_bits_get(blk, below, extra, 128) << 6;
			int base = (int)(field & 3u) - 1;
			KILN_ROLLED for (int p = 0; p < parts; p++) {
				int cls = base + (int)((field >> (2 + p)) & 1u);
				int low = (int)((field >> (2 + parts + 2 * p)) & 3u);
				s->cem[p] = (uint8_t)(cls * 4 + low);
			}
			config = 25 + 3 * parts;
		}
	}
	if (s->mode.dual) {
		below -= 2;
		s->ccs = (uint8_t)astc_bits_get(blk, below, 2, 128);
		config += 2;
	} else {
		s->ccs = 0;
	}
	int values = 0;
	KILN_ROLLED for (int p = 0; p < parts; p++)
		values += astc_cem_values(s->cem[p]);
	if (values > ASTC_MAX_VALUES)
		return;
	int cr = astc_color_range(values, 128 - config - wbits);
	if (cr < 0)
		return;
	s->crange = (uint8_t)cr;
	astc_bise_decode(blk, color_pos, cr, values, s->colors);
	uint8_t rev[16], w[ASTC_MAX_WEIGHTS];
	astc_reverse128(blk, rev);
	int nw = s->mode.grid_w * s->mode.grid_h;
	astc_bise_decode(rev, 0, s->mode.wrange, nw * (s->mode.dual ? 2 : 1), w);
	if (s->mode.dual) {
		KILN_ROLLED for (int i = 0; i < nw; i++) {
			s->weights[i] = w[2 * i];
			s->weights[nw + i] = w[2 * i + 1];
		}
	} else {
		KILN_ROLLED for (int i = 0; i < nw; i++)
			s->weights[i] = w[i];
	}
	s->kind = ASTC_KIND_NORMAL;
}

/* Serialises a NORMAL or VOID symbolic block (fields already legal) into 16 bytes. */
KILN_HD void astc_pack(const astc_symbolic *s, uint8_t *out)
{
	for (int i = 0; i < 16; i++)
		out[i] = 0;
	if (s->kind == ASTC_KIND_VOID) {
		/* constant colour without an extent: every coordinate all ones */
		astc_bits128 v = {{0, 0}};
		astc_bits128_put(&v, 0, 12, 0xDFCu);
		for (int i = 12; i < 64; i += 13)
			astc_bits128_put(&v, i, 13, 0x1FFFu);
		for (int c = 0; c < 4; c++)
			astc_bits128_put(&v, 64 + 16 * c, 16, s->void_color[c]);
		astc_bits128_or(&v, out);
		return;
	}
	int parts = s->partitions;
	int nw = s->mode.grid_w * s->mode.grid_h;
	int below = 128 - s->mode.weight_bits;
	uint8_t w[ASTC_MAX_WEIGHTS];
	if (s->mode.dual) {
		KILN_ROLLED for (int i = 0; i < nw; i++) {
			w[2 * i] = s->weights[i];
			w[2 * i + 1] = s->weights[nw + i];
		}
		nw *= 2;
	} else {
		KILN_ROLLED for (int i = 0; i < nw; i++)
			w[i] = s->weights[i];
	}
	/* the weight stream grows down from bit 127 (astc_reverse128): encoded upwards, then
	 * each word's bits reversed and the words swapped; first, so that the block's other
	 * fields are ORed into the same words */
	astc_bits128 rev = {{0, 0}};
	astc_bise_put(&rev, 0, s->mode.wrange, nw, w);
	astc_bits128 a = {{astc_rev64(rev.w[1]), astc_rev64(rev.w[0])}};
	astc_bits128_put(&a, 0, 11, s->block_mode);
	astc_bits128_put(&a, 11, 2, (uint32_t)(parts - 1));
	int values = 0;
	KILN_ROLLED for (int p = 0; p < parts; p++)
		values += astc_cem_values(s->cem[p]);
	if (parts == 1) {
		astc_bits128_put(&a, 13, 4, s->cem[0]);
		astc_bise_put(&a, 17, s->crange, values, s->colors);
	} else {
		astc_bits128_put(&a, 13, 10, s->seed);
		int mixed = 0;
		KILN_ROLLED for (int p = 1; p < parts; p++)
			mixed |= s->cem[p] != s->cem[0];
		if (!mixed) {
			astc_bits128_put(&a, 23, 6, (uint32_t)s->cem[0] << 2);
		} else {
			/* the lowest class, but at most 2: the field holds base + 1 in 2 bits, and
			 * partitions all of class 3 (of different modes: 12-15) are base 2 with
			 * every class bit set */
			int base = 2;
			KILN_ROLLED for (int p = 0; p < parts; p++)
				base = (s->cem[p] >> 2) < base ? (s->cem[p] >> 2) : base;
			uint32_t field = (uint32_t)base + 1u;
			KILN_ROLLED for (int p = 0; p < parts; p++) {
				field |= (uint32_t)((s->cem[p] >> 2) - base) << (2 + p);
				field |= (uint32_t)(s->cem[p] & 3) << (2 + parts + 2 * p);
			}
			int extra = astc_extra_cem_bits(parts, 1);
			below -= extra;
			astc_bits128_put(&a, 23, 6, field & 0x3Fu);
			astc_bits128_put(&a, below, extra, field >> 6);
		}
		astc_bise_put(&a, 29, s->crange, values, s->colors);
	}
	if (s->mode.dual) {
		below -= 2;
		astc_bits128_put(&a, below, 2, s->ccs);
	}
	astc_bits128_or(&a, out);
}

/* ---- weight infill --------------------------------------------------------------------- */

/* For texel (x, y) of a bw x bh block with a gw x gh grid: the four grid indices and
 * their 4-bit factors (summing to 16) of the specification's bilinear infill. */
typedef struct astc_infill {
	uint8_t idx[4];
	uint8_t fac[4];
} astc_infill_tap;

KILN_HD void astc_infill_texel(int bw, int bh, int gw, int gh, int x, int y, astc_infill_tap *f)
{
	int ds = (1024 + bw / 2) / (bw - 1), dt = (1024 + bh / 2) / (bh - 1);
	int gs = (ds * x * (gw - 1) + 32) >> 6, gt = (dt * y * (gh - 1) + 32) >> 6;
	int js = gs >> 4, fs = gs & 15, jt = gt >> 4, ft = gt & 15;
	int w11 = (fs * ft + 8) >> 4;
	int v0 = js + jt * gw;
	/* factors of zero may point past the grid's edge: keep those indices in range */
	f->idx[0] = (uint8_t)v0;
	f->idx[1] = (uint8_t)(js + 1 < gw ? v0 + 1 : v0);
	f->idx[2] = (uint8_t)(jt + 1 < gh ? v0 + gw : v0);
	f->idx[3] = (uint8_t)(js + 1 < gw && jt + 1 < gh ? v0 + gw + 1 : v0);
	f->fac[0] = (uint8_t)(16 - fs - ft + w11);
	f->fac[1] = (uint8_t)(fs - w11);
	f->fac[2] = (uint8_t)(ft - w11);
	f->fac[3] = (uint8_t)w11;
}

/* Unquantised grid weights (0..64) -> the weight of every texel. */
KILN_HD void astc_infill(int bw, int bh, int gw, int gh, const uint8_t *grid, uint8_t *texel)
{
	if (gw == bw && gh == bh) {
		KILN_ROLLED for (int i = 0; i < bw * bh; i++)
			texel[i] = grid[i];
		return;
	}
	KILN_ROLLED for (int y = 0; y < bh; y++) {
		KILN_ROLLED for (int x = 0; x < bw; x++) {
			astc_infill_tap f;
			astc_infill_texel(bw, bh, gw, gh, x, y, &f);
			int sum = 8;
			for (int k = 0; k < 4; k++)
				sum += grid[f.idx[k]] * f.fac[k];
			texel[y * bw + x] = (uint8_t)(sum >> 4);
		}
	}
}

/* ---- decoding a block to texels -------------------------------------------------------- */

/* Texels of a symbolic block as RGBA8, row-major bw x bh (4 bytes each). */
KILN_HD void astc_decode_symbolic(const astc_symbolic *s, int bw, int bh, int srgb, uint8_t *out)
{
	int n = bw * bh;
	if (s->kind == ASTC_KIND_VOID) {
		uint8_t c[4];
		for (int k = 0; k < 4; k++)
			c[k] = srgb ? (uint8_t)(s->void_color[k] >> 8) : astc_unorm16_to_u8(s->void_color[k]);
		KILN_ROLLED for (int i = 0; i < n; i++)
			for (int k = 0; k < 4; k++)
				out[4 * i + k] = c[k];
		return;
	}
	if (s->kind != ASTC_KIND_NORMAL) {
		KILN_ROLLED for (int i = 0; i < n; i++) {
			out[4 * i + 0] = 255;
			out[4 * i + 1] = 0;
			out[4 * i + 2] = 255;
			out[4 * i + 3] = 255;
		}
		return;
	}
	int e[4][2][4], ok[4];
	int pos = 0;
	KILN_ROLLED for (int p = 0; p < s->partitions; p++) {
		uint8_t v[8];
		int nv = astc_cem_values(s->cem[p]);
		KILN_ROLLED for (int i = 0; i < nv; i++)
			v[i] = astc_color_unquant[s->crange][s->colors[pos + i]];
		pos += nv;
		ok[p] = astc_decode_endpoints(s->cem[p], v, e[p][0], e[p][1]);
	}
	int gw = s->mode.grid_w, gh = s->mode.grid_h, ng = gw * gh;
	/* grid zeroed: gcc cannot see that a normal block's mode always has weights */
	uint8_t grid[ASTC_MAX_WEIGHTS] = {0}, w0[ASTC_MAX_TEXELS], w1[ASTC_MAX_TEXELS];
	KILN_ROLLED for (int i = 0; i < ng; i++)
		grid[i] = astc_weight_unquant[s->mode.wrange][s->weights[i]];
	astc_infill(bw, bh, gw, gh, grid, w0);
	if (s->mode.dual) {
		KILN_ROLLED for (int i = 0; i < ng; i++)
			grid[i] = astc_weight_unquant[s->mode.wrange][s->weights[ng + i]];
		astc_infill(bw, bh, gw, gh, grid, w1);
	}
	KILN_ROLLED for (int y = 0; y < bh; y++) {
		KILN_ROLLED for (int x = 0; x < bw; x++) {
			int i = y * bw + x;
			int p = astc_partition(s->seed, x, y, s->partitions, n);
			uint8_t *o = out + 4 * i;
			if (!ok[p]) {
				/* astcenc gives HDR endpoints in LDR the UNORM16 colour
				 * (0xFF00, 0, 0xFF00, 0xFF00): 254 in linear 8-bit output */
				uint8_t m = srgb ? 255 : astc_unorm16_to_u8(0xFF00u);
				o[0] = m;
				o[1] = 0;
				o[2] = m;
				o[3] = m;
				continue;
			}
			for (int k = 0; k < 4; k++) {
				int w = s->mode.dual && k == s->ccs ? w1[i] : w0[i];
				o[k] = astc_interpolate(e[p][0][k], e[p][1][k], w, srgb);
			}
		}
	}
}

KILN_HD void astc_decode_block(const uint8_t *blk, int bw, int bh, int srgb, uint8_t *out)
{
	astc_symbolic s;
	astc_unpack(blk, bw, bh, &s);
	astc_decode_symbolic(&s, bw, bh, srgb, out);
}

#endif
