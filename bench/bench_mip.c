/* Mip chain generation (sRGB, filtered in linear light): CPU throughput on all cores and on
 * one, GPU throughput for a batch of 32 Kodak images, and a CPU/GPU identity check. No
 * anchor: no library among the anchors builds mip chains this way. Throughput counts the
 * pixels of the base levels: a chain down to 1x1 writes a third as many again. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "common/texture.h"
#include "kernels/mip/mip.h"

/* Levels 1.. of up to BENCH_GPU_BATCH chains, tightly packed one after the other in one
 * buffer (host or device); level 0 is the caller's image. */
typedef struct mip_set {
	kiln_mip_chain chains[BENCH_GPU_BATCH];
	kiln_surface levels[BENCH_GPU_BATCH][KILN_MAX_LEVELS];
	size_t offsets[BENCH_GPU_BATCH][KILN_MAX_LEVELS];
	size_t count;
	size_t bytes;
	uint32_t max_levels;
} mip_set;

/* Plans the chains of `count` base surfaces (levels 1.. unbound until mip_set_bind). */
static kiln_status mip_set_plan(mip_set *m, const kiln_surface *base, size_t count)
{
	memset(m, 0, sizeof *m);
	m->count = count;
	for (size_t i = 0; i < count; i++) {
		uint32_t n = kiln_mip_count(base[i].width, base[i].height);
		if (n > KILN_MAX_LEVELS)
			return KILN_ERR_TOO_LARGE;
		m->levels[i][0] = base[i];
		for (uint32_t l = 1; l < n; l++) {
			uint32_t w = base[i].width >> l, h = base[i].height >> l;
			w = w ? w : 1;
			h = h ? h : 1;
			m->offsets[i][l] = m->bytes;
			m->levels[i][l] = (kiln_surface){ NULL, w, h, w * 4, base[i].has_alpha };
			m->bytes += (size_t)w * h * 4;
		}
		m->chains[i] = (kiln_mip_chain){ m->levels[i], n, true };
		m->max_levels = n > m->max_levels ? n : m->max_levels;
	}
	return KILN_OK;
}

/* The same plan bound to a buffer of m->bytes. */
static void mip_set_bind(mip_set *m, uint8_t *mem)
{
	for (size_t i = 0; i < m->count; i++)
		for (uint32_t l = 1; l < m->chains[i].count; l++)
			m->levels[i][l].rgba = mem + m->offsets[i][l];
}

/* ---- CPU ----------------------------------------------------------------------------- */

typedef struct mip_cpu_run {
	mip_set *set;
	kiln_pool *pool;
	kiln_status status;
} mip_cpu_run;

static void run_cpu(void *ctx)
{
	mip_cpu_run *run = ctx;
	kiln_status st = kiln_mip_build_cpu(run->set->chains, run->set->count, run->pool);
	if (run->status == KILN_OK)
		run->status = st;
}

static int cpu_rows(const bench_opts *opts, const bench_set *set, mip_set *host, kiln_pool *pool,
		    bench_section *sec)
{
	for (int single = 0; single < 2; single++) {
		mip_cpu_run run = { host, single ? NULL : pool, KILN_OK };
		double s = bench_time(opts, run_cpu, &run);
		const char *what = single ? "mip chains, CPU, 1 thread" : "mip chains, CPU, all cores";
		if (run.status != KILN_OK) {
			bench_row_text(sec, what, kiln_strerror(run.status), NULL, NULL);
			return 1;
		}
		bench_row_rate(sec, what, (double)set->pixels / s / 1e6, -1, "Mpix/s");
	}
	return 0;
}

/* ---- GPU ----------------------------------------------------------------------------- */

typedef struct mip_gpu_run {
	mip_set *dev;
	void *d_temp;
	size_t temp_size;
	kiln_stream stream;
} mip_gpu_run;

static kiln_status run_gpu(void *ctx)
{
	mip_gpu_run *run = ctx;
	return kiln_mip_build_gpu(run->dev->chains, run->dev->count, run->d_temp, run->temp_size,
				  run->stream);
}

