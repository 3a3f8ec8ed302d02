/* The PNG encoder against libpng (zlib level 6, adaptive filters: png_write's defaults) on
 * the 24 Kodak images, RGB8: file sizes per quality, CPU throughput on one thread and on
 * all cores, and GPU kernel throughput for a batch of 32 resident images with a CPU/GPU
 * identity check. Run by `kiln-bench --only pngenc`.
 *
 * Both encoders read the same RGBA8 surfaces and write RGB8 (kiln: from_rgba8; libpng:
 * png_set_filler, which strips the fourth byte on write). Throughput is MB/s of raw RGB8
 * samples (3 bytes a pixel) per second of wall clock (CPU) or device time (GPU). */
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "kernels/png/png_enc.h"

typedef struct pe_out {
	uint8_t *dst[BENCH_GPU_BATCH];
	size_t caps[BENCH_GPU_BATCH], sizes[BENCH_GPU_BATCH];
	kiln_status status[BENCH_GPU_BATCH];
	kiln_pngenc_image imgs[BENCH_GPU_BATCH];
	void *temp;
	size_t temp_size;
} pe_out;

static void pe_out_free(pe_out *o)
{
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++)
		free(o->dst[i]);
	free(o->temp);
	memset(o, 0, sizeof *o);
}

/* Buffers for every image of the set at every quality: the largest bound and scratch of
 * the three (the quality sets the strip layout and the match search). */
static kiln_status pe_out_alloc(pe_out *o, const bench_set *set, kiln_pool *pool)
{
	memset(o, 0, sizeof *o);
	kiln_pngenc_params p;
	kiln_pngenc_params_default(&p);
	for (size_t i = 0; i < set->count; i++) {
		kiln_surface s = set->surfaces[i];
		s.has_alpha = 0;
		kiln_pngenc_image_from_surface(&s, &o->imgs[i]);
	}
	for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++) {
		p.quality = (kiln_quality)q;
		for (size_t i = 0; i < set->count; i++) {
			size_t b = kiln_pngenc_bound(&p, &o->imgs[i]);
			o->caps[i] = b > o->caps[i] ? b : o->caps[i];
		}
		size_t t = kiln_pngenc_cpu_temp_size(&p, o->imgs, set->count, pool);
		o->temp_size = t > o->temp_size ? t : o->temp_size;
	}
	for (size_t i = 0; i < set->count; i++)
		if (!(o->dst[i] = malloc(o->caps[i])))
			return KILN_ERR_NOMEM;
	o->temp = malloc(o->temp_size);
	return o->temp ? KILN_OK : KILN_ERR_NOMEM;
}

typedef struct pe_run {
	const bench_set *set;
	pe_out *out;
	kiln_pool *pool;    /* NULL: one thread */
	int libpng;
	kiln_quality quality;
	kiln_status status;
	size_t total;       /* bytes of all files of the last run */
	size_t lib_sizes[BENCH_KODAK_COUNT];
} pe_run;

typedef struct lib_buf {
	uint8_t *p;
	size_t n, cap;
} lib_buf;

