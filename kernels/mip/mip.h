/* Mip chains: each level half the size of the one above (rounding down, at least 1),
 * down to 1x1. Colour is filtered in linear light when the image is sRGB, alpha always
 * linearly. CPU and GPU backends run the same per-texel functions (mip_texel.h), so
 * their levels are byte-identical. */
#ifndef KILN_MIP_H
#define KILN_MIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

/* One image's chain. levels[0] is the source; levels[1..count-1] are written. Each level
 * i >= 1 must be max(1, w0 >> i) x max(1, h0 >> i) with caller-owned storage. */
typedef struct kiln_mip_chain {
	kiln_surface *levels;
	uint32_t count;
	bool srgb;
} kiln_mip_chain;

/* Device scratch bytes kiln_mip_build_gpu needs for nchains chains of at most max_levels. */
size_t kiln_mip_temp_size(size_t nchains, uint32_t max_levels);

/* Fills levels 1.. of every chain (host memory). */
kiln_status kiln_mip_build_cpu(const kiln_mip_chain *chains, size_t nchains, kiln_pool *pool);

/* The same on the current GPU; level pointers are device memory, the chain array and the
 * levels arrays are host memory. Queues the work on `stream` and returns. */
kiln_status kiln_mip_build_gpu(const kiln_mip_chain *chains, size_t nchains, void *d_temp,
			       size_t temp_size, kiln_stream stream);

#endif
