/* BC1 (DXT1) batch encoder and decoder.
 *
 * The batch API follows nvcomp/libdeflate: the caller sizes every buffer up front
 * (kiln_bc1_bound per surface, kiln_bc1_temp_size per batch), the encoders never allocate,
 * and each surface gets its own status so one bad surface never fails the batch.
 * Output is byte-identical between the CPU and GPU backends, at any batch size: both run
 * the per-block functions of bc1_block.h. */
#ifndef KILN_BC1_H
#define KILN_BC1_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

#define KILN_BC1_BLOCK_BYTES 8

typedef struct kiln_bc1_params {
	kiln_quality quality;
	/* For surfaces with has_alpha: texels with alpha below this become transparent
	 * (punch-through, 3-colour mode). 0 keeps every texel opaque. Default 128. */
	int alpha_cutoff;
} kiln_bc1_params;

void kiln_bc1_params_default(kiln_bc1_params *params);

/* Bytes of BC1 data for a width x height surface: 8 per 4x4 block, partial blocks padded. */
size_t kiln_bc1_bound(uint32_t width, uint32_t height);

/* Device scratch bytes kiln_bc1_encode_gpu needs for a batch of `count` surfaces. */
size_t kiln_bc1_temp_size(size_t count);

/* Encodes count surfaces (host memory) into dst[i] (kiln_bc1_bound bytes each), blocks in
 * row-major order. status[i] is KILN_OK or why surface i was refused (bad size, NULL).
 * Returns KILN_OK when the batch ran, even if some surfaces failed. pool may be NULL. */
kiln_status kiln_bc1_encode_cpu(const kiln_bc1_params *params, const kiln_surface *src,
				uint8_t *const *dst, size_t count, kiln_status *status,
				kiln_pool *pool);

/* The same on the current GPU: src[i].rgba and dst[i] are device pointers; the arrays
 * src, dst and status are host memory. One kernel launch for the batch, on `stream`;
 * d_temp is device memory of kiln_bc1_temp_size(count) bytes. The call returns once the
 * work is queued: synchronise the stream before reading dst. Errors from the launch itself
 * return KILN_ERR_CUDA (the caller may then reset the device). */
kiln_status kiln_bc1_encode_gpu(const kiln_bc1_params *params, const kiln_surface *src,
				uint8_t *const *dst, size_t count, kiln_status *status,
				void *d_temp, size_t temp_size, kiln_stream stream);

/* Decodes BC1 data of a width x height surface into RGBA8 rows of `stride` bytes.
 * punch_through: index 3 of 3-colour blocks decodes as transparent black (BC1 RGBA);
 * otherwise as opaque black. */
kiln_status kiln_bc1_decode(const uint8_t *blocks, size_t size, uint32_t width, uint32_t height,
			    int punch_through, uint8_t *rgba, size_t stride);

#endif