static void lib_write(png_structp png, png_bytep data, png_size_t n)
{
	lib_buf *b = png_get_io_ptr(png);
	if (b->n + n > b->cap) {
		size_t cap = (b->n + n) * 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p)
			png_error(png, "out of memory");
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void lib_flush(png_structp png)
{
}

/* libpng with its defaults; the file's size (0 on error). */
static size_t libpng_encode(const kiln_surface *s, lib_buf *b)
{
	b->n = 0;
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	if (!info) {
		png_destroy_write_struct(&png, NULL);
		return 0;
	}
	if (setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		return 0;
	}
	png_set_write_fn(png, b, lib_write, lib_flush);
	png_set_IHDR(png, info, s->width, s->height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	png_set_filler(png, 0, PNG_FILLER_AFTER);
	for (uint32_t y = 0; y < s->height; y++)
		png_write_row(png, s->rgba + (size_t)y * s->stride);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	return b->n;
}

static void lib_range(void *ctx, size_t begin, size_t end)
{
	pe_run *run = ctx;
	lib_buf b = {0};
	for (size_t i = begin; i < end; i++)
		run->lib_sizes[i] = libpng_encode(&run->set->surfaces[i], &b);
	free(b.p);
}

static void run_encoder(void *ctx)
{
	pe_run *run = ctx;
	run->total = 0;
	if (run->libpng) {
		kiln_pool_for(run->pool, run->set->count, 1, lib_range, run);
		for (size_t i = 0; i < run->set->count; i++) {
			if (!run->lib_sizes[i] && run->status == KILN_OK)
				run->status = KILN_ERR_IO;
			run->total += run->lib_sizes[i];
		}
		return;
	}
	kiln_pngenc_params p;
	kiln_pngenc_params_default(&p);
	p.quality = run->quality;
	pe_out *o = run->out;
	kiln_status st = kiln_pngenc_encode_cpu(&p, o->imgs, o->dst, o->caps, o->sizes, run->set->count,
						o->status, o->temp, o->temp_size, run->pool);
	for (size_t i = 0; st == KILN_OK && i < run->set->count; i++) {
		st = o->status[i];
		run->total += o->sizes[i];
	}
	if (run->status == KILN_OK)
		run->status = st;
}

static double raw_mb(const bench_set *set)
{
	return (double)set->pixels * 3 / 1e6;
}

static int size_section(const bench_set *set, pe_out *out, kiln_pool *pool, bench_report *report,
			size_t *lib_total)
{
	bench_section *sec = bench_section_add(report, "PNG encoder: file size (24 Kodak images, RGB8)",
		"Bytes of all 24 files. Anchor: libpng 1.6 png_write with its defaults (zlib level 6, "
		"adaptive filters). kiln: default layout (kiSt strips of about 16, 20 and 20 KiB of filtered bytes at fast, medium and high). "
		"Targets: medium <= 1.03 x, fast <= 1.10 x. Ratio: kiln / libpng.");
	pe_run lib = { set, out, pool, 1, KILN_QUALITY_MEDIUM, KILN_OK, 0, {0} };
	run_encoder(&lib);
	*lib_total = lib.total;
	if (lib.status != KILN_OK) {
		bench_row_text(sec, "libpng", kiln_strerror(lib.status), NULL, NULL);
		return 1;
	}
	int failed = 0;
	for (int q = 0; q < 3; q++) {
		pe_run k = { set, out, pool, 0, (kiln_quality)q, KILN_OK, 0, {0} };
		run_encoder(&k);
		char what[160], kb[48], ab[48], ratio[32];
		snprintf(what, sizeof what, "PNG %s vs libpng level 6", kiln_quality_name((kiln_quality)q));
		if (k.status != KILN_OK) {
			bench_row_text(sec, what, kiln_strerror(k.status), NULL, NULL);
			failed++;
			continue;
		}
		snprintf(kb, sizeof kb, "%zu B", k.total);
		snprintf(ab, sizeof ab, "%zu B", lib.total);
		snprintf(ratio, sizeof ratio, "%.4f", (double)k.total / (double)lib.total);
		bench_row_text(sec, what, kb, ab, ratio);
	}
	return failed;
}

static int cpu_section(const bench_opts *opts, const bench_set *set, pe_out *out, kiln_pool *pool,
		       bench_report *report)
{
	char note[512];
	snprintf(note, sizeof note,
		 "MB/s of raw RGB8 samples (%.1f MB) per run over the 24 Kodak images, wall clock; median "
		 "of up to %d runs after %d warm-up. All cores: a kiln_pool of %u threads; kiln spreads "
		 "strips over it, libpng gets one image per task on the same pool. Anchor: libpng level 6.",
		 raw_mb(set), opts->reps, opts->warmup, kiln_pool_threads(pool));
	bench_section *sec = bench_section_add(report, "PNG encoder: CPU throughput", note);
	int failed = 0;
	for (int single = 1; single >= 0; single--) {
		pe_run lib = { set, out, single ? NULL : pool, 1, KILN_QUALITY_MEDIUM, KILN_OK, 0, {0} };
		double lib_s = bench_time(opts, run_encoder, &lib);
		for (int q = 0; q < 3; q++) {
			pe_run k = { set, out, single ? NULL : pool, 0, (kiln_quality)q, KILN_OK, 0, {0} };
			double s = bench_time(opts, run_encoder, &k);
			char what[160];
			snprintf(what, sizeof what, "PNG %s vs libpng level 6, %s",
				 kiln_quality_name((kiln_quality)q), single ? "1 thread" : "all cores");
			if (k.status != KILN_OK) {
				bench_row_text(sec, what, kiln_strerror(k.status), NULL, NULL);
				failed++;
				continue;
			}
			bench_row_rate(sec, what, raw_mb(set) / s, raw_mb(set) / lib_s, "MB/s");
		}
	}
	return failed;
}

/* ---- GPU --------------------------------------------------------------------------- */

typedef struct pe_gpu {
	bench_gpu_batch *batch;
	kiln_pngenc_params params;
	kiln_pngenc_image imgs[BENCH_GPU_BATCH];
	uint8_t *d_files;
	uint8_t *dst[BENCH_GPU_BATCH];
	size_t caps[BENCH_GPU_BATCH], offsets[BENCH_GPU_BATCH], bytes;
	uint64_t *d_sizes;
	void *d_temp;
	size_t temp_size;
	kiln_status status[BENCH_GPU_BATCH];
} pe_gpu;

static kiln_status gpu_launch(void *ctx)
{
	pe_gpu *g = ctx;
	return kiln_pngenc_encode_gpu(&g->params, g->imgs, g->dst, g->caps, g->d_sizes, BENCH_GPU_BATCH,
				      g->status, g->d_temp, g->temp_size, g->batch->stream);
}

static void pe_gpu_free(pe_gpu *g)
{
	kiln_gpu_free(g->d_files);
	kiln_gpu_free(g->d_sizes);
	kiln_gpu_free(g->d_temp);
}

static kiln_status pe_gpu_init(pe_gpu *g, bench_gpu_batch *batch)
{
	memset(g, 0, sizeof *g);
	g->batch = batch;
	kiln_pngenc_params_default(&g->params);
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		kiln_surface s = batch->device[i];
		s.has_alpha = 0;
		kiln_pngenc_image_from_surface(&s, &g->imgs[i]);
	}
	/* the largest bounds and scratch of the three qualities */
	for (int q = KILN_QUALITY_FAST; q <= KILN_QUALITY_HIGH; q++) {
		g->params.quality = (kiln_quality)q;
		for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
			size_t b = kiln_pngenc_bound(&g->params, &g->imgs[i]);
			g->caps[i] = b > g->caps[i] ? b : g->caps[i];
		}
		size_t t = kiln_pngenc_gpu_temp_size(&g->params, g->imgs, BENCH_GPU_BATCH);
		g->temp_size = t > g->temp_size ? t : g->temp_size;
	}
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++) {
		g->offsets[i] = g->bytes;
		g->bytes += (g->caps[i] + 255) & ~(size_t)255;
	}
	kiln_status st = kiln_gpu_malloc((void **)&g->d_files, g->bytes);
	if (st == KILN_OK)
		st = kiln_gpu_malloc((void **)&g->d_sizes, BENCH_GPU_BATCH * sizeof(uint64_t));
	if (st == KILN_OK)
		st = kiln_gpu_malloc(&g->d_temp, g->temp_size);
	if (st != KILN_OK) {
		pe_gpu_free(g);
		return st;
	}
	for (size_t i = 0; i < BENCH_GPU_BATCH; i++)
		g->dst[i] = g->d_files + g->offsets[i];
	return KILN_OK;
}

