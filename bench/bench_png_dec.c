/* kiln-bench --only pngdec: PNG decoding throughput, kiln's decoder (kernels/png/png_dec.h)
 * against libpng (common/png_io.c's configuration) and libspng, on the 24 Kodak files as
 * written by libpng (ordinary files), on kiSt files of the same images built here with zlib
 * (strips of 16 and of 8 rows, their first row Sub and the others Paeth, one zlib stream with
 * Z_FULL_FLUSH at strip boundaries) and on the same images as kiln's encoder writes them at
 * fast, medium and high (its automatic strips, adaptive filters, an IDAT chunk a strip);
 * KILN_BENCH_PNGDEC_SETS picks sets by key (set_kinds). Decoded MB/s counts RGBA8 output
 * bytes (w*h*4) and, in a second table, raw pixel bytes (w*h*3: the Kodak images are RGB). CPU figures are
 * wall time over the whole set, one thread and all cores (files spread over a pool); the
 * GPU figure is kernel time (events) of batches of 32 files resident on the device. */
#include <spng.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "bench/bench_util.h"
#include "common/buf.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_enc.h"
#include "kernels/texenc.h"
#include "tests/png_testutil.h"

int bench_png_dec(const bench_opts *opts, bench_report *report);

#define NFILES 24

typedef struct pd_set {
	kiln_buf files[NFILES];
	uint32_t w[NFILES], h[NFILES];
	uint64_t rgba_bytes, raw_bytes;
	uint8_t *out[NFILES];
	int gpu_to_cpu; /* checked GPU decodes sent to the CPU path (KILN_ERR_UNSUPPORTED) */
} pd_set;

/* img as kiln's encoder writes it at `quality` with default parameters (RGB: the Kodak
 * images have no alpha), its automatic strips and kiSt chunk. */
static kiln_status kiln_encoded(const kiln_image *img, kiln_quality quality, kiln_buf *out)
{
	kiln_pngenc_params p;
	kiln_pngenc_params_default(&p);
	p.quality = quality;
	kiln_surface s = {.rgba = img->pixels, .width = img->width, .height = img->height,
			  .stride = (uint32_t)img->stride, .has_alpha = 0};
	kiln_pngenc_image pi;
	kiln_pngenc_image_from_surface(&s, &pi);
	size_t cap = kiln_pngenc_bound(&p, &pi), size = 0, temp_size = kiln_pngenc_cpu_temp_size(&p, &pi, 1, NULL);
	void *temp = malloc(temp_size);
	kiln_buf_init(out, cap);
	kiln_status st = KILN_ERR_NOMEM, one = KILN_OK;
	if (!temp || kiln_buf_reserve(out, cap) != KILN_OK)
		goto fail;
	uint8_t *dst = out->data;
	st = kiln_pngenc_encode_cpu(&p, &pi, &dst, &cap, &size, 1, &one, temp, temp_size, NULL);
	if (st == KILN_OK)
		st = one;
	out->len = size;
fail:
	free(temp);
	return st;
}

/* The file sets: the Kodak files as they are (0), as kiSt files made with zlib (rows > 0)
 * or as kiln's encoder writes them (rows == 0, quality). */
#define NSETS 6
static const struct set_kind {
	const char *key, *name;
	uint32_t rows;
	kiln_quality quality;
} set_kinds[NSETS] = {
	{"ordinary", "ordinary", 0, 0},
	{"kist16", "kiSt (16-row strips)", 16, 0},
	{"kist8", "kiSt (8-row strips)", 8, 0},
	{"kilnfast", "kiln fast (kiSt)", 0, KILN_QUALITY_FAST},
	{"kilnmedium", "kiln medium (kiSt)", 0, KILN_QUALITY_MEDIUM},
	{"kilnhigh", "kiln high (kiSt)", 0, KILN_QUALITY_HIGH},
};

