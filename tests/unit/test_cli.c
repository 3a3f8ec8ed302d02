/* End-to-end tests of the kiln binary (build/kiln): real processes, real files, exit codes,
 * output names, containers read back, JSON reports, and bad inputs mixed with good ones. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/png_io.h"
#include "kernels/gpu.h"
#include "proc_util.h"
#include "sched_sim.h"

static char dir[64];

static void make_dir(void)
{
	sim_mkdtemp(dir, sizeof dir, "cli");
	kiln_samples(NULL, dir);
}

static void remove_dir(void)
{
	sim_rmdir(dir);
}

/* Runs the kiln binary with args (a shell fragment); stdout and stderr go to files in dir. */
#define kiln(...) proc_kiln(NULL, NULL, dir, "stdout", "stderr", __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, NULL)

static void read_texture(const char *path, kiln_buf *file, kiln_texture *tex)
{
	kiln_buf_init(file, 1 << 28);
	cr_assert_eq(kiln_buf_read_file(file, path), KILN_OK, "%s", path);
	cr_assert_eq(kiln_container_read(file->data, file->len, tex), KILN_OK, "%s", path);
}

TestSuite(cli, .init = make_dir, .fini = remove_dir, .timeout = 120);

Test(cli, help_and_usage_errors)
{
	cr_expect_eq(kiln("--help"), 0);
	cr_expect(strstr(slurp("stdout"), "encode") != NULL);
	cr_expect_eq(kiln("encode --help"), 0);
	cr_expect(strstr(slurp("stdout"), "--quality") != NULL);
	cr_expect_eq(kiln("decode --help"), 0);
	cr_expect_eq(kiln("frobnicate"), 2);
	cr_expect_eq(kiln("encode --quality ultra %s/in/pixel.png -o %s/x.dds", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "--quality") != NULL);
	cr_expect_eq(kiln("encode %s/in/pixel.png", dir), 2);
	cr_expect_eq(kiln("encode --alpha-cutoff 300 %s/in/pixel.png -o %s/x.dds", dir, dir), 2);
	cr_expect_eq(kiln("encode --device tpu %s/in/pixel.png -o %s/x.dds", dir, dir), 2);
	/* usage errors are one line */
	char *err = slurp("stderr");
	cr_expect_eq(strchr(err, '\n'), err + strlen(err) - 1, "stderr: %s", err);
}

Test(cli, encodes_a_directory_of_samples_with_mipmaps)
{
	cr_assert_eq(kiln("encode --quality fast --mipmaps --device cpu %s/in/*.png -o %s/out", dir, dir), 0,
		     "stderr: %s", slurp("stderr"));
	static const struct { const char *name; uint32_t w, h; } expect[] = {
		{"gradient", 256, 256}, {"checker-alpha", 300, 200}, {"noise", 123, 77},
		{"solid-5x3", 5, 3}, {"pixel", 1, 1}, {"wide", 4099, 17},
	};
	for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
		char path[256];
		snprintf(path, sizeof path, "%s/out/%s.dds", dir, expect[i].name);
		kiln_buf file;
		kiln_texture tex;
		read_texture(path, &file, &tex);
		cr_expect_eq(tex.levels[0].width, expect[i].w, "%s", path);
		cr_expect_eq(tex.levels[0].height, expect[i].h, "%s", path);
		cr_expect_eq(tex.num_levels, kiln_mip_count(expect[i].w, expect[i].h), "%s", path);
		cr_expect_eq(tex.levels[tex.num_levels - 1].width, 1u);
		cr_expect_eq(tex.format, strcmp(expect[i].name, "checker-alpha") == 0 ? KILN_TEXFMT_BC1_RGBA
										   : KILN_TEXFMT_BC1_RGB);
		kiln_buf_free(&file);
	}
}

