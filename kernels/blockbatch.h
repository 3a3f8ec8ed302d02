/* The CPU backends' batch over blocks: the blocks of every valid surface of a batch are
 * numbered in one sequence, and the thread pool runs ranges of that sequence, so small
 * mip levels leave no thread idle. A codec keeps its own surface descriptors and adds
 * one span per descriptor, in the same order; the pool calls `fn` once per block with
 * the descriptor's index. Nothing is allocated: the spans are the caller's array. */
#ifndef KILN_BLOCKBATCH_H
#define KILN_BLOCKBATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/pool.h"

/* Where a surface's blocks start in the sequence, and its width in blocks. */
typedef struct kiln_block_span {
	uint64_t first_block;
	uint32_t blocks_x;
} kiln_block_span;

/* Encodes block (bx, by) of surface `surface`; `local` is by * blocks_x + bx. */
typedef void (*kiln_block_fn)(const void *ctx, size_t surface, uint64_t local, uint32_t bx,
			      uint32_t by);

typedef struct kiln_blockbatch {
	kiln_block_span *span;  /* caller's array, one entry per added surface */
	size_t count;           /* surfaces added */
	uint64_t total;         /* blocks added */
	kiln_block_fn fn;
	const void *ctx;
} kiln_blockbatch;

/* An empty batch over `span` that runs fn(ctx, ...) per block. */
void kiln_blockbatch_init(kiln_blockbatch *batch, kiln_block_span *span, kiln_block_fn fn,
			  const void *ctx);

/* Appends a surface of `blocks` blocks, `blocks_x` a row; it gets index batch->count. */
void kiln_blockbatch_add(kiln_blockbatch *batch, uint32_t blocks_x, uint64_t blocks);

/* Runs every block added so far through the pool, then empties the batch. */
void kiln_blockbatch_run(kiln_blockbatch *batch, kiln_pool *pool);

#endif
