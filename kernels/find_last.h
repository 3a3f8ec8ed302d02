/* The host side's "which item holds index k" search: batches number their blocks (or PNG
 * strips) in one sequence and keep, per item, the index of its first one; the item holding
 * k is the last whose first index is <= k. The CPU backends (kernels/blockbatch.c,
 * kernels/png/png_enc_cpu.c) share this copy; the CUDA kernels have the same search as a
 * template in kernels/cuda_util.cuh (kiln_find_last_le), because C has no templates and
 * the device descriptors' first-index fields are not all uint64_t (mip's are uint32_t). */
#ifndef KILN_FIND_LAST_H
#define KILN_FIND_LAST_H

#include <stddef.h>
#include <stdint.h>

/* Index of the last of n items whose uint64_t first index is <= k: first_key points at item
 * 0's field, and item i's is stride bytes after item i-1's (so `&items[0].field,
 * sizeof items[0]`). The indices ascend and item 0's is <= k; n == 0 gives 0 without a
 * read. */
static inline size_t kiln_find_last_le(const uint64_t *first_key, size_t stride, size_t n, uint64_t k)
{
	const unsigned char *base = (const unsigned char *)first_key;
	size_t lo = 0, hi = n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (*(const uint64_t *)(base + mid * stride) <= k)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

#endif
