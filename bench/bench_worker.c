/* Worker throughput end to end: PNG files on local disk -> BC1 DDS files on local disk
 * (or ASTC, or PNG again) through the worker pipeline (worker/pipeline.h) in-process,
 * without sockets, with file storage, batches of 32, shards of 32 items. Images/s and
 * Mpix/s on the CPU backend and, when present, on GPU 0 (and on every GPU when there are
 * several), and where the time went: each stage's busy time, what it could sustain alone,
 * and which stage limits. GPU outputs are compared with the CPU backend's files, and their
 * throughput with the CPU backend's.
 *
 * Input sets: "kodak" (the 24 Kodak files as distributed, one zlib stream each: folder in/),
 * "kodak-strips" (the same pixels in kiln's strip-parallel PNG layout: in-strips/), "2k"
 * (HD_FILES 2048x2048 RGB mosaics of 512x512 Kodak crops, written here by libpng with its
 * defaults, zlib level 6 and adaptive filters: in-2k/) and "2k-strips" (the same mosaics in
 * kiln's strip layout: in-2k-strips/). The CPU backend runs on the ordinary files of a pair
 * when either set of it is selected; the GPUs run on each selected set.
 *
 * Environment: KILN_BENCH_WORKER_SETTINGS=png-fast,... runs only the settings it names
 * (fast, high, astc4x4-fast, png-fast, fast-mixed); KILN_BENCH_WORKER_SETS=kodak,2k-strips,... only the
 * input sets it names (default: all; with --quick the 2K sets only when named, then 2 files
 * and small counts); KILN_BENCH_WORKER_UPLOADERS=N sets the upload threads (default: the
 * pipeline's); KILN_BENCH_WORKER_OUT=DIR puts the outputs under DIR;
 * KILN_BENCH_WORKER_KEEP=1 leaves the temporary folders (inputs, CPU outputs) in place. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_util.h"
#include "common/buf.h"
#include "common/fileio.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "worker/pipeline.h"

#define SHARD_ITEMS 32
#define CPU_RUNS 2 /* CPU backend runs per setting and input group (the faster one kept) */

/* What a run encodes to: BC1 DDS at two qualities, ASTC 4x4 .astc (the worker issue's
 * second end-to-end case), and PNG again (format png: bulk PNG transcoding). */
typedef struct codec_setting {
	const char *name;        /* in labels */
	const char *what;        /* in the table */
	kiln_texfmt format;
	kiln_quality quality;
	kiln_container container;
	/* Kodak images per run, sized to the backends' speed: runs of a second or more (the CPU
	 * backend's BC1 fast over 96 images, 0.3 s, moved between 250 and 343 images/s from
	 * run to run on the 16-core GPU host) */
	size_t cpu_count, gpu_count;
	size_t hd_cpu_count, hd_gpu_count; /* 2K images per run: runs of ~0.5-1 s */
	bool png_out;            /* format png: the container and texture format do not apply */
	/* shards alternate sRGB and linear output: the same work in two kinds of batch, whose
	 * items the decode threads interleave in the encode queue (jobs of different options
	 * on one worker) */
	bool mixed;
} codec_setting;

