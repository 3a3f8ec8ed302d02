/* Benchmark plumbing: the Kodak set, timing, PSNR, block-row splitting over the pool, and
 * the markdown report. See bench_util.h. */
#include "bench/bench_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/png_io.h"
#include "kernels/gpu.h"

/* ---- images ------------------------------------------------------------------------- */

static const char *kodak_dir(char *buf, size_t cap)
{
	const char *env = getenv("KILN_SHARED");
	snprintf(buf, cap, "%s/kodak", env ? env : "../shared/data");
	return buf;
}

kiln_status bench_load_kodak(bench_set *set, char *err, size_t err_cap)
{
	char dir[400], path[512], why[256] = "";
	memset(set, 0, sizeof *set);
	kodak_dir(dir, sizeof dir);
	for (size_t i = 0; i < BENCH_KODAK_COUNT; i++) {
		snprintf(path, sizeof path, "%s/kodim%02zu.png", dir, i + 1);
		kiln_image *img = &set->images[i];
		kiln_status st = kiln_png_read_file(path, NULL, img, why, sizeof why);
		if (st != KILN_OK) {
			snprintf(err, err_cap, "%s: %s (%s)", path, kiln_strerror(st), why);
			bench_set_free(set);
			return st;
		}
		set->surfaces[i] = (kiln_surface){ img->pixels, img->width, img->height,
						   (uint32_t)img->stride, img->has_alpha };
		set->pixels += (uint64_t)img->width * img->height;
		set->count++;
	}
	return KILN_OK;
}

void bench_set_free(bench_set *set)
{
	for (size_t i = 0; i < set->count; i++)
		kiln_image_free(&set->images[i]);
	memset(set, 0, sizeof *set);
}

/* ---- time ------------------------------------------------------------------------- */

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_time(const bench_opts *opts, void (*fn)(void *ctx), void *ctx)
{
	double t[64], spent = 0;
	int reps = opts->reps < 1 ? 1 : opts->reps > 64 ? 64 : opts->reps;
	int n = 0;
	for (int i = 0; i < opts->warmup; i++) {
		double start = bench_now();
		fn(ctx);
		double run = bench_now() - start;
		if (i == 0 && run > 1.0) {
			t[n++] = run;
			spent += run;
			break;
		}
	}
	while (n < reps && (n == 0 || spent < opts->budget_s)) {
		double start = bench_now();
		fn(ctx);
		t[n] = bench_now() - start;
		spent += t[n++];
	}
	return bench_median(t, (size_t)n);
}

/* ---- quality ------------------------------------------------------------------------ */

uint64_t bench_sse_rgb(const uint8_t *a, size_t stride_a, const uint8_t *b, size_t stride_b,
		       uint32_t w, uint32_t h)
{
	uint64_t sse = 0;
	for (uint32_t y = 0; y < h; y++) {
		const uint8_t *pa = a + (size_t)y * stride_a, *pb = b + (size_t)y * stride_b;
		for (uint32_t x = 0; x < w; x++, pa += 4, pb += 4) {
			for (int c = 0; c < 3; c++) {
				int d = pa[c] - pb[c];
				sse += (uint64_t)(d * d);
			}
		}
	}
	return sse;
}

double bench_psnr(double mse)
{
	return mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : 99.0;
}

/* ---- splitting anchor work over the pool ------------------------------------------- */

typedef struct rows_work {
	const bench_set *set;
	bench_rows_fn fn;
	void *ctx;
} rows_work;

/* Items are block rows numbered across the images, in order. */
static void rows_range(void *ctx, size_t begin, size_t end)
{
	const rows_work *work = ctx;
	size_t first = 0;
	for (size_t i = 0; i < work->set->count && first < end; i++) {
		size_t rows = (work->set->surfaces[i].height + 3) / 4;
		size_t lo = begin > first ? begin - first : 0;
		size_t hi = end - first < rows ? end - first : rows;
		if (lo < hi)
			work->fn(work->ctx, i, (uint32_t)lo, (uint32_t)hi);
		first += rows;
	}
}

void bench_for_block_rows(kiln_pool *pool, const bench_set *set, bench_rows_fn fn, void *ctx)
{
	rows_work work = { set, fn, ctx };
	size_t rows = 0;
	for (size_t i = 0; i < set->count; i++)
		rows += (set->surfaces[i].height + 3) / 4;
	kiln_pool_for(pool, rows, 0, rows_range, &work);
}

