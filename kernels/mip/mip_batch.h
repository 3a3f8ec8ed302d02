/* What the two mip backends share on the host side, private to kernels/mip: the check of
 * a batch of chains, and the per-level job descriptor the GPU backend copies into d_temp
 * (its size sets kiln_mip_temp_size, which the CPU file defines). */
#ifndef KILN_MIP_BATCH_H
#define KILN_MIP_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/kiln_hd.h"
#include "kernels/mip/mip.h"

/* Threads per block of the GPU level kernel; one thread per destination texel. */
#define KILN_MIP_GPU_THREADS 256u

/* One level of one chain, as a GPU launch sees it. A launch runs the jobs of one level
 * index of every chain; its blocks are numbered across the jobs, first_block being where
 * this job's blocks start. */
typedef struct kiln_mip_job {
	kiln_surface src;    /* level i-1 */
	uint8_t *dst;        /* level i, dst_w x dst_h = the next size of src */
	uint32_t dst_stride;
	uint32_t srgb;
	uint32_t first_block;
} kiln_mip_job;

/* KILN_OK when every chain is well formed: non-NULL levels and pixels, 1 <= count <=
 * kiln_mip_count(w0, h0), level i of max(1, w0 >> i) x max(1, h0 >> i), strides of at
 * least 4 * width. KILN_ERR_INVALID_ARG otherwise. */
kiln_status kiln_mip_check(const kiln_mip_chain *chains, size_t nchains);

#endif