static kiln_status load_sets(pd_set *sets, char *err, size_t cap)
{
	const char *dir = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared/data";
	for (int i = 0; i < NFILES; i++) {
		char path[512];
		snprintf(path, sizeof path, "%s/kodak/kodim%02d.png", dir, i + 1);
		kiln_buf *plain = &sets[0].files[i];
		kiln_buf_init(plain, (size_t)64 << 20);
		kiln_status st = kiln_buf_read_file(plain, path);
		if (st != KILN_OK) {
			snprintf(err, cap, "cannot read %.200s", path);
			return st;
		}
		kiln_image img;
		st = kiln_png_decode(plain->data, plain->len, NULL, &img, err, cap);
		if (st != KILN_OK)
			return st;
		for (int k = 0; k < NSETS; k++) {
			pd_set *s = &sets[k];
			if (k > 0 && st == KILN_OK)
				st = set_kinds[k].rows ? png_test_make_kist(&img, set_kinds[k].rows, 0, &s->files[i])
						       : kiln_encoded(&img, set_kinds[k].quality, &s->files[i]);
			s->w[i] = img.width;
			s->h[i] = img.height;
			s->rgba_bytes += (uint64_t)img.width * img.height * 4;
			s->raw_bytes += (uint64_t)img.width * img.height * 3;
			s->out[i] = malloc((size_t)img.width * img.height * 4);
		}
		kiln_image_free(&img);
		if (st != KILN_OK)
			return st;
	}
	return KILN_OK;
}

static void free_set(pd_set *s)
{
	for (int i = 0; i < NFILES; i++) {
		kiln_buf_free(&s->files[i]);
		free(s->out[i]);
	}
}

enum { DEC_KILN, DEC_LIBPNG, DEC_SPNG };

struct cpu_run {
	pd_set *set;
	int which;
	kiln_pool *pool; /* NULL: one thread */
	int failed;
};

static void decode_one(struct cpu_run *r, size_t i)
{
	pd_set *s = r->set;
	char err[256];
	if (r->which == DEC_KILN) {
		if (kiln_pngdec_decode_cpu(s->files[i].data, s->files[i].len, NULL, s->out[i], 4 * (size_t)s->w[i],
					   NULL, err, sizeof err) != KILN_OK)
			r->failed = 1;
	} else if (r->which == DEC_LIBPNG) {
		kiln_image img;
		if (kiln_png_decode(s->files[i].data, s->files[i].len, NULL, &img, err, sizeof err) != KILN_OK)
			r->failed = 1;
		kiln_image_free(&img);
	} else {
		spng_ctx *ctx = spng_ctx_new(0);
		size_t need = 0;
		if (!ctx || spng_set_png_buffer(ctx, s->files[i].data, s->files[i].len) ||
		    spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &need) ||
		    need != (size_t)s->w[i] * s->h[i] * 4 ||
		    spng_decode_image(ctx, s->out[i], need, SPNG_FMT_RGBA8, 0))
			r->failed = 1;
		spng_ctx_free(ctx);
	}
}

static void cpu_chunk(void *ctx, size_t begin, size_t end)
{
	for (size_t i = begin; i < end; i++)
		decode_one(ctx, i);
}

static void cpu_all(void *ctx)
{
	struct cpu_run *r = ctx;
	kiln_pool_for(r->pool, NFILES, 1, cpu_chunk, r);
}

static double cpu_rate(const bench_opts *opts, pd_set *s, int which, kiln_pool *pool, int *failed)
{
	struct cpu_run r = {s, which, pool, 0};
	double t = bench_time(opts, cpu_all, &r);
	*failed += r.failed;
	return t > 0 ? (double)s->rgba_bytes / t / 1e6 : 0;
}

/* ---- GPU ------------------------------------------------------------------------------ */

#define GPU_BATCH 32

struct gpu_run {
	kiln_pngdec_gpu_file files[GPU_BATCH];
	kiln_status status[GPU_BATCH];
	uint8_t *d_data[GPU_BATCH], *d_rgba[GPU_BATCH];
	void *d_temp;
	size_t temp;
	kiln_stream stream;
	uint64_t rgba_bytes;
};