static const codec_setting settings[] = {
	{"fast", "BC1 DDS", KILN_TEXFMT_BC1_RGB, KILN_QUALITY_FAST, KILN_CONTAINER_DDS, 384, 3840, 32, 256, false, false},
	{"high", "BC1 DDS", KILN_TEXFMT_BC1_RGB, KILN_QUALITY_HIGH, KILN_CONTAINER_DDS, 24, 1920, 2, 256, false, false},
	{"astc4x4-fast", "ASTC 4x4 .astc", KILN_TEXFMT_ASTC, KILN_QUALITY_FAST, KILN_CONTAINER_ASTC, 96, 768, 4, 96, false,
	 false},
	{"png-fast", "PNG (kiln, fast)", KILN_TEXFMT_BC1_RGB, KILN_QUALITY_FAST, KILN_CONTAINER_DDS, 192, 960, 16, 96, true,
	 false},
	{"fast-mixed", "BC1 DDS, sRGB and linear shards", KILN_TEXFMT_BC1_RGB, KILN_QUALITY_FAST, KILN_CONTAINER_DDS, 384,
	 3840, 32, 256, false, true},
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

/* The inputs of a run: Kodak files or the 2K mosaics, each as ordinary files (one zlib
 * stream, as encoders write them) or in kiln's strip-parallel layout (which the GPUs decode
 * themselves). Sets 2g and 2g+1 hold the same pixels. */
typedef struct input_set {
	const char *name;    /* in KILN_BENCH_WORKER_SETS */
	const char *folder;  /* under the bench's temporary folder */
	bool hd;             /* the 2K mosaics (HD_FILES files), else the 24 Kodak files */
	bool strips;
} input_set;

static const input_set input_sets[] = {
	{"kodak", "in", false, false},
	{"kodak-strips", "in-strips", false, true},
	{"2k", "in-2k", true, false},
	{"2k-strips", "in-2k-strips", true, true},
};
#define NINPUT_SETS (sizeof input_sets / sizeof input_sets[0])

/* The 2K mosaics: HD_SIDE x HD_SIDE, HD_TILE x HD_TILE crops of the Kodak images (every
 * one of them is at least 512 on both sides), so that every block has photographic detail
 * rather than an upscale's smooth ramps. */
#define HD_SIDE 2048u
#define HD_TILE 512u
#define HD_FILES 8

/* One configuration: the devices it runs on and what it measured. */
typedef struct worker_run {
	const char *label;       /* folder name and table text */
	kiln_device devices[KILN_PIPELINE_MAX_DEVICES];
	size_t ndevices;
	const codec_setting *setting;
	size_t count;            /* images */
	double seconds;
	uint64_t pixels;
	size_t failed;           /* items not OK */
	kiln_pipeline_stats stats;
} worker_run;

static struct {
	pthread_mutex_t lock;
	size_t failed;
	char first_error[KILN_ITEM_ERROR_MAX];
} outcome = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void on_report(void *ctx, const kiln_shard_result *r)
{
	pthread_mutex_lock(&outcome.lock);
	for (size_t i = 0; i < r->count; i++)
		if (r->items[i].status != KILN_OK && outcome.failed++ == 0)
			snprintf(outcome.first_error, sizeof outcome.first_error, "%s", r->items[i].error);
	pthread_mutex_unlock(&outcome.lock);
}

static void stats_minus(kiln_pipeline_stage_stats *a, const kiln_pipeline_stage_stats *b)
{
	a->busy_s -= b->busy_s;
	a->items -= b->items;
	a->device_wait_s -= b->device_wait_s;
}

/* The inputs of the next runs, and how many distinct 2K files there are (fewer with
 * --quick). */
static const input_set *input = &input_sets[0];
static size_t hd_files = HD_FILES;
/* Where the outputs go: the bench's folder on local disk, or a folder made under
 * KILN_BENCH_WORKER_OUT (e.g. /dev/shm: file storage fsyncs every output and its
 * directory, which on a slow disk is the limit; tmpfs shows the rest of the pipeline). */
static char out_root[256];

/* Submits items first..first+count (input i % the set's files) as shards and waits for all
 * of them. */
static kiln_status run_items(kiln_pipeline *p, const char *dir, const char *label, size_t first, size_t count,
			     const kiln_texenc_opts *opts, kiln_container container, const codec_setting *setting)
{
	static char inputs[SHARD_ITEMS][512], outputs[SHARD_ITEMS][512];
	kiln_shard_item items[SHARD_ITEMS];
	for (size_t done = 0; done < count;) {
		size_t n = count - done < SHARD_ITEMS ? count - done : SHARD_ITEMS;
		for (size_t i = 0; i < n; i++) {
			size_t k = first + done + i;
			if (input->hd)
				snprintf(inputs[i], sizeof inputs[i], "%s/%s/hd%02zu.png", dir, input->folder,
					 k % hd_files + 1);
			else
				snprintf(inputs[i], sizeof inputs[i], "%s/%s/kodim%02zu.png", dir, input->folder,
					 k % BENCH_KODAK_COUNT + 1);
			snprintf(outputs[i], sizeof outputs[i], "%s/out/%s/%zu.out", out_root, label, k);
			items[i] = (kiln_shard_item){.id = k, .input = inputs[i], .output = outputs[i]};
		}
		char shard[64];
		snprintf(shard, sizeof shard, "%s.%zu", label, first + done);
		kiln_shard_spec spec = {.job = label, .shard = shard, .lease = 1, .opts = *opts,
					.container = container, .items = items, .count = n, .png_out = setting->png_out};
		if (setting->mixed && (first + done) / SHARD_ITEMS % 2)
			spec.opts.colorspace = KILN_COLORSPACE_LINEAR;
		kiln_status st = kiln_pipeline_submit(p, &spec);
		if (st != KILN_OK)
			return st;
		done += n;
	}
	while (!kiln_pipeline_wait_idle(p, 60000))
		;
	return KILN_OK;
}

static kiln_status run_pipeline(const bench_opts *opts, const bench_set *set, const char *dir, worker_run *run,
				char *err, size_t err_cap)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	memcpy(cfg.devices, run->devices, sizeof cfg.devices);
	cfg.ndevices = run->ndevices;
	cfg.batch = 32;
	cfg.report = on_report;
	/* KILN_BENCH_WORKER_UPLOADERS: upload threads (default: the pipeline's) */
	const char *up = getenv("KILN_BENCH_WORKER_UPLOADERS");
	if (up && atoi(up) > 0)
		cfg.upload_threads = (unsigned)atoi(up);
	kiln_pipeline *p;
	kiln_status st = kiln_pipeline_create(&cfg, &p, err, err_cap);
	if (st != KILN_OK)
		return st;
	kiln_texenc_opts topts;
	kiln_texenc_opts_default(&topts);
	topts.quality = run->setting->quality;
	topts.format = run->setting->format;
	kiln_container container = run->setting->container;
	outcome.failed = 0;
	outcome.first_error[0] = '\0';
	/* A warm-up (not on the CPU at high quality, where one image takes seconds): device and
	 * pinned buffers, page cache, thread start-up stay out of the figures, as in a worker
	 * that has run a while. A GPU's texenc grows the buffers of each of its slots at its
	 * first full batch there: a full batch per slot and one more (of the run's own inputs, so
	 * 2K runs grow them to 2K). On the CPU 8 Kodak images, or 2 of the 2K ones. */
	kiln_pipeline_stats before;
	bool gpu = run->devices[0].kind == KILN_DEVICE_GPU;
	size_t warm = gpu ? (KILN_TEXENC_MAX_INFLIGHT + 1) * (size_t)cfg.batch : input->hd ? 2 : 8;
	if (!opts->quick && (gpu || run->setting->cpu_count > 24))
		st = run_items(p, dir, run->label, run->count, warm * run->ndevices, &topts, container, run->setting);
	kiln_pipeline_stats_get(p, &before);
	double t0 = bench_now();
	if (st == KILN_OK)
		st = run_items(p, dir, run->label, 0, run->count, &topts, container, run->setting);
	run->seconds = bench_now() - t0;
	kiln_pipeline_stats_get(p, &run->stats);
	stats_minus(&run->stats.fetch, &before.fetch);
	stats_minus(&run->stats.decode, &before.decode);
	stats_minus(&run->stats.encode, &before.encode);
	stats_minus(&run->stats.upload, &before.upload);
	run->stats.batches -= before.batches;
	kiln_pipeline_destroy(p);
	run->failed = outcome.failed;
	if (run->failed)
		snprintf(err, err_cap, "%zu item(s) failed, e.g.: %s", run->failed, outcome.first_error);
	run->pixels = 0;
	for (size_t i = 0; i < run->count; i++)
		run->pixels += input->hd ? (uint64_t)HD_SIDE * HD_SIDE
					 : (uint64_t)set->images[i % set->count].width * set->images[i % set->count].height;
	return st;
}

