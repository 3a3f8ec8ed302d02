/* PNG files decoded on the GPU inside the encode front end (kiln_texenc_submit_png): the
 * textures are byte-identical with decoding on the host (libpng) and encoding on the CPU,
 * for Kodak and PngSuite files (palette, gray, alpha, 16-bit and interlaced ones take the
 * host path inside the same batch), in batches of 1, 7 and 32, and level 0's error
 * measured on the device is the CPU backend's (kernels/texerr.h); a file whose deflate
 * stream is broken fails alone; files whose stream ends irregularly (which the GPU decoder
 * sends back to the CPU path) get the CPU backend's statuses and textures. Run by make
 * test-gpu. */
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
#include "tests/png_testutil.h"
#include "tests/png_stream_end.h"

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

/* The same texture options (fast, mipmaps, level 0's error measured) on the GPU and on
 * the CPU backend. */
typedef struct encoder_pair {
	kiln_pool *pool;
	kiln_texenc *gpu, *cpu;
} encoder_pair;

static void pair_create(encoder_pair *e, kiln_texfmt format)
{
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.format = format;
	opts.quality = KILN_QUALITY_FAST;
	opts.mipmaps = true;
	opts.measure = true;
	kiln_device gpu = {KILN_DEVICE_GPU, 0}, cpu = {KILN_DEVICE_CPU, 0};
	cr_assert_eq(kiln_pool_create(0, &e->pool), KILN_OK);
	cr_assert_eq(kiln_texenc_create(&gpu, &opts, NULL, &e->gpu), KILN_OK, "%s", kiln_gpu_last_error());
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, e->pool, &e->cpu), KILN_OK);
}

static void pair_destroy(encoder_pair *e)
{
	kiln_texenc_destroy(e->gpu);
	kiln_texenc_destroy(e->cpu);
	kiln_pool_destroy(e->pool);
}

static void run(kiln_texfmt format, size_t batch)
{
	gpu_test_require("texenc_png_gpu");
	static corpus c;
	load_corpus(&c);
	encoder_pair e;
	pair_create(&e, format);
	size_t gpu_decoded = 0;
	for (size_t first = 0; first < c.n; first += batch) {
		size_t n = c.n - first < batch ? c.n - first : batch;
		kiln_texenc_png files[32];
		kiln_image images[32];
		kiln_status dec[32], gst[32], cst[32];
		kiln_texture gtex[32], ctex[32];
		kiln_texerr gerr[32], cerr[32];
		for (size_t i = 0; i < n; i++) {
			kiln_buf *f = &c.files[first + i];
			files[i] = (kiln_texenc_png){.data = f->data, .size = f->len};
			cr_assert_eq(kiln_pngdec_probe(f->data, f->len, NULL, &files[i].info, NULL, 0), KILN_OK, "%s",
				     c.names[first + i]);
			gpu_decoded += files[i].info.gpu_ok;
			dec[i] = kiln_png_decode(f->data, f->len, NULL, &images[i], NULL, 0);
		}
		uint64_t ticket;
		cr_assert_eq(kiln_texenc_submit_png(e.gpu, files, n, &ticket), KILN_OK);
		cr_assert_eq(kiln_texenc_collect_measured(e.gpu, ticket, gtex, gst, gerr), KILN_OK, "%s",
			     kiln_texenc_last_error(e.gpu));
		/* the reference: libpng's pixels through the CPU backend, one image at a time */
		for (size_t i = 0; i < n; i++) {
			const char *name = c.names[first + i];
			if (dec[i] != KILN_OK) {
				cr_expect_str_eq(name, "broken-stream", "libpng refused %s", name);
				cr_expect_neq(gst[i], KILN_OK, "%s decoded on the GPU", name);
				continue;
			}
			uint64_t t;
			cr_assert_eq(kiln_texenc_submit(e.cpu, &images[i], 1, &t), KILN_OK);
			cr_assert_eq(kiln_texenc_collect_measured(e.cpu, t, &ctex[i], &cst[i], &cerr[i]), KILN_OK);
			cr_assert_eq(gst[i], KILN_OK, "%s: %s", name, kiln_strerror(gst[i]));
			cr_assert_eq(gtex[i].num_levels, ctex[i].num_levels, "%s", name);
			for (uint32_t l = 0; l < gtex[i].num_levels; l++)
				cr_assert(gtex[i].levels[l].size == ctex[i].levels[l].size &&
						  memcmp(gtex[i].levels[l].data, ctex[i].levels[l].data, gtex[i].levels[l].size) == 0,
					  "%s level %u differs (batch %zu)", name, l, batch);
			/* level 0's error, measured on the device against the pixels it decoded */
			cr_assert_gt(cerr[i].texels, 0, "%s", name);
			cr_assert(gerr[i].sse == cerr[i].sse && gerr[i].texels == cerr[i].texels,
				  "%s: error %llu over %llu texels on the GPU, %llu over %llu on the CPU", name,
				  (unsigned long long)gerr[i].sse, (unsigned long long)gerr[i].texels,
				  (unsigned long long)cerr[i].sse, (unsigned long long)cerr[i].texels);
			kiln_texture_free_levels(&gtex[i]);
			kiln_texture_free_levels(&ctex[i]);
			kiln_image_free(&images[i]);
		}
	}
	cr_expect_gt(gpu_decoded, 24, "the Kodak files and the 8-bit PngSuite files go to the GPU decoder");
	pair_destroy(&e);
	for (size_t i = 0; i < c.n; i++)
		kiln_buf_free(&c.files[i]);
}

