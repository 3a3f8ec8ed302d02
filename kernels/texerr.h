/* The error of encoded texture levels against the pixels they were encoded from, measured
 * where both are: on the GPU for a batch encoded there (its pixels, decoded from PNG on the
 * device or uploaded, never need to come back), on the host for the CPU backend. The
 * metric is the worker's and the bench's PSNR: the squared RGB differences summed over the
 * level's texels, leaving out those that BC1's punch-through alpha made transparent (BC1
 * does not keep their colour); PSNR = 10 log10(255^2 / (sse / (3 texels))). Integer sums:
 * the same on both. */
#ifndef KILN_TEXERR_H
#define KILN_TEXERR_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

/* One level to measure: its source pixels and its blocks (host memory for kiln_texerr_cpu,
 * device memory for kiln_texerr_gpu). */
typedef struct kiln_texerr_job {
	kiln_surface src;
	const uint8_t *blocks;    /* row-major blocks of block_w x block_h texels */
	uint32_t block_w, block_h;
	uint8_t astc;             /* ASTC (16-byte blocks), else BC1 (8-byte blocks) */
	uint8_t srgb;             /* ASTC: decode in sRGB mode */
	uint8_t punch;            /* BC1: punch-through alpha (texels below alpha_cutoff left out) */
	uint8_t alpha_cutoff;
} kiln_texerr_job;

typedef struct kiln_texerr {
	uint64_t sse;    /* summed squared R, G and B differences */
	uint64_t texels; /* texels counted */
} kiln_texerr;

/* out[i] for jobs[i], on the pool's threads (NULL: this one). */
kiln_status kiln_texerr_cpu(const kiln_texerr_job *jobs, size_t count, kiln_texerr *out, kiln_pool *pool);

/* Device scratch kiln_texerr_gpu needs for count jobs. */
size_t kiln_texerr_temp_size(size_t count);

/* Queues the measurement of count jobs on stream: d_out (device memory, count entries) is
 * written once the stream gets there. jobs is host memory, read during the call. */
kiln_status kiln_texerr_gpu(const kiln_texerr_job *jobs, size_t count, kiln_texerr *d_out, void *d_temp,
			    size_t temp_size, kiln_stream stream);

/* RGB PSNR in centi-dB (3657 = 36.57 dB), at most 9900 (99 dB: also a perfect match);
 * false when no texel was counted. */
bool kiln_texerr_psnr(const kiln_texerr *e, int32_t *centi_db);

#endif
