/* The mip filter, one destination texel at a time: written once, compiled by gcc for the
 * CPU backend (mip_cpu.c) and by nvcc for the GPU backend (mip_cuda.cu), so both produce
 * the same bytes (the single-source rule of kiln_hd.h).
 *
 * Filter: an area-weighted box, separable. Along an axis of n source texels, the level
 * below has m = max(1, n / 2) texels; destination texel d covers the source interval
 * [d * n / m, (d + 1) * n / m) and every source texel it overlaps is weighted by the
 * length of the overlap. The intervals tile the source, so every source texel contributes
 * (an odd last column is not dropped) and each destination's weights sum to 1. As integers
 * over a common denominator:
 *   n even:             taps 2d, 2d+1         weights 1, 1             over 2
 *   n = 2k+1, k >= 1:   taps 2d, 2d+1, 2d+2   weights k-d, k, d+1      over n
 *   n = 1:              tap 0                 weight 1                 over 1
 * A texel's 2D weight is the product of its two axis weights.
 *
 * Arithmetic (no libm, no contraction: -ffp-contract=off, nvcc -fmad=false):
 *  - linear channels (alpha always; all four when the chain is not sRGB): exact integer
 *    sum of weight * code, divided by the total weight, rounded half up;
 *  - sRGB colour: codes decoded to linear light by table (srgb_tables.h), summed in float
 *    in a fixed order, divided by the total weight; the result is the code whose linear
 *    value is nearest, found by binary search over the midpoints between neighbouring
 *    codes (a value exactly on a midpoint takes the upper code). */
#ifndef KILN_MIP_TEXEL_H
#define KILN_MIP_TEXEL_H

#include <stdint.h>

#include "kernels/kiln_hd.h"
#include "kernels/mip/srgb_tables.h"

/* nvcc compiles every KILN_HD function twice, for the device and for the host; each pass
 * reads its own copy of the tables (device code cannot read host arrays, nor host code
 * device ones). Under gcc only the host copy exists. */
#ifdef __CUDACC__
static __device__ const float kiln_mip_lin_dev[256] = KILN_SRGB_TO_LINEAR;
static __device__ const float kiln_mip_mid_dev[255] = KILN_LINEAR_MIDPOINTS;
#endif
static const float kiln_mip_lin_host[256] = KILN_SRGB_TO_LINEAR;
static const float kiln_mip_mid_host[255] = KILN_LINEAR_MIDPOINTS;

/* Linear-light value of sRGB code b. */
KILN_HD float kiln_mip_srgb_to_linear(uint32_t b)
{
#ifdef __CUDA_ARCH__
	return kiln_mip_lin_dev[b];
#else
	return kiln_mip_lin_host[b];
#endif
}

/* Midpoint between the linear values of codes k and k + 1 (k < 255). */
KILN_HD float kiln_mip_linear_midpoint(uint32_t k)
{
#ifdef __CUDA_ARCH__
	return kiln_mip_mid_dev[k];
#else
	return kiln_mip_mid_host[k];
#endif
}

/* The sRGB code whose linear value is nearest v: the number of midpoints <= v, by a
 * binary search of fixed depth. (Neighbouring texels of real images take the same path
 * mostly, so the branches predict well: faster on the CPU than a branch-free form.) */
KILN_HD uint8_t kiln_mip_linear_to_srgb(float v)
{
	uint32_t code = 0;
	for (uint32_t step = 128; step != 0; step >>= 1)
		if (kiln_mip_linear_midpoint(code + step - 1) <= v)
			code += step;
	return (uint8_t)code;
}

/* Size of the next level along an axis of n texels. */
KILN_HD uint32_t kiln_mip_next_size(uint32_t n)
{
	return n > 1 ? n / 2 : 1;
}

/* Source texels of one destination index along one axis (see the table above). */
typedef struct kiln_mip_taps {
	uint32_t first;  /* first source index */
	uint32_t n;      /* 1, 2 or 3 taps */
	uint32_t w[3];   /* integer weights */
	uint32_t den;    /* their sum */
} kiln_mip_taps;

