/* ASTC through the kiln binary ($KILN_BIN, real processes): kiln encode --format astc to
 * .astc and KTX 2.0 (with mip chains) over several footprints, the files read back with
 * kiln_container_read, kiln decode back to PNG within PSNR bounds, astcenc -dl (when it is
 * installed) decoding kiln's .astc files to the same pixels as kiln decode, the option
 * checks (footprint, container, mipmaps, a GPU asked for by name), and kiln run (scheduler,
 * worker client and pipeline) encoding a folder to ASTC. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/png_io.h"
#include "tests/unit/proc_util.h"

static char dir[64];
static char bin[PATH_MAX];
/* the kiln binary with args (a shell fragment), stdout and stderr to files in dir */
#define kiln(...) proc_kiln(bin, NULL, dir, "stdout", "stderr", __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, NULL)

static const char *const samples[] = {"checker-alpha", "gradient", "noise", "pixel", "solid-5x3", "wide"};
#define NSAMPLES (sizeof samples / sizeof samples[0])

static void setup(void)
{
	kiln_bin_abs(bin);
	strcpy(dir, "/tmp/kiln-cli-astc-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	char cmd[PATH_MAX + 128];
	snprintf(cmd, sizeof cmd, "'%s' samples -o %s/in >/dev/null", bin, dir);
	cr_assert_eq(system(cmd), 0, "kiln samples failed");
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)system(cmd);
}

TestSuite(cli_astc, .init = setup, .fini = teardown, .timeout = 240);

/* Reads dir/name as a texture; the caller frees file. */
static void read_texture(const char *name, kiln_buf *file, kiln_texture *tex)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	kiln_buf_init(file, 1 << 28);
	cr_assert_eq(kiln_buf_read_file(file, path), KILN_OK, "%s is missing", path);
	cr_assert_eq(kiln_container_read(file->data, file->len, tex), KILN_OK, "%s is not a valid texture", path);
}

static void read_png(const char *name, kiln_image *img)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	cr_assert_eq(kiln_png_read_file(path, NULL, img, NULL, 0), KILN_OK, "%s", path);
}

/* RGB PSNR (MSE over R, G, B; 99 dB for a perfect match) of dir/b against dir/a, or
 * RGBA with alpha set. */
static double psnr(const char *a, const char *b, bool alpha)
{
	kiln_image x, y;
	read_png(a, &x);
	read_png(b, &y);
	cr_assert_eq(x.width, y.width, "%s %s", a, b);
	cr_assert_eq(x.height, y.height, "%s %s", a, b);
	int channels = alpha ? 4 : 3;
	double sse = 0;
	for (uint32_t r = 0; r < x.height; r++) {
		const uint8_t *p = kiln_image_row(&x, r), *q = kiln_image_row(&y, r);
		for (uint32_t i = 0; i < x.width; i++)
			for (int c = 0; c < channels; c++) {
				double d = (double)p[4 * i + c] - (double)q[4 * i + c];
				sse += d * d;
			}
	}
	double mse = sse / ((double)x.width * x.height * channels);
	kiln_image_free(&x);
	kiln_image_free(&y);
	return mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : 99.0;
}

/* Whether dir/a and dir/b hold the same RGBA pixels. */
static bool same_pixels(const char *a, const char *b)
{
	kiln_image x, y;
	read_png(a, &x);
	read_png(b, &y);
	bool same = x.width == y.width && x.height == y.height;
	for (uint32_t r = 0; same && r < x.height; r++)
		same = memcmp(kiln_image_row(&x, r), kiln_image_row(&y, r), (size_t)x.width * 4) == 0;
	kiln_image_free(&x);
	kiln_image_free(&y);
	return same;
}

static bool have_astcenc(void)
{
	return system("command -v astcenc >/dev/null 2>&1") == 0;
}

/* Lowest PSNR accepted per sample (gradient, checker-alpha, wide) and footprint, well
 * under what the encoder gives at --quality fast, far above what a broken one would. */
