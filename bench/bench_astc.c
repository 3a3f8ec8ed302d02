/* ASTC against ARM's astcenc (libastcenc, linked): mean RGB PSNR over the Kodak set for
 * kiln fast / medium / high next to astcenc -fast / -medium / -thorough at 4x4, 6x6 and
 * 8x8 (linear LDR, every encoder's output decoded by kiln_astc_decode, which is exact to
 * astcenc's decoder), mean RGBA PSNR over the same images with an alpha mask drawn in code,
 * and single-thread speed (Mpix/s of CPU time on the encoding thread) of both encoders.
 *
 * Both encoders run on one thread, one after the other, so the CPU-time figures compare
 * per-core speed even on a loaded machine. The full grid is slow (astcenc -thorough and
 * kiln high on 24 images x 3 footprints x 2 image kinds); for iteration, environment
 * variables restrict it:
 *   KILN_BENCH_ASTC_IMAGES=N      the first N Kodak images (default 24)
 *   KILN_BENCH_ASTC_CROP=S        the centre S x S of each image (default: whole image)
 *   KILN_BENCH_ASTC_FOOTPRINTS=4x4,6x6   footprints (default 4x4,6x6,8x8)
 *   KILN_BENCH_ASTC_QUALITIES=fast,medium  levels (default fast,medium,high)
 *   KILN_BENCH_ASTC_ALPHA=0       skip the RGBA part */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/astcenc_shim.h"
#include "bench/bench_util.h"
#include "kernels/astc/astc.h"

int bench_astc(const bench_opts *opts, const bench_set *set, bench_report *report);

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One test image, tightly packed (astcenc wants packed rows). */
typedef struct astc_img {
	uint8_t *px;
	uint32_t w, h;
	int alpha;
} astc_img;

/* A smooth radial ramp and a hard-edged disc: alpha with gradients and sharp edges. */
static uint8_t mask_alpha(uint32_t x, uint32_t y, uint32_t w, uint32_t h)
{
	double u = (double)x / w - 0.5, v = (double)y / h - 0.5;
	double r = sqrt(u * u + v * v);
	double a = 255.0 * (1.0 - r * 1.6);
	double du = (double)x / w - 0.7, dv = (double)y / h - 0.3;
	if (du * du + dv * dv < 0.02)
		a = 0.0;
	if (((x / 37) + (y / 29)) % 7 == 0)
		a = 255.0;
	return (uint8_t)(a < 0 ? 0 : (a > 255 ? 255 : a + 0.5));
}

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

static int env_has(const char *name, const char *item, int def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	return strstr(v, item) != NULL;
}

static double psnr_of(const uint8_t *a, const uint8_t *b, uint32_t w, uint32_t h, int channels)
{
	uint64_t sse = 0;
	for (size_t i = 0; i < (size_t)w * h; i++)
		for (int c = 0; c < channels; c++) {
			int d = (int)a[4 * i + c] - (int)b[4 * i + c];
			sse += (uint64_t)(d * d);
		}
	return bench_psnr((double)sse / ((double)w * h * channels));
}

typedef struct astc_result {
	double psnr_sum;
	double seconds;
	uint64_t pixels;
	int failed;
} astc_result;

static void run_kiln(const astc_img *img, int bw, int bh, kiln_quality q, uint8_t *blocks,
		     uint8_t *dec, astc_result *r)
{
	kiln_astc_params p;
	kiln_astc_params_default(&p);
	p.quality = q;
	p.block_w = (uint32_t)bw;
	p.block_h = (uint32_t)bh;
	kiln_surface s = {img->px, img->w, img->h, 4 * img->w, img->alpha};
	uint8_t *dst[1] = {blocks};
	kiln_status st;
	double t0 = cpu_now();
	kiln_status batch = kiln_astc_encode_cpu(&p, &s, dst, 1, &st, NULL);
	r->seconds += cpu_now() - t0;
	r->pixels += (uint64_t)img->w * img->h;
	if (batch != KILN_OK || st != KILN_OK) {
		r->failed++;
		return;
	}
	kiln_astc_decode(blocks, kiln_astc_bound(img->w, img->h, (uint32_t)bw, (uint32_t)bh), img->w,
			 img->h, (uint32_t)bw, (uint32_t)bh, 0, dec, 4 * (size_t)img->w);
	r->psnr_sum += psnr_of(img->px, dec, img->w, img->h, img->alpha ? 4 : 3);
}