Test(cli, single_input_to_a_file_in_ktx2_and_back_to_png)
{
	cr_assert_eq(kiln("encode --container ktx2 --srgb %s/in/gradient.png -o %s/g.ktx2", dir, dir), 0,
		     "stderr: %s", slurp("stderr"));
	kiln_buf file;
	kiln_texture tex;
	char path[256];
	snprintf(path, sizeof path, "%s/g.ktx2", dir);
	read_texture(path, &file, &tex);
	cr_expect(tex.srgb);
	cr_expect_eq(tex.num_levels, 1u);
	kiln_buf_free(&file);

	cr_assert_eq(kiln("decode %s/g.ktx2 -o %s/g.png", dir, dir), 0, "stderr: %s", slurp("stderr"));
	kiln_image orig, back;
	snprintf(path, sizeof path, "%s/in/gradient.png", dir);
	cr_assert_eq(kiln_png_read_file(path, NULL, &orig, NULL, 0), KILN_OK);
	snprintf(path, sizeof path, "%s/g.png", dir);
	cr_assert_eq(kiln_png_read_file(path, NULL, &back, NULL, 0), KILN_OK);
	cr_assert_eq(back.width, orig.width);
	cr_assert_eq(back.height, orig.height);
	double se = 0;
	for (uint32_t y = 0; y < orig.height; y++)
		for (uint32_t x = 0; x < orig.width * 4; x++)
			if (x % 4 != 3) {
				double d = (double)kiln_image_row(&orig, y)[x] - kiln_image_row(&back, y)[x];
				se += d * d;
			}
	double mse = se / (3.0 * orig.width * orig.height);
	cr_expect_lt(mse, 4.0, "a smooth gradient should survive BC1 closely (MSE %.2f)", mse);
	kiln_image_free(&orig);
	kiln_image_free(&back);

	cr_expect_eq(kiln("decode --level 3 %s/g.ktx2 -o %s/x.png", dir, dir), 3);
	cr_expect_eq(kiln("decode %s/in/gradient.png -o %s/x.png", dir, dir), 3);
}

Test(cli, bad_inputs_fail_alone_and_json_reports_them)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "head -c 300 %s/in/gradient.png > %s/in/truncated.png && "
		 "echo 'not a png' > %s/in/text.png && : > %s/in/empty.png", dir, dir, dir, dir);
	cr_assert_eq(system(cmd), 0);
	int rc = kiln("encode --json --device cpu --batch 2 %s/in/*.png -o %s/out", dir, dir);
	cr_expect_eq(rc, 1, "some inputs failed: exit 1");
	char *err = slurp("stderr");
	cr_expect(strstr(err, "truncated.png") != NULL, "stderr: %s", err);
	cr_expect(strstr(err, "text.png") != NULL);
	cr_expect(strstr(err, "empty.png") != NULL);
	json_error_t jerr;
	json_t *root = json_loads(slurp("stdout"), 0, &jerr);
	cr_assert_not_null(root, "stdout is JSON: %s", jerr.text);
	cr_expect_eq(json_integer_value(json_object_get(root, "ok")), 6);
	cr_expect_eq(json_integer_value(json_object_get(root, "failed")), 3);
	size_t i;
	json_t *o;
	json_array_foreach(json_object_get(root, "outputs"), i, o) {
		const char *in = json_string_value(json_object_get(o, "input"));
		const char *out = json_string_value(json_object_get(o, "output"));
		bool bad = strstr(in, "truncated") || strstr(in, "text.png") || strstr(in, "empty");
		cr_expect_str_eq(json_string_value(json_object_get(o, "status")), bad ? "error" : "ok", "%s", in);
		cr_expect_eq(access(out, F_OK) == 0, !bad, "%s exists iff it was good", out);
	}
	json_decref(root);
	/* nothing half-written: no temporary files left in the output directory */
	snprintf(cmd, sizeof cmd, "ls -A %s/out | grep -c tmp", dir);
	cr_expect_neq(system(cmd), 0, "temporary files left behind");
}

Test(cli, refuses_colliding_outputs_and_missing_gpu)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "mkdir -p %s/a %s/b && cp %s/in/pixel.png %s/a/ && cp %s/in/pixel.png %s/b/",
		 dir, dir, dir, dir, dir, dir);
	cr_assert_eq(system(cmd), 0);
	cr_expect_eq(kiln("encode %s/a/pixel.png %s/b/pixel.png -o %s/out", dir, dir, dir), 2);
	if (kiln_gpu_count() == 0)
		cr_expect_eq(kiln("encode --device gpu %s/in/pixel.png -o %s/p.dds", dir, dir), 3);
	cr_expect_eq(kiln("encode --max-pixels 100 %s/in/gradient.png -o %s/big.dds", dir, dir), 1);
	cr_expect(strstr(slurp("stderr"), "limit") != NULL, "stderr: %s", slurp("stderr"));
}

Test(cli, devices_lists_the_cpu)
{
	cr_expect_eq(kiln("devices --json"), 0);
	json_t *root = json_loads(slurp("stdout"), 0, NULL);
	cr_assert_not_null(root);
	json_t *first = json_array_get(json_object_get(root, "devices"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(first, "device")), "cpu");
	json_decref(root);
}

