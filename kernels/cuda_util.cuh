// Device helpers shared by the CUDA backends (.cu files only).
#ifndef KILN_CUDA_UTIL_CUH
#define KILN_CUDA_UTIL_CUH

#include <stdint.h>

// The batch descriptor that holds index k of a sequence numbered across a batch (blocks,
// PNG strips): the last of items[0, count) whose first index, items[i].*first, is <= k
// (items[0]'s is <= k, and they never decrease). One search for every kernel, whatever
// its descriptor type and the width of its first-index field; the host backends have the
// same search in kernels/find_last.h (C, no templates).
template <typename Item, typename Field, typename Key>
__device__ static uint32_t kiln_find_last_le(const Item *items, uint32_t count, Field Item::*first, Key k)
{
	uint32_t lo = 0, hi = count;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (items[mid].*first <= k)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

// kiln_find_last_le over the codecs' first_block fields: the descriptor that holds block
// `block` (items[0].first_block is 0, and first_block never decreases).
template <typename Item, typename Block>
__device__ static uint32_t kiln_find_first_block(const Item *items, uint32_t count, Block block)
{
	return kiln_find_last_le(items, count, &Item::first_block, block);
}

#endif
