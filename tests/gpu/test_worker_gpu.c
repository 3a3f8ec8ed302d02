/* GPU test of the worker pipeline (make test-gpu): `kiln run`, i.e. the scheduler and a
 * worker with the GPU backend (texenc keeping several batches in flight), writes the same
 * files as the same job on the CPU backend; so does the pipeline when its host decodes
 * part of the files for a busy GPU. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "kernels/gpu.h"
#include "kernels/png/png_file.h"
#include "tests/gpu/gpu_testutil.h"
#include "worker/pipeline.h"

Test(worker_gpu, kiln_run_on_the_gpu_writes_the_cpu_backends_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	/* more images than one batch, with mips, through real shards */
	int rc = gpu_test_sh(NULL,
		 "$kiln samples -o $d/in; cp $data/kodak/*.png $d/in/; "
		 "for i in 1 2; do mkdir -p $d/in/copy$i; cp $data/kodak/kodim1*.png $d/in/copy$i/; done; "
		 "$kiln run -q --shard-size 8 --mipmaps --container ktx2 --device gpu --input $d/in --output $d/gpu; "
		 "$kiln run -q --shard-size 8 --mipmaps --container ktx2 --device cpu --input $d/in --output $d/cpu; "
		 "test $(find $d/gpu -name '*.ktx2' | wc -l) -eq $(find $d/in -name '*.png' | wc -l); "
		 "diff -r $d/cpu $d/gpu");
	cr_expect_eq(rc, 0, "kiln run on the GPU must write the same files as on the CPU");
}

/* The same with inputs in kiln's strip-parallel PNG layout, which the worker hands to the
 * GPU undecoded (GPU PNG decode inside the encode batches), next to ordinary files that
 * the decode threads take: the files are those of the CPU backend, and those of libpng
 * decoding on the GPU too. */
Test(worker_gpu, strip_pngs_decoded_on_the_gpu_give_the_cpu_backends_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	char dir[] = "/tmp/kiln-wgpu-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char path[512];
	for (int i = 1; i <= 24; i++) {
		kiln_image img;
		test_kodak_path(path, sizeof path, i);
		cr_assert_eq(kiln_png_read_path(path, KILN_PNG_DECODER_LIBPNG, NULL, NULL, &img, NULL, 0), KILN_OK, "%s", path);
		snprintf(path, sizeof path, "%s/in/strips%02d.png", dir, i);
		if (i == 1) {
			char in[256];
			snprintf(in, sizeof in, "%s/in", dir);
			cr_assert_eq(kiln_mkdir_p(in), KILN_OK);
		}
		cr_assert_eq(kiln_png_write_path(path, &img, KILN_QUALITY_FAST), KILN_OK);
		kiln_image_free(&img);
	}
	int rc = gpu_test_sh(dir,
		 "cp $data/kodak/kodim0*.png $d/in/; "
		 "$kiln run -q --shard-size 8 --mipmaps --device gpu --input $d/in --output $d/gpu; "
		 "$kiln run -q --shard-size 8 --mipmaps --device gpu --png-decoder libpng --input $d/in --output $d/gpu-libpng; "
		 "$kiln run -q --shard-size 8 --mipmaps --device cpu --input $d/in --output $d/cpu; "
		 "test $(find $d/gpu -name '*.dds' | wc -l) -eq 33; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpu $d/gpu-libpng");
	cr_expect_eq(rc, 0, "GPU-decoded strip PNGs must give the CPU backend's files");
}

/* `kiln encode --device gpu` hands kiln's strip-parallel files to the GPU undecoded and
 * decodes the rest on the host, in the same run: the textures are the CPU backend's, and
 * those of libpng decoding on the host. */
Test(worker_gpu, kiln_encode_on_the_gpu_decodes_strip_pngs_there_and_writes_the_cpus_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	int rc = gpu_test_sh(NULL,
		 "mkdir -p $d/in; "
		 "$kiln encode -q --format png --quality fast $data/kodak/kodim1*.png -o $d/in/; "
		 "for f in $d/in/*.png; do mv $f $d/in/strips-$(basename $f); done; "
		 "cp $data/kodak/kodim0*.png $data/pngsuite/basn2c16.png $data/pngsuite/basi6a08.png $d/in/; "
		 "for fmt in 'bc1 --mipmaps' 'astc --quality fast'; do rm -rf $d/gpu $d/cpu $d/lib; "
		 "$kiln encode -q --format $fmt --batch 7 --device gpu $d/in/*.png -o $d/gpu/; "
		 "$kiln encode -q --format $fmt --batch 32 --device cpu $d/in/*.png -o $d/cpu/; "
		 "$kiln encode -q --format $fmt --device gpu --png-decoder libpng $d/in/*.png -o $d/lib/; "
		 "diff -r $d/cpu $d/gpu; diff -r $d/cpu $d/lib; done; "
		 "test $(ls $d/gpu | wc -l) -eq 21");
	cr_expect_eq(rc, 0, "kiln encode on the GPU must write the CPU backend's textures");
}