static kiln_status gpu_launch(void *ctx)
{
	struct gpu_run *g = ctx;
	return kiln_pngdec_decode_gpu(g->files, GPU_BATCH, g->status, g->d_temp, g->temp, g->stream);
}

static void gpu_free(struct gpu_run *g)
{
	for (int i = 0; i < GPU_BATCH; i++) {
		kiln_gpu_free(g->d_data[i]);
		kiln_gpu_free(g->d_rgba[i]);
	}
	kiln_gpu_free(g->d_temp);
	kiln_gpu_stream_destroy(g->stream);
}

/* A batch of 32 of the set's files resident on the device, with its own stream, scratch
 * and outputs. */
static kiln_status gpu_setup(pd_set *s, struct gpu_run *g)
{
	char err[256];
	kiln_status st = kiln_gpu_stream_create(&g->stream);
	for (int i = 0; st == KILN_OK && i < GPU_BATCH; i++) {
		kiln_buf *f = &s->files[i % NFILES];
		st = kiln_pngdec_probe(f->data, f->len, NULL, &g->files[i].info, err, sizeof err);
		size_t bytes = (size_t)g->files[i].info.width * 4 * g->files[i].info.height;
		if (st == KILN_OK)
			st = kiln_gpu_malloc((void **)&g->d_data[i], f->len);
		if (st == KILN_OK)
			st = kiln_gpu_malloc((void **)&g->d_rgba[i], bytes);
		if (st == KILN_OK)
			st = kiln_gpu_h2d(g->d_data[i], f->data, f->len, g->stream);
		g->files[i].data = g->d_data[i];
		g->files[i].size = f->len;
		g->files[i].rgba = g->d_rgba[i];
		g->files[i].stride = g->files[i].info.width * 4;
		g->rgba_bytes += bytes;
	}
	if (st == KILN_OK) {
		g->temp = kiln_pngdec_temp_size(g->files, GPU_BATCH);
		st = kiln_gpu_malloc(&g->d_temp, g->temp);
	}
	return st;
}

/* After g's stream ran a batch: every file's status and pixels against the CPU decoder.
 * Returns the files that differ; a file the GPU decoder sends to the CPU path
 * (KILN_ERR_UNSUPPORTED, png_dec.h) is no mismatch: it is counted in s->gpu_to_cpu. */
static int gpu_check(pd_set *s, struct gpu_run *g)
{
	char err[256];
	if (kiln_gpu_stream_sync(g->stream) != KILN_OK ||
	    kiln_pngdec_gpu_status(g->files, GPU_BATCH, g->status, g->d_temp, g->temp) != KILN_OK)
		return GPU_BATCH;
	int bad = 0;
	for (int i = 0; i < GPU_BATCH; i++) {
		size_t bytes = (size_t)g->files[i].info.width * 4 * g->files[i].info.height;
		uint8_t *a = malloc(bytes), *b = malloc(bytes);
		kiln_buf *f = &s->files[i % NFILES];
		if (g->status[i] == KILN_ERR_UNSUPPORTED) {
			s->gpu_to_cpu++;
			free(a);
			free(b);
			continue;
		}
		bad += g->status[i] != KILN_OK || !a || !b ||
		       kiln_gpu_d2h(a, g->d_rgba[i], bytes, g->stream) != KILN_OK ||
		       kiln_pngdec_decode_cpu(f->data, f->len, NULL, b, g->files[i].stride, NULL, err, sizeof err) != KILN_OK ||
		       memcmp(a, b, bytes) != 0;
		free(a);
		free(b);
	}
	return bad;
}

/* Kernel-time MB/s of RGBA output for batches of 32 of the set's files; checks the
 * output against the CPU decoder once. Returns < 0 on failure. phases (NULL: none): the
 * kernel times of one more batch, as text. legacy: kiln_pngdec_gpu_debug flags (1: no window
 * walk, 8: no copy rounds, 16: the old de-filter, 128: 32-bit
 * windows, 512: no refill words loaded ahead; more runs with KILN_BENCH_PNGDEC_FLAGS=a,b,...). */
