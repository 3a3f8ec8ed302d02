/* GPU tests of PNG -> PNG on the device (make test-gpu): kernels/png/png_runner.h encodes
 * the samples of every PngSuite file kiln reads and of Kodak images to the bytes of the CPU
 * backend, in one batch and in batches of 7, with a failing image alone; `kiln encode
 * --format png` and `kiln run --format png` (the worker) on the GPU write the CPU's files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "kernels/gpu.h"
#include "kernels/png/png_runner.h"
#include "kernels/png/png_transcode.h"
#include "tests/gpu/gpu_testutil.h"
#include "tests/pngsuite.h"

#define MAX_FILES 256

static kiln_buf files[MAX_FILES];
static kiln_png_source srcs[MAX_FILES];
static kiln_png_source *ptrs[MAX_FILES];
static size_t nfiles;

static void add_file(const char *path, const kiln_png_transcode_opts *opts)
{
	cr_assert_lt(nfiles, MAX_FILES);
	files[nfiles] = gpu_test_load(path);
	char err[256];
	cr_assert_eq(kiln_png_source_read(files[nfiles].data, files[nfiles].len, NULL, opts, NULL, &srcs[nfiles], err,
					  sizeof err),
		     KILN_OK, "%s: %s", path, err);
	ptrs[nfiles] = &srcs[nfiles];
	nfiles++;
}

static void load_sources(const kiln_png_transcode_opts *opts)
{
	nfiles = 0;
	static pngsuite_list suite;
	char path[1024];
	pngsuite_list_files(&suite, PNGSUITE_VALID);
	for (size_t i = 0; i < suite.n; i++)
		add_file(pngsuite_path(path, sizeof path, suite.names[i]), opts);
	for (int k = 1; k <= 8; k++)
		add_file(test_kodak_path(path, sizeof path, k), opts);
}

static void free_sources(void)
{
	for (size_t i = 0; i < nfiles; i++) {
		kiln_png_source_free(&srcs[i]);
		kiln_buf_free(&files[i]);
	}
	nfiles = 0;
}

/* Encodes sources [0, n) in batches of `batch` on runner r into out[]. */
static void encode_all(kiln_pngenc_runner *r, const kiln_png_transcode_opts *opts, size_t batch, kiln_buf *out,
		       kiln_status *status)
{
	char err[256] = "";
	for (size_t first = 0; first < nfiles; first += batch) {
		size_t n = nfiles - first < batch ? nfiles - first : batch;
		cr_assert_eq(kiln_png_source_encode(r, opts, ptrs + first, n, out + first, status + first, err, sizeof err),
			     KILN_OK, "%s", err);
	}
}

Test(png_runner_gpu, pngsuite_and_kodak_match_the_cpu_in_any_batch, .timeout = 300)
{
	gpu_test_require("png_runner_gpu");
	static const kiln_quality qualities[] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM};
	for (int rgba8 = 0; rgba8 <= 1; rgba8++) {
		kiln_png_transcode_opts opts;
		kiln_png_transcode_opts_default(&opts);
		opts.rgba8 = rgba8;
		load_sources(&opts);
		cr_assert_gt(nfiles, 150);
		for (size_t qi = 0; qi < 2; qi++) {
			opts.quality = qualities[qi];
			kiln_device cpu = {.kind = KILN_DEVICE_CPU}, gpu = {.kind = KILN_DEVICE_GPU, .index = 0};
			kiln_pngenc_runner *rc = NULL, *rg = NULL;
			cr_assert_eq(kiln_pngenc_runner_create(&cpu, NULL, &rc), KILN_OK);
			cr_assert_eq(kiln_pngenc_runner_create(&gpu, NULL, &rg), KILN_OK);
			static kiln_buf ref[MAX_FILES], one[MAX_FILES], seven[MAX_FILES];
			static kiln_status sref[MAX_FILES], sone[MAX_FILES], sseven[MAX_FILES];
			for (size_t i = 0; i < nfiles; i++) {
				kiln_buf_init(&ref[i], (size_t)1 << 28);
				kiln_buf_init(&one[i], (size_t)1 << 28);
				kiln_buf_init(&seven[i], (size_t)1 << 28);
			}
			seven[3].max = 50; /* the file cannot fit: fails alone */
			encode_all(rc, &opts, nfiles, ref, sref);
			encode_all(rg, &opts, nfiles, one, sone);
			encode_all(rg, &opts, 7, seven, sseven);
			for (size_t i = 0; i < nfiles; i++) {
				cr_assert_eq(sref[i], KILN_OK, "file %zu", i);
				cr_assert_eq(sone[i], KILN_OK, "file %zu", i);
				cr_assert_eq(one[i].len, ref[i].len, "file %zu rgba8 %d quality %zu", i, rgba8, qi);
				cr_assert(memcmp(one[i].data, ref[i].data, ref[i].len) == 0, "file %zu: GPU bytes differ", i);
				if (i == 3) {
					cr_assert_neq(sseven[i], KILN_OK);
					cr_assert_eq(seven[i].len, 0);
				} else {
					cr_assert_eq(sseven[i], KILN_OK, "file %zu", i);
					cr_assert_eq(seven[i].len, ref[i].len, "file %zu", i);
					cr_assert(memcmp(seven[i].data, ref[i].data, ref[i].len) == 0, "file %zu (batch 7)", i);
				}
			}
			for (size_t i = 0; i < nfiles; i++) {
				kiln_buf_free(&ref[i]);
				kiln_buf_free(&one[i]);
				kiln_buf_free(&seven[i]);
			}
			kiln_pngenc_runner_destroy(rc);
			kiln_pngenc_runner_destroy(rg);
		}
		free_sources();
	}
}

Test(png_runner_gpu, kiln_encode_and_run_format_png_on_the_gpu_write_the_cpus_files, .timeout = 600)
{
	gpu_test_require("png_runner_gpu");
	int rc = gpu_test_sh(NULL,
		 "mkdir -p $d/in; cp $data/pngsuite/[!x]*.png $data/kodak/kodim0*.png $d/in/; "
		 "$kiln encode -q --format png --quality fast --batch 16 --device gpu $d/in/*.png -o $d/enc-gpu/; "
		 "$kiln encode -q --format png --quality fast --batch 5 --device cpu $d/in/*.png -o $d/enc-cpu/; "
		 "diff -r $d/enc-cpu $d/enc-gpu; "
		 "$kiln run -q --format png --shard-size 8 --device gpu --input $d/in --output $d/run-gpu; "
		 "$kiln run -q --format png --shard-size 8 --device cpu --input $d/in --output $d/run-cpu; "
		 "diff -r $d/run-cpu $d/run-gpu; "
		 "test $(ls $d/run-gpu | wc -l) -eq $(ls $d/in | wc -l)");
	cr_expect_eq(rc, 0, "format png on the GPU must write the CPU backend's files");
}
