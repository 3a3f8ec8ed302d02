/* kiln run end to end ($KILN_BIN, real processes): the embedded scheduler and worker over
 * `kiln samples` output with a corrupt PNG among them (exit 1, every good output present
 * and readable, the failure list naming the bad one), --json, an all-good folder (exit 0),
 * relative paths, nested folders, a missing input (exit 3), the temporary state directory
 * removed, and --state-dir resuming the same job. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/container.h"
#include "proc_util.h"
#include "sched_sim.h"

static char dir[128];
static char bin[PATH_MAX];

static const char *const samples[] = {"checker-alpha", "gradient", "noise", "pixel", "solid-5x3", "wide"};
#define NSAMPLES (sizeof samples / sizeof samples[0])

static void setup(void)
{
	kiln_bin_abs(bin);  /* absolute, so that a test may run kiln from another working directory */
	sim_mkdtemp(dir, sizeof dir, "run");
	kiln_samples(bin, dir);
}

static void teardown(void)
{
	sim_rmdir(dir);
}

TestSuite(run, .init = setup, .fini = teardown, .timeout = 120);

/* Runs kiln with args (a shell fragment) in cwd (NULL: here); stdout and stderr to files. */
#define kiln_in(cwd, ...) proc_kiln(bin, cwd, dir, "stdout", "stderr", __VA_ARGS__)
#define kiln(...) kiln_in(NULL, __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, NULL)

static void write_file(const char *name, const void *data, size_t len)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

/* A PNG signature and IHDR chunk header, then garbage: fails in decoding, not in fetching. */
static void write_corrupt_png(const char *name)
{
	static const unsigned char bad[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H',
					    'D', 'R', 0, 0, 1, 0, 0, 0, 1, 0, 8, 6, 0, 0, 0, 0xde, 0xad, 0xbe,
					    0xef, 'g', 'a', 'r', 'b', 'a', 'g', 'e'};
	write_file(name, bad, sizeof bad);
}

static bool exists(const char *rel)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	return access(path, F_OK) == 0;
}

/* Reads dir/rel back with kiln_container_read; returns its mip level count. */
static uint32_t texture_levels(const char *rel)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	kiln_buf file;
	kiln_texture tex;
	kiln_buf_init(&file, 1 << 26);
	cr_assert_eq(kiln_buf_read_file(&file, path), KILN_OK, "%s is missing", path);
	cr_assert_eq(kiln_container_read(file.data, file.len, &tex), KILN_OK, "%s is not a valid texture", path);
	kiln_buf_free(&file);
	return tex.num_levels;
}

