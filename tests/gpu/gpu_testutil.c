/* Scaffolding shared by the GPU tests; see gpu_testutil.h. */
#include "gpu_testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/png_io.h"

void gpu_test_require(const char *suite)
{
	if (kiln_gpu_count() < 1)
		cr_assert_fail("no usable GPU: the %s tests must run on a machine with an NVIDIA GPU "
			       "(kiln_gpu_count() == 0, built with CUDA: %d)", suite, (int)kiln_gpu_built());
}

void gpu_test_require_device0(const char *suite)
{
	gpu_test_require(suite);
	cr_assert_eq(kiln_gpu_use(0), KILN_OK, "%s", kiln_gpu_last_error());
}

kiln_buf gpu_test_load(const char *path)
{
	kiln_buf b;
	kiln_buf_init(&b, (size_t)1 << 28);
	cr_assert_eq(kiln_buf_read_file(&b, path), KILN_OK, "cannot read %s", path);
	return b;
}

kiln_surface gpu_test_read_kodak(int k, kiln_image *img)
{
	char path[512], err[256] = "";
	test_kodak_path(path, sizeof path, k);
	cr_assert_eq(kiln_png_read_file(path, NULL, img, err, sizeof err), KILN_OK, "%s: %s", path, err);
	kiln_surface s = {img->pixels, img->width, img->height, (uint32_t)img->stride, img->has_alpha};
	return s;
}

int gpu_test_sh(const char *dir, const char *script)
{
	static char cmd[16384];
	int n = snprintf(cmd, sizeof cmd, "set -e; kiln=%s; data=%s; d=%s; %s; rm -rf $d", test_kiln_bin(),
			 test_data_dir(), dir ? dir : "$(mktemp -d)", script);
	cr_assert(n > 0 && (size_t)n < sizeof cmd, "shell command too long");
	return system(cmd);
}

uint8_t **gpu_test_outputs(gpu_test_bound_fn bound, const void *ctx, const kiln_surface *src, size_t count,
			   int fill)
{
	uint8_t **out = calloc(count, sizeof *out);
	cr_assert_not_null(out);
	for (size_t i = 0; i < count; i++) {
		size_t b = bound(&src[i], ctx);
		out[i] = malloc(b ? b : 1);
		cr_assert_not_null(out[i]);
		memset(out[i], fill, b);
	}
	return out;
}

void gpu_test_outputs_free(uint8_t **out, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(out[i]);
	free(out);
}

size_t gpu_test_first_diff(const uint8_t *a, const uint8_t *b, size_t bytes)
{
	for (size_t i = 0; i < bytes; i++)
		if (a[i] != b[i])
			return i;
	return bytes;
}

void gpu_test_surfaces_upload(gpu_test_surfaces *g, const kiln_surface *src, size_t count, gpu_test_bound_fn bound,
			      const void *ctx, size_t slack, int misalign, const int *dst_null, kiln_stream stream)
{
	g->count = count;
	g->dev = calloc(count, sizeof *g->dev);
	g->dst = calloc(count, sizeof *g->dst);
	g->out = calloc(count, sizeof *g->out);
	g->px = calloc(count, sizeof *g->px);
	g->staged = calloc(count, sizeof *g->staged);
	cr_assert(g->dev && g->dst && g->out && g->px && g->staged);
	for (size_t i = 0; i < count; i++) {
		g->dev[i] = src[i];
		size_t size = bound(&src[i], ctx) + slack;
		cr_assert_eq(kiln_gpu_malloc((void **)&g->out[i], size), KILN_OK);
		cr_assert_eq(kiln_gpu_memset(g->out[i], 0x5a, size, stream), KILN_OK);
		g->dst[i] = dst_null && dst_null[i] ? NULL : g->out[i] + misalign;
		if (!src[i].rgba || src[i].width == 0 || src[i].height == 0) {
			g->dev[i].rgba = src[i].rgba ? g->out[i] : NULL; /* never read */
			continue;
		}
		uint32_t stride = src[i].width * 4 + (uint32_t)misalign;
		size_t bytes = (size_t)stride * src[i].height;
		cr_assert_eq(kiln_gpu_malloc((void **)&g->px[i], bytes + 1), KILN_OK);
		/* rows repacked at the device stride on the host first */
		g->staged[i] = calloc(bytes, 1);
		cr_assert_not_null(g->staged[i]);
		for (uint32_t y = 0; y < src[i].height; y++)
			memcpy(g->staged[i] + (size_t)y * stride, src[i].rgba + (size_t)y * src[i].stride, src[i].width * 4);
		cr_assert_eq(kiln_gpu_h2d(g->px[i] + misalign, g->staged[i], bytes, stream), KILN_OK);
		g->dev[i].rgba = g->px[i] + misalign;
		g->dev[i].stride = stride;
	}
}

void gpu_test_surfaces_free(gpu_test_surfaces *g)
{
	for (size_t i = 0; i < g->count; i++) {
		kiln_gpu_free(g->px[i]);
		kiln_gpu_free(g->out[i]);
		free(g->staged[i]);
	}
	free(g->dev);
	free(g->dst);
	free(g->out);
	free(g->px);
	free(g->staged);
	memset(g, 0, sizeof *g);
}

void gpu_test_bad_batch(kiln_surface a, kiln_surface b, kiln_surface c, kiln_surface src[GPU_TEST_BAD_BATCH],
			int dst_null[GPU_TEST_BAD_BATCH], kiln_status expect[GPU_TEST_BAD_BATCH])
{
	const kiln_surface good[3] = {a, b, c};
	for (int i = 0; i < GPU_TEST_BAD_BATCH; i++) {
		src[i] = good[i / 2];
		dst_null[i] = i == 5;
		expect[i] = i % 2 ? KILN_ERR_INVALID_ARG : KILN_OK;
	}
	src[1].rgba = NULL; /* no pixels */
	src[3].width = 0;   /* 0 x 0 */
	src[3].height = 0;
}