/* The rows of one run: throughput, then each stage, then the limit. */
static void report_run(bench_section *sec, const worker_run *run)
{
	char what[160], kiln[48], anchor[48], ratio[32];
	snprintf(what, sizeof what, "%s: %zu %s PNG -> %s, end to end", run->label, run->count,
		 input->hd ? "2K" : "Kodak", run->setting->what);
	snprintf(kiln, sizeof kiln, "%.1f images/s", (double)run->count / run->seconds);
	snprintf(anchor, sizeof anchor, "%.1f Mpix/s", (double)run->pixels / run->seconds / 1e6);
	snprintf(ratio, sizeof ratio, "%.2f s, %llu batches", run->seconds, (unsigned long long)run->stats.batches);
	bench_row_text(sec, what, kiln, anchor, ratio);
	const struct {
		const char *name;
		const kiln_pipeline_stage_stats *s;
	} stages[] = {{"fetch", &run->stats.fetch}, {"decode", &run->stats.decode},
		      {"encode", &run->stats.encode}, {"upload", &run->stats.upload}};
	size_t limit = 0;
	double limit_util = -1, limit_rate = 0;
	for (size_t i = 0; i < 4; i++) {
		const kiln_pipeline_stage_stats *s = stages[i].s;
		double per_thread = s->threads ? s->busy_s / s->threads : 0;
		double util = run->seconds > 0 ? per_thread / run->seconds : 0;
		double alone = per_thread > 0 ? (double)s->items / per_thread : 0;
		snprintf(what, sizeof what, "%s: stage %s (%u thread%s)", run->label, stages[i].name, s->threads,
			 s->threads == 1 ? "" : "s");
		snprintf(kiln, sizeof kiln, "busy %.2f s (%.0f%% of wall)", s->busy_s, util * 100);
		snprintf(anchor, sizeof anchor, "alone: %.1f images/s", alone);
		/* the encode threads' share waiting for their GPUs: the rest is host work
		 * (staging copies, launches, copies out) */
		char wait[48] = "";
		if (s->device_wait_s > 0)
			snprintf(wait, sizeof wait, "%.0f%% waiting for the GPU",
				 s->busy_s > 0 ? s->device_wait_s / s->busy_s * 100 : 0);
		bench_row_text(sec, what, kiln, anchor, wait[0] ? wait : NULL);
		if (util > limit_util) {
			limit_util = util;
			limit = i;
			limit_rate = alone;
		}
	}
	snprintf(what, sizeof what, "%s: limiting stage (end to end / its rate alone)", run->label);
	snprintf(ratio, sizeof ratio, "%.0f%%", limit_rate > 0 ? (double)run->count / run->seconds / limit_rate * 100 : 0);
	/* the most memory the pixel budget held (warm-up included): at the budget, decoding
	 * waited for memory */
	snprintf(anchor, sizeof anchor, "budget peak %.2f GiB", (double)run->stats.budget_peak / (1 << 30));
	bench_row_text(sec, what, stages[limit].name, anchor, ratio);
}

