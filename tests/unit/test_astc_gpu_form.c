/* The ASTC search in the form the GPU builds it (astc_enc.h's ASTC_ENC_CPU_SHORTCUTS 0: the
 * exact shortcuts the CPU takes left out) gives the CPU backend's bytes. The GPU's output
 * is compared with the CPU's by `make test-gpu`; this runs the GPU's form of the search on
 * the CPU, so that CI (no GPU) sees a shortcut that stops being exact. One translation
 * unit of its own: the encoder's functions are static here, built with the setting. */
#define ASTC_ENC_CPU_SHORTCUTS 0

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "astc_testutil.h"
#include "kernels/astc/astc_enc.h"

/* Every block of img at footprint bw x bh, quality q, through astc_encode_block as built
 * here against kiln_astc_encode_cpu; returns the blocks that differ. */
static int differing_blocks(const kiln_image *img, uint32_t bw, uint32_t bh, kiln_quality q, int srgb)
{
	uint8_t *want;
	size_t size;
	astc_test_encode(img, bw, bh, q, srgb, NULL, &want, &size);
	kiln_surface s = {img->pixels, img->width, img->height, (uint32_t)img->stride, img->has_alpha};
	const astc_enc_ctx *ctx = astc_enc_context(kiln_astc_footprint_index(bw, bh));
	uint32_t bx_n = (img->width + bw - 1) / bw, by_n = (img->height + bh - 1) / bh;
	int differ = 0;
	for (uint32_t by = 0; by < by_n; by++)
		for (uint32_t bx = 0; bx < bx_n; bx++) {
			astc_enc_block blk;
			uint8_t got[16];
			astc_enc_load(&s, bx, by, (int)bw, (int)bh, srgb, &blk);
			astc_encode_block(ctx, &blk, (int)q, got);
			differ += memcmp(got, want + 16 * ((size_t)by * bx_n + bx), 16) != 0;
		}
	free(want);
	return differ;
}

/* Footprints on both sides of ASTC_ENC_GPU_CACHE_TEXELS and of the GPU's runs, every
 * preset, RGB (linear) and RGBA (sRGB) crops of two Kodak images: 3 and 4 partitions
 * (medium, high) take the pattern match, every search the ranking. */
Test(astc_gpu_form, gives_the_cpu_backends_bytes, .timeout = 300)
{
	static const uint8_t footprints[][2] = {{4, 4}, {6, 5}, {8, 8}, {10, 8}, {12, 12}};
	static const kiln_quality qualities[] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};
	static const char *images[] = {"kodim13.png", "kodim23.png"};
	for (int im = 0; im < 2; im++)
		for (int alpha = 0; alpha < 2; alpha++) {
			kiln_image img;
			astc_test_kodak_crop(images[im], 200, 120, 48, 40, alpha, &img);
			for (size_t f = 0; f < sizeof footprints / sizeof footprints[0]; f++)
				for (size_t qi = 0; qi < sizeof qualities / sizeof qualities[0]; qi++)
					cr_expect_eq(differing_blocks(&img, footprints[f][0], footprints[f][1], qualities[qi], alpha),
						     0, "%s %s %ux%u quality %d: blocks differ", images[im],
						     alpha ? "RGBA sRGB" : "RGB", footprints[f][0], footprints[f][1],
						     (int)qualities[qi]);
			kiln_image_free(&img);
		}
}
