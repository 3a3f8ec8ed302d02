/* kiln_texerr's per-block step, written once for the CPU and the GPU (kiln_hd.h). */
#ifndef KILN_TEXERR_BLOCK_H
#define KILN_TEXERR_BLOCK_H

#include "kernels/astc/astc_block.h"
#include "kernels/bc1/bc1_block.h"
#include "kernels/texerr.h"

/* Blocks of a job's level. */
KILN_HD uint64_t kiln_texerr_blocks(const kiln_texerr_job *j)
{
	return (uint64_t)((j->src.width + j->block_w - 1) / j->block_w) *
	       ((j->src.height + j->block_h - 1) / j->block_h);
}

/* Adds block b's squared error and texel count (the texels inside the level) to *sse, *n. */
KILN_HD void kiln_texerr_block(const kiln_texerr_job *j, uint64_t b, uint64_t *sse, uint64_t *n)
{
	uint32_t bx_count = (j->src.width + j->block_w - 1) / j->block_w;
	uint32_t bx = (uint32_t)(b % bx_count), by = (uint32_t)(b / bx_count);
	uint8_t texels[ASTC_MAX_TEXELS * 4];
	if (j->astc)
		astc_decode_block(j->blocks + b * 16, (int)j->block_w, (int)j->block_h, j->srgb, texels);
	else
		bc1_decode_block(j->blocks + b * 8, j->punch, texels);
	for (uint32_t y = 0; y < j->block_h; y++) {
		uint32_t py = by * j->block_h + y;
		if (py >= j->src.height)
			break;
		for (uint32_t x = 0; x < j->block_w; x++) {
			uint32_t px = bx * j->block_w + x;
			if (px >= j->src.width)
				break;
			const uint8_t *a = j->src.rgba + (size_t)py * j->src.stride + (size_t)px * 4;
			const uint8_t *t = texels + (y * j->block_w + x) * 4;
			if (j->punch && a[3] < j->alpha_cutoff)
				continue;
			for (int c = 0; c < 3; c++) {
				int d = (int)a[c] - (int)t[c];
				*sse += (uint64_t)(d * d);
			}
			(*n)++;
		}
	}
}

#endif
