/* See blockbatch.h. */
#include "kernels/blockbatch.h"

#include "kernels/find_last.h"

void kiln_blockbatch_init(kiln_blockbatch *batch, kiln_block_span *span, kiln_block_fn fn,
			  const void *ctx)
{
	batch->span = span;
	batch->count = 0;
	batch->total = 0;
	batch->fn = fn;
	batch->ctx = ctx;
}

void kiln_blockbatch_add(kiln_blockbatch *batch, uint32_t blocks_x, uint64_t blocks)
{
	batch->span[batch->count].first_block = batch->total;
	batch->span[batch->count].blocks_x = blocks_x;
	batch->total += blocks;
	batch->count++;
}

static void run_range(void *arg, size_t begin, size_t end)
{
	const kiln_blockbatch *batch = arg;
	/* the surface of the range's first block; the loop steps on from there */
	size_t si = kiln_find_last_le(&batch->span[0].first_block, sizeof batch->span[0], batch->count, begin);
	for (uint64_t b = begin; b < end; b++) {
		while (si + 1 < batch->count && batch->span[si + 1].first_block <= b)
			si++;
		const kiln_block_span *s = &batch->span[si];
		uint64_t local = b - s->first_block;
		batch->fn(batch->ctx, si, local, (uint32_t)(local % s->blocks_x),
			  (uint32_t)(local / s->blocks_x));
	}
}

void kiln_blockbatch_run(kiln_blockbatch *batch, kiln_pool *pool)
{
	if (batch->count)
		kiln_pool_for(pool, (size_t)batch->total, 0, run_range, batch);
	batch->count = 0;
	batch->total = 0;
}