/* A pipeline whose GPU is the limit (ASTC 4x4 medium, batches of 4) with 8 decode threads,
 * 2 of which may decode for the busy GPU (host_decoders): some files reach the GPU
 * undecoded and some decoded on the host, in batches of one kind each, and every output is
 * the CPU backend's. */
static struct {
	pthread_mutex_t lock;
	size_t done, failed;
	char first_error[KILN_ITEM_ERROR_MAX];
} mixed = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void mixed_report(void *ctx, const kiln_shard_result *r)
{
	(void)ctx;
	pthread_mutex_lock(&mixed.lock);
	for (size_t i = 0; i < r->count; i++) {
		mixed.done++;
		if (r->items[i].status != KILN_OK && mixed.failed++ == 0)
			snprintf(mixed.first_error, sizeof mixed.first_error, "%s", r->items[i].error);
	}
	pthread_mutex_unlock(&mixed.lock);
}

enum { MIXED_ITEMS = 48, MIXED_SHARD = 8 };

/* Runs MIXED_ITEMS Kodak files (each twice) to dir/out/I.astc on device; returns the stats. */
static kiln_pipeline_stats mixed_run(const char *dir, kiln_device device)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.devices[0] = device;
	cfg.batch = 4;
	cfg.decode_threads = 8;
	cfg.host_decoders = 2;
	cfg.report = mixed_report;
	kiln_pipeline *p;
	char msg[256];
	cr_assert_eq(kiln_pipeline_create(&cfg, &p, msg, sizeof msg), KILN_OK, "%s", msg);
	static char in[MIXED_ITEMS][256], out[MIXED_ITEMS][300];
	kiln_shard_item items[MIXED_ITEMS];
	for (size_t i = 0; i < MIXED_ITEMS; i++) {
		test_kodak_path(in[i], sizeof in[i], (int)(i % 24) + 1);
		snprintf(out[i], sizeof out[i], "file://%s/%zu.astc", dir, i);
		items[i] = (kiln_shard_item){.id = i, .input = in[i], .output = out[i]};
	}
	mixed.done = mixed.failed = 0;
	for (size_t s = 0; s < MIXED_ITEMS / MIXED_SHARD; s++) {
		char id[32];
		snprintf(id, sizeof id, "mixed.s%zu", s);
		kiln_shard_spec spec = {.job = "mixed", .shard = id, .lease = 1, .container = KILN_CONTAINER_ASTC,
					.items = items + s * MIXED_SHARD, .count = MIXED_SHARD};
		kiln_texenc_opts_default(&spec.opts);
		spec.opts.format = KILN_TEXFMT_ASTC;
		spec.opts.quality = KILN_QUALITY_MEDIUM;
		cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	}
	cr_assert(kiln_pipeline_wait_idle(p, 500000), "the pipeline did not finish");
	cr_assert_eq(mixed.done, MIXED_ITEMS);
	cr_assert_eq(mixed.failed, 0, "%s", mixed.first_error);
	kiln_pipeline_stats st;
	kiln_pipeline_stats_get(p, &st);
	kiln_pipeline_destroy(p);
	return st;
}

Test(worker_gpu, files_decoded_on_the_host_for_a_busy_gpu_give_the_cpu_backends_files, .timeout = 600)
{
	gpu_test_require("worker_gpu");
	char dir[] = "/tmp/kiln-wmix-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char gpu_dir[300], cpu_dir[300];
	snprintf(gpu_dir, sizeof gpu_dir, "%s/gpu", dir);
	snprintf(cpu_dir, sizeof cpu_dir, "%s/cpu", dir);
	kiln_pipeline_stats g = mixed_run(gpu_dir, (kiln_device){KILN_DEVICE_GPU, 0});
	kiln_pipeline_stats c = mixed_run(cpu_dir, (kiln_device){KILN_DEVICE_CPU, 0});
	cr_expect_gt(g.host_decoded, 0, "no file was decoded on the host for the busy GPU");
	cr_expect_lt(g.host_decoded, MIXED_ITEMS, "every file was decoded on the host");
	cr_expect_eq(c.host_decoded, 0, "the CPU backend decodes everything itself");
	cr_expect_geq(g.batches, MIXED_ITEMS / 4, "batches of at most 4");
	for (size_t i = 0; i < MIXED_ITEMS; i++) {
		char a[320], b[320];
		snprintf(a, sizeof a, "%s/%zu.astc", gpu_dir, i);
		snprintf(b, sizeof b, "%s/%zu.astc", cpu_dir, i);
		kiln_buf fa = gpu_test_load(a), fb = gpu_test_load(b);
		cr_assert(fa.len == fb.len && memcmp(fa.data, fb.data, fa.len) == 0, "item %zu differs", i);
		kiln_buf_free(&fa);
		kiln_buf_free(&fb);
	}
	char cmd[320];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}