KILN_HD void kiln_mip_axis_taps(uint32_t src_n, uint32_t d, kiln_mip_taps *t)
{
	if (src_n == 1) {
		t->first = 0;
		t->n = 1;
		t->w[0] = 1;
		t->den = 1;
	} else if (src_n % 2 == 0) {
		t->first = 2 * d;
		t->n = 2;
		t->w[0] = 1;
		t->w[1] = 1;
		t->den = 2;
	} else {
		/* n = 2k+1 into k: texel d spans [d(2k+1)/k, (d+1)(2k+1)/k), i.e. the tail k-d of
		 * source texel 2d, all of 2d+1, and the head d+1 of 2d+2 (in units of 1/k). */
		uint32_t k = src_n / 2;
		t->first = 2 * d;
		t->n = 3;
		t->w[0] = k - d;
		t->w[1] = k;
		t->w[2] = d + 1;
		t->den = src_n;
	}
}

/* round(sum / den), halves up. The 32-bit path only saves time where the numbers fit
 * (64-bit division is slow on GPUs); both paths give the same quotient. */
KILN_HD uint8_t kiln_mip_div_round(uint64_t sum, uint64_t den)
{
	uint64_t num = sum + den / 2;
	if (num <= 0xffffffffu && den <= 0xffffffffu)
		return (uint8_t)((uint32_t)num / (uint32_t)den);
	return (uint8_t)(num / den);
}

/* Adds one source texel with 2D weight w: into float linear-light sums for sRGB colour,
 * into exact integer sums otherwise. (Channel indices are constants after unrolling, so
 * nvcc keeps the sums in registers.) */
KILN_HD void kiln_mip_accumulate(const uint8_t *p, uint64_t w, uint32_t srgb, uint64_t isum[4],
				 float fsum[3])
{
	float fw = (float)(int64_t)w;  /* signed: one instruction on x86, same value */
	for (uint32_t c = 0; c < 3; c++) {
		if (srgb)
			fsum[c] = fsum[c] + fw * kiln_mip_srgb_to_linear(p[c]);
		else
			isum[c] += w * p[c];
	}
	isum[3] += w * p[3];
}

/* Destination texel (x, y) of the level below src (RGBA8, host or device memory as the
 * caller's backend runs) into out[0..3]. srgb: colour channels are sRGB-encoded. */
KILN_HD void kiln_mip_texel(const kiln_surface *src, uint32_t x, uint32_t y, uint32_t srgb,
			    uint8_t out[4])
{
	kiln_mip_taps tx, ty;
	kiln_mip_axis_taps(src->width, x, &tx);
	kiln_mip_axis_taps(src->height, y, &ty);

	uint64_t isum[4] = { 0, 0, 0, 0 };
	float fsum[3] = { 0.0f, 0.0f, 0.0f };
	/* constant trip counts, so that nvcc unrolls and keeps taps and sums in registers */
	for (uint32_t j = 0; j < 3; j++) {
		if (j >= ty.n)
			break;
		const uint8_t *row = src->rgba + (uint64_t)(ty.first + j) * src->stride +
				     (uint64_t)tx.first * 4;
		for (uint32_t i = 0; i < 3; i++) {
			if (i >= tx.n)
				break;
			kiln_mip_accumulate(row + 4 * i, (uint64_t)tx.w[i] * ty.w[j], srgb, isum, fsum);
		}
	}

	uint64_t den = (uint64_t)tx.den * ty.den;
	float fden = (float)(int64_t)den;
	for (uint32_t c = 0; c < 3; c++)
		out[c] = srgb ? kiln_mip_linear_to_srgb(fsum[c] / fden) : kiln_mip_div_round(isum[c], den);
	out[3] = kiln_mip_div_round(isum[3], den);
}

#endif