/* GPU files against the CPU backend's, for the items both runs wrote. */
static bool same_outputs(const char *a, const char *b, size_t count, char *err, size_t err_cap)
{
	kiln_buf fa, fb;
	kiln_buf_init(&fa, (size_t)64 << 20);
	kiln_buf_init(&fb, (size_t)64 << 20);
	bool same = true;
	for (size_t i = 0; i < count && same; i++) {
		char pa[400], pb[400];
		snprintf(pa, sizeof pa, "%s/out/%s/%zu.out", out_root, a, i);
		snprintf(pb, sizeof pb, "%s/out/%s/%zu.out", out_root, b, i);
		kiln_buf_reset(&fa); /* reading appends */
		kiln_buf_reset(&fb);
		same = kiln_buf_read_file(&fa, pa) == KILN_OK && kiln_buf_read_file(&fb, pb) == KILN_OK &&
		       fa.len == fb.len && memcmp(fa.data, fb.data, fa.len) == 0;
		if (!same)
			snprintf(err, err_cap, "%s differs from %s", pb, pa);
	}
	kiln_buf_free(&fa);
	kiln_buf_free(&fb);
	return same;
}

/* Removes a run's outputs (a GPU run's, once compared): 2K runs write gigabytes. */
static void remove_outputs(const char *label)
{
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/out/%s'", out_root, label);
	if (system(cmd) != 0)
		fprintf(stderr, "kiln-bench: could not remove %s/out/%s\n", out_root, label);
}