/* The batch's files (after a launch) against the CPU's for the same images. */
static bool same_as_cpu(pe_gpu *g, const bench_set *set, pe_out *cpu, kiln_pool *pool)
{
	pe_run k = { set, cpu, pool, 0, g->params.quality, KILN_OK, 0, {0} };
	run_encoder(&k);
	uint64_t sizes[BENCH_GPU_BATCH];
	if (k.status != KILN_OK || kiln_gpu_d2h(sizes, g->d_sizes, sizeof sizes, g->batch->stream) != KILN_OK ||
	    kiln_gpu_stream_sync(g->batch->stream) != KILN_OK)
		return false;
	bool same = true;
	for (size_t i = 0; same && i < BENCH_GPU_BATCH; i++) {
		size_t img = i % set->count;
		if (g->status[i] != KILN_OK || sizes[i] != cpu->sizes[img])
			return false;
		uint8_t *h = malloc(sizes[i]);
		same = h && kiln_gpu_d2h(h, g->dst[i], sizes[i], g->batch->stream) == KILN_OK &&
		       kiln_gpu_stream_sync(g->batch->stream) == KILN_OK && memcmp(h, cpu->dst[img], sizes[i]) == 0;
		free(h);
	}
	return same;
}

static int gpu_section(const bench_opts *opts, const bench_set *set, pe_out *cpu, kiln_pool *pool,
		       bench_report *report)
{
	char note[512];
	snprintf(note, sizeof note,
		 "Batch of %d Kodak images (the 24, then the first 8 again) per kiln_pngenc_encode_gpu "
		 "call, RGBA8 surfaces resident on the device written as RGB8 PNG files into device "
		 "memory; device time between events around %d calls, median of %d runs after %d warm-up "
		 "calls. MB/s of raw RGB8 samples (3 bytes a pixel). Targets (H100): fast >= 10 GB/s, "
		 "medium >= 4 GB/s.",
		 BENCH_GPU_BATCH, opts->gpu_launches, opts->reps, opts->warmup);
	bench_section *sec = bench_section_add(report, "PNG encoder on the GPU", note);
	bench_gpu_batch batch;
	pe_gpu g;
	if (!bench_gpu_ok(sec, "GPU batch upload", bench_gpu_batch_create(&batch, set)))
		return 1;
	int failed = 0;
	if (!bench_gpu_ok(sec, "GPU buffers", pe_gpu_init(&g, &batch))) {
		failed = 1;
		goto fail;
	}
	double mb = (double)batch.pixels * 3 / 1e6;
	for (int q = 0; q < 3; q++) {
		char what[160];
		double s = 0;
		g.params.quality = (kiln_quality)q;
		kiln_status st = bench_gpu_time(opts, batch.stream, gpu_launch, &g, &s);
		snprintf(what, sizeof what, "PNG %s, kernels only, batch of %d", kiln_quality_name((kiln_quality)q),
			 BENCH_GPU_BATCH);
		if (!bench_gpu_ok(sec, what, st)) {
			failed++;
			continue;
		}
		bench_row_rate(sec, what, mb / s, -1, "MB/s");
		bool same = same_as_cpu(&g, set, cpu, pool);
		snprintf(what, sizeof what, "PNG %s, GPU files == CPU files", kiln_quality_name((kiln_quality)q));
		bench_row_text(sec, what, same ? "OK" : "MISMATCH", NULL, NULL);
		failed += same ? 0 : 1;
	}
	pe_gpu_free(&g);
fail:
	bench_gpu_batch_destroy(&batch);
	return failed;
}

int bench_png_enc(const bench_opts *opts, const bench_set *set, bench_report *report)
{
	pe_out out;
	kiln_pool *pool = NULL;
	int failed = 0;
	size_t lib_total = 0;
	if (kiln_pool_create(kiln_cpu_count(), &pool) != KILN_OK || pe_out_alloc(&out, set, pool) != KILN_OK) {
		bench_report_line(report, "PNG encoder: out of memory");
		failed = 1;
		goto fail;
	}
	failed += size_section(set, &out, pool, report, &lib_total);
	failed += cpu_section(opts, set, &out, pool, report);
	if (kiln_gpu_count() > 0)
		failed += gpu_section(opts, set, &out, pool, report);
fail:
	pe_out_free(&out);
	kiln_pool_destroy(pool);
	return failed;
}
