/* Kodak crops and whole-image encodes shared by the ASTC tests (test_astc.c,
 * test_astc_gpu_form.c). */
#ifndef KILN_TESTS_ASTC_TESTUTIL_H
#define KILN_TESTS_ASTC_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/image.h"
#include "common/pool.h"
#include "kernels/astc/astc.h"

/* A w x h crop of a Kodak image at (x0, y0); with alpha: a radial mask with a hard edge
 * and a soft ramp, so blocks see opaque, transparent and mixed alpha. */
void astc_test_kodak_crop(const char *name, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, int alpha,
			  kiln_image *out);

/* img encoded by the CPU backend at footprint bw x bh into *blocks (malloc'd, *size bytes);
 * asserts success. */
void astc_test_encode(const kiln_image *img, uint32_t bw, uint32_t bh, kiln_quality q, int srgb, kiln_pool *pool,
		      uint8_t **blocks, size_t *size);

#endif