/* 2K mosaic n: a 4x4 grid of HD_TILE crops, tile t from Kodak image (5t + 3n) mod 24 (5 is
 * prime to 24: the 16 tiles of a mosaic come from 16 different images, in an order that
 * changes with n) at an offset that also moves with n. */
static kiln_status hd_mosaic(const bench_set *set, size_t n, kiln_image *img)
{
	kiln_status st = kiln_image_alloc(img, HD_SIDE, HD_SIDE, NULL);
	if (st != KILN_OK)
		return st;
	img->has_alpha = false;
	img->srgb = true;
	const size_t per_row = HD_SIDE / HD_TILE;
	for (size_t t = 0; t < per_row * per_row; t++) {
		const kiln_image *src = &set->images[(t * 5 + n * 3) % set->count];
		if (src->width < HD_TILE || src->height < HD_TILE) {
			kiln_image_free(img);
			return KILN_ERR_INVALID_ARG;
		}
		size_t ox = (n * 131 + t * 57) % (src->width - HD_TILE + 1);
		size_t oy = (n * 89 + t * 41) % (src->height - HD_TILE + 1);
		for (uint32_t y = 0; y < HD_TILE; y++)
			memcpy(kiln_image_row(img, (uint32_t)(t / per_row * HD_TILE + y)) + t % per_row * HD_TILE * 4,
			       kiln_image_row(src, (uint32_t)oy + y) + ox * 4, (size_t)HD_TILE * 4);
	}
	return KILN_OK;
}

typedef struct hd_writer {
	const bench_set *set;
	const char *dir;
	kiln_status st[HD_FILES];
} hd_writer;

/* Mosaics begin..end-1: in-2k/ by libpng with its defaults (zlib level 6, adaptive
 * filters: the ordinary files most tools write), in-2k-strips/ by kiln's encoder (fast). */
static void hd_write(void *ctx, size_t begin, size_t end)
{
	hd_writer *w = ctx;
	for (size_t n = begin; n < end; n++) {
		kiln_image img = {0};
		char path[600];
		kiln_status st = hd_mosaic(w->set, n, &img);
		snprintf(path, sizeof path, "%s/in-2k/hd%02zu.png", w->dir, n + 1);
		if (st == KILN_OK)
			st = kiln_png_write_file(path, &img);
		snprintf(path, sizeof path, "%s/in-2k-strips/hd%02zu.png", w->dir, n + 1);
		if (st == KILN_OK)
			st = kiln_png_write_path(path, &img, KILN_QUALITY_FAST);
		kiln_image_free(&img);
		w->st[n] = st;
	}
}

static kiln_status stage_hd_inputs(const bench_set *set, const char *dir, char *err, size_t err_cap)
{
	char path[600];
	kiln_status st = KILN_OK;
	static const char *const folders[] = {"in-2k", "in-2k-strips"};
	for (size_t i = 0; i < 2 && st == KILN_OK; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, folders[i]);
		if ((st = kiln_mkdir_p(path)) != KILN_OK) {
			snprintf(err, err_cap, "%s: %s", path, kiln_strerror(st));
			return st;
		}
	}
	hd_writer w = {.set = set, .dir = dir};
	kiln_pool *pool = NULL; /* NULL (no memory for threads): one thread writes them all */
	if (kiln_pool_create(0, &pool) != KILN_OK)
		pool = NULL;
	kiln_pool_for(pool, hd_files, 1, hd_write, &w);
	kiln_pool_destroy(pool);
	for (size_t n = 0; n < hd_files; n++)
		if (w.st[n] != KILN_OK) {
			snprintf(err, err_cap, "2K input hd%02zu.png: %s", n + 1, kiln_strerror(w.st[n]));
			return w.st[n];
		}
	return KILN_OK;
}

