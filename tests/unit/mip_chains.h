/* Host mip chains for the mip tests (tests/unit/test_mip.c and tests/gpu/test_mip_gpu.c):
 * every level allocated for a base size, optional row padding so that strides other than
 * 4 * width are exercised, and a seeded pseudo-random fill of level 0. */
#ifndef KILN_TEST_MIP_CHAINS_H
#define KILN_TEST_MIP_CHAINS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/texture.h"
#include "kernels/mip/mip.h"

#define TEST_MIP_MAX_LEVELS 32

typedef struct test_chain {
	kiln_mip_chain chain;
	kiln_surface levels[TEST_MIP_MAX_LEVELS];
	uint8_t *pixels[TEST_MIP_MAX_LEVELS];
} test_chain;

static inline void test_chain_free(test_chain *tc)
{
	for (uint32_t i = 0; i < TEST_MIP_MAX_LEVELS; i++)
		free(tc->pixels[i]);
	memset(tc, 0, sizeof *tc);
}

/* The full chain of a w x h base, rows of 4 * width + pad bytes, zeroed. false if out of
 * memory (then tc is empty). */
static inline bool test_chain_alloc(test_chain *tc, uint32_t w, uint32_t h, uint32_t pad, bool srgb)
{
	memset(tc, 0, sizeof *tc);
	tc->chain.levels = tc->levels;
	tc->chain.count = kiln_mip_count(w, h);
	tc->chain.srgb = srgb;
	for (uint32_t i = 0; i < tc->chain.count; i++) {
		kiln_surface *s = &tc->levels[i];
		s->width = w;
		s->height = h;
		s->stride = 4 * w + pad;
		s->has_alpha = 1;
		tc->pixels[i] = calloc((size_t)s->stride * h, 1);
		if (!tc->pixels[i]) {
			test_chain_free(tc);
			return false;
		}
		s->rgba = tc->pixels[i];
		w = w > 1 ? w / 2 : 1;
		h = h > 1 ? h / 2 : 1;
	}
	return true;
}

/* Writes texel (x, y) of level 0. */
static inline void test_chain_set(test_chain *tc, uint32_t x, uint32_t y, const uint8_t rgba[4])
{
	memcpy(tc->pixels[0] + (size_t)y * tc->levels[0].stride + (size_t)x * 4, rgba, 4);
}

static inline const uint8_t *test_chain_texel(const test_chain *tc, uint32_t level, uint32_t x,
					      uint32_t y)
{
	return tc->pixels[level] + (size_t)y * tc->levels[level].stride + (size_t)x * 4;
}

/* Level 0 filled with seeded noise over a smooth gradient (padding bytes too, which the
 * filter must never read into a result). */
static inline void test_chain_random(test_chain *tc, uint32_t seed)
{
	const kiln_surface *s = &tc->levels[0];
	uint32_t r = seed * 2654435761u + 12345u;
	for (uint32_t y = 0; y < s->height; y++) {
		uint8_t *row = tc->pixels[0] + (size_t)y * s->stride;
		for (uint32_t i = 0; i < s->stride; i++) {
			r = r * 1103515245u + 12345u;
			uint32_t ramp = (i / 4) * 160u / s->width + y * 64u / s->height;
			row[i] = (uint8_t)(ramp + ((r >> 16) & 0x3f));
		}
	}
}

/* true when every level of a and b holds the same texels (padding ignored). */
static inline bool test_chain_equal(const test_chain *a, const test_chain *b, uint32_t *bad_level)
{
	for (uint32_t l = 0; l < a->chain.count; l++) {
		const kiln_surface *s = &a->levels[l];
		for (uint32_t y = 0; y < s->height; y++) {
			if (memcmp(test_chain_texel(a, l, 0, y), test_chain_texel(b, l, 0, y),
				   (size_t)s->width * 4) != 0) {
				*bad_level = l;
				return false;
			}
		}
	}
	return true;
}

#endif
