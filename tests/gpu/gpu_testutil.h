/* Scaffolding shared by the GPU tests (tests/gpu, make test-gpu): every file used to carry
 * its own copy of the "is there a GPU" check, the Kodak and PngSuite loading, the shell
 * wrapper that runs the kiln binary in a temporary directory and, for the block codecs,
 * the upload of host surfaces to the device; one copy here keeps the files about what they
 * test (the PngSuite listing is tests/pngsuite.h, shared with the unit tests). Failures
 * are Criterion assertions in the calling test. */
#ifndef KILN_TESTS_GPU_TESTUTIL_H
#define KILN_TESTS_GPU_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/image.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"
#include "tests/unit/testutil.h"

/* Fails the test when no GPU is usable (suite names the tests in the message): the GPU
 * binary only runs where a GPU is expected, so a missing one is a failure, never a skip. */
void gpu_test_require(const char *suite);
/* gpu_test_require, then makes GPU 0 current for this thread: for the tests that call the
 * kernels' batch entry points directly (the front ends pick their device themselves). */
void gpu_test_require_device0(const char *suite);

/* The whole file at path in a kiln_buf (kiln_buf_free releases it). */
kiln_buf gpu_test_load(const char *path);
/* Kodak image k (1 to 24) decoded by kiln_png_read_file into *img; returns its pixels as a
 * host surface. */
kiln_surface gpu_test_read_kodak(int k, kiln_image *img);

/* Runs script with /bin/sh after "set -e; kiln=BINARY; data=SHARED_DATA; d=DIR" (dir NULL:
 * a new mktemp -d directory) and removes $d when the script succeeded (a failed run keeps
 * it to look at). Returns system()'s status: 0 when every command succeeded. */
int gpu_test_sh(const char *dir, const char *script);

/* The bytes a codec writes for surface s; ctx is its parameters. */
typedef size_t (*gpu_test_bound_fn)(const kiln_surface *s, const void *ctx);

/* count host output buffers of bound(src[i]) bytes (at least 1) filled with fill. */
uint8_t **gpu_test_outputs(gpu_test_bound_fn bound, const void *ctx, const kiln_surface *src, size_t count,
			   int fill);
void gpu_test_outputs_free(uint8_t **out, size_t count);
/* Index of the first byte where a and b differ, or bytes when they are equal. */
size_t gpu_test_first_diff(const uint8_t *a, const uint8_t *b, size_t bytes);

/* Host surfaces mirrored on the device for a block codec's batch entry point. */
typedef struct gpu_test_surfaces {
	size_t count;
	kiln_surface *dev;  /* the surfaces with device pixels, as the kernel is given them */
	uint8_t **dst;      /* the destinations for the kernel: out[i] + misalign, or NULL */
	uint8_t **out;      /* device outputs of bound + slack bytes, filled with 0x5a */
	uint8_t **px;       /* device pixels (NULL where the surface has none) */
	uint8_t **staged;   /* host rows at the device stride: live until the uploads are synced */
} gpu_test_surfaces;

/* Uploads src[0, count) on stream. A surface with NULL pixels keeps NULL on the device and
 * an empty one gets a pointer that is never read; dst_null[i] (dst_null may be NULL) gives
 * it a NULL destination. misalign shifts every device pointer and stride by that many
 * bytes, so texel loads and block stores take their unaligned paths. */
void gpu_test_surfaces_upload(gpu_test_surfaces *g, const kiln_surface *src, size_t count, gpu_test_bound_fn bound,
			      const void *ctx, size_t slack, int misalign, const int *dst_null, kiln_stream stream);
/* Frees the device and host memory; the stream must be synchronised. */
void gpu_test_surfaces_free(gpu_test_surfaces *g);

/* The batch of the codecs' "a bad surface fails alone" tests: a, b and c twice each, the
 * second a without pixels, the second b 0 x 0 and the second c with a NULL destination
 * (dst_null[5]); expect[i] is the status each surface must get. */
enum { GPU_TEST_BAD_BATCH = 6 };
void gpu_test_bad_batch(kiln_surface a, kiln_surface b, kiln_surface c, kiln_surface src[GPU_TEST_BAD_BATCH],
			int dst_null[GPU_TEST_BAD_BATCH], kiln_status expect[GPU_TEST_BAD_BATCH]);

#endif
