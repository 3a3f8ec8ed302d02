/* BC1 against libsquish: RGB PSNR over the Kodak set (every encoder's output decoded by
 * kiln_bc1_decode, so one decoder judges all), CPU throughput on all cores and on one, and
 * GPU throughput (kernel only, and with transfers) with a CPU/GPU identity check.
 * kiln's quality levels are paired with squish's fits of similar intent: fast with range
 * fit, medium with cluster fit, high with iterative cluster fit. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "bench/squish_shim.h"
#include "kernels/bc1/bc1.h"

typedef struct bc1_pair {
	kiln_quality quality;
	squish_shim_fit fit;
} bc1_pair;

static const bc1_pair pairs[] = {
	{ KILN_QUALITY_FAST, SQUISH_SHIM_RANGE },
	{ KILN_QUALITY_MEDIUM, SQUISH_SHIM_CLUSTER },
	{ KILN_QUALITY_HIGH, SQUISH_SHIM_ITERATIVE_CLUSTER },
};
#define NPAIRS (sizeof pairs / sizeof pairs[0])

/* Encoded blocks of every image of a set. */
typedef struct bc1_out {
	uint8_t *blocks[BENCH_KODAK_COUNT];
	size_t size[BENCH_KODAK_COUNT];
} bc1_out;

static void bc1_out_free(bc1_out *o)
{
	for (size_t i = 0; i < BENCH_KODAK_COUNT; i++)
		free(o->blocks[i]);
	memset(o, 0, sizeof *o);
}

static kiln_status bc1_out_alloc(bc1_out *o, const bench_set *set)
{
	memset(o, 0, sizeof *o);
	for (size_t i = 0; i < set->count; i++) {
		o->size[i] = kiln_bc1_bound(set->surfaces[i].width, set->surfaces[i].height);
		o->blocks[i] = malloc(o->size[i]);
		if (!o->blocks[i]) {
			bc1_out_free(o);
			return KILN_ERR_NOMEM;
		}
	}
	return KILN_OK;
}

/* One encoder run over the set, in the shape bench_time wants. */
typedef struct bc1_run {
	const bench_set *set;
	bc1_out *out;
	kiln_pool *pool;       /* NULL: one thread */
	bool squish;
	kiln_quality quality;  /* kiln */
	squish_shim_fit fit;   /* squish */
	kiln_status status;    /* first failure seen */
} bc1_run;

static void run_kiln(bc1_run *run)
{
	kiln_bc1_params params;
	kiln_status st[BENCH_KODAK_COUNT];
	kiln_bc1_params_default(&params);
	params.quality = run->quality;
	kiln_status batch = kiln_bc1_encode_cpu(&params, run->set->surfaces, run->out->blocks,
						run->set->count, st, run->pool);
	for (size_t i = 0; batch == KILN_OK && i < run->set->count; i++)
		batch = st[i];
	if (run->status == KILN_OK)
		run->status = batch;
}

static void squish_rows(void *ctx, size_t image, uint32_t by0, uint32_t by1)
{
	const bc1_run *run = ctx;
	const kiln_surface *s = &run->set->surfaces[image];
	squish_shim_encode_rows(s->rgba, s->width, s->height, s->stride, by0, by1,
				run->out->blocks[image], run->fit);
}

static void run_encoder(void *ctx)
{
	bc1_run *run = ctx;
	if (run->squish)
		bench_for_block_rows(run->pool, run->set, squish_rows, run);
	else
		run_kiln(run);
}

static const char *pair_name(const bc1_pair *p, char *buf, size_t cap)
{
	snprintf(buf, cap, "BC1 %s vs squish %s", kiln_quality_name(p->quality),
		 squish_shim_fit_name(p->fit));
	return buf;
}

/* ---- quality ----------------------------------------------------------------------- */

