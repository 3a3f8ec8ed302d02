/* PNG files decoded on the GPU inside the encode front end (kiln_texenc_submit_png): the
 * textures are byte-identical with decoding on the host (libpng) and encoding on the CPU,
 * for Kodak and PngSuite files (palette, gray, alpha, 16-bit and interlaced ones take the
 * host path inside the same batch), in batches of 1, 7 and 32; a file whose deflate
 * stream is broken fails alone. Run by make test-gpu. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/png_io.h"
#include "kernels/gpu.h"
#include "kernels/texenc.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/pngsuite.h"
#include "tests/png_breaker.h"

#define MAX_FILES 96

typedef struct corpus {
	kiln_buf files[MAX_FILES];
	char names[MAX_FILES][64];
	size_t n;
} corpus;

static void add_file(corpus *c, const char *dir, const char *name)
{
	char path[512];
	cr_assert_lt(c->n, MAX_FILES);
	c->files[c->n] = gpu_test_load(test_data_path(path, sizeof path, dir, name));
	snprintf(c->names[c->n], sizeof c->names[c->n], "%s", name);
	c->n++;
}

/* Kodak, then every PngSuite file that is not meant to be refused, then a Kodak file whose
 * deflate data is broken behind sound chunk CRCs. */
static void load_corpus(corpus *c)
{
	c->n = 0;
	for (int i = 1; i <= 24; i++) {
		char name[32];
		snprintf(name, sizeof name, "kodim%02d.png", i);
		add_file(c, "kodak", name);
	}
	static pngsuite_list suite;
	pngsuite_list_files(&suite, PNGSUITE_VALID);
	for (size_t i = 0; i < suite.n && c->n < MAX_FILES - 1; i++)
		if (strcmp(suite.names[i], "PngSuite.png") != 0) /* the suite's overview image */
			add_file(c, "pngsuite", suite.names[i]);
	add_file(c, "kodak", "kodim05.png");
	kiln_buf *bad = &c->files[c->n - 1];
	snprintf(c->names[c->n - 1], sizeof c->names[0], "broken-stream");
	cr_assert(png_break_idat(bad->data, bad->len, 100, 37, 0xa5));
}

static void run(kiln_texfmt format, size_t batch)
{
	gpu_test_require("texenc_png_gpu");
	static corpus c;
	load_corpus(&c);
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.format = format;
	opts.quality = KILN_QUALITY_FAST;
	opts.mipmaps = true;
	kiln_device gpu = {KILN_DEVICE_GPU, 0}, cpu = {KILN_DEVICE_CPU, 0};
	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(0, &pool), KILN_OK);
	kiln_texenc *genc, *cenc;
	cr_assert_eq(kiln_texenc_create(&gpu, &opts, NULL, &genc), KILN_OK, "%s", kiln_gpu_last_error());
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &cenc), KILN_OK);
	size_t gpu_decoded = 0;
	for (size_t first = 0; first < c.n; first += batch) {
		size_t n = c.n - first < batch ? c.n - first : batch;
		kiln_texenc_png files[32];
		kiln_image images[32];
		kiln_status dec[32], gst[32], cst[32];
		kiln_texture gtex[32], ctex[32];
		for (size_t i = 0; i < n; i++) {
			kiln_buf *f = &c.files[first + i];
			files[i] = (kiln_texenc_png){.data = f->data, .size = f->len};
			cr_assert_eq(kiln_pngdec_probe(f->data, f->len, NULL, &files[i].info, NULL, 0), KILN_OK, "%s",
				     c.names[first + i]);
			gpu_decoded += files[i].info.gpu_ok;
			dec[i] = kiln_png_decode(f->data, f->len, NULL, &images[i], NULL, 0);
		}
		uint64_t ticket;
		cr_assert_eq(kiln_texenc_submit_png(genc, files, n, &ticket), KILN_OK);
		cr_assert_eq(kiln_texenc_collect(genc, ticket, gtex, gst), KILN_OK, "%s", kiln_texenc_last_error(genc));
		/* the reference: libpng's pixels through the CPU backend, one image at a time */
		for (size_t i = 0; i < n; i++) {
			const char *name = c.names[first + i];
			if (dec[i] != KILN_OK) {
				cr_expect_str_eq(name, "broken-stream", "libpng refused %s", name);
				cr_expect_neq(gst[i], KILN_OK, "%s decoded on the GPU", name);
				continue;
			}
			cr_assert_eq(kiln_texenc_encode(cenc, &images[i], 1, &ctex[i], &cst[i]), KILN_OK);
			cr_assert_eq(gst[i], KILN_OK, "%s: %s", name, kiln_strerror(gst[i]));
			cr_assert_eq(gtex[i].num_levels, ctex[i].num_levels, "%s", name);
			for (uint32_t l = 0; l < gtex[i].num_levels; l++)
				cr_assert(gtex[i].levels[l].size == ctex[i].levels[l].size &&
						  memcmp(gtex[i].levels[l].data, ctex[i].levels[l].data, gtex[i].levels[l].size) == 0,
					  "%s level %u differs (batch %zu)", name, l, batch);
			kiln_texture_free_levels(&gtex[i]);
			kiln_texture_free_levels(&ctex[i]);
			kiln_image_free(&images[i]);
		}
	}
	cr_expect_gt(gpu_decoded, 24, "the Kodak files and the 8-bit PngSuite files go to the GPU decoder");
	kiln_texenc_destroy(genc);
	kiln_texenc_destroy(cenc);
	kiln_pool_destroy(pool);
	for (size_t i = 0; i < c.n; i++)
		kiln_buf_free(&c.files[i]);
}

Test(texenc_png_gpu, bc1_batches_of_32, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 32); }
Test(texenc_png_gpu, bc1_batches_of_7, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 7); }
Test(texenc_png_gpu, bc1_batches_of_1, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 1); }
Test(texenc_png_gpu, astc_batches_of_32, .timeout = 600) { run(KILN_TEXFMT_ASTC, 32); }
