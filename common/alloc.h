/* Checked allocation and overflow-safe size arithmetic. Every size that comes from input
 * (image dimensions, counts in headers) goes through kiln_size_mul/add before it reaches
 * an allocator. */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true and *out = a*b (a+b) when it fits in size_t; false on overflow. */
static inline bool kiln_size_mul(size_t a, size_t b, size_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}
static inline bool kiln_size_add(size_t a, size_t b, size_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}
/* a*b*c, false on overflow. */
static inline bool kiln_size_mul3(size_t a, size_t b, size_t c, size_t *out)
{
	size_t ab;
	return kiln_size_mul(a, b, &ab) && kiln_size_mul(ab, c, out);
}

/* malloc/calloc/realloc that return NULL for size 0 requests too large to be sane, and
 * calloc with overflow checking. Memory is released with free(). */
void *kiln_malloc(size_t size);
void *kiln_calloc(size_t count, size_t size);
void *kiln_realloc(void *ptr, size_t size);
/* count*size with overflow check; NULL on overflow or failure. */
void *kiln_malloc_array(size_t count, size_t size);
char *kiln_strdup(const char *s);

#endif
