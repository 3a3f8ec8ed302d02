// Device helpers shared by the CUDA backends (.cu files only).
#ifndef KILN_CUDA_UTIL_CUH
#define KILN_CUDA_UTIL_CUH

#include <stdint.h>

// The batch descriptor that holds block `block`: the last of items[0, count) whose
// first_block is <= block (items[0].first_block is 0, and first_block never decreases).
template <typename Item, typename Block>
__device__ static uint32_t kiln_find_first_block(const Item *items, uint32_t count, Block block)
{
	uint32_t lo = 0, hi = count;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (items[mid].first_block <= block)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

#endif