static double gpu_rate(const bench_opts *opts, pd_set *s, int *failed, char *phases, size_t phases_cap,
		       unsigned legacy)
{
	struct gpu_run *g = calloc(1, sizeof *g);
	double rate = -1;
#ifdef KILN_HAVE_CUDA
	kiln_pngdec_gpu_debug(legacy);
#endif
	if (!g || gpu_setup(s, g) != KILN_OK)
		goto fail;
	double sec = 0;
	if (bench_gpu_time(opts, g->stream, gpu_launch, g, &sec) != KILN_OK || sec <= 0)
		goto fail;
	/* check one batch */
	if (gpu_launch(g) != KILN_OK)
		goto fail;
	int bad = gpu_check(s, g);
	if (bad) {
		*failed += bad;
		goto fail;
	}
	rate = (double)g->rgba_bytes / sec / 1e6;
#ifdef KILN_HAVE_CUDA
	if (phases) {
		float ms[4];
		kiln_pngdec_gpu_debug(2 | legacy);
		if (gpu_launch(g) == KILN_OK && kiln_pngdec_gpu_phase_ms(ms) == 0)
			snprintf(phases, phases_cap, "gather %.3f ms, inflate %.3f ms, finish %.3f ms, defilter %.3f ms",
				 ms[0], ms[1], ms[2], ms[3]);
		unsigned long long v[12];
		kiln_pngdec_gpu_debug(4 | legacy);
		if (kiln_pngdec_gpu_prof(v) == 0 && gpu_launch(g) == KILN_OK && kiln_pngdec_gpu_prof(v) == 0 &&
		    v[4] > 0) {
			size_t n = strlen(phases);
			double per = 1.0 / (double)v[4];
			snprintf(phases + n, phases_cap - n,
				 "; lane-0 clocks per output byte: headers %.1f, decode %.1f, copy %.1f, flush %.1f; "
				 "%.1f matches/KB, %.2f headers/stream; %.1f windows/KB, %.1f symbols walked/KB, "
				 "clocks per window: %.0f refill, %.0f window",
				 v[0] * per, v[1] * per, v[2] * per, v[3] * per, 1024.0 * v[5] * per,
				 v[7] ? (double)v[6] / v[7] : 0, 1024.0 * v[8] * per, 1024.0 * v[9] * per,
				 v[8] ? (double)v[10] / v[8] : 0, v[8] ? (double)v[11] / v[8] : 0);
		}
	}
#endif
fail:
#ifdef KILN_HAVE_CUDA
	kiln_pngdec_gpu_debug(0);
#endif
	if (g) {
		gpu_free(g);
		free(g);
	}
	return rate;
}

#define GPU_MAX_FLIGHT 4

/* Sustained MB/s with `flight` batches in flight, each on its own stream with its own
 * scratch (as the worker's texenc keeps them): wall time of rounds of `flight` launches,
 * one a stream, until all streams are done; so one batch's tail (its last strips, the
 * de-filter's last bands) overlaps the next batch's work. Every stream's last batch is
 * checked against the CPU decoder. Returns < 0 on failure. */
static double gpu_flight_rate(const bench_opts *opts, pd_set *s, int flight, int *failed, unsigned legacy)
{
	struct gpu_run *g = calloc((size_t)flight, sizeof *g);
#ifdef KILN_HAVE_CUDA
	kiln_pngdec_gpu_debug(legacy);
#else
	(void)legacy;
#endif
	double rate = -1, t[64];
	int reps = opts->reps < 1 ? 1 : opts->reps > 64 ? 64 : opts->reps;
	int rounds = opts->gpu_launches < 1 ? 1 : opts->gpu_launches;
	if (!g)
		return -1;
	for (int k = 0; k < flight; k++)
		if (gpu_setup(s, &g[k]) != KILN_OK)
			goto fail;
	for (int r = -opts->warmup; r < reps; r++) {
		for (int k = 0; k < flight; k++)
			if (kiln_gpu_stream_sync(g[k].stream) != KILN_OK)
				goto fail;
		double t0 = bench_now();
		for (int i = 0; i < rounds; i++)
			for (int k = 0; k < flight; k++)
				if (gpu_launch(&g[k]) != KILN_OK)
					goto fail;
		for (int k = 0; k < flight; k++)
			if (kiln_gpu_stream_sync(g[k].stream) != KILN_OK)
				goto fail;
		if (r >= 0)
			t[r] = (bench_now() - t0) / rounds;
	}
	int bad = 0;
	for (int k = 0; k < flight; k++)
		bad += gpu_check(s, &g[k]);
	if (bad) {
		*failed += bad;
		goto fail;
	}
	rate = (double)g[0].rgba_bytes * flight / bench_median(t, (size_t)reps) / 1e6;
fail:
	for (int k = 0; k < flight; k++)
		gpu_free(&g[k]);
	free(g);
#ifdef KILN_HAVE_CUDA
	kiln_pngdec_gpu_debug(0);
#endif
	return rate;
}