/* Mean of the per-image RGB PSNRs, and the PSNR of the MSE over all images. */
static kiln_status judge(const bench_set *set, const bc1_out *out, double *mean_psnr, double *total_psnr)
{
	uint64_t sse_all = 0;
	double psnr_sum = 0;
	for (size_t i = 0; i < set->count; i++) {
		const kiln_surface *s = &set->surfaces[i];
		size_t stride = (size_t)s->width * 4;
		uint8_t *decoded = malloc(stride * s->height);
		if (!decoded)
			return KILN_ERR_NOMEM;
		kiln_status st = kiln_bc1_decode(out->blocks[i], out->size[i], s->width, s->height, 0,
						 decoded, stride);
		if (st != KILN_OK) {
			free(decoded);
			return st;
		}
		uint64_t sse = bench_sse_rgb(s->rgba, s->stride, decoded, stride, s->width, s->height);
		free(decoded);
		psnr_sum += bench_psnr((double)sse / (3.0 * s->width * s->height));
		sse_all += sse;
	}
	*mean_psnr = psnr_sum / (double)set->count;
	*total_psnr = bench_psnr((double)sse_all / (3.0 * (double)set->pixels));
	return KILN_OK;
}

static kiln_status encode_and_judge(bc1_run *run, double *mean_psnr, double *total_psnr)
{
	run->status = KILN_OK;
	run_encoder(run);
	if (run->status != KILN_OK)
		return run->status;
	return judge(run->set, run->out, mean_psnr, total_psnr);
}

static int quality_section(const bench_set *set, bc1_out *out, kiln_pool *pool, bench_report *report)
{
	bench_section *sec = bench_section_add(report, "BC1 quality (24 Kodak images, RGB PSNR)",
		"PSNR per image over R, G, B (MSE averaged over the three channels); the mean of the "
		"24 per-image values, and the PSNR of the MSE over all images. squish uses the uniform "
		"metric {1, 1, 1}. Every encoder's blocks are decoded by kiln_bc1_decode. "
		"Third column: kiln minus squish.");
	int failed = 0;
	for (size_t p = 0; p < NPAIRS; p++) {
		double k_mean, k_total, s_mean, s_total;
		char name[96], what[160];
		bc1_run kiln = { set, out, pool, false, pairs[p].quality, pairs[p].fit, KILN_OK };
		bc1_run squish = kiln;
		squish.squish = true;
		kiln_status st = encode_and_judge(&kiln, &k_mean, &k_total);
		if (st == KILN_OK)
			st = encode_and_judge(&squish, &s_mean, &s_total);
		pair_name(&pairs[p], name, sizeof name);
		if (st != KILN_OK) {
			bench_row_text(sec, name, kiln_strerror(st), NULL, NULL);
			failed++;
			continue;
		}
		snprintf(what, sizeof what, "%s: mean PSNR", name);
		bench_row_psnr(sec, what, k_mean, s_mean);
		snprintf(what, sizeof what, "%s: PSNR of total MSE", name);
		bench_row_psnr(sec, what, k_total, s_total);
	}
	return failed;
}

/* ---- CPU throughput ---------------------------------------------------------------- */

/* Mpix/s of one encoder on the set. */
static double mpix_per_s(const bench_opts *opts, bc1_run *run)
{
	double s = bench_time(opts, run_encoder, run);
	return s > 0 ? (double)run->set->pixels / s / 1e6 : 0;
}

