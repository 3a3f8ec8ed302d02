#!/usr/bin/env python3
"""Writes kernels/astc/astc_tables.h: the constant tables of the ASTC codec.

Every entry follows from the ASTC chapter of the Khronos Data Format Specification
(integer sequence encoding, endpoint and weight unquantisation); the encoder needs them
inverted (value -> nearest code, trits/quints -> packed byte), which is what the tables
hold. tests/unit/test_astc.c recomputes each table from the specification's procedures,
written a second time in C, and compares.

    python3 tools/gen_astc_tables.py > kernels/astc/astc_tables.h
"""

# The 21 ranges of integer sequence encoding, in the order ASTC numbers them:
# (levels, trits, quints, bits). Weights use the first 12.
RANGES = [
    (2, 0, 0, 1), (3, 1, 0, 0), (4, 0, 0, 2), (5, 0, 1, 0), (6, 1, 0, 1), (8, 0, 0, 3),
    (10, 0, 1, 1), (12, 1, 0, 2), (16, 0, 0, 4), (20, 0, 1, 2), (24, 1, 0, 3), (32, 0, 0, 5),
    (40, 0, 1, 3), (48, 1, 0, 4), (64, 0, 0, 6), (80, 0, 1, 4), (96, 1, 0, 5), (128, 0, 0, 7),
    (160, 0, 1, 5), (192, 1, 0, 6), (256, 0, 0, 8),
]


def bit(v, i):
    return (v >> i) & 1


def trit_decode(t):
    """The five trits packed in byte t (the specification's bit procedure)."""
    if (t >> 2) & 7 == 7:
        c = ((t >> 5) & 7) << 2 | (t & 3)
        t4 = t3 = 2
    else:
        c = t & 0x1F
        if (t >> 5) & 3 == 3:
            t4, t3 = 2, bit(t, 7)
        else:
            t4, t3 = bit(t, 7), (t >> 5) & 3
    if c & 3 == 3:
        t2, t1 = 2, bit(c, 4)
        t0 = bit(c, 3) << 1 | (bit(c, 2) & (1 - bit(c, 3)))
    elif (c >> 2) & 3 == 3:
        t2, t1, t0 = 2, 2, c & 3
    else:
        t2, t1 = bit(c, 4), (c >> 2) & 3
        t0 = bit(c, 1) << 1 | (bit(c, 0) & (1 - bit(c, 1)))
    return (t0, t1, t2, t3, t4)


def quint_decode(q):
    """The three quints packed in the 7 bits q."""
    if (q >> 1) & 3 == 3 and (q >> 5) & 3 == 0:
        q2 = bit(q, 0) << 2 | (bit(q, 4) & (1 - bit(q, 0))) << 1 | (bit(q, 3) & (1 - bit(q, 0)))
        return (4, 4, q2)
    if (q >> 1) & 3 == 3:
        q2 = 4
        c = ((q >> 3) & 3) << 3 | ((~q >> 5) & 3) << 1 | bit(q, 0)
    else:
        q2 = (q >> 5) & 3
        c = q & 0x1F
    if c & 7 == 5:
        q1, q0 = 4, (c >> 3) & 3
    else:
        q1, q0 = (c >> 3) & 3, c & 7
    return (q0, q1, q2)


# Bits of the packed byte that the stream holds when only the first k values of a group
# are present (the others are read as zero): the encoder must leave the rest zero.
TRIT_PREFIX = {1: 2, 2: 4, 3: 5, 4: 7, 5: 8}
QUINT_PREFIX = {1: 3, 2: 5, 3: 7}