/* The worker's GPU path for these files without its other stages: kiln_texenc_submit_png
 * (BC1 fast) on GPU 0 with batches of 32 kept in flight as the worker keeps them (submit
 * while a slot is free, else collect the oldest), `rounds` batches. Images/s, and the
 * host's milliseconds per batch in submit (staging, launches) and in collect (the wait
 * for the stream, the statuses, the blocks copied out). < 0 on failure. */
static double texenc_rate(const bench_opts *opts, pd_set *s, double *submit_ms, double *collect_ms, int *failed)
{
	kiln_texenc_opts to;
	kiln_texenc_opts_default(&to);
	to.quality = KILN_QUALITY_FAST;
	kiln_device dev = {KILN_DEVICE_GPU, 0};
	kiln_texenc *enc = NULL;
	kiln_texenc_png files[GPU_BATCH];
	kiln_texture out[GPU_BATCH];
	kiln_status status[GPU_BATCH];
	uint64_t tickets[KILN_TEXENC_MAX_INFLIGHT];
	char err[256];
	int rounds = 8 * (opts->gpu_launches < 1 ? 1 : opts->gpu_launches), head = 0, inflight = 0;
	double rate = -1, t_sub = 0, t_col = 0;
	if (kiln_texenc_create(&dev, &to, NULL, &enc) != KILN_OK)
		return -1;
	unsigned depth = kiln_texenc_depth(enc);
	for (int i = 0; i < GPU_BATCH; i++) {
		kiln_buf *f = &s->files[i % NFILES];
		files[i].data = f->data;
		files[i].size = f->len;
		if (kiln_pngdec_probe(f->data, f->len, NULL, &files[i].info, err, sizeof err) != KILN_OK)
			goto fail;
	}
	/* one untimed round fills every slot once (their buffers grow to the batch) */
	for (int pass = 0; pass < 2; pass++) {
		int batches = pass == 0 ? (int)depth : rounds;
		double t0 = bench_now();
		t_sub = t_col = 0;
		for (int b = 0; b < batches || inflight > 0;) {
			double a = bench_now();
			if (inflight < (int)depth && b < batches) {
				if (kiln_texenc_submit_png(enc, files, GPU_BATCH, &tickets[(head + inflight) % depth]) != KILN_OK)
					goto fail;
				t_sub += bench_now() - a;
				inflight++;
				b++;
				continue;
			}
			kiln_status st = kiln_texenc_collect(enc, tickets[head], out, status);
			t_col += bench_now() - a;
			head = (head + 1) % (int)depth;
			inflight--;
			for (int i = 0; i < GPU_BATCH; i++) {
				*failed += st != KILN_OK || status[i] != KILN_OK;
				kiln_texture_free_levels(&out[i]);
			}
			if (st != KILN_OK)
				goto fail;
		}
		double sec = bench_now() - t0;
		if (pass == 1 && sec > 0) {
			rate = (double)rounds * GPU_BATCH / sec;
			*submit_ms = t_sub * 1e3 / rounds;
			*collect_ms = t_col * 1e3 / rounds;
		}
	}
fail:
	kiln_texenc_destroy(enc);
	return rate;
}