static void run_astcenc(const astc_img *img, int bw, int bh, astcenc_shim_preset preset,
			uint8_t *blocks, uint8_t *dec, astc_result *r)
{
	size_t bytes = kiln_astc_bound(img->w, img->h, (uint32_t)bw, (uint32_t)bh);
	double sec = 0;
	int e = astcenc_shim_encode(img->px, img->w, img->h, (uint32_t)bw, (uint32_t)bh, preset, blocks,
				    bytes, &sec);
	r->seconds += sec;
	r->pixels += (uint64_t)img->w * img->h;
	if (e != 0) {
		r->failed++;
		return;
	}
	kiln_astc_decode(blocks, bytes, img->w, img->h, (uint32_t)bw, (uint32_t)bh, 0, dec,
			 4 * (size_t)img->w);
	r->psnr_sum += psnr_of(img->px, dec, img->w, img->h, img->alpha ? 4 : 3);
}

int bench_astc(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	(void)opts;
	static const int fps[3][2] = {{4, 4}, {6, 6}, {8, 8}};
	static const char *fp_names[3] = {"4x4", "6x6", "8x8"};
	static const kiln_quality qs[3] = {KILN_QUALITY_FAST, KILN_QUALITY_MEDIUM, KILN_QUALITY_HIGH};
	static const char *q_names[3] = {"fast", "medium", "high"};
	static const char *a_names[3] = {"-fast", "-medium", "-thorough"};
	static const astcenc_shim_preset presets[3] = {ASTCENC_SHIM_FAST, ASTCENC_SHIM_MEDIUM,
						       ASTCENC_SHIM_THOROUGH};
	/* images [first, first + count) of the set: runs over parts of the set can go to
	 * separate processes (the stderr lines carry the sums that combine them) */
	int first = env_int("KILN_BENCH_ASTC_FIRST", 0);
	int count = env_int("KILN_BENCH_ASTC_IMAGES", (int)set->count);
	int crop = env_int("KILN_BENCH_ASTC_CROP", 0);
	/* 0: RGB only, 1: RGB then RGBA, 2: RGBA only */
	int alpha_mode = env_int("KILN_BENCH_ASTC_ALPHA", 1);
	if (first < 0 || first >= (int)set->count)
		first = 0;
	if (count < 1 || count > (int)set->count - first)
		count = (int)set->count - first;
	int failed = 0;

	astc_img imgs[2][BENCH_KODAK_COUNT];
	size_t max_px = 0;
	for (int i = 0; i < count; i++) {
		const kiln_surface *s = &set->surfaces[first + i];
		uint32_t w = s->width, h = s->height, x0 = 0, y0 = 0;
		if (crop > 0 && (uint32_t)crop < w && (uint32_t)crop < h) {
			x0 = (w - (uint32_t)crop) / 2;
			y0 = (h - (uint32_t)crop) / 2;
			w = h = (uint32_t)crop;
		}
		for (int a = 0; a < 2; a++) {
			astc_img *im = &imgs[a][i];
			im->w = w;
			im->h = h;
			im->alpha = a;
			im->px = malloc((size_t)w * h * 4);
			if (!im->px)
				return 1;
			for (uint32_t y = 0; y < h; y++)
				for (uint32_t x = 0; x < w; x++) {
					const uint8_t *t = s->rgba + (size_t)(y0 + y) * s->stride + 4 * (size_t)(x0 + x);
					uint8_t *o = im->px + 4 * ((size_t)y * w + x);
					o[0] = t[0];
					o[1] = t[1];
					o[2] = t[2];
					o[3] = a ? mask_alpha(x, y, w, h) : 255;
				}
		}
		if ((size_t)w * h > max_px)
			max_px = (size_t)w * h;
	}
	uint8_t *blocks = malloc(max_px * 2 + 64), *dec = malloc(max_px * 4);
	if (!blocks || !dec) {
		free(blocks);
		free(dec);
		return 1;
	}

	char note[512];
	snprintf(note, sizeof note,
		 "Mean PSNR (dB) over %d Kodak image(s)%s, linear LDR; kiln fast/medium/high against "
		 "astcenc -fast/-medium/-thorough (libastcenc), both decoded by kiln_astc_decode. "
		 "Speed: Mpix/s of CPU time on one thread, per encoder. RGBA: the same images with "
		 "an alpha mask drawn in code, PSNR over 4 channels.",
		 count, crop > 0 ? " (centre crops)" : "");
	bench_section *sec = bench_section_add(report, "ASTC: kiln against astcenc", note);
	for (int a = alpha_mode == 2 ? 1 : 0; a < (alpha_mode ? 2 : 1); a++) {
		for (int f = 0; f < 3; f++) {
			if (!env_has("KILN_BENCH_ASTC_FOOTPRINTS", fp_names[f], 1))
				continue;
			for (int q = 0; q < 3; q++) {
				if (!env_has("KILN_BENCH_ASTC_QUALITIES", q_names[q], 1))
					continue;
				astc_result rk = {0}, ra = {0};
				for (int i = 0; i < count; i++) {
					run_kiln(&imgs[a][i], fps[f][0], fps[f][1], qs[q], blocks, dec, &rk);
					run_astcenc(&imgs[a][i], fps[f][0], fps[f][1], presets[q], blocks, dec, &ra);
				}
				failed += rk.failed + ra.failed;
				char what[160], kc[48], ac[48], rc[32];
				snprintf(what, sizeof what, "%s %s %s vs astcenc %s: PSNR dB", a ? "RGBA" : "RGB",
					 fp_names[f], q_names[q], a_names[q]);
				if (sec)
					bench_row_psnr(sec, what, rk.psnr_sum / count, ra.psnr_sum / count);
				double mk = (double)rk.pixels / 1e6 / rk.seconds, ma = (double)ra.pixels / 1e6 / ra.seconds;
				snprintf(what, sizeof what, "%s %s %s vs astcenc %s: Mpix/s per thread",
					 a ? "RGBA" : "RGB", fp_names[f], q_names[q], a_names[q]);
				if (sec)
					bench_row_rate(sec, what, mk, ma, "Mpix/s");
				snprintf(kc, sizeof kc, "%.3f", rk.psnr_sum / count);
				snprintf(ac, sizeof ac, "%.3f", ra.psnr_sum / count);
				snprintf(rc, sizeof rc, "%+.3f", (rk.psnr_sum - ra.psnr_sum) / count);
				fprintf(stderr,
					"astc %s %s %-6s kiln %s astcenc %s (%s dB)  %.3f vs %.3f Mpix/s  "
					"[images %d+%d: PSNR sums %.6f %.6f, Mpix %.6f, seconds %.6f %.6f]\n",
					a ? "RGBA" : "RGB ", fp_names[f], q_names[q], kc, ac, rc, mk, ma, first, count,
					rk.psnr_sum, ra.psnr_sum, (double)rk.pixels / 1e6, rk.seconds, ra.seconds);
			}
		}
	}
	free(blocks);
	free(dec);
	for (int a = 0; a < 2; a++)
		for (int i = 0; i < count; i++)
			free(imgs[a][i].px);
	return failed;
}