static const struct {
	const char *block;
	uint32_t w, h;
	double gradient, checker, wide;
} footprints[] = {
	{"4x4", 4, 4, 45, 40, 40},
	{"5x4", 5, 4, 44, 38, 38},
	{"6x6", 6, 6, 42, 34, 33},
	{"8x8", 8, 8, 40, 30, 29},
	{"12x12", 12, 12, 36, 25, 25},
};
#define NFOOTPRINTS (sizeof footprints / sizeof footprints[0])

Test(cli_astc, footprints_to_astc_files_read_back_decode_within_bounds_and_match_astcenc)
{
	bool astcenc = have_astcenc();
	for (size_t f = 0; f < NFOOTPRINTS; f++) {
		const char *b = footprints[f].block;
		cr_assert_eq(kiln("encode --format astc --block %s --quality fast --json %s/in/*.png -o %s/%s", b, dir,
				  dir, b),
			     0, "%s: %s", b, slurp("stderr"));
		json_t *report = json_loads(slurp("stdout"), 0, NULL);
		cr_assert_not_null(report);
		cr_expect_str_eq(json_string_value(json_object_get(report, "device")), "cpu", "auto picks the CPU");
		json_decref(report);
		for (size_t i = 0; i < NSAMPLES; i++) {
			char name[128], dec[128], ref[128], src[128];
			snprintf(name, sizeof name, "%s/%s.astc", b, samples[i]);
			kiln_buf file;
			kiln_texture tex;
			read_texture(name, &file, &tex);
			cr_expect_eq(tex.format, KILN_TEXFMT_ASTC, "%s", name);
			cr_expect_eq(tex.block_w, footprints[f].w, "%s", name);
			cr_expect_eq(tex.block_h, footprints[f].h, "%s", name);
			cr_expect_eq(tex.num_levels, 1u, "%s", name);
			cr_expect(!tex.srgb, "%s: .astc has no colour space", name);
			uint32_t w = tex.levels[0].width, h = tex.levels[0].height;
			size_t blocks = (size_t)((w + footprints[f].w - 1) / footprints[f].w) *
					((h + footprints[f].h - 1) / footprints[f].h);
			cr_expect_eq(tex.levels[0].size, blocks * 16, "%s", name);
			kiln_buf_free(&file);

			/* the samples are sRGB: decoded as such they are what the encoder aimed at */
			snprintf(dec, sizeof dec, "%s/%s-srgb.png", b, samples[i]);
			cr_assert_eq(kiln("decode --srgb %s/%s -o %s/%s", dir, name, dir, dec), 0, "%s", slurp("stderr"));
			snprintf(src, sizeof src, "in/%s.png", samples[i]);
			double db = psnr(src, dec, false), want = 0;
			if (strcmp(samples[i], "gradient") == 0)
				want = footprints[f].gradient;
			else if (strcmp(samples[i], "checker-alpha") == 0)
				want = footprints[f].checker;
			else if (strcmp(samples[i], "wide") == 0)
				want = footprints[f].wide;
			else if (strcmp(samples[i], "noise") != 0)
				want = 50; /* a pixel, a solid block */
			cr_expect_geq(db, want, "%s: %.2f dB < %.2f", name, db, want);
			if (strcmp(samples[i], "checker-alpha") == 0)
				cr_expect_geq(psnr(src, dec, true), want, "%s: alpha is kept", name);

			/* without --srgb, as astcenc -dl decodes it */
			snprintf(dec, sizeof dec, "%s/%s-kiln.png", b, samples[i]);
			cr_assert_eq(kiln("decode %s/%s -o %s/%s", dir, name, dir, dec), 0, "%s", slurp("stderr"));
			if (!astcenc)
				continue;
			snprintf(ref, sizeof ref, "%s/%s-astcenc.png", b, samples[i]);
			char cmd[512];
			snprintf(cmd, sizeof cmd, "astcenc -dl %s/%s %s/%s -silent >/dev/null 2>&1", dir, name, dir, ref);
			cr_assert_eq(system(cmd), 0, "%s", cmd);
			cr_expect(same_pixels(dec, ref), "%s: astcenc -dl and kiln decode differ", name);
		}
	}
	if (!astcenc)
		cr_log_warn("astcenc is not installed: the comparison with astcenc -dl was skipped");
}