static int cpu_section(const bench_opts *opts, const bench_set *set, bc1_out *out, kiln_pool *pool,
		       bench_report *report)
{
	char note[512];
	snprintf(note, sizeof note,
		 "Mpix/s over the 24 Kodak images (%.1f Mpix) per run, wall clock; median of up to %d "
		 "runs after %d warm-up, adding runs while under %.0f s per figure (a first run over "
		 "1 s counts as a run). All cores: kiln through a kiln_pool of %u threads; squish on "
		 "the same pool, block rows split between the threads the same way. Ratio: kiln / squish.",
		 set->pixels / 1e6, opts->reps, opts->warmup, opts->budget_s, kiln_pool_threads(pool));
	bench_section *sec = bench_section_add(report, "BC1 CPU throughput", note);
	int failed = 0;
	for (int single = 0; single < 2; single++) {
		for (size_t p = 0; p < NPAIRS; p++) {
			char name[96], what[160];
			bc1_run kiln = { set, out, single ? NULL : pool, false, pairs[p].quality,
					 pairs[p].fit, KILN_OK };
			bc1_run squish = kiln;
			squish.squish = true;
			double k = mpix_per_s(opts, &kiln);
			double s = mpix_per_s(opts, &squish);
			snprintf(what, sizeof what, "%s, %s", pair_name(&pairs[p], name, sizeof name),
				 single ? "1 thread" : "all cores");
			if (kiln.status != KILN_OK) {
				bench_row_text(sec, what, kiln_strerror(kiln.status), NULL, NULL);
				failed++;
				continue;
			}
			bench_row_rate(sec, what, k, s, "Mpix/s");
		}
	}
	return failed;
}

/* ---- GPU --------------------------------------------------------------------------- */

/* Device buffers for encoding one GPU batch. */
typedef struct bc1_gpu {
	bench_gpu_batch *batch;
	kiln_bc1_params params;
	uint8_t *d_blocks, *h_blocks;  /* all outputs, one after the other */
	uint8_t *dst[BENCH_GPU_BATCH]; /* device pointers into d_blocks */
	size_t offsets[BENCH_GPU_BATCH], bytes;
	void *d_temp;
	size_t temp_size;
	kiln_status status[BENCH_GPU_BATCH];
} bc1_gpu;

static kiln_status gpu_launch(void *ctx)
{
	bc1_gpu *g = ctx;
	return kiln_bc1_encode_gpu(&g->params, g->batch->device, g->dst, BENCH_GPU_BATCH, g->status,
				   g->d_temp, g->temp_size, g->batch->stream);
}

/* Upload, encode, download: what a worker pays per batch. */
static kiln_status gpu_round_trip(void *ctx)
{
	bc1_gpu *g = ctx;
	bench_gpu_batch *b = g->batch;
	kiln_status st = kiln_gpu_h2d(b->d_pixels, b->h_pixels, b->bytes, b->stream);
	if (st == KILN_OK)
		st = gpu_launch(g);
	if (st == KILN_OK)
		st = kiln_gpu_d2h(g->h_blocks, g->d_blocks, g->bytes, b->stream);
	return st;
}

static void bc1_gpu_free(bc1_gpu *g)
{
	kiln_gpu_free(g->d_blocks);
	kiln_gpu_free(g->d_temp);
	kiln_gpu_host_free(g->h_blocks);
}

static kiln_status bc1_gpu_init(bc1_gpu *g, bench_gpu_batch *batch)
{
	memset(g, 0, sizeof *g);
	g->batch = batch;
	kiln_bc1_params_default(&g->params);
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		g->offsets[i] = g->bytes;
		g->bytes += kiln_bc1_bound(batch->device[i].width, batch->device[i].height);
	}
	g->temp_size = kiln_bc1_temp_size(BENCH_GPU_BATCH);
	kiln_status st = kiln_gpu_malloc((void **)&g->d_blocks, g->bytes);
	if (st == KILN_OK)
		st = kiln_gpu_malloc(&g->d_temp, g->temp_size);
	if (st == KILN_OK)
		st = kiln_gpu_host_alloc((void **)&g->h_blocks, g->bytes);
	if (st != KILN_OK) {
		bc1_gpu_free(g);
		return st;
	}
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++)
		g->dst[i] = g->d_blocks + g->offsets[i];
	return KILN_OK;
}

/* GPU blocks (h_blocks, after a round trip) against the CPU's for the same images. */
static bool same_as_cpu(const bc1_gpu *g, const bench_set *set, const bc1_out *cpu)
{
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		if (g->status[i] != KILN_OK)
			return false;
		size_t img = i % set->count;
		if (memcmp(g->h_blocks + g->offsets[i], cpu->blocks[img], cpu->size[img]) != 0)
			return false;
	}
	return true;
}

