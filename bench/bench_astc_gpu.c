/* ASTC on the GPU (kiln-bench --only astcgpu): kernel-only throughput of
 * kiln_astc_encode_gpu on a batch of 32 Kodak images resident on the device, at 4x4, 6x6
 * and 8x8 (other footprints on request), fast / medium / high, with the kernel's
 * registers, local memory and occupancy, and a check that the GPU's blocks equal the
 * CPU's (the first two block rows of the first image, encoded on the CPU as a surface of
 * their own: inner blocks see the same texels).
 * Environment (comma-separated lists), to keep device runs short or to add footprints:
 *   KILN_BENCH_ASTCGPU_FOOTPRINTS=4x4,6x6     of 4x4, 6x6, 8x8 (the default), or any other
 *                                             footprint named (5x4, 10x10, ...)
 *   KILN_BENCH_ASTCGPU_QUALITIES=fast,medium  of fast, medium, high */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "kernels/astc/astc.h"

int bench_astc_gpu(const bench_opts *opts, const bench_set *set, bench_report *report);

typedef struct astc_gpu_run {
	bench_gpu_batch *batch;
	kiln_astc_params params;
	uint8_t *d_blocks;
	uint8_t *dst[BENCH_GPU_BATCH];
	size_t offsets[BENCH_GPU_BATCH], bytes;
	void *d_temp;
	size_t temp_size;
	kiln_status status[BENCH_GPU_BATCH];
} astc_gpu_run;

static kiln_status launch(astc_gpu_run *g)
{
	kiln_status st = kiln_astc_encode_gpu(&g->params, g->batch->device, g->dst, BENCH_GPU_BATCH, g->status,
					      g->d_temp, g->temp_size, g->batch->stream);
	for (size_t i = 0; st == KILN_OK && i < BENCH_GPU_BATCH; i++)
		st = g->status[i];
	return st;
}

/* Device seconds per launch: a warm-up launch on a 1x1 surface (which copies the
 * footprint's tables to the device), one timed launch of the batch, and when that took
 * less than 0.5 s, launches between two events for about 1 s more (at most
 * opts->gpu_launches): the slow qualities take seconds a launch. */
static kiln_status time_launches(const bench_opts *opts, astc_gpu_run *g, double *seconds, int *launches)
{
	kiln_event start = NULL, end = NULL;
	kiln_status st = kiln_gpu_event_create(&start);
	if (st == KILN_OK)
		st = kiln_gpu_event_create(&end);
	float ms = 0;
	*launches = 0;
	/* the first launch copies the tables (synchronously): time after that copy */
	if (st == KILN_OK) {
		kiln_surface one = g->batch->device[0];
		one.width = one.height = 1;
		st = kiln_astc_encode_gpu(&g->params, &one, g->dst, 1, g->status, g->d_temp, g->temp_size,
					  g->batch->stream);
	}
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(g->batch->stream);
	if (st == KILN_OK)
		st = kiln_gpu_event_record(start, g->batch->stream);
	if (st == KILN_OK)
		st = launch(g);
	if (st == KILN_OK)
		st = kiln_gpu_event_record(end, g->batch->stream);
	if (st == KILN_OK)
		st = kiln_gpu_event_elapsed(start, end, &ms);
	double total = ms * 1e-3;
	int n = 1;
	int cap = opts->gpu_launches < 1 ? 1 : opts->gpu_launches;
	if (st == KILN_OK && total < 0.5 && !opts->quick) {
		int more = (int)(1.0 / (total > 1e-6 ? total : 1e-6));
		more = more < 1 ? 1 : (more > cap ? cap : more);
		st = kiln_gpu_event_record(start, g->batch->stream);
		for (int i = 0; st == KILN_OK && i < more; i++)
			st = launch(g);
		if (st == KILN_OK)
			st = kiln_gpu_event_record(end, g->batch->stream);
		if (st == KILN_OK)
			st = kiln_gpu_event_elapsed(start, end, &ms);
		total = ms * 1e-3;
		n = more;
	}
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(g->batch->stream);
	kiln_gpu_event_destroy(start);
	kiln_gpu_event_destroy(end);
	*seconds = total / n;
	*launches = n;
	return st;
}

/* The first two block rows of image 0: GPU bytes against a CPU encode of those rows. */
static kiln_status same_as_cpu(astc_gpu_run *g, const bench_set *set, kiln_pool *pool, bool *same)
{
	const kiln_surface *img = &set->surfaces[0];
	kiln_surface rows = *img;
	rows.height = 2 * g->params.block_h;
	size_t bytes = kiln_astc_bound(rows.width, rows.height, g->params.block_w, g->params.block_h);
	uint8_t *cpu = malloc(bytes), *gpu = malloc(bytes);
	kiln_status st = cpu && gpu ? KILN_OK : KILN_ERR_NOMEM, one = KILN_OK;
	if (st == KILN_OK)
		st = kiln_gpu_d2h(gpu, g->dst[0], bytes, g->batch->stream);
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(g->batch->stream);
	if (st == KILN_OK)
		st = kiln_astc_encode_cpu(&g->params, &rows, &cpu, 1, &one, pool);
	*same = st == KILN_OK && one == KILN_OK && memcmp(cpu, gpu, bytes) == 0;
	free(cpu);
	free(gpu);
	return st;
}

static void run_free(astc_gpu_run *g)
{
	kiln_gpu_free(g->d_blocks);
	kiln_gpu_free(g->d_temp);
	g->d_blocks = NULL;
	g->d_temp = NULL;
}

