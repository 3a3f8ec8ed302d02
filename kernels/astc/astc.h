/* ASTC (LDR, 2D, every footprint 4x4 ... 12x12) batch encoder and decoder.
 *
 * The batch API follows BC1's (kernels/bc1/bc1.h): the caller sizes every buffer up front
 * (kiln_astc_bound per surface, kiln_astc_temp_size per batch), the encoders never
 * allocate, and each surface gets its own status. The per-block logic lives in
 * astc_block.h (format, decoder) and astc_enc.h (encoder), shared by both backends. */
#ifndef KILN_ASTC_H
#define KILN_ASTC_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

#define KILN_ASTC_BLOCK_BYTES 16

typedef struct kiln_astc_params {
	kiln_quality quality;
	uint32_t block_w, block_h; /* a 2D footprint of the specification (4x4 ... 12x12) */
	/* The texels are sRGB-encoded and will be decoded with sRGB conversion: the encoder
	 * scores its candidates with the sRGB decoder's 8-bit interpolation. */
	int srgb;
} kiln_astc_params;

/* medium, 6x6, linear */
void kiln_astc_params_default(kiln_astc_params *params);

/* The 14 2D footprints of the specification (width, height), smallest first. */
#define KILN_ASTC_FOOTPRINTS 14
extern const uint8_t kiln_astc_footprints[KILN_ASTC_FOOTPRINTS][2];

/* The index of w x h in kiln_astc_footprints; -1 for none. */
int kiln_astc_footprint_index(uint32_t block_w, uint32_t block_h);

/* 1 when w x h is one of the 14 2D footprints of the specification. */
int kiln_astc_footprint_valid(uint32_t block_w, uint32_t block_h);

/* Bytes of ASTC data for a width x height surface (16 per block, partial blocks padded);
 * 0 for an invalid footprint or on overflow. */
size_t kiln_astc_bound(uint32_t width, uint32_t height, uint32_t block_w, uint32_t block_h);

/* Device scratch bytes kiln_astc_encode_gpu needs for a batch of `count` surfaces: about
 * 32 MiB whatever the batch (its lists of blocks for the later stages of the search, 24
 * MiB, and the split stage's keys, 8) and a little per surface. */
size_t kiln_astc_temp_size(size_t count);

/* Encodes count surfaces (host memory) into dst[i] (kiln_astc_bound bytes each), blocks in
 * row-major order. status[i] is KILN_OK or why surface i was refused. Returns KILN_OK when
 * the batch ran, even if some surfaces failed; KILN_ERR_INVALID_ARG for bad parameters.
 * pool may be NULL. */
kiln_status kiln_astc_encode_cpu(const kiln_astc_params *params, const kiln_surface *src,
				 uint8_t *const *dst, size_t count, kiln_status *status,
				 kiln_pool *pool);

/* The same on the current GPU (kernels/astc/astc_cuda.cu): src[i].rgba and dst[i] are
 * device pointers; the arrays src, dst and status are host memory. One kernel launch for
 * the batch, on `stream`: a cooperative launch of as many CTAs as the device holds, which
 * starts once it can have them all; d_temp is device memory of kiln_astc_temp_size(count)
 * bytes.
 * The call returns once the work is queued (the first call for a footprint on a device
 * also copies the encoder's tables there and waits for that copy): synchronise the stream
 * before reading dst. The bytes are kiln_astc_encode_cpu's. Errors from the launch itself
 * return KILN_ERR_CUDA (the caller may then reset the device). */
kiln_status kiln_astc_encode_gpu(const kiln_astc_params *params, const kiln_surface *src,
				 uint8_t *const *dst, size_t count, kiln_status *status,
				 void *d_temp, size_t temp_size, kiln_stream stream);

/* For benchmarks: the GPU kernel (one for every quality) as compiled for the current
 * device: threads per CTA, registers per thread, local (stack) bytes per thread, and CTAs
 * an SM holds (cudaOccupancyMaxActiveBlocksPerMultiprocessor). KILN_ERR_NO_GPU without
 * CUDA. */
kiln_status kiln_astc_gpu_kernel_info(int *threads, int *regs, size_t *local_bytes, int *ctas_per_sm);

/* Decodes the ASTC data of a width x height surface into RGBA8 rows of `stride` bytes, as
 * astcenc decodes to an 8-bit image: `srgb` 0 like `astcenc -dl`, 1 like `astcenc -ds`
 * (values stay sRGB-encoded). Illegal blocks decode to opaque magenta. */
kiln_status kiln_astc_decode(const uint8_t *blocks, size_t size, uint32_t width, uint32_t height,
			     uint32_t block_w, uint32_t block_h, int srgb, uint8_t *rgba,
			     size_t stride);

#endif