static int gpu_quality(const bench_opts *opts, const bench_set *set, bc1_out *cpu, kiln_pool *pool,
		       bc1_gpu *g, kiln_quality q, bench_section *sec)
{
	char what[160];
	double kernel_s = 0, e2e_s = 0;
	g->params.quality = q;
	kiln_status st = bench_gpu_time(opts, g->batch->stream, gpu_launch, g, &kernel_s);
	if (st == KILN_OK)
		st = bench_gpu_time(opts, g->batch->stream, gpu_round_trip, g, &e2e_s);
	snprintf(what, sizeof what, "BC1 %s on the GPU", kiln_quality_name(q));
	if (!bench_gpu_ok(sec, what, st))
		return 1;
	double gpix = (double)g->batch->pixels / 1e9;
	snprintf(what, sizeof what, "BC1 %s, kernel only, batch of %d", kiln_quality_name(q), BENCH_GPU_BATCH);
	bench_row_rate(sec, what, gpix / kernel_s, -1, "Gpix/s");
	snprintf(what, sizeof what, "BC1 %s, H2D + kernel + D2H (pinned)", kiln_quality_name(q));
	bench_row_rate(sec, what, gpix / e2e_s, -1, "Gpix/s");

	bc1_run run = { set, cpu, pool, false, q, SQUISH_SHIM_RANGE, KILN_OK };
	run_encoder(&run);
	bool same = run.status == KILN_OK && same_as_cpu(g, set, cpu);
	snprintf(what, sizeof what, "BC1 %s, GPU output == CPU output", kiln_quality_name(q));
	bench_row_text(sec, what, same ? "OK" : "MISMATCH", NULL, NULL);
	return same ? 0 : 1;
}

static int gpu_section(const bench_opts *opts, const bench_set *set, bc1_out *cpu, kiln_pool *pool,
		       bench_report *report)
{
	char note[400];
	snprintf(note, sizeof note,
		 "Batch of %d Kodak images (the 24, then the first 8 again) per kiln_bc1_encode_gpu "
		 "launch, images resident on the device; device time between events around %d "
		 "launches, median of %d runs after %d warm-up launches. End to end: pinned host "
		 "buffers, H2D + launch + D2H per batch.",
		 BENCH_GPU_BATCH, opts->gpu_launches, opts->reps, opts->warmup);
	bench_section *sec = bench_section_add(report, "BC1 on the GPU", note);
	bench_gpu_batch batch;
	bc1_gpu g;
	if (!bench_gpu_ok(sec, "GPU batch upload", bench_gpu_batch_create(&batch, set)))
		return 1;
	int failed = 0;
	if (!bench_gpu_ok(sec, "GPU buffers", bc1_gpu_init(&g, &batch))) {
		failed = 1;
		goto fail;
	}
	for (size_t p = 0; p < NPAIRS; p++)
		failed += gpu_quality(opts, set, cpu, pool, &g, pairs[p].quality, sec);
	bc1_gpu_free(&g);
fail:
	bench_gpu_batch_destroy(&batch);
	return failed;
}

int bench_bc1(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	bc1_out out;
	kiln_pool *pool = NULL;
	int failed = 0;
	if (bc1_out_alloc(&out, set) != KILN_OK || kiln_pool_create(kiln_cpu_count(), &pool) != KILN_OK) {
		bench_report_line(report, "BC1: out of memory");
		failed = 1;
		goto fail;
	}
	if (opts->quality)
		failed += quality_section(set, &out, pool, report);
	if (opts->cpu)
		failed += cpu_section(opts, set, &out, pool, report);
	if (opts->gpu && kiln_gpu_count() > 0)
		failed += gpu_section(opts, set, &out, pool, report);
fail:
	kiln_pool_destroy(pool);
	bc1_out_free(&out);
	return failed;
}
