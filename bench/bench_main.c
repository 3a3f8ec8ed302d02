/* kiln-bench: kiln's codecs against the anchors (libsquish for BC1), side by side, on the
 * Kodak set. Prints markdown tables (what, kiln, anchor, ratio) and writes them to a file.
 *
 *   kiln-bench [--quick] [--only quality|cpu|gpu|sched|worker|astc|astcgpu|pngdec|pngenc|storage] [--out FILE.md]
 *
 * Run from the repository root (make bench), so ../shared/data/kodak is found; KILN_SHARED
 * overrides the data folder. Exit status 1 when a check failed (an encoder error, GPU
 * output differing from the CPU's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "kernels/gpu.h"

#define DEFAULT_OUT "bench/out/bench.md"

/* ASTC against astcenc (bench_astc.c): only with --only astc, it takes minutes. */
int bench_astc(const bench_opts *opts, const bench_set *set, bench_report *report);
static bool only_astc;
/* ASTC on the GPU (bench_astc_gpu.c): only with --only astcgpu, it takes a minute. */
int bench_astc_gpu(const bench_opts *opts, const bench_set *set, bench_report *report);
static bool only_astcgpu;
/* PNG decoding against libpng and libspng (bench_png_dec.c): only with --only pngdec. */
int bench_png_dec(const bench_opts *opts, bench_report *report);
static bool only_pngdec;
/* The PNG encoder against libpng (bench_png_enc.c): only with --only pngenc. */
int bench_png_enc(const bench_opts *opts, const bench_set *set, bench_report *report);
static bool only_pngenc;
/* Durable small-file writes through file storage (bench_storage.c): only with --only storage. */
int bench_storage(const bench_opts *opts, bench_report *report);
static bool only_storage;

static void usage(FILE *f)
{
	fprintf(f, "usage: kiln-bench [--quick] [--only quality|cpu|gpu|sched|worker|astc|astcgpu|pngdec|pngenc|storage]\n"
		   "                  [--out FILE.md]\n"
		   "  --quick   one timed run, no warm-up (CI smoke)\n"
		   "  --only    run one part: BC1 quality, CPU throughput, the GPU part, or\n"
		   "            scheduler scale (simulated workers), or the worker pipeline\n"
		   "            end to end (PNG files -> DDS files); astc, astcgpu, pngdec and\n"
		   "            pngenc run only when named (ASTC against astcenc, ASTC on the GPU,\n"
		   "            PNG decoding against libpng/libspng, PNG encoding against libpng);\n"
		   "            storage: durable small-file writes (KILN_BENCH_STORAGE_DIR)\n"
		   "  --out     markdown output (default " DEFAULT_OUT ")\n");
}

/* 0 on success, 1 on a bad command line, -1 for --help. */
static int parse_args(int argc, char **argv, bench_opts *opts)
{
	*opts = (bench_opts){ .quality = true, .cpu = true, .gpu = true, .sched = true, .worker = true, .warmup = 1, .reps = 5,
			      .budget_s = 10, .gpu_launches = 20, .out_path = DEFAULT_OUT };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--quick") == 0) {
			opts->quick = true;
			opts->warmup = 0;
			opts->reps = 1;
			opts->budget_s = 0;
			opts->gpu_launches = 3;
		} else if (strcmp(a, "--only") == 0 && i + 1 < argc) {
			const char *part = argv[++i];
			opts->quality = strcmp(part, "quality") == 0;
			opts->cpu = strcmp(part, "cpu") == 0;
			opts->gpu = strcmp(part, "gpu") == 0;
			opts->sched = strcmp(part, "sched") == 0;
			opts->worker = strcmp(part, "worker") == 0;
			only_astc = strcmp(part, "astc") == 0;
			only_astcgpu = strcmp(part, "astcgpu") == 0;
			only_pngdec = strcmp(part, "pngdec") == 0;
			only_pngenc = strcmp(part, "pngenc") == 0;
			only_storage = strcmp(part, "storage") == 0;
			if (!opts->quality && !opts->cpu && !opts->gpu && !opts->sched && !opts->worker &&
			    !only_astc && !only_astcgpu && !only_pngdec && !only_pngenc && !only_storage) {
				fprintf(stderr, "kiln-bench: unknown part '%s'\n", part);
				return 1;
			}
		} else if (strcmp(a, "--out") == 0 && i + 1 < argc) {
			opts->out_path = argv[++i];
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			return -1;
		} else {
			fprintf(stderr, "kiln-bench: unknown or incomplete option '%s'\n", a);
			return 1;
		}
	}
	return 0;
}

static int write_report(const bench_report *report, const char *path)
{
	bench_report_write(report, stdout);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "kiln-bench: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	bench_report_write(report, f);
	if (fclose(f) != 0) {
		fprintf(stderr, "kiln-bench: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(stderr, "kiln-bench: wrote %s\n", path);
	return 0;
}

int main(int argc, char **argv)
{
	bench_opts opts;
	int rc = parse_args(argc, argv, &opts);
	if (rc != 0) {
		usage(rc < 0 ? stdout : stderr);
		return rc < 0 ? 0 : 2;
	}
	static bench_set set;  /* large: keep it off the stack */
	static bench_report report;
	char err[600];
	bool images = opts.quality || opts.cpu || opts.gpu || opts.worker || only_astc || only_astcgpu || only_pngenc;  /* the scheduler part needs none */
	kiln_status st = images ? bench_load_kodak(&set, err, sizeof err) : KILN_OK;
	if (st != KILN_OK) {
		fprintf(stderr, "kiln-bench: %s\n", err);
		return 2;
	}
	bench_report_machine(&report, &opts);
	if (opts.gpu && kiln_gpu_count() == 0)
		bench_report_line(&report, "GPU part skipped: no GPU%s.",
				  kiln_gpu_built() ? "" : " (built without CUDA)");

	int failed = images ? bench_bc1(&opts, &set, &report) : 0;
	failed += images ? bench_mip(&opts, &set, &report) : 0;
	if (only_astcgpu)
		failed += bench_astc_gpu(&opts, &set, &report);
	if (only_astc)
		failed += bench_astc(&opts, &set, &report);
	if (only_pngdec)
		failed += bench_png_dec(&opts, &report);
	if (only_pngenc)
		failed += bench_png_enc(&opts, &set, &report);
	if (only_storage)
		failed += bench_storage(&opts, &report);
	if (opts.sched)
		failed += bench_sched(&opts, &report);
	if (opts.worker)
		failed += bench_worker(&opts, &set, &report);
	if (failed)
		bench_report_line(&report, "%d check(s) FAILED: see the tables.", failed);
	rc = write_report(&report, opts.out_path);
	bench_set_free(&set);
	return failed || rc ? 1 : 0;
}
