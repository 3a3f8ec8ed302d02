/* Allocation wrappers: one place to refuse overflowing sizes. */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

void *kiln_malloc(size_t size)
{
	return malloc(size ? size : 1);
}

void *kiln_calloc(size_t count, size_t size)
{
	size_t total;
	if (!kiln_size_mul(count, size, &total))
		return NULL;
	return calloc(total ? count : 1, total ? size : 1);
}

void *kiln_realloc(void *ptr, size_t size)
{
	return realloc(ptr, size ? size : 1);
}

void *kiln_malloc_array(size_t count, size_t size)
{
	size_t total;
	if (!kiln_size_mul(count, size, &total))
		return NULL;
	return kiln_malloc(total);
}

char *kiln_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *copy = kiln_malloc(n);
	if (copy)
		memcpy(copy, s, n);
	return copy;
}
