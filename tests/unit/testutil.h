/* Helpers shared by the unit and GPU tests: where the shared test data and the kiln binary
 * live, the Kodak file names, the tests' pseudo-random numbers and images. No Criterion
 * here, so that anything may include it. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/image.h"

/* ../shared/data relative to the repository root (tests run from there), or $KILN_SHARED. */
static inline const char *test_data_dir(void)
{
	const char *env = getenv("KILN_SHARED");
	return env ? env : "../shared/data";
}

/* Joins test_data_dir()/sub/name into out. */
static inline const char *test_data_path(char *out, size_t cap, const char *sub, const char *name)
{
	snprintf(out, cap, "%s/%s/%s", test_data_dir(), sub, name);
	return out;
}

/* Kodak image k (1 to 24): test_data_dir()/kodak/kodimNN.png into out. */
static inline const char *test_kodak_path(char *out, size_t cap, int k)
{
	char name[32];
	snprintf(name, sizeof name, "kodim%02d.png", k);
	return test_data_path(out, cap, "kodak", name);
}

/* The binary under test: $KILN_BIN (make test sets it; empty counts as unset), else
 * build/kiln. */
static inline const char *test_kiln_bin(void)
{
	const char *bin = getenv("KILN_BIN");
	return bin && *bin ? bin : "build/kiln";
}

/* xorshift32 (*s must not be 0): the same test images on every run, on every machine. */
static inline uint32_t test_xorshift32(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* A w x h image of low-frequency structure plus noise, so that blocks are neither flat nor
 * pure noise; the same pixels for a seed on every run (the texenc tests compare backends
 * on it). false when memory runs out. */
static inline bool test_random_image(kiln_image *img, uint32_t w, uint32_t h, uint32_t seed, bool alpha)
{
	if (kiln_image_alloc(img, w, h, NULL) != KILN_OK)
		return false;
	img->has_alpha = alpha;
	uint32_t s = seed * 2654435761u + 1;
	for (size_t i = 0; i < (size_t)w * h * 4; i++) {
		s = s * 1103515245u + 12345u;
		img->pixels[i] = (uint8_t)((s >> 16) & 0x3f) + (uint8_t)((i / 4 % w) * 191 / (w + 1));
	}
	return true;
}

#endif
