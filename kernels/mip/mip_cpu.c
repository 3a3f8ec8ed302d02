/* CPU backend of the mip chains, and the batch checks both backends share. Each level
 * depends on the one above, so levels run in order; within a level index, the rows of
 * that level of every chain form one parallel-for on the pool, so small levels of many
 * chains still keep all threads busy. */
#include "kernels/mip/mip.h"

#include "common/alloc.h"
#include "common/texture.h"
#include "kernels/mip/mip_batch.h"
#include "kernels/mip/mip_texel.h"

static int surface_ok(const kiln_surface *s, uint32_t width, uint32_t height)
{
	return s->rgba && s->width == width && s->height == height &&
	       s->width <= UINT32_MAX / 4 && s->stride >= 4 * s->width;
}

static int chain_ok(const kiln_mip_chain *chain)
{
	if (!chain->levels || chain->count == 0)
		return 0;
	const kiln_surface *base = &chain->levels[0];
	if (base->width == 0 || base->height == 0 || !surface_ok(base, base->width, base->height))
		return 0;
	if (chain->count > kiln_mip_count(base->width, base->height))
		return 0;
	uint32_t w = base->width, h = base->height;
	for (uint32_t i = 1; i < chain->count; i++) {
		w = kiln_mip_next_size(w);
		h = kiln_mip_next_size(h);
		if (!surface_ok(&chain->levels[i], w, h))
			return 0;
	}
	return 1;
}

kiln_status kiln_mip_check(const kiln_mip_chain *chains, size_t nchains)
{
	if (nchains && !chains)
		return KILN_ERR_INVALID_ARG;
	for (size_t c = 0; c < nchains; c++)
		if (!chain_ok(&chains[c]))
			return KILN_ERR_INVALID_ARG;
	return KILN_OK;
}

size_t kiln_mip_temp_size(size_t nchains, uint32_t max_levels)
{
	size_t size;
	if (max_levels < 2)
		return 0;
	/* SIZE_MAX on overflow: no allocation can satisfy it, and the launch would refuse. */
	if (!kiln_size_mul3(nchains, max_levels - 1, sizeof(kiln_mip_job), &size))
		return SIZE_MAX;
	return size;
}

/* One level index of a batch, for the pool: rows are numbered across the chains that
 * have this level, in chain order. */
typedef struct level_work {
	const kiln_mip_chain *chains;
	size_t nchains;
	uint32_t level;
} level_work;

static void filter_row(const kiln_surface *src, const kiln_surface *dst, uint32_t srgb, uint32_t y)
{
	uint8_t *row = (uint8_t *)dst->rgba + (size_t)y * dst->stride;
	for (uint32_t x = 0; x < dst->width; x++)
		kiln_mip_texel(src, x, y, srgb, row + (size_t)x * 4);
}

static void filter_rows(void *ctx, size_t begin, size_t end)
{
	const level_work *work = ctx;
	size_t first = 0;  /* batch-wide number of the current chain's row 0 */
	for (size_t c = 0; c < work->nchains && first < end; c++) {
		const kiln_mip_chain *chain = &work->chains[c];
		if (chain->count <= work->level)
			continue;
		const kiln_surface *dst = &chain->levels[work->level];
		size_t last = first + dst->height;
		for (size_t r = begin > first ? begin : first; r < end && r < last; r++)
			filter_row(&chain->levels[work->level - 1], dst, chain->srgb, (uint32_t)(r - first));
		first = last;
	}
}

kiln_status kiln_mip_build_cpu(const kiln_mip_chain *chains, size_t nchains, kiln_pool *pool)
{
	kiln_status st = kiln_mip_check(chains, nchains);
	if (st != KILN_OK)
		return st;
	uint32_t max_count = 0;
	for (size_t c = 0; c < nchains; c++)
		if (chains[c].count > max_count)
			max_count = chains[c].count;

	for (uint32_t level = 1; level < max_count; level++) {
		level_work work = { chains, nchains, level };
		size_t rows = 0;
		for (size_t c = 0; c < nchains; c++)
			if (chains[c].count > level)
				rows += chains[c].levels[level].height;
		kiln_pool_for(pool, rows, 0, filter_rows, &work);
	}
	return KILN_OK;
}