/* --png-decoder picks the decoder in every command that reads PNG files; both write the
 * same files. */
Test(cli, png_decoder_option_in_encode_run_and_worker)
{
	cr_assert_eq(kiln("encode --png-decoder libpng %s/in/gradient.png -o %s/lib.dds", dir, dir), 0, "%s",
		     slurp("stderr"));
	cr_assert_eq(kiln("encode --png-decoder kiln %s/in/gradient.png -o %s/kiln.dds", dir, dir), 0, "%s",
		     slurp("stderr"));
	char a[256], b[256];
	snprintf(a, sizeof a, "%s/lib.dds", dir);
	snprintf(b, sizeof b, "%s/kiln.dds", dir);
	kiln_buf fa, fb;
	kiln_buf_init(&fa, 1 << 24);
	kiln_buf_init(&fb, 1 << 24);
	cr_assert_eq(kiln_buf_read_file(&fa, a), KILN_OK);
	cr_assert_eq(kiln_buf_read_file(&fb, b), KILN_OK);
	cr_expect(fa.len == fb.len && memcmp(fa.data, fb.data, fa.len) == 0, "the decoders gave different files");
	kiln_buf_free(&fa);
	kiln_buf_free(&fb);
	cr_expect_eq(kiln("run -q --png-decoder libpng --input %s/in --output %s/r", dir, dir), 0, "%s", slurp("stderr"));
	const char *cmds[] = {"encode", "run", "worker"};
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(kiln("%s --png-decoder spng --help", cmds[i]), 2, "%s", cmds[i]);
		cr_expect(strstr(slurp("stderr"), "kiln or libpng") != NULL, "%s", slurp("stderr"));
		cr_expect_eq(kiln("%s --help", cmds[i]), 0);
		cr_expect(strstr(slurp("stdout"), "--png-decoder") != NULL, "%s --help", cmds[i]);
	}
}

/* Format png through the scheduler and a worker (`kiln run`, the REST path): every input
 * becomes a PNG written by kiln's codec with the same pixels; a bad input fails alone. */
Test(cli, run_format_png_transcodes_through_the_worker)
{
	kiln_broken_sample(dir);
	int rc = kiln("run -q --json --format png --quality fast --input %s/in --output %s/png", dir, dir);
	cr_assert_eq(rc, 1, "%s", slurp("stderr"));
	json_error_t jerr;
	json_t *job = json_loads(slurp("stdout"), 0, &jerr);
	cr_assert_not_null(job, "%s", jerr.text);
	json_t *failures = json_object_get(job, "failures");
	cr_expect_eq(json_array_size(failures), 1);
	char bad[256];
	snprintf(bad, sizeof bad, "%s/in/zz-broken.png", dir);
	unlink(bad);
	json_decref(job);
	/* every sample went through: same pixels, a PNG that is kiln's (kiSt strips or not) */
	const char *names[] = {"gradient", "checker-alpha", "noise", "solid-5x3", "pixel", "wide"};
	int checked = 0;
	for (int i = 0; i < 6; i++) {
		char a[256], b[256];
		snprintf(a, sizeof a, "%s/in/%s.png", dir, names[i]);
		snprintf(b, sizeof b, "%s/png/%s.png", dir, names[i]);
		if (access(a, F_OK) != 0)
			continue;
		kiln_image ia, ib;
		cr_assert_eq(kiln_png_read_file(a, NULL, &ia, NULL, 0), KILN_OK, "%s", a);
		cr_assert_eq(kiln_png_read_file(b, NULL, &ib, NULL, 0), KILN_OK, "%s", b);
		cr_assert_eq(ia.width, ib.width);
		cr_assert_eq(ia.height, ib.height);
		for (uint32_t y = 0; y < ia.height; y++)
			cr_assert(memcmp(kiln_image_row(&ia, y), kiln_image_row(&ib, y), (size_t)ia.width * 4) == 0,
				  "%s row %u", names[i], y);
		kiln_image_free(&ia);
		kiln_image_free(&ib);
		checked++;
	}
	cr_expect_eq(checked, 6, "kiln samples writes these six");
	cr_expect_eq(kiln("run -q --format png --mipmaps --input %s/in --output %s/png2", dir, dir), 2,
		     "%s", slurp("stderr"));
}