/* ---- GPU ------------------------------------------------------------------------ */

kiln_status bench_gpu_batch_create(bench_gpu_batch *b, const bench_set *set)
{
	memset(b, 0, sizeof *b);
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		const kiln_surface *s = &set->surfaces[i % set->count];
		b->offsets[i] = b->bytes;
		b->bytes += (size_t)s->width * s->height * 4;
		b->pixels += (uint64_t)s->width * s->height;
	}
	kiln_status st = kiln_gpu_stream_create(&b->stream);
	if (st == KILN_OK)
		st = kiln_gpu_host_alloc((void **)&b->h_pixels, b->bytes);
	if (st == KILN_OK)
		st = kiln_gpu_malloc((void **)&b->d_pixels, b->bytes);
	if (st != KILN_OK)
		goto fail;
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		const kiln_surface *s = &set->surfaces[i % set->count];
		uint32_t row = s->width * 4;
		for (uint32_t y = 0; y < s->height; y++)
			memcpy(b->h_pixels + b->offsets[i] + (size_t)y * row, s->rgba + (size_t)y * s->stride, row);
		b->host[i] = (kiln_surface){ b->h_pixels + b->offsets[i], s->width, s->height, row, s->has_alpha };
		b->device[i] = b->host[i];
		b->device[i].rgba = b->d_pixels + b->offsets[i];
	}
	st = kiln_gpu_h2d(b->d_pixels, b->h_pixels, b->bytes, b->stream);
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(b->stream);
	if (st != KILN_OK)
		goto fail;
	return KILN_OK;
fail:
	bench_gpu_batch_destroy(b);
	return st;
}

void bench_gpu_batch_destroy(bench_gpu_batch *b)
{
	kiln_gpu_free(b->d_pixels);
	kiln_gpu_host_free(b->h_pixels);
	kiln_gpu_stream_destroy(b->stream);
	memset(b, 0, sizeof *b);
}

kiln_status bench_gpu_time(const bench_opts *opts, kiln_stream stream,
			   kiln_status (*fn)(void *ctx), void *ctx, double *seconds)
{
	double t[64];
	int reps = opts->reps < 1 ? 1 : opts->reps > 64 ? 64 : opts->reps;
	int launches = opts->gpu_launches < 1 ? 1 : opts->gpu_launches;
	kiln_event start = NULL, end = NULL;
	kiln_status st = kiln_gpu_event_create(&start);
	if (st == KILN_OK)
		st = kiln_gpu_event_create(&end);
	for (int i = 0; st == KILN_OK && i < opts->warmup; i++)
		st = fn(ctx);
	for (int r = 0; st == KILN_OK && r < reps; r++) {
		float ms = 0;
		st = kiln_gpu_event_record(start, stream);
		for (int i = 0; st == KILN_OK && i < launches; i++)
			st = fn(ctx);
		if (st == KILN_OK)
			st = kiln_gpu_event_record(end, stream);
		if (st == KILN_OK)
			st = kiln_gpu_event_elapsed(start, end, &ms);
		t[r] = ms * 1e-3 / launches;
	}
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(stream);
	*seconds = st == KILN_OK ? bench_median(t, (size_t)reps) : 0;
	kiln_gpu_event_destroy(start);
	kiln_gpu_event_destroy(end);
	return st;
}

/* ---- the report ------------------------------------------------------------------- */

static void cpu_model(char *out, size_t cap)
{
	char line[512];
	snprintf(out, cap, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "model name", 10) == 0 && colon) {
			colon += strspn(colon + 1, " \t") + 1;
			colon[strcspn(colon, "\n")] = 0;
			snprintf(out, cap, "%s", colon);
			break;
		}
	}
	fclose(f);
}

/* The 1-minute load average: other work on the machine skews CPU figures. */
static double load_average(void)
{
	double load = -1;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &load) != 1)
			load = -1;
		fclose(f);
	}
	return load;
}