Test(run, good_and_corrupt_inputs_exit_1_with_every_good_output_and_the_failure_listed)
{
	write_corrupt_png("in/corrupt.png");
	cr_assert_eq(kiln("run --input %s/in --output %s/out --device cpu --quality fast --mipmaps --max-attempts 1", dir,
			  dir),
		     1, "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	char name[64];
	for (size_t i = 0; i < NSAMPLES; i++) {
		snprintf(name, sizeof name, "out/%s.dds", samples[i]);
		texture_levels(name);
	}
	cr_expect_gt(texture_levels("out/gradient.dds"), 1, "--mipmaps reached the worker");
	cr_expect(!exists("out/corrupt.dds"), "no output for the bad input");
	const char *out = slurp("stdout");
	const char *failed = strstr(out, "failed:\n");
	cr_assert_not_null(failed, "no failure list: %s", out);
	cr_expect(strstr(failed, "/in/corrupt.png: ") != NULL, "the bad input is named: %s", out);
	cr_expect(strstr(out, "6 of 7 images written") != NULL, "summary: %s", out);
	for (size_t i = 0; i < NSAMPLES; i++)
		cr_expect(strstr(failed, samples[i]) == NULL, "only the bad input is listed: %s", out);
}

Test(run, json_is_the_ended_job_with_its_failures)
{
	write_corrupt_png("in/corrupt.png");
	cr_assert_eq(kiln("run --input %s/in --output %s/out --container ktx2 --shard-size 2 --max-attempts 1 --json",
			  dir, dir),
		     1, "stderr: %s", slurp("stderr"));
	json_error_t err;
	json_t *job = json_loads(slurp("stdout"), 0, &err);
	cr_assert_not_null(job, "stdout is not JSON (%s): %s", err.text, slurp("stdout"));
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "done");
	json_t *items = json_object_get(job, "items");
	cr_expect_eq(json_integer_value(json_object_get(items, "total")), NSAMPLES + 1);
	cr_expect_eq(json_integer_value(json_object_get(items, "done")), NSAMPLES);
	cr_expect_eq(json_integer_value(json_object_get(items, "failed")), 1);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(job, "spec"), "shard_size")), 2);
	cr_expect(json_is_true(json_object_get(json_object_get(job, "spec"), "measure_psnr")));
	double psnr = json_number_value(json_object_get(job, "psnr_mean_db"));
	cr_expect(json_is_number(json_object_get(job, "psnr_mean_db")) && psnr > 10 && psnr <= 99, "psnr %f", psnr);
	cr_expect(json_is_number(json_object_get(job, "mpix")) && json_is_number(json_object_get(job, "mpix_per_s")));
	/* the samples hold 204,706 pixels (kiln samples: 256x256, 300x200, 123x77, 5x3, 1x1, 4099x17) */
	double mpix = json_number_value(json_object_get(job, "mpix"));
	cr_expect(mpix > 0.2047 && mpix < 0.2048, "mpix %f", mpix);
	cr_expect_gt(json_number_value(json_object_get(job, "mpix_per_s")), 0);
	json_t *failures = json_object_get(job, "failures");
	cr_assert_eq(json_array_size(failures), 1);
	const char *input = json_string_value(json_object_get(json_array_get(failures, 0), "input"));
	cr_assert_not_null(input);
	cr_expect(strstr(input, "/in/corrupt.png") != NULL, "%s", input);
	const char *why = json_string_value(json_object_get(json_array_get(failures, 0), "error"));
	cr_expect(why && why[0], "a reason is given");
	json_decref(job);
	cr_expect(texture_levels("out/noise.ktx2") >= 1);
}