Test(texenc_png_gpu, bc1_batches_of_32, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 32); }
Test(texenc_png_gpu, bc1_batches_of_7, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 7); }
Test(texenc_png_gpu, bc1_batches_of_1, .timeout = 600) { run(KILN_TEXFMT_BC1_RGB, 1); }
Test(texenc_png_gpu, astc_batches_of_32, .timeout = 600) { run(KILN_TEXFMT_ASTC, 32); }

/* Every file of set through texenc on enc, in batches of `batch` with two in flight
 * (the second submitted before the first is collected): statuses and textures. */
static void texenc_all(kiln_texenc *enc, const kiln_texenc_png *set, size_t n, size_t batch, kiln_status *st,
		       kiln_texture *tex)
{
	for (size_t first = 0; first < n; first += 2 * batch) {
		uint64_t t[2] = {0, 0};
		size_t at[2], cnt[2];
		for (int k = 0; k < 2; k++) {
			at[k] = first + (size_t)k * batch;
			cnt[k] = at[k] < n ? (n - at[k] < batch ? n - at[k] : batch) : 0;
			if (cnt[k])
				cr_assert_eq(kiln_texenc_submit_png(enc, set + at[k], cnt[k], &t[k]), KILN_OK);
		}
		for (int k = 0; k < 2; k++)
			if (cnt[k])
				cr_assert_eq(kiln_texenc_collect(enc, t[k], tex + at[k], st + at[k]), KILN_OK, "%s",
					     kiln_texenc_last_error(enc));
	}
}

/* Files whose zlib stream ends in every irregular way (tests/png_stream_end.h), whole and
 * cut short, mixed with Kodak files in batches of 40, two batches in flight: the GPU
 * encoder's statuses and textures (BC1 and ASTC, with mipmaps) are the CPU backend's. The
 * 8-bit files the device does not settle are decoded and encoded on the CPU at collect. */
static void irregular(kiln_texfmt format)
{
	gpu_test_require("texenc_png_gpu");
	enum { MAX = 256 };
	static kiln_buf bufs[MAX];
	static kiln_texenc_png set[MAX];
	static kiln_status gst[MAX], cst[MAX];
	static kiln_texture gtex[MAX], ctex[MAX];
	size_t n = 0, kodak = 0;
	png_end_walk w = png_end_walk_start(png_end_images, PNG_END_IMAGES_GPU, 99);
	while (png_end_walk_next(&w)) {
		for (int cut = 0; cut < 2; cut++)
			for (size_t sp = 0; sp < PNG_END_SPLITS; sp += 3) {
				cr_assert_lt(n, MAX);
				png_end_file(&w.images[w.im], w.z, cut ? w.zlen * 2 / 3 : w.zlen, sp,
					     (size_t)w.how % PNG_END_AFTERS, &bufs[n++]);
				if (n % 8 == 0 && kodak < 24) { /* a regular file every few */
					char path[512], name[32];
					snprintf(name, sizeof name, "kodim%02zu.png", ++kodak);
					bufs[n++] = gpu_test_load(test_data_path(path, sizeof path, "kodak", name));
				}
			}
	}
	cr_assert(!w.failed, "out of memory making the streams");
	for (size_t i = 0; i < n; i++) {
		set[i] = (kiln_texenc_png){.data = bufs[i].data, .size = bufs[i].len};
		cr_assert_eq(kiln_pngdec_probe(bufs[i].data, bufs[i].len, NULL, &set[i].info, NULL, 0), KILN_OK);
	}
	encoder_pair e;
	pair_create(&e, format);
	texenc_all(e.gpu, set, n, 40, gst, gtex);
	texenc_all(e.cpu, set, n, 40, cst, ctex);
	size_t ok = 0, refused = 0;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(gst[i], cst[i], "file %zu (%ux%u): GPU %s, CPU %s", i, set[i].info.width, set[i].info.height,
			     kiln_strerror(gst[i]), kiln_strerror(cst[i]));
		if (cst[i] != KILN_OK) {
			refused++;
			continue;
		}
		ok++;
		cr_assert_eq(gtex[i].num_levels, ctex[i].num_levels, "file %zu", i);
		for (uint32_t l = 0; l < gtex[i].num_levels; l++)
			cr_assert(gtex[i].levels[l].size == ctex[i].levels[l].size &&
					  memcmp(gtex[i].levels[l].data, ctex[i].levels[l].data, gtex[i].levels[l].size) == 0,
				  "file %zu level %u differs", i, l);
		kiln_texture_free_levels(&gtex[i]);
		kiln_texture_free_levels(&ctex[i]);
	}
	cr_expect_gt(ok, 40);
	cr_expect_gt(refused, 20);
	pair_destroy(&e);
	for (size_t i = 0; i < n; i++)
		kiln_buf_free(&bufs[i]);
}

Test(texenc_png_gpu, irregular_streams_bc1, .timeout = 300) { irregular(KILN_TEXFMT_BC1_RGB); }
Test(texenc_png_gpu, irregular_streams_astc, .timeout = 300) { irregular(KILN_TEXFMT_ASTC); }