def pick_encodings(count, base, width, decode, prefix):
    """For every tuple (index sum v_i base^i), the smallest packed value decoding to it;
    for tuples whose tail is zero, it must also fit the bits the shorter group keeps."""
    table = []
    for idx in range(base ** count):
        want = tuple((idx // base ** i) % base for i in range(count))
        last = max([i + 1 for i in range(count) if want[i]] or [1])
        keep = prefix[last]
        found = [p for p in range(1 << width) if decode(p) == want]
        fit = [p for p in found if p >> keep == 0]
        assert fit, (want, found)
        table.append(min(fit))
    return table


def unquant_color(rng, code):
    levels, trits, quints, bits = RANGES[rng]
    if rng in (1, 3):
        # 0..2 and 0..4 never carry endpoints (a block needs at least 0..5); spread evenly
        # so the tables stay total.
        return (code * 255 * 2 + levels - 1) // (2 * (levels - 1))
    if not trits and not quints:
        v = code << (8 - bits)
        s = bits
        while s < 8:
            v |= v >> s
            s *= 2
        return v & 0xFF
    d = code >> bits
    m = code & ((1 << bits) - 1)
    a = 0x1FF if m & 1 else 0
    b_, c_ = bit(m, 1), bit(m, 2)
    d_, e_, f_ = bit(m, 3), bit(m, 4), bit(m, 5)
    if trits:
        C = {1: 204, 2: 93, 3: 44, 4: 22, 5: 11, 6: 5}[bits]
        B = {1: 0,
             2: b_ << 8 | b_ << 4 | b_ << 2 | b_ << 1,
             3: c_ << 8 | b_ << 7 | c_ << 3 | b_ << 2 | c_ << 1 | b_,
             4: d_ << 8 | c_ << 7 | b_ << 6 | d_ << 2 | c_ << 1 | b_,
             5: e_ << 8 | d_ << 7 | c_ << 6 | b_ << 5 | e_ << 1 | d_,
             6: f_ << 8 | e_ << 7 | d_ << 6 | c_ << 5 | b_ << 4 | f_}[bits]
    else:
        C = {1: 113, 2: 54, 3: 26, 4: 13, 5: 6}[bits]
        B = {1: 0,
             2: b_ << 8 | b_ << 3 | b_ << 2,
             3: c_ << 8 | b_ << 7 | c_ << 2 | b_ << 1 | c_,
             4: d_ << 8 | c_ << 7 | b_ << 6 | d_ << 1 | c_,
             5: e_ << 8 | d_ << 7 | c_ << 6 | b_ << 5 | e_}[bits]
    t = d * C + B
    t ^= a
    return (a & 0x80) | (t >> 2)


def unquant_weight(rng, code):
    levels, trits, quints, bits = RANGES[rng]
    if not trits and not quints:
        v = code << (6 - bits)
        s = bits
        while s < 6:
            v |= v >> s
            s *= 2
        t = v & 0x3F
    elif bits == 0:
        t = {3: [0, 32, 63], 5: [0, 16, 32, 47, 63]}[levels][code]
    else:
        d = code >> bits
        m = code & ((1 << bits) - 1)
        a = 0x7F if m & 1 else 0
        b_, c_ = bit(m, 1), bit(m, 2)
        if trits:
            C = {1: 50, 2: 23, 3: 11}[bits]
            B = {1: 0, 2: b_ << 6 | b_ << 2 | b_, 3: c_ << 6 | b_ << 5 | c_ << 1 | b_}[bits]
        else:
            C = {1: 28, 2: 13}[bits]
            B = {1: 0, 2: b_ << 6 | b_ << 1}[bits]
        t = d * C + B
        t ^= a
        t = (a & 0x20) | (t >> 2)
    return t + 1 if t > 32 else t


def nearest(values, target):
    """Code whose value is nearest; ties to the smaller value, then the lower code."""
    return min(range(len(values)), key=lambda c: (abs(values[c] - target), values[c], c))


def emit(name, ctype, rows, width, per_line=16):
    out = []
    dims = "".join("[%d]" % d for d in ([len(rows), width] if isinstance(rows[0], list) else [len(rows)]))
    out.append("ASTC_TABLE %s %s%s = {" % (ctype, name, dims))
    def line(vals):
        for i in range(0, len(vals), per_line):
            out.append("\t" + " ".join("%d," % v for v in vals[i:i + per_line]))
    if isinstance(rows[0], list):
        for r in rows:
            out.append("\t{")
            line(r + [0] * (width - len(r)))
            out.append("\t},")
    else:
        line(rows)
    out.append("};")
    return "\n".join(out)


def main():
    trit_enc = pick_encodings(5, 3, 8, trit_decode, TRIT_PREFIX)
    quint_enc = pick_encodings(3, 5, 7, quint_decode, QUINT_PREFIX)
    cu = [[unquant_color(r, c) for c in range(RANGES[r][0])] for r in range(21)]
    cq = [[nearest(cu[r], v) for v in range(256)] for r in range(21)]
    wu = [[unquant_weight(r, c) for c in range(RANGES[r][0])] for r in range(12)]
    wq = [[nearest(wu[r], v) for v in range(65)] for r in range(12)]
    print("""/* Constant tables of the ASTC codec, shared by the CPU and CUDA backends (global memory
 * there). Generated by tools/gen_astc_tables.py from the procedures of the ASTC
 * specification; tests/unit/test_astc.c recomputes every entry and compares. */
#ifndef KILN_ASTC_TABLES_H
#define KILN_ASTC_TABLES_H

#include <stdint.h>

#include "kernels/kiln_hd.h"

/* Read by __host__ __device__ functions: a host array in the host pass, global memory in
 * the device pass. The encoder's threads each index them with their
 * own block's values, which constant memory serves one address at a time (a warp's
 * different indices queue one behind another) and the global memory's caches a line at
 * a time: measured on an H100 (batch of 32 Kodak images, kernel only, 2026-11-24), fast
 * 4x4 1,704 -> 1,943 Mpix/s and medium 146.9 -> 154.5 with the tables in global memory. */
#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
#define ASTC_TABLE static __device__ const
#else
#define ASTC_TABLE static const
#endif

/* Packed byte of five trits (index t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4): the smallest byte
 * that decodes to them and whose bits beyond a shorter final group are zero. */""")
    print(emit("astc_trit_enc", "uint8_t", trit_enc, 243))
    print("\n/* Packed 7 bits of three quints (index q0 + 5 q1 + 25 q2), chosen the same way. */")
    print(emit("astc_quint_enc", "uint8_t", quint_enc, 125))
    print("\n/* Colour endpoint code -> value 0..255, per range (unused entries 0). */")
    print(emit("astc_color_unquant", "uint8_t", cu, 256))
    print("\n/* Value 0..255 -> the colour code whose value is nearest (ties: smaller value). */")
    print(emit("astc_color_quant", "uint8_t", cq, 256))
    print("\n/* Weight code -> weight 0..64, per weight range (the first 12 ranges). */")
    print(emit("astc_weight_unquant", "uint8_t", wu, 32))
    print("\n/* Weight 0..64 -> the weight code whose value is nearest (ties: smaller value). */")
    print(emit("astc_weight_quant", "uint8_t", wq, 65, per_line=13))
    print("""
/* The encoder kernel's copies (astc_cuda.cu defines ASTC_TABLES_SHARED before including
 * this): the tables its threads index most, in shared memory, filled by each CTA at the
 * kernel's start (astc_tables_to_shared), and every use of their names in that
 * translation unit's device code reads the copies. Shared memory serves a warp's
 * different indices together (bank conflicts aside) where global memory's caches take a
 * line at a time: measured on an H100 (batch of 32 Kodak images, kernel only,
 * 2026-11-24), fast 4x4 1,948 -> 1,984 Mpix/s, medium 154.6 -> 156.1. */
#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && defined(ASTC_TABLES_SHARED)
__shared__ uint8_t astc_shared_color_unquant[21][256], astc_shared_color_quant[21][256],
	astc_shared_weight_unquant[12][32], astc_shared_weight_quant[12][65];

/* Every thread of the CTA takes part; returns once the copies are complete. */
static __device__ void astc_tables_to_shared(void)
{
	for (unsigned i = threadIdx.x; i < 21 * 256; i += blockDim.x) {
		(&astc_shared_color_unquant[0][0])[i] = (&astc_color_unquant[0][0])[i];
		(&astc_shared_color_quant[0][0])[i] = (&astc_color_quant[0][0])[i];
	}
	for (unsigned i = threadIdx.x; i < 12 * 32; i += blockDim.x)
		(&astc_shared_weight_unquant[0][0])[i] = (&astc_weight_unquant[0][0])[i];
	for (unsigned i = threadIdx.x; i < 12 * 65; i += blockDim.x)
		(&astc_shared_weight_quant[0][0])[i] = (&astc_weight_quant[0][0])[i];
	__syncthreads();
}
#define astc_color_unquant astc_shared_color_unquant
#define astc_color_quant astc_shared_color_quant
#define astc_weight_unquant astc_shared_weight_unquant
#define astc_weight_quant astc_shared_weight_quant
#endif

#endif""")


if __name__ == "__main__":
    main()