Test(cli_astc, ktx2_with_mip_chains_and_srgb)
{
	cr_assert_eq(kiln("encode --format astc --block 6x6 --quality fast --container ktx2 --mipmaps --srgb %s/in/*.png "
			  "-o %s/k/",
			  dir, dir),
		     0, "%s", slurp("stderr"));
	for (size_t i = 0; i < NSAMPLES; i++) {
		char name[128];
		snprintf(name, sizeof name, "k/%s.ktx2", samples[i]);
		kiln_buf file;
		kiln_texture tex;
		read_texture(name, &file, &tex);
		cr_expect_eq(tex.format, KILN_TEXFMT_ASTC, "%s", name);
		cr_expect_eq(tex.block_w, 6u);
		cr_expect_eq(tex.block_h, 6u);
		cr_expect(tex.srgb, "%s: KTX 2.0 says sRGB", name);
		cr_expect_eq(tex.num_levels, kiln_mip_count(tex.levels[0].width, tex.levels[0].height), "%s", name);
		cr_expect_eq(tex.levels[tex.num_levels - 1].width, 1u);
		cr_expect_eq(tex.levels[tex.num_levels - 1].height, 1u);
		for (uint32_t l = 0; l < tex.num_levels; l++)
			cr_expect_eq(tex.levels[l].size, (size_t)((tex.levels[l].width + 5) / 6) * ((tex.levels[l].height + 5) / 6) * 16,
				     "%s level %u", name, l);
		kiln_buf_free(&file);
	}
	/* the file says sRGB: no --srgb needed to decode it as such */
	cr_assert_eq(kiln("decode %s/k/gradient.ktx2 -o %s/k/gradient.png", dir, dir), 0, "%s", slurp("stderr"));
	cr_assert_eq(kiln("decode --srgb %s/k/gradient.ktx2 -o %s/k/gradient-srgb.png", dir, dir), 0, "%s", slurp("stderr"));
	cr_expect(same_pixels("k/gradient.png", "k/gradient-srgb.png"));
	double db = psnr("in/gradient.png", "k/gradient.png", false);
	cr_expect_geq(db, 42, "%.2f dB", db);
	/* a mip level decodes at its own size */
	cr_assert_eq(kiln("decode --level 3 %s/k/checker-alpha.ktx2 -o %s/k/l3.png", dir, dir), 0, "%s", slurp("stderr"));
	kiln_image l3;
	read_png("k/l3.png", &l3);
	cr_expect_eq(l3.width, 300u >> 3);
	cr_expect_eq(l3.height, 200u >> 3);
	cr_expect(l3.has_alpha, "the checker's alpha survives the mip chain");
	kiln_image_free(&l3);
}