/* Copies the Kodak PNG files (as they are: their compression is what a real input has),
 * and writes them again with kiln's encoder (fast) into in-strips/. */
static kiln_status stage_inputs(const char *dir, char *err, size_t err_cap)
{
	const char *env = getenv("KILN_SHARED");
	kiln_buf f;
	kiln_buf_init(&f, (size_t)64 << 20);
	kiln_status st = KILN_OK;
	char path[600];
	snprintf(path, sizeof path, "%s/in-strips", dir);
	if ((st = kiln_mkdir_p(path)) != KILN_OK)
		snprintf(err, err_cap, "%s: %s", path, kiln_strerror(st));
	for (int i = 1; i <= BENCH_KODAK_COUNT && st == KILN_OK; i++) {
		char src[256], dst[256];
		snprintf(src, sizeof src, "%s/kodak/kodim%02d.png", env ? env : "../shared/data", i);
		snprintf(dst, sizeof dst, "%s/in/kodim%02d.png", dir, i);
		st = kiln_buf_read_file(&f, src);
		if (st == KILN_OK)
			st = kiln_file_write_atomic(dst, f.data, f.len);
		kiln_image img = {0};
		if (st == KILN_OK)
			st = kiln_png_read(f.data, f.len, KILN_PNG_DECODER_KILN, NULL, NULL, &img, err, err_cap);
		snprintf(dst, sizeof dst, "%s/in-strips/kodim%02d.png", dir, i);
		if (st == KILN_OK)
			st = kiln_png_write_path(dst, &img, KILN_QUALITY_FAST);
		kiln_image_free(&img);
		if (st != KILN_OK)
			snprintf(err, err_cap, "%s -> %s: %s", src, dst, kiln_strerror(st));
		kiln_buf_reset(&f);
	}
	kiln_buf_free(&f);
	return st;
}