static kiln_status run_init(astc_gpu_run *g, bench_gpu_batch *batch, uint32_t bw, uint32_t bh)
{
	memset(g, 0, sizeof *g);
	g->batch = batch;
	kiln_astc_params_default(&g->params);
	g->params.block_w = bw;
	g->params.block_h = bh;
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		g->offsets[i] = g->bytes;
		g->bytes += kiln_astc_bound(batch->device[i].width, batch->device[i].height, bw, bh);
	}
	g->temp_size = kiln_astc_temp_size(BENCH_GPU_BATCH);
	kiln_status st = kiln_gpu_malloc((void **)&g->d_blocks, g->bytes);
	if (st == KILN_OK)
		st = kiln_gpu_malloc(&g->d_temp, g->temp_size);
	if (st != KILN_OK) {
		run_free(g);
		return st;
	}
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++)
		g->dst[i] = g->d_blocks + g->offsets[i];
	return KILN_OK;
}

static bool selected(uint32_t bw, uint32_t bh, int q)
{
	char fp[16];
	snprintf(fp, sizeof fp, "%ux%u", bw, bh);
	bool by_default = bw == bh && (bw == 4 || bw == 6 || bw == 8);
	return bench_env_lists("KILN_BENCH_ASTCGPU_FOOTPRINTS", fp, by_default) &&
	       bench_env_lists("KILN_BENCH_ASTCGPU_QUALITIES", kiln_quality_name((kiln_quality)q), true);
}

/* A row with the kernel's shape: threads a CTA, registers, stack, CTAs an SM. */
static void report_kernel(bench_section *sec)
{
	char what[160], cell[48];
	int threads = 0, regs = 0, ctas = 0;
	size_t local = 0;
	if (kiln_astc_gpu_kernel_info(&threads, &regs, &local, &ctas) != KILN_OK)
		return;
	snprintf(what, sizeof what, "ASTC kernel: %d threads/CTA, %d registers, %zu B local, %d CTAs/SM", threads,
		 regs, local, ctas);
	snprintf(cell, sizeof cell, "%.0f%% occupancy", 100.0 * ctas * threads / 2048.0);
	bench_row_text(sec, what, cell, NULL, NULL);
	fprintf(stderr, "astcgpu: %s: %s\n", what, cell);
}

int bench_astc_gpu(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	if (kiln_gpu_count() == 0) {
		bench_report_line(report, "ASTC GPU part skipped: no GPU%s.", kiln_gpu_built() ? "" : " (built without CUDA)");
		return 0;
	}
	char note[512];
	snprintf(note, sizeof note,
		 "Batch of %d Kodak images (24, then the first 8 again) per launch, on the device, "
		 "linear; device time between events around up to %d launches (about 1 s; one when "
		 "a launch takes over 0.5 s) after a warm-up. A thread per ASTC block and stage. Kernel: "
		 "registers and local bytes per thread, CTAs per SM (occupancy API) and the share of "
		 "2048 threads. Check: first two block rows of kodim01 against the CPU.",
		 BENCH_GPU_BATCH, opts->gpu_launches);
	bench_section *sec = bench_section_add(report, "ASTC on the GPU", note);
	kiln_pool *pool = NULL;
	bench_gpu_batch batch;
	int failed = 0;
	if (!bench_gpu_ok(sec, "GPU batch upload", bench_gpu_batch_create(&batch, set)))
		return 1;
	if (kiln_pool_create(0, &pool) != KILN_OK) {
		bench_row_text(sec, "thread pool", "out of memory", NULL, NULL);
		bench_gpu_batch_destroy(&batch);
		return 1;
	}
	report_kernel(sec);
	for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++) { /* fastest first */
		for (int f = 0; f < KILN_ASTC_FOOTPRINTS; f++) {
			uint32_t bw = kiln_astc_footprints[f][0], bh = kiln_astc_footprints[f][1];
			if (!selected(bw, bh, q))
				continue;
			char what[160], cell[48];
			astc_gpu_run g;
			snprintf(what, sizeof what, "ASTC %ux%u %s, kernel only, batch of %d", bw, bh,
				 kiln_quality_name((kiln_quality)q), BENCH_GPU_BATCH);
			kiln_status st = run_init(&g, &batch, bw, bh);
			if (!bench_gpu_ok(sec, what, st)) {
				failed++;
				continue;
			}
			g.params.quality = (kiln_quality)q;
			double s = 0;
			int n = 0;
			bool same = false;
			st = time_launches(opts, &g, &s, &n);
			if (st == KILN_OK)
				st = same_as_cpu(&g, set, pool, &same);
			if (!bench_gpu_ok(sec, what, st)) {
				failed++;
			} else {
				snprintf(cell, sizeof cell, "%.2f Mpix/s", (double)batch.pixels / 1e6 / s);
				char anchor[48];
				snprintf(anchor, sizeof anchor, "%.1f ms/launch (%d timed)", s * 1e3, n);
				bench_row_text(sec, what, cell, anchor, same ? "== CPU" : "MISMATCH");
				/* as it goes: a long run cut short still shows what it measured */
				fprintf(stderr, "astcgpu: %s: %s, %s, %s\n", what, cell, anchor, same ? "== CPU" : "MISMATCH");
				failed += !same;
			}
			run_free(&g);
		}
	}
	kiln_pool_destroy(pool);
	bench_gpu_batch_destroy(&batch);
	return failed;
}