Test(cli_astc, option_checks)
{
	cr_expect_eq(kiln("encode --format astc --block 7x7 %s/in/pixel.png -o %s/x.astc", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "--block") != NULL);
	cr_expect_eq(kiln("encode --format astc --block 4x4x %s/in/pixel.png -o %s/x.astc", dir, dir), 2);
	cr_expect_eq(kiln("encode --block 6x6 %s/in/pixel.png -o %s/x.dds", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "--format astc") != NULL);
	cr_expect_eq(kiln("encode --format astc --container dds %s/in/pixel.png -o %s/x.dds", dir, dir), 2);
	cr_expect_eq(kiln("encode --container astc %s/in/pixel.png -o %s/x.astc", dir, dir), 2);
	cr_expect_eq(kiln("encode --format astc --mipmaps %s/in/pixel.png -o %s/x.astc", dir, dir), 2);
	cr_expect(strstr(slurp("stderr"), "ktx2") != NULL, "%s", slurp("stderr"));
	/* ASTC runs on the GPU too: here (no GPU) asking for one fails as it does for BC1 */
	cr_expect_eq(kiln("encode --format astc --device gpu:9 %s/in/pixel.png -o %s/x.astc", dir, dir), 3);
	cr_expect(strstr(slurp("stderr"), "--device") != NULL, "%s", slurp("stderr"));
	cr_expect_eq(kiln("run --input %s/in --output %s/r --format astc --device gpu:9", dir, dir), 3);
	cr_expect(strstr(slurp("stderr"), "GPU") != NULL, "%s", slurp("stderr"));
	/* usage errors are one line */
	cr_expect_eq(kiln("encode --format astc --block 3x3 %s/in/pixel.png -o %s/x.astc", dir, dir), 2);
	char *err = slurp("stderr");
	cr_expect_eq(strchr(err, '\n'), err + strlen(err) - 1, "stderr: %s", err);
	/* --device auto and cpu both run */
	cr_expect_eq(kiln("encode --format astc --device auto %s/in/pixel.png -o %s/a.astc", dir, dir), 0, "%s",
		     slurp("stderr"));
	cr_expect_eq(kiln("encode --format astc --device cpu %s/in/pixel.png -o %s/c.astc", dir, dir), 0, "%s",
		     slurp("stderr"));
}

Test(cli_astc, kiln_run_encodes_a_folder_to_astc_through_the_worker)
{
	cr_assert_eq(kiln("run --input %s/in --output %s/r --format astc --block 6x6 --quality fast", dir, dir), 0,
		     "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	cr_assert_eq(kiln("encode --format astc --block 6x6 --quality fast %s/in/*.png -o %s/e/", dir, dir), 0, "%s",
		     slurp("stderr"));
	for (size_t i = 0; i < NSAMPLES; i++) {
		char name[128], ref[128];
		snprintf(name, sizeof name, "r/%s.astc", samples[i]);
		snprintf(ref, sizeof ref, "e/%s.astc", samples[i]);
		kiln_buf a, b;
		kiln_texture ta, tb;
		read_texture(name, &a, &ta);
		read_texture(ref, &b, &tb);
		cr_expect_eq(ta.format, KILN_TEXFMT_ASTC, "%s", name);
		cr_expect_eq(ta.block_w, 6u);
		cr_expect_eq(ta.block_h, 6u);
		cr_expect(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
			  "%s: the worker writes what kiln encode writes", name);
		kiln_buf_free(&a);
		kiln_buf_free(&b);
	}
	/* KTX 2.0 with mip chains, and the JSON report */
	cr_assert_eq(kiln("run --input %s/in --output %s/rk --format astc --block 8x8 --quality fast --container ktx2 "
			  "--mipmaps --json",
			  dir, dir),
		     0, "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	json_t *job = json_loads(slurp("stdout"), 0, NULL);
	cr_assert_not_null(job, "%s", slurp("stdout"));
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "done");
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(job, "items"), "done")), NSAMPLES);
	json_decref(job);
	kiln_buf file;
	kiln_texture tex;
	read_texture("rk/gradient.ktx2", &file, &tex);
	cr_expect_eq(tex.format, KILN_TEXFMT_ASTC);
	cr_expect_eq(tex.block_w, 8u);
	cr_expect_eq(tex.num_levels, kiln_mip_count(256, 256));
	kiln_buf_free(&file);
	/* mipmaps into .astc: every item fails with the reason */
	cr_expect_eq(kiln("run --input %s/in --output %s/rm --format astc --mipmaps --quality fast --max-attempts 1", dir,
			  dir),
		     1, "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	cr_expect(strstr(slurp("stdout"), "ktx2") != NULL, "%s", slurp("stdout"));
}