Test(run, an_all_good_folder_with_relative_paths_exits_0_and_leaves_no_state)
{
	/* TMPDIR inside the test's folder: the temporary state directory must be gone after */
	char tmp[192];
	snprintf(tmp, sizeof tmp, "%s/tmp", dir);
	cr_assert_eq(mkdir(tmp, 0700), 0);
	cr_assert_eq(kiln_in(dir, "run --input ./in --output out/../textures --device cpu -q"), 0,
		     "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	cr_assert_eq(kiln_in(dir, "run --input in --output textures --device cpu"), 0);
	for (size_t i = 0; i < NSAMPLES; i++) {
		char name[64];
		snprintf(name, sizeof name, "textures/%s.dds", samples[i]);
		texture_levels(name);
	}
	cr_expect(strstr(slurp("stdout"), "6 of 6 images written") != NULL, "%s", slurp("stdout"));
	/* issue 6's summary: throughput in Mpix and the textures' mean PSNR (kiln run asks
	 * the worker to measure it) */
	cr_expect(strstr(slurp("stdout"), " Mpix, ") != NULL && strstr(slurp("stdout"), " Mpix/s, mean PSNR ") != NULL,
		  "%s", slurp("stdout"));
	cr_expect(strstr(slurp("stdout"), "mean PSNR n/a") == NULL, "PSNR was measured: %s", slurp("stdout"));
	cr_expect(strstr(slurp("stdout"), "failed:") == NULL);
	char cmd[PATH_MAX + 1024];
	snprintf(cmd, sizeof cmd, "TMPDIR=%s '%s' run --input %s/in --output %s/o2 -q >/dev/null 2>&1", tmp, bin, dir, dir);
	cr_assert_eq(system(cmd), 0);
	snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", tmp);
	cr_expect_eq(system(cmd), 0, "the temporary state directory was removed");
}

Test(run, nested_folders_keep_their_relative_paths)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "mkdir -p %s/tree/a/b %s/tree/c && cp %s/in/noise.png %s/tree/a/b/deep.png && "
		 "cp %s/in/pixel.png %s/tree/a/mid.png && cp %s/in/wide.png %s/tree/top.png && "
		 "cp %s/in/gradient.png %s/tree/c/top.png", dir, dir, dir, dir, dir, dir, dir, dir, dir, dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(kiln("run --input %s/tree --output %s/baked/ --device cpu --quality fast", dir, dir), 0,
		     "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	texture_levels("baked/a/b/deep.dds");
	texture_levels("baked/a/mid.dds");
	texture_levels("baked/top.dds");
	texture_levels("baked/c/top.dds");
}

Test(run, a_missing_input_is_a_job_that_could_not_run_exit_3)
{
	cr_expect_eq(kiln("run --input %s/no-such-folder --output %s/out", dir, dir), 3);
	cr_expect(strstr(slurp("stdout"), "could not run: the input matched no files") != NULL, "%s",
		  slurp("stdout"));
	cr_expect(!exists("out"), "nothing written");
	cr_expect_eq(kiln("run --output %s/out", dir), 2, "no --input");
	cr_expect_eq(kiln("run --input %s/in", dir), 2, "no --output");
	cr_expect_eq(kiln("run --input %s/in --output %s/out --quality ultra", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "quality") != NULL, "%s", slurp("stderr"));
	cr_expect_eq(kiln("run --input %s/in --output %s/out --device tpu", dir, dir), 2);
	cr_expect_eq(kiln("run --input %s/in --output %s/out --devices 63", dir, dir), 3, "no such GPU");
	cr_expect_eq(kiln("run --help"), 0);
	cr_expect(strstr(slurp("stdout"), "--state-dir") != NULL);
}

Test(run, state_dir_keeps_the_journal_and_the_same_command_finds_the_same_job)
{
	cr_assert_eq(kiln("run --input %s/in --output %s/out --state-dir %s/state --json", dir, dir, dir), 0,
		     "stderr: %s", slurp("stderr"));
	json_t *first = json_loads(slurp("stdout"), 0, NULL);
	cr_assert_not_null(first);
	struct stat sb;
	char path[256];
	snprintf(path, sizeof path, "%s/state/token", dir);
	cr_assert_eq(stat(path, &sb), 0, "the REST token is kept in the state directory");
	cr_expect_eq(sb.st_mode & 0777, 0600);
	snprintf(path, sizeof path, "%s/out/noise.dds", dir);
	cr_assert_eq(stat(path, &sb), 0);
	time_t written = sb.st_mtime;
	long nsec = sb.st_mtim.tv_nsec;

	cr_assert_eq(kiln("run --input %s/in --output %s/out --state-dir %s/state --json", dir, dir, dir), 0);
	json_t *again = json_loads(slurp("stdout"), 0, NULL);
	cr_assert_not_null(again);
	cr_expect_str_eq(json_string_value(json_object_get(again, "id")), json_string_value(json_object_get(first, "id")));
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(again, "items"), "done")), NSAMPLES);
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect(sb.st_mtime == written && sb.st_mtim.tv_nsec == nsec, "nothing was encoded again");
	json_decref(first);
	json_decref(again);

	/* another spec on the same state directory is another job */
	cr_assert_eq(kiln("run --input %s/in --output %s/out2 --state-dir %s/state --json", dir, dir, dir), 0);
	json_t *other = json_loads(slurp("stdout"), 0, NULL);
	cr_assert_not_null(other);
	cr_expect_str_eq(json_string_value(json_object_get(other, "id")), "j2");
	json_decref(other);
}

/* --threads sizes the embedded worker's host threads: one thread encodes the same bytes as
 * the default, and an out-of-range count is a usage error. */
Test(run, threads_option_gives_the_same_outputs_and_checks_its_range)
{
	cr_assert_eq(kiln("run --input %s/in --output %s/one --device cpu --threads 1 -q", dir, dir), 0,
		     "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	cr_assert_eq(kiln("run --input %s/in --output %s/all --device cpu -q", dir, dir), 0, "stderr: %s",
		     slurp("stderr"));
	for (size_t i = 0; i < NSAMPLES; i++) {
		char cmd[512];
		snprintf(cmd, sizeof cmd, "cmp -s %s/one/%s.dds %s/all/%s.dds", dir, samples[i], dir, samples[i]);
		cr_expect_eq(system(cmd), 0, "%s.dds differs with --threads 1", samples[i]);
	}
	cr_expect_eq(kiln("run --input %s/in --output %s/bad --threads 0", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "--threads") != NULL, "stderr: %s", slurp("stderr"));
	cr_expect_eq(kiln("run --input %s/in --output %s/bad --threads many", dir, dir), 2);
}
