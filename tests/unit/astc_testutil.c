/* Kodak crops and whole-image encodes shared by the ASTC tests; see astc_testutil.h. */
#include "astc_testutil.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/png_io.h"
#include "testutil.h"

void astc_test_kodak_crop(const char *name, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
			  int alpha, kiln_image *out)
{
	char path[512], err[200];
	kiln_image src;
	cr_assert_eq(kiln_png_read_file(test_data_path(path, sizeof path, "kodak", name), NULL, &src,
					err, sizeof err), KILN_OK, "%s: %s", path, err);
	cr_assert_eq(kiln_image_alloc(out, w, h, NULL), KILN_OK);
	for (uint32_t y = 0; y < h; y++) {
		memcpy(kiln_image_row(out, y), kiln_image_row(&src, y0 + y) + 4 * x0, 4 * (size_t)w);
		if (!alpha)
			continue;
		for (uint32_t x = 0; x < w; x++) {
			int dx = (int)x - (int)w / 2, dy = (int)y - (int)h / 2;
			int d2 = dx * dx + dy * dy, r = (int)(w < h ? w : h) / 3;
			int a = d2 < r * r ? 255 : (x < w / 4 ? 0 : (int)(x * 255 / w));
			kiln_image_row(out, y)[4 * x + 3] = (uint8_t)a;
		}
	}
	out->has_alpha = alpha != 0;
	kiln_image_free(&src);
}

void astc_test_encode(const kiln_image *img, uint32_t bw, uint32_t bh, kiln_quality q, int srgb,
		      kiln_pool *pool, uint8_t **blocks, size_t *size)
{
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.block_w = bw;
	p.block_h = bh;
	p.quality = q;
	p.srgb = srgb;
	*size = kiln_astc_bound(img->width, img->height, bw, bh);
	cr_assert_gt(*size, 0);
	*blocks = malloc(*size);
	cr_assert_not_null(*blocks);
	kiln_surface s = {img->pixels, img->width, img->height, (uint32_t)img->stride, img->has_alpha};
	kiln_status st = KILN_ERR_IO;
	cr_assert_eq(kiln_astc_encode_cpu(&p, &s, blocks, 1, &st, pool), KILN_OK);
	cr_assert_eq(st, KILN_OK);
}