int bench_png_dec(const bench_opts *opts, bench_report *report)
{
	static pd_set sets[NSETS];
	char err[256];
	int failed = 0;
	memset(sets, 0, sizeof sets);
	if (load_sets(sets, err, sizeof err) != KILN_OK) {
		bench_report_line(report, "pngdec: %s", err);
		return 1;
	}
	kiln_pool *pool = NULL;
	if (kiln_pool_create(0, &pool) != KILN_OK)
		return 1;
	unsigned cores = kiln_pool_threads(pool);
	/* batches in flight for the sustained GPU rate: the worker's texenc keeps up to 3 */
	const char *fe = getenv("KILN_BENCH_PNGDEC_FLIGHT");
	int flight = fe && *fe ? atoi(fe) : 3;
	flight = flight < 1 ? 1 : flight > GPU_MAX_FLIGHT ? GPU_MAX_FLIGHT : flight;
	char note[768];
	snprintf(note, sizeof note,
		 "Decoded MB/s of RGBA8 output (w*h*4 bytes) over the 24 Kodak files; anchor = libspng "
		 "(SPNG_FMT_RGBA8) unless the row says otherwise. Ordinary files: as libpng wrote them; "
		 "kiSt: the same images with a kiSt chunk (16-row strips). All cores = %u threads, files "
		 "spread over a pool (the kiSt files then decode strips serially on their thread). GPU: "
		 "kernel time of batches of %d files resident on the device; \"in flight\": wall time of "
		 "%d such batches at once, each on its own stream (KILN_BENCH_PNGDEC_FLIGHT), as the "
		 "worker keeps them.",
		 cores, GPU_BATCH, flight);
	bench_section *sec = bench_section_add(report, "PNG decoding (kiln vs libspng and libpng)", note);
	bench_section *raw = bench_section_add(report, "PNG decoding, raw pixel bytes",
					       "The same runs in MB/s of raw RGB pixel bytes (w*h*3).");
	if (!sec || !raw)
		return 1;
	for (int k = 0; k < NSETS; k++) {
		pd_set *s = &sets[k];
		const char *name = set_kinds[k].name;
		if (!bench_env_lists("KILN_BENCH_PNGDEC_SETS", set_kinds[k].key, true))
			continue;
		double f = (double)s->raw_bytes / (double)s->rgba_bytes;
		double k1 = cpu_rate(opts, s, DEC_KILN, NULL, &failed);
		double p1 = cpu_rate(opts, s, DEC_LIBPNG, NULL, &failed);
		double s1 = cpu_rate(opts, s, DEC_SPNG, NULL, &failed);
		double kn = cpu_rate(opts, s, DEC_KILN, pool, &failed);
		double pn = cpu_rate(opts, s, DEC_LIBPNG, pool, &failed);
		double sn = cpu_rate(opts, s, DEC_SPNG, pool, &failed);
		const char *ph = getenv("KILN_BENCH_PNGDEC_PHASES");
		char phases[768] = "";
		double gk = kiln_gpu_count() > 0 ? gpu_rate(opts, s, &failed, ph ? phases : NULL, sizeof phases, 0) : -1;
		double gf = gk > 0 && flight > 1 ? gpu_flight_rate(opts, s, flight, &failed, 0) : -1;
		if (gf > 0) /* the table keeps 3 digits; A/B runs compare finer */
			fprintf(stderr, "pngdec GPU %s: batch %.0f MB/s, %d in flight %.0f MB/s\n", name, gk, flight, gf);
		double sub_ms = 0, col_ms = 0;
		double te = gk > 0 ? texenc_rate(opts, s, &sub_ms, &col_ms, &failed) : -1;
#ifdef KILN_HAVE_CUDA
		if (ph && gk > 0) {
			bench_opts quick = *opts;
			quick.warmup = 0;
			quick.reps = 1;
			quick.gpu_launches = 3;
			char old_phases[768] = "";
			double old = gpu_rate(&quick, s, &failed, old_phases, sizeof old_phases, 1 | 8 | 16);
			fprintf(stderr, "pngdec GPU %s: %.0f MB/s (%s)\n  one symbol at a time, matches one by one, old de-filter: %.0f MB/s (%s)\n", name, gk,
				phases, old, old_phases);
			/* KILN_BENCH_PNGDEC_FLAGS: more A/B runs, comma-separated debug flags */
			const char *fl = getenv("KILN_BENCH_PNGDEC_FLAGS");
			while (fl && *fl) {
				char *endp;
				unsigned long v = strtoul(fl, &endp, 0);
				if (endp == fl)
					break;
				char ab[768] = "";
				double r = gpu_rate(&quick, s, &failed, ab, sizeof ab, (unsigned)v);
				double rf = flight > 1 ? gpu_flight_rate(opts, s, flight, &failed, (unsigned)v) : -1;
				fprintf(stderr, "  flags %lu: %.0f MB/s, %d in flight %.0f MB/s (%s)\n", v, r, flight, rf, ab);
				fl = *endp == ',' ? endp + 1 : endp;
			}
		}
#endif
		char what[160];
		snprintf(what, sizeof what, "%s files, CPU 1 thread", name);
		bench_row_rate(sec, what, k1, s1, "MB/s");
		bench_row_rate(raw, what, k1 * f, s1 * f, "MB/s");
		snprintf(what, sizeof what, "%s files, CPU 1 thread, anchor libpng", name);
		bench_row_rate(sec, what, k1, p1, "MB/s");
		bench_row_rate(raw, what, k1 * f, p1 * f, "MB/s");
		snprintf(what, sizeof what, "%s files, CPU all cores", name);
		bench_row_rate(sec, what, kn, sn, "MB/s");
		bench_row_rate(raw, what, kn * f, sn * f, "MB/s");
		snprintf(what, sizeof what, "%s files, CPU all cores, anchor libpng", name);
		bench_row_rate(sec, what, kn, pn, "MB/s");
		bench_row_rate(raw, what, kn * f, pn * f, "MB/s");
		if (gk > 0) {
			snprintf(what, sizeof what, "%s files, GPU batch %d vs libspng all cores", name, GPU_BATCH);
			bench_row_rate(sec, what, gk, sn, "MB/s");
			bench_row_rate(raw, what, gk * f, sn * f, "MB/s");
			snprintf(what, sizeof what, "%s files, GPU %d batches of %d in flight vs libspng all cores", name,
				 flight, GPU_BATCH);
			if (gf > 0) {
				bench_row_rate(sec, what, gf, sn, "MB/s");
				bench_row_rate(raw, what, gf * f, sn * f, "MB/s");
			} else if (flight > 1) {
				bench_report_line(report, "pngdec: the GPU run of %d batches in flight on %s files failed",
						  flight, name);
				failed++;
			}
			snprintf(what, sizeof what, "%s files, texenc BC1 fast on the GPU (PNG decoded there), images/s", name);
			char ms[96];
			snprintf(ms, sizeof ms, "host per batch: submit %.2f ms, collect %.2f ms", sub_ms, col_ms);
			char rt[48];
			snprintf(rt, sizeof rt, "%.0f images/s", te);
			if (te > 0)
				bench_row_text(sec, what, rt, ms, NULL);
			else {
				bench_report_line(report, "pngdec: the texenc run on %s files failed", name);
				failed++;
			}
		} else if (kiln_gpu_count() > 0) {
			bench_report_line(report, "pngdec: the GPU run on %s files failed", name);
			failed++;
		}
		if (s->gpu_to_cpu)
			bench_report_line(report, "pngdec: %d checked GPU decodes of %s files went to the CPU path "
					  "(the GPU rates leave out their CPU decode)", s->gpu_to_cpu, name);
		if (failed)
			bench_report_line(report, "pngdec: a decoder failed on %s files", name);
	}
	kiln_pool_destroy(pool);
	for (int k = 0; k < NSETS; k++)
		free_set(&sets[k]);
	return failed;
}