void bench_report_machine(bench_report *report, const bench_opts *opts)
{
	char cpu[256], gpu[256] = "none", date[64];
	cpu_model(cpu, sizeof cpu);
	size_t mem = 0;
	if (kiln_gpu_count() > 0 && kiln_gpu_describe(0, gpu, sizeof gpu, &mem) == KILN_OK)
		snprintf(gpu + strlen(gpu), sizeof gpu - strlen(gpu), " (%.0f GiB)", mem / 1073741824.0);
	time_t now = time(NULL);
	strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
	snprintf(report->machine, sizeof report->machine,
		 "- CPU: %s, %u cores online (load average %.2f at start)\n- GPU: %s\n- date: %s\n"
		 "- parts:%s%s%s%s%s%s; up to %d timed runs (median) after %d warm-up\n",
		 cpu, kiln_cpu_count(), load_average(), gpu, date, opts->quality ? " quality" : "",
		 opts->cpu ? " cpu" : "", opts->gpu ? " gpu" : "", opts->sched ? " sched" : "", opts->worker ? " worker" : "",
		 opts->quick ? " (--quick)" : "",
		 opts->reps, opts->warmup);
}

bench_section *bench_section_add(bench_report *report, const char *title, const char *note)
{
	if (report->nsections == BENCH_MAX_SECTIONS)
		return NULL;
	bench_section *s = &report->sections[report->nsections++];
	memset(s, 0, sizeof *s);
	snprintf(s->title, sizeof s->title, "%s", title);
	snprintf(s->note, sizeof s->note, "%s", note ? note : "");
	return s;
}

void bench_row_text(bench_section *s, const char *what, const char *kiln, const char *anchor,
		    const char *ratio)
{
	if (!s || s->nrows == BENCH_MAX_ROWS)
		return;
	bench_row *r = &s->rows[s->nrows++];
	snprintf(r->what, sizeof r->what, "%s", what);
	snprintf(r->kiln, sizeof r->kiln, "%s", kiln);
	snprintf(r->anchor, sizeof r->anchor, "%s", anchor ? anchor : "—");
	snprintf(r->ratio, sizeof r->ratio, "%s", ratio ? ratio : "—");
}

bool bench_gpu_ok(bench_section *s, const char *what, kiln_status st)
{
	if (st == KILN_OK)
		return true;
	bench_row_text(s, what, kiln_strerror(st), kiln_gpu_last_error(), NULL);
	return false;
}

void bench_row_rate(bench_section *s, const char *what, double kiln, double anchor, const char *unit)
{
	char k[48], a[48], r[32];
	snprintf(k, sizeof k, "%.3g %s", kiln, unit);
	snprintf(a, sizeof a, "%.3g %s", anchor, unit);
	snprintf(r, sizeof r, "%.2fx", anchor > 0 ? kiln / anchor : 0.0);
	bench_row_text(s, what, k, anchor >= 0 ? a : NULL, anchor > 0 ? r : NULL);
}

void bench_row_psnr(bench_section *s, const char *what, double kiln, double anchor)
{
	char k[48], a[48], r[32];
	snprintf(k, sizeof k, "%.3f dB", kiln);
	snprintf(a, sizeof a, "%.3f dB", anchor);
	snprintf(r, sizeof r, "%+.3f dB", kiln - anchor);
	bench_row_text(s, what, k, a, r);
}

void bench_report_line(bench_report *report, const char *fmt, ...)
{
	if (report->nlines == sizeof report->lines / sizeof report->lines[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(report->lines[report->nlines++], sizeof report->lines[0], fmt, ap);
	va_end(ap);
}

void bench_report_write(const bench_report *report, FILE *f)
{
	fprintf(f, "# kiln benchmarks\n\n%s\n", report->machine);
	for (size_t i = 0; i < report->nlines; i++)
		fprintf(f, "%s\n\n", report->lines[i]);
	for (size_t i = 0; i < report->nsections; i++) {
		const bench_section *s = &report->sections[i];
		fprintf(f, "## %s\n\n", s->title);
		if (s->note[0])
			fprintf(f, "%s\n\n", s->note);
		fprintf(f, "| what | kiln | anchor | ratio |\n|---|---|---|---|\n");
		for (size_t r = 0; r < s->nrows; r++)
			fprintf(f, "| %s | %s | %s | %s |\n", s->rows[r].what, s->rows[r].kiln,
				s->rows[r].anchor, s->rows[r].ratio);
		fprintf(f, "\n");
	}
}

bool bench_env_lists(const char *name, const char *item, bool def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	size_t n = strlen(item);
	for (const char *p = v; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, item, n) == 0)
			return true;
		p += len + (e != NULL);
	}
	return false;
}