int bench_worker(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	if (!opts->worker)
		return 0;
	/* KILN_BENCH_WORKER_SETS: the input sets (default: all; with --quick, the 2K sets only
	 * when named) */
	bool set_on[NINPUT_SETS];
	bool group_on[2] = {false, false};  /* Kodak, 2K: either set of the pair */
	for (size_t i = 0; i < NINPUT_SETS; i++) {
		set_on[i] = bench_env_lists("KILN_BENCH_WORKER_SETS", input_sets[i].name,
					    !(opts->quick && input_sets[i].hd));
		group_on[i / 2] |= set_on[i];
	}
	hd_files = opts->quick ? 2 : HD_FILES;
	char dir[] = "/tmp/kiln-bench-worker-XXXXXX";
	char err[1200] = "", path[600];
	if (!mkdtemp(dir)) {
		bench_report_line(report, "worker bench skipped: mkdtemp: %s", strerror(errno));
		return 1;
	}
	snprintf(out_root, sizeof out_root, "%s", dir);
	const char *oe = getenv("KILN_BENCH_WORKER_OUT");
	if (oe && *oe) {
		snprintf(out_root, sizeof out_root, "%s/kiln-bench-out-XXXXXX", oe);
		if (!mkdtemp(out_root)) {
			bench_report_line(report, "worker bench: mkdtemp under %s: %s; outputs on local disk", oe,
					  strerror(errno));
			snprintf(out_root, sizeof out_root, "%s", dir);
		}
	}
	if (strcmp(out_root, dir) != 0)
		bench_report_line(report, "worker bench: outputs under %s (KILN_BENCH_WORKER_OUT), inputs on local disk",
				  out_root);
	snprintf(path, sizeof path, "%s/in", dir);
	int failed = 0;
	if ((group_on[0] && (kiln_mkdir_p(path) != KILN_OK || stage_inputs(dir, err, sizeof err) != KILN_OK)) ||
	    (group_on[1] && stage_hd_inputs(set, dir, err, sizeof err) != KILN_OK)) {
		bench_report_line(report, "worker bench skipped: %s", err);
		failed = 1;
		goto done;
	}
	int gpus = kiln_gpu_count();
	/* per group of input sets (Kodak, 2K): the CPU backend's section, GPU 0's, every GPU's */
	static const struct {
		const char *title[3], *cpu_note;
	} groups[2] = {
		{{"Worker end to end: CPU backend", "Worker end to end: GPU 0", "Worker end to end: every GPU"},
		 "Kodak PNG files -> BC1 DDS files on local disk through the worker pipeline in-process "
		 "(file storage, no sockets), batch 32, shards of 32; wall clock after a warm-up shard. "
		 "Stage rows: busy time summed over the stage's threads, its share of wall time per "
		 "thread, and the rate it would sustain alone; the highest share limits. Decode and the "
		 "CPU encoder share the cores, so 'alone' overstates both there."},
		{{"Worker end to end, 2K: CPU backend", "Worker end to end, 2K: GPU 0",
		  "Worker end to end, 2K: every GPU"},
		 "As the Kodak tables, on 2048x2048 RGB PNG files made at the start: 4x4 mosaics of "
		 "512x512 crops of the Kodak images (8 distinct files, 2 with --quick), written by "
		 "libpng with its defaults (zlib level 6, adaptive filters) and, for the strip rows, "
		 "by kiln's encoder. Warm-up: 2 images on the CPU, 4 batches per GPU. 'budget peak': "
		 "the most decoded/encoded bytes the pipeline's pixel budget held."},
	};
	static const char *const gpu_notes[3] = {
		NULL,
		"As above with GPU 0 as the only device (texenc keeps up to 3 batches in flight). Outputs "
		"compared with the CPU backend's files of the same items, throughput with the CPU backend's.",
		"As above with every GPU of the machine as a device (one encode thread each).",
	};
	bench_section *sec[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
	for (int g = 0; g < 2; g++)
		for (int k = 0; k < 3 && group_on[g]; k++)
			if (k == 0 || gpus > k - 1)
				sec[g][k] = bench_section_add(report, groups[g].title[k], k ? gpu_notes[k] : groups[g].cpu_note);
	size_t cpu_written[NSETTINGS][2] = {{0}};  /* CPU outputs to compare the GPUs' with */
	double cpu_rate[NSETTINGS][2] = {{0}};     /* CPU images/s, for the GPU/CPU rows */
	for (size_t q = 0; q < NSETTINGS; q++) {
		if (!bench_env_lists("KILN_BENCH_WORKER_SETTINGS", settings[q].name, true))
			continue;
		for (int g = 0; g < 2; g++) {  /* Kodak, then 2K */
			if (!group_on[g])
				continue;
			/* GPU runs again on strip-layout inputs, which the GPUs decode themselves */
			for (int r = 0; r < 6; r++) {
				int b = r % 3, in = r / 3;
				/* format png reads its files on the host whatever their layout; the CPU
				 * backend runs on the ordinary files whichever set of the pair is named */
				if (!sec[g][b] || ((b == 0 || settings[q].png_out) && in))
					continue;
				if (b == 0 ? !set_on[2 * g] && (settings[q].png_out || !set_on[2 * g + 1])
					   : !set_on[2 * g + in])
					continue;
				input = &input_sets[2 * g + in];
				static const char *const labels[] = {"cpu", "gpu0", "gpus"};
				char label[40];
				snprintf(label, sizeof label, "%s-%s%s%s", labels[b], settings[q].name, g ? "-2k" : "",
					 in ? "-strips" : "");
				worker_run run = {.label = label, .setting = &settings[q]};
				size_t cpu_count = g ? settings[q].hd_cpu_count : settings[q].cpu_count;
				size_t gpu_count = g ? settings[q].hd_gpu_count : settings[q].gpu_count;
				if (b == 0) {
					run.devices[0].kind = KILN_DEVICE_CPU;
					run.ndevices = 1;
					run.count = opts->quick ? (cpu_count + 3) / 4 : cpu_count;
				} else {
					run.ndevices = b == 1 ? 1 : (size_t)(gpus < KILN_PIPELINE_MAX_DEVICES ? gpus : KILN_PIPELINE_MAX_DEVICES);
					for (size_t d = 0; d < run.ndevices; d++)
						run.devices[d] = (kiln_device){KILN_DEVICE_GPU, (int)d};
					run.count = (opts->quick ? (g ? 32 : 96) : gpu_count) * run.ndevices;
				}
				/* The CPU backend twice (once with --quick), its faster run kept: its rate
				 * moved by up to 38% between runs minutes apart on the 16-core GPU host,
				 * and the GPU rows' ratios are taken against the faster one. */
				kiln_status st = KILN_OK;
				double tried[CPU_RUNS] = {0};
				int runs = b == 0 && !opts->quick ? CPU_RUNS : 1;
				for (int r = 0; r < runs && st == KILN_OK && !run.failed; r++) {
					worker_run again = run;
					st = run_pipeline(opts, set, dir, &again, err, sizeof err);
					tried[r] = again.seconds > 0 ? (double)again.count / again.seconds : 0;
					if (r == 0 || st != KILN_OK || again.failed || again.seconds < run.seconds)
						run = again;
				}
				if (runs > 1 && st == KILN_OK && !run.failed) {
					char what[160], rates[64];
					snprintf(what, sizeof what, "%s: CPU backend runs (the faster one reported)", label);
					snprintf(rates, sizeof rates, "%.1f / %.1f images/s", tried[0], tried[1]);
					bench_row_text(sec[g][b], what, rates, NULL, NULL);
				}
				if (st != KILN_OK || run.failed) {
					char what[160];
					snprintf(what, sizeof what, "%s", label);
					bench_row_text(sec[g][b], what, st != KILN_OK ? kiln_strerror(st) : "FAILED items", err, NULL);
					failed++;
					continue;
				}
				report_run(sec[g][b], &run);
				if (b == 0) {
					cpu_written[q][g] = run.count;
					cpu_rate[q][g] = (double)run.count / run.seconds;
				}
				if (b > 0 && cpu_written[q][g]) {
					char cpu_label[40], what[160];
					snprintf(cpu_label, sizeof cpu_label, "cpu-%s%s", settings[q].name, g ? "-2k" : "");
					bool same = same_outputs(cpu_label, label, cpu_written[q][g], err, sizeof err);
					snprintf(what, sizeof what, "%s: first %zu outputs == CPU backend's", label,
						 cpu_written[q][g]);
					bench_row_text(sec[g][b], what, same ? "OK" : "MISMATCH", same ? NULL : err, NULL);
					failed += !same;
					/* images/s: every file of a set has about (Kodak) or exactly (2K) the
					 * pixels of the others */
					char kiln[48], anchor[48], ratio[32];
					double rate = (double)run.count / run.seconds;
					snprintf(what, sizeof what, "%s: GPU / CPU backend (end to end images/s)", label);
					snprintf(kiln, sizeof kiln, "%.1f images/s", rate);
					snprintf(anchor, sizeof anchor, "CPU: %.1f images/s", cpu_rate[q][g]);
					snprintf(ratio, sizeof ratio, "%.1fx", rate / cpu_rate[q][g]);
					bench_row_text(sec[g][b], what, kiln, anchor, ratio);
				}
				if (b > 0)
					remove_outputs(label);
			}
		}
	}
done:;
	const char *keep = getenv("KILN_BENCH_WORKER_KEEP");
	if (keep && *keep && strcmp(keep, "0") != 0) {
		bench_report_line(report, "worker bench: inputs and CPU outputs kept in %s (KILN_BENCH_WORKER_KEEP)",
				  out_root);
		if (strcmp(out_root, dir) != 0)
			bench_report_line(report, "worker bench: inputs kept in %s", dir);
		return failed;
	}
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, out_root);
	if (system(cmd) != 0)
		fprintf(stderr, "kiln-bench: could not remove %s\n", dir);
	return failed;
}
