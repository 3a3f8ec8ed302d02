/* What every benchmark section shares: options, the Kodak set, wall-clock and median
 * timing, RGB PSNR, and the report (markdown tables of what / kiln / anchor / ratio) that
 * bench_main.c prints and writes. A codec's benchmarks live in their own file
 * (bench_bc1.c, bench_mip.c, later ASTC and PNG) and only add sections to the report. */
#ifndef KILN_BENCH_UTIL_H
#define KILN_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/image.h"
#include "common/host.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

/* Which parts run (--only) and how long (--quick). */
typedef struct bench_opts {
	bool quality, cpu, gpu;
	bool sched;   /* scheduler scale (bench_sched.c); needs no images */
	bool worker;  /* worker pipeline end to end (bench_worker.c) */
	bool quick;
	int warmup;   /* untimed runs before timing */
	int reps;     /* timed runs at most; the median is reported */
	double budget_s;  /* CPU figures stop adding runs after this many seconds */
	int gpu_launches;  /* launches per timed GPU run */
	const char *out_path;
} bench_opts;

/* The images a section measures, loaded once. */
#define BENCH_KODAK_COUNT 24
typedef struct bench_set {
	kiln_image images[BENCH_KODAK_COUNT];
	kiln_surface surfaces[BENCH_KODAK_COUNT];
	size_t count;
	uint64_t pixels;  /* sum of width * height */
} bench_set;

/* Loads kodim01..24.png from $KILN_SHARED/kodak or ../shared/data/kodak. */
kiln_status bench_load_kodak(bench_set *set, char *err, size_t err_cap);
void bench_set_free(bench_set *set);

/* Seconds on the monotonic clock. */
double bench_now(void);

/* Whether the environment variable `name`, a comma-separated list, names `item` exactly;
 * when it is unset or empty, `def`. Selects parts of a bench (KILN_BENCH_*). */
bool bench_env_lists(const char *name, const char *item, bool def);
/* Median of n values (sorts them). */
double bench_median(double *v, size_t n);
/* Median wall time in seconds of fn: opts->warmup untimed runs, then timed runs until
 * opts->reps or until opts->budget_s is spent (at least one). A first run longer than 1 s
 * is kept as a sample instead of being a warm-up: at that length first-touch costs are
 * noise, and the slow anchors would otherwise double the bench's time. */
double bench_time(const bench_opts *opts, void (*fn)(void *ctx), void *ctx);

/* Sum of squared R, G, B differences of two w x h RGBA8 images. */
uint64_t bench_sse_rgb(const uint8_t *a, size_t stride_a, const uint8_t *b, size_t stride_b,
		       uint32_t w, uint32_t h);
/* PSNR of an 8-bit mean squared error (99 dB for a perfect match). */
double bench_psnr(double mse);

/* Splits the block rows of every image of a set over a pool: fn(ctx, image, first_row,
 * end_row) is called on disjoint ranges of 4-texel rows. Lets an anchor encoder run on the
 * same threads, with the same scheduling, as kiln. */
typedef void (*bench_rows_fn)(void *ctx, size_t image, uint32_t by0, uint32_t by1);
void bench_for_block_rows(kiln_pool *pool, const bench_set *set, bench_rows_fn fn, void *ctx);

/* ---- GPU ------------------------------------------------------------------------ */

/* BENCH_GPU_BATCH images on the current GPU (the set's images in order, repeated as
 * needed), tightly packed in one device buffer and mirrored in one pinned host buffer. */
#define BENCH_GPU_BATCH 32
typedef struct bench_gpu_batch {
	kiln_surface host[BENCH_GPU_BATCH];    /* into h_pixels */
	kiln_surface device[BENCH_GPU_BATCH];  /* into d_pixels */
	size_t offsets[BENCH_GPU_BATCH];
	uint8_t *h_pixels, *d_pixels;
	size_t bytes;
	uint64_t pixels;
	kiln_stream stream;
} bench_gpu_batch;

/* Allocates, fills the pinned buffer and uploads it (synchronously). */
kiln_status bench_gpu_batch_create(bench_gpu_batch *b, const bench_set *set);
void bench_gpu_batch_destroy(bench_gpu_batch *b);

/* Device time of one call of fn (which queues work on b->stream): opts->warmup calls, then
 * opts->reps runs of opts->gpu_launches calls between two events; the median per call,
 * in seconds, into *seconds. fn returns its status; the first error stops timing. */
kiln_status bench_gpu_time(const bench_opts *opts, kiln_stream stream,
			   kiln_status (*fn)(void *ctx), void *ctx, double *seconds);

/* ---- the report ---------------------------------------------------------------------- */

#define BENCH_MAX_SECTIONS 16
#define BENCH_MAX_ROWS 64

typedef struct bench_row {
	char what[160];
	char kiln[48];
	char anchor[48];
	char ratio[32];
} bench_row;

typedef struct bench_section {
	char title[128];
	char note[512];  /* a paragraph under the title: method, units */
	bench_row rows[BENCH_MAX_ROWS];
	size_t nrows;
} bench_section;

typedef struct bench_report {
	char machine[1024];  /* markdown list */
	bench_section sections[BENCH_MAX_SECTIONS];
	size_t nsections;
	char lines[8][160];  /* plain lines, e.g. "GPU part skipped: no GPU" */
	size_t nlines;
} bench_report;

/* Fills report->machine: CPU model, cores, GPU, date, options. */
void bench_report_machine(bench_report *report, const bench_opts *opts);
/* A new section (NULL when the report is full). */
bench_section *bench_section_add(bench_report *report, const char *title, const char *note);
/* A row of preformatted cells (anchor and ratio may be NULL: shown as a dash). */
void bench_row_text(bench_section *s, const char *what, const char *kiln, const char *anchor,
		    const char *ratio);
/* A GPU step's outcome in a section: true when st is KILN_OK; otherwise a row of what, the
 * status and CUDA's last error (how every GPU section reports a failed step), and false. */
bool bench_gpu_ok(bench_section *s, const char *what, kiln_status st);
/* Throughput row: kiln and anchor in `unit`, ratio kiln/anchor ("x"); anchor < 0: none. */
void bench_row_rate(bench_section *s, const char *what, double kiln, double anchor, const char *unit);
/* PSNR row: the third column is the difference in dB. */
void bench_row_psnr(bench_section *s, const char *what, double kiln, double anchor);
/* A line printed outside the tables. */
void bench_report_line(bench_report *report, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The whole report as markdown. */
void bench_report_write(const bench_report *report, FILE *f);

/* ---- sections: one file per codec, run by bench_main.c ------------------------------ */

/* Each returns the number of failed checks (GPU output differing from the CPU's, an
 * encoder error). */
int bench_bc1(const bench_opts *opts, const bench_set *set, bench_report *report);
int bench_mip(const bench_opts *opts, const bench_set *set, bench_report *report);
/* Scheduler scale with simulated workers (bench_sched.c): planning time and memory of a
 * 1,000,000-item job (100,000 with --quick), shards dispatched per second. Returns the
 * number of failed checks (the job not ending done with every item). */
int bench_sched(const bench_opts *opts, bench_report *report);
/* Worker pipeline end to end (bench_worker.c): Kodak PNG files -> BC1 DDS files through
 * the pipeline in-process, images/s and Mpix/s on the CPU backend and on the GPUs, and the
 * stage breakdown naming the limiting stage. Returns the number of failed checks (failed
 * items, GPU files differing from the CPU's). */
int bench_worker(const bench_opts *opts, const bench_set *set, bench_report *report);

#endif