/* Downloads the GPU levels and compares them with host chains of the same images. */
static kiln_status same_as_cpu(const mip_set *dev, const uint8_t *d_mem, const bench_set *set,
			       kiln_pool *pool, kiln_stream stream, bool *same)
{
	mip_set host, gpu;
	uint8_t *h_mem = NULL, *g_mem = NULL;
	kiln_status st = mip_set_plan(&host, set->surfaces, set->count);
	if (st != KILN_OK)
		return st;
	h_mem = malloc(host.bytes);
	g_mem = malloc(dev->bytes);
	if (!h_mem || !g_mem) {
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	mip_set_bind(&host, h_mem);
	st = kiln_gpu_d2h(g_mem, d_mem, dev->bytes, stream);
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(stream);
	if (st == KILN_OK)
		st = kiln_mip_build_cpu(host.chains, host.count, pool);
	if (st != KILN_OK)
		goto fail;
	gpu = *dev;
	mip_set_bind(&gpu, g_mem);
	*same = true;
	for (size_t i = 0; i < gpu.count; i++) {
		const kiln_mip_chain *c = &host.chains[i % host.count];
		for (uint32_t l = 1; l < c->count; l++)
			*same &= memcmp(gpu.levels[i][l].rgba, c->levels[l].rgba,
					(size_t)c->levels[l].width * c->levels[l].height * 4) == 0;
	}
fail:
	free(h_mem);
	free(g_mem);
	return st;
}

static int gpu_rows(const bench_opts *opts, const bench_set *set, kiln_pool *pool, bench_section *sec)
{
	bench_gpu_batch batch;
	mip_set dev;
	uint8_t *d_mem = NULL;
	mip_gpu_run run = { &dev, NULL, 0, NULL };
	bool same = false;
	double s = 0;
	if (!bench_gpu_ok(sec, "mip chains, GPU", bench_gpu_batch_create(&batch, set)))
		return 1;
	kiln_status st = mip_set_plan(&dev, batch.device, BENCH_GPU_BATCH);
	if (st == KILN_OK)
		st = kiln_gpu_malloc((void **)&d_mem, dev.bytes);
	run.temp_size = kiln_mip_temp_size(BENCH_GPU_BATCH, dev.max_levels);
	if (st == KILN_OK)
		st = kiln_gpu_malloc(&run.d_temp, run.temp_size);
	if (st != KILN_OK)
		goto fail;
	mip_set_bind(&dev, d_mem);
	run.stream = batch.stream;
	st = bench_gpu_time(opts, batch.stream, run_gpu, &run, &s);
	if (st == KILN_OK)
		st = same_as_cpu(&dev, d_mem, set, pool, batch.stream, &same);
fail:
	if (bench_gpu_ok(sec, "mip chains, GPU", st)) {
		char what[96];
		snprintf(what, sizeof what, "mip chains, GPU, batch of %d", BENCH_GPU_BATCH);
		bench_row_rate(sec, what, (double)batch.pixels / s / 1e9, -1, "Gpix/s");
		bench_row_text(sec, "mip chains, GPU output == CPU output", same ? "OK" : "MISMATCH", NULL, NULL);
	}
	kiln_gpu_free(run.d_temp);
	kiln_gpu_free(d_mem);
	bench_gpu_batch_destroy(&batch);
	return st == KILN_OK && same ? 0 : 1;
}

int bench_mip(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	bool gpu = opts->gpu && kiln_gpu_count() > 0;
	if (!opts->cpu && !gpu)
		return 0;
	mip_set host;
	uint8_t *mem = NULL;
	kiln_pool *pool = NULL;
	int failed = 1;
	bench_section *sec = bench_section_add(report, "Mip chains (sRGB, linear-light box filter)",
		"Full chains down to 1x1 of the Kodak images; throughput in base-level pixels. "
		"CPU: the 24 images in one kiln_mip_build_cpu call, median wall time. GPU: a batch of "
		"32 (the 24, then 8 again) resident on the device, one kiln_mip_build_gpu call "
		"(one launch per level) timed between events.");
	if (mip_set_plan(&host, set->surfaces, set->count) != KILN_OK ||
	    !(mem = malloc(host.bytes)) || kiln_pool_create(kiln_cpu_count(), &pool) != KILN_OK) {
		bench_row_text(sec, "mip chains", "setup failed", NULL, NULL);
		goto fail;
	}
	mip_set_bind(&host, mem);
	failed = 0;
	if (opts->cpu)
		failed += cpu_rows(opts, set, &host, pool, sec);
	if (gpu)
		failed += gpu_rows(opts, set, pool, sec);
fail:
	kiln_pool_destroy(pool);
	free(mem);
	return failed;
}
