/* The worker pipeline in-process, without sockets: shards of good and bad inputs over
 * file:// storage, reports collected by a fake callback; a fake storage to hold fetches
 * (cancel), slow them (overlap of stages) or refuse uploads; PSNR on request; the
 * per-stage figures; the queues between the stages (worker/queue.h) on their own. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/fileio.h"
#include "common/host.h"
#include "common/png_io.h"
#include "kernels/bc1/bc1.h"
#include "worker/pipeline.h"
#include "worker/queue.h"

#define MAX_REPORTS 64
#define MAX_ITEMS 256

static char dir[64];

/* What the fake report callback saw: a copy of every shard result. */
typedef struct report {
	char job[64], shard[64];
	uint64_t lease;
	size_t count;
	kiln_item_result items[MAX_ITEMS];
} report;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	report reports[MAX_REPORTS];
	size_t n;
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void on_report(void *ctx, const kiln_shard_result *r)
{
	pthread_mutex_lock(&seen.lock);
	if (seen.n < MAX_REPORTS && r->count <= MAX_ITEMS) {
		report *c = &seen.reports[seen.n];
		snprintf(c->job, sizeof c->job, "%s", r->job);
		snprintf(c->shard, sizeof c->shard, "%s", r->shard);
		c->lease = r->lease;
		c->count = r->count;
		memcpy(c->items, r->items, r->count * sizeof *r->items);
	}
	seen.n++;
	pthread_cond_broadcast(&seen.cond);
	pthread_mutex_unlock(&seen.lock);
}

/* Waits for n reports in all (10 s at most). */
static void wait_reports(size_t n)
{
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	pthread_mutex_lock(&seen.lock);
	while (seen.n < n && pthread_cond_timedwait(&seen.cond, &seen.lock, &deadline) == 0)
		;
	size_t got = seen.n;
	pthread_mutex_unlock(&seen.lock);
	cr_assert_eq(got, n, "expected %zu shard reports, got %zu", n, got);
}

static const report *find_report(const char *shard)
{
	for (size_t i = 0; i < seen.n && i < MAX_REPORTS; i++)
		if (strcmp(seen.reports[i].shard, shard) == 0)
			return &seen.reports[i];
	cr_assert_fail("no report for shard %s", shard);
	return NULL;
}

static void write_png(const char *name, uint32_t w, uint32_t h, bool alpha)
{
	kiln_image img;
	cr_assert_eq(kiln_image_alloc(&img, w, h, NULL), KILN_OK);
	img.has_alpha = alpha;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			uint8_t *p = kiln_image_row(&img, y) + 4 * x;
			p[0] = (uint8_t)(x * 7), p[1] = (uint8_t)(y * 5), p[2] = (uint8_t)(x ^ y);
			p[3] = alpha ? (uint8_t)(x * 255 / w) : 255;
		}
	char path[256];
	snprintf(path, sizeof path, "%s/in/%s", dir, name);
	cr_assert_eq(kiln_png_write_file(path, &img), KILN_OK);
	kiln_image_free(&img);
}

static void write_bytes(const char *name, const void *data, size_t len)
{
	char path[256];
	snprintf(path, sizeof path, "%s/in/%s", dir, name);
	cr_assert_eq(kiln_file_write_atomic(path, data, len), KILN_OK);
}

static void setup(void)
{
	strcpy(dir, "/tmp/kiln-wpipe-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	char in[128];
	snprintf(in, sizeof in, "%s/in", dir);
	cr_assert_eq(kiln_mkdir_p(in), KILN_OK);
	write_png("a.png", 64, 48, false);
	write_png("b.png", 33, 17, true);
	write_png("big.png", 200, 200, false);
	/* a PNG cut in the middle of its data */
	kiln_buf f;
	kiln_buf_init(&f, 1 << 20);
	char path[256];
	snprintf(path, sizeof path, "%s/in/a.png", dir);
	cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK);
	write_bytes("truncated.png", f.data, f.len / 2);
	kiln_buf_free(&f);
	write_bytes("garbage.png", "this is not a png at all", 24);
	seen.n = 0;
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)system(cmd);
}

/* Item i of a shard: input dir/in/NAME, output dir/out/SHARD/i.EXT. */
typedef struct shard_builder {
	kiln_shard_item items[MAX_ITEMS];
	char inputs[MAX_ITEMS][256];
	char outputs[MAX_ITEMS][256];
	size_t n;
} shard_builder;

static void add_item(shard_builder *b, const char *shard, const char *input, const char *ext)
{
	size_t i = b->n++;
	snprintf(b->inputs[i], sizeof b->inputs[i], "%s/in/%s", dir, input);
	snprintf(b->outputs[i], sizeof b->outputs[i], "file://%s/out/%s/%zu.%s", dir, shard, i, ext);
	b->items[i] = (kiln_shard_item){.id = 1000 + i, .input = b->inputs[i], .output = b->outputs[i]};
}

static kiln_shard_spec spec_of(const shard_builder *b, const char *job, const char *shard)
{
	kiln_shard_spec s = {.job = job, .shard = shard, .lease = 7, .container = KILN_CONTAINER_DDS,
			     .items = b->items, .count = b->n};
	kiln_texenc_opts_default(&s.opts);
	s.opts.quality = KILN_QUALITY_FAST;
	return s;
}

static kiln_pipeline *start(kiln_pipeline_config *cfg)
{
	cfg->report = on_report;
	cfg->cpu_threads = 2;
	cfg->decode_threads = 2;
	kiln_pipeline *p;
	char msg[256];
	cr_assert_eq(kiln_pipeline_create(cfg, &p, msg, sizeof msg), KILN_OK, "%s", msg);
	return p;
}

/* Reads an output back through the container reader. */
static void check_output(const char *uri, uint32_t w, uint32_t h, uint64_t bytes)
{
	const char *path = strncmp(uri, "file://", 7) == 0 ? uri + 7 : uri;
	kiln_buf f;
	kiln_buf_init(&f, 1 << 24);
	cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK, "%s", path);
	kiln_texture tex;
	cr_assert_eq(kiln_container_read(f.data, f.len, &tex), KILN_OK, "%s", path);
	cr_expect_eq(tex.levels[0].width, w, "%s", path);
	cr_expect_eq(tex.levels[0].height, h, "%s", path);
	cr_expect_eq(f.len, bytes, "%s: reported %llu bytes, file has %zu", path, (unsigned long long)bytes, f.len);
	kiln_buf_free(&f);
}

TestSuite(worker_pipeline, .init = setup, .fini = teardown, .timeout = 60);

Test(worker_pipeline, bad_items_fail_alone_and_good_outputs_are_written)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.limits.max_pixels = 100 * 100; /* big.png (200x200) is over it */
	kiln_pipeline *p = start(&cfg);
	shard_builder b = {.n = 0};
	add_item(&b, "s1", "a.png", "dds");
	add_item(&b, "s1", "truncated.png", "dds");
	add_item(&b, "s1", "b.png", "dds");
	add_item(&b, "s1", "garbage.png", "dds");
	add_item(&b, "s1", "missing.png", "dds");
	add_item(&b, "s1", "big.png", "dds");
	add_item(&b, "s1", "a.png", "dds");
	kiln_shard_spec spec = spec_of(&b, "j1", "j1.s1");
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	wait_reports(1);
	cr_expect(kiln_pipeline_wait_idle(p, 1000));
	const report *r = find_report("j1.s1");
	cr_assert_eq(r->count, 7);
	cr_expect_str_eq(r->job, "j1");
	cr_expect_eq(r->lease, 7);
	static const bool ok[] = {true, false, true, false, false, false, true};
	for (size_t i = 0; i < 7; i++) {
		const kiln_item_result *it = &r->items[i];
		cr_expect_eq(it->id, 1000 + i);
		cr_expect_eq(it->status == KILN_OK, ok[i], "item %zu: %s", i, it->error);
		cr_expect_eq(it->error[0] == '\0', ok[i], "item %zu: '%s'", i, it->error);
		cr_expect(!it->cancelled);
	}
	check_output(b.outputs[0], 64, 48, r->items[0].bytes);
	check_output(b.outputs[2], 33, 17, r->items[2].bytes);
	check_output(b.outputs[6], 64, 48, r->items[6].bytes);
	cr_expect_gt(r->items[0].bytes_in, 0);
	cr_expect_eq(r->items[4].bytes_in, 0, "a missing input has no size");
	cr_expect(strstr(r->items[1].error, "truncated") || strstr(r->items[1].error, "corrupt"), "%s",
		  r->items[1].error);
	cr_expect(strstr(r->items[3].error, "PNG") != NULL, "%s", r->items[3].error);
	cr_expect(strstr(r->items[4].error, "missing.png") != NULL, "%s", r->items[4].error);
	cr_expect(strstr(r->items[5].error, "200x200") != NULL, "%s", r->items[5].error);
	cr_expect_eq(r->items[5].status, KILN_ERR_TOO_LARGE);
	/* the failed items wrote nothing */
	char path[256];
	snprintf(path, sizeof path, "%s/out/s1/1.dds", dir);
	cr_expect_neq(access(path, F_OK), 0);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, many_shards_with_mixed_options_each_reported_once)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.batch = 4; /* several batches per shard, and option changes between them */
	kiln_pipeline *p = start(&cfg);
	enum { SHARDS = 6, PER = 9 };
	static shard_builder b[SHARDS];
	char names[SHARDS][16];
	for (int s = 0; s < SHARDS; s++) {
		snprintf(names[s], sizeof names[s], "j2.s%d", s);
		b[s].n = 0;
		for (int i = 0; i < PER; i++)
			add_item(&b[s], names[s], i % 2 ? "a.png" : "b.png", s % 2 ? "ktx2" : "dds");
		kiln_shard_spec spec = spec_of(&b[s], "j2", names[s]);
		spec.container = s % 2 ? KILN_CONTAINER_KTX2 : KILN_CONTAINER_DDS;
		spec.opts.mipmaps = s % 3 == 0;
		cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	}
	wait_reports(SHARDS);
	for (int s = 0; s < SHARDS; s++) {
		const report *r = find_report(names[s]);
		cr_assert_eq(r->count, PER);
		for (int i = 0; i < PER; i++) {
			cr_expect_eq(r->items[i].status, KILN_OK, "%s item %d: %s", names[s], i, r->items[i].error);
			const char *path = b[s].outputs[i] + 7;
			kiln_buf f;
			kiln_buf_init(&f, 1 << 20);
			cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK, "%s", path);
			kiln_texture tex;
			cr_assert_eq(kiln_container_read(f.data, f.len, &tex), KILN_OK);
			cr_expect_eq(kiln_container_detect(f.data, f.len), s % 2 ? KILN_CONTAINER_KTX2 : KILN_CONTAINER_DDS);
			uint32_t w = i % 2 ? 64 : 33, h = i % 2 ? 48 : 17;
			cr_expect_eq(tex.num_levels, s % 3 == 0 ? kiln_mip_count(w, h) : 1u, "%s", path);
			cr_expect_eq(tex.format, i % 2 ? KILN_TEXFMT_BC1_RGB : KILN_TEXFMT_BC1_RGBA);
			kiln_buf_free(&f);
		}
	}
	cr_expect(kiln_pipeline_wait_idle(p, 2000));
	cr_expect_eq(kiln_pipeline_active(p), 0);
	kiln_pipeline_destroy(p);
}

/* The PSNR the worker reports, computed here the long way: the whole output decoded at once
 * against the whole input, texels made transparent by punch-through left out. */
static int32_t reference_psnr(const char *input, const char *output_uri, int alpha_cutoff)
{
	kiln_image img;
	cr_assert_eq(kiln_png_read_file(input, NULL, &img, NULL, 0), KILN_OK, "%s", input);
	kiln_buf f;
	kiln_buf_init(&f, 1 << 24);
	cr_assert_eq(kiln_buf_read_file(&f, output_uri + 7), KILN_OK, "%s", output_uri);
	kiln_texture tex;
	cr_assert_eq(kiln_container_read(f.data, f.len, &tex), KILN_OK);
	bool punch = tex.format == KILN_TEXFMT_BC1_RGBA;
	uint8_t *dec = malloc((size_t)img.width * img.height * 4);
	cr_assert_eq(kiln_bc1_decode(tex.levels[0].data, tex.levels[0].size, img.width, img.height, punch, dec,
				     (size_t)img.width * 4), KILN_OK);
	double sse = 0, n = 0;
	for (uint32_t y = 0; y < img.height; y++)
		for (uint32_t x = 0; x < img.width; x++) {
			const uint8_t *a = kiln_image_row(&img, y) + 4 * x, *b = dec + ((size_t)y * img.width + x) * 4;
			if (punch && a[3] < alpha_cutoff)
				continue;
			for (int c = 0; c < 3; c++)
				sse += (double)(a[c] - b[c]) * (a[c] - b[c]);
			n++;
		}
	free(dec);
	kiln_buf_free(&f);
	kiln_image_free(&img);
	double mse = sse / (3 * n);
	double db = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99;
	return (int32_t)lround((db < 99 ? db : 99) * 100);
}

Test(worker_pipeline, psnr_is_measured_when_the_shard_asks)
{
	/* a white image: exact in BC1, so the cap */
	kiln_image white;
	cr_assert_eq(kiln_image_alloc(&white, 20, 10, NULL), KILN_OK);
	memset(white.pixels, 255, (size_t)white.stride * white.height);
	char path[256];
	snprintf(path, sizeof path, "%s/in/white.png", dir);
	cr_assert_eq(kiln_png_write_file(path, &white), KILN_OK);
	kiln_image_free(&white);
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.batch = 2;
	cfg.pixel_budget = 1; /* images held for the PSNR must not stall the others */
	kiln_pipeline *p = start(&cfg);
	static const char *const names[] = {"a.png", "b.png", "white.png", "garbage.png", "big.png"};
	shard_builder with = {.n = 0}, without = {.n = 0};
	for (size_t i = 0; i < 5; i++) {
		add_item(&with, "psnr", names[i], "dds");
		add_item(&without, "plain", names[i], "dds");
	}
	kiln_shard_spec a = spec_of(&with, "j9", "j9.psnr"), b = spec_of(&without, "j9", "j9.plain");
	a.measure_psnr = true;
	a.opts.mipmaps = true;
	cr_assert_eq(kiln_pipeline_submit(p, &a), KILN_OK);
	cr_assert_eq(kiln_pipeline_submit(p, &b), KILN_OK);
	wait_reports(2);
	const report *r = find_report("j9.psnr");
	for (size_t i = 0; i < 5; i++) {
		const kiln_item_result *it = &r->items[i];
		if (i == 3) {
			cr_expect_neq(it->status, KILN_OK);
			cr_expect(!it->psnr_measured, "no PSNR for a failed item");
			continue;
		}
		cr_assert_eq(it->status, KILN_OK, "%s: %s", names[i], it->error);
		cr_assert(it->psnr_measured, "%s", names[i]);
		char in[256];
		snprintf(in, sizeof in, "%s/in/%s", dir, names[i]);
		cr_expect_eq(it->psnr, reference_psnr(in, with.outputs[i], a.opts.alpha_cutoff), "%s", names[i]);
		cr_expect_gt(it->psnr, 2000, "%s: %d centi-dB is implausibly low", names[i], it->psnr);
	}
	cr_expect_eq(r->items[2].psnr, 9900, "a perfect match reads 99 dB");
	r = find_report("j9.plain");
	for (size_t i = 0; i < 5; i++)
		cr_expect(!r->items[i].psnr_measured, "%s: not asked for", names[i]);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, stats_account_every_stage)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.batch = 3;
	kiln_pipeline *p = start(&cfg);
	shard_builder b = {.n = 0};
	for (int i = 0; i < 10; i++)
		add_item(&b, "st", i == 4 ? "garbage.png" : "a.png", "dds");
	kiln_shard_spec spec = spec_of(&b, "j10", "j10.s");
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	wait_reports(1);
	kiln_pipeline_stats st;
	kiln_pipeline_stats_get(p, &st);
	cr_expect_eq(st.fetch.items, 10);
	cr_expect_eq(st.decode.items, 10);
	cr_expect_eq(st.encode.items, 9, "the garbage never reaches the encoder");
	cr_expect_eq(st.upload.items, 9);
	cr_expect_geq(st.batches, 3);
	cr_expect_leq(st.batches, 9);
	cr_expect_eq(st.encode.device_wait_s, 0.0, "the CPU backend waits for no device");
	cr_expect_eq(st.fetch.threads, 4);
	cr_expect_eq(st.decode.threads, 2);
	cr_expect_eq(st.encode.threads, 1);
	cr_expect_eq(st.upload.threads, 4);
	cr_expect_gt(st.fetch.busy_s, 0);
	cr_expect_gt(st.decode.busy_s, 0);
	cr_expect_gt(st.encode.busy_s, 0);
	cr_expect_gt(st.upload.busy_s, 0);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, rejected_and_empty_shards_are_reported)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	kiln_pipeline *p = start(&cfg);
	shard_builder b = {.n = 0};
	add_item(&b, "r", "a.png", "dds");
	add_item(&b, "r", "b.png", "dds");
	kiln_shard_spec spec = spec_of(&b, "j3", "j3.rejected");
	spec.reject = KILN_ERR_UNSUPPORTED;
	spec.reject_msg = "format 'astc' is not supported by this worker";
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	kiln_shard_spec empty = spec_of(&b, "j3", "j3.empty");
	empty.count = 0;
	cr_assert_eq(kiln_pipeline_submit(p, &empty), KILN_OK);
	wait_reports(2);
	const report *r = find_report("j3.rejected");
	cr_assert_eq(r->count, 2);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(r->items[i].status, KILN_ERR_UNSUPPORTED);
		cr_expect_str_eq(r->items[i].error, "format 'astc' is not supported by this worker");
	}
	cr_expect_eq(find_report("j3.empty")->count, 0);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, tiny_pixel_budget_still_runs_every_image)
{
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.pixel_budget = 1; /* every image is larger than the budget: one at a time */
	kiln_pipeline *p = start(&cfg);
	shard_builder b = {.n = 0};
	for (int i = 0; i < 12; i++)
		add_item(&b, "t", i % 3 ? "a.png" : "big.png", "dds");
	kiln_shard_spec spec = spec_of(&b, "j4", "j4.s");
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	wait_reports(1);
	const report *r = find_report("j4.s");
	for (int i = 0; i < 12; i++)
		cr_expect_eq(r->items[i].status, KILN_OK, "%d: %s", i, r->items[i].error);
	kiln_pipeline_destroy(p);
}

/* ---- fake storage ---- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool gate_open;       /* gets wait while closed */
	unsigned get_delay_ms;
	unsigned put_delay_ms;
	int gets_in_flight, puts_in_flight;
	int max_gets_in_flight;
	bool put_overlapped_get;
	bool fail_puts;
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static kiln_status fake_get_many(void *ctx, kiln_storage_get_item *items, size_t count)
{
	pthread_mutex_lock(&fake.lock);
	while (!fake.gate_open)
		pthread_cond_wait(&fake.cond, &fake.lock);
	fake.gets_in_flight++;
	if (fake.gets_in_flight > fake.max_gets_in_flight)
		fake.max_gets_in_flight = fake.gets_in_flight;
	pthread_mutex_unlock(&fake.lock);
	sleep_ms(fake.get_delay_ms * (unsigned)count);
	for (size_t i = 0; i < count; i++) {
		items[i].status = kiln_buf_read_file(items[i].out, items[i].uri);
		snprintf(items[i].msg, sizeof items[i].msg, "%s", items[i].status ? "fake get failed" : "");
	}
	pthread_mutex_lock(&fake.lock);
	fake.gets_in_flight--;
	pthread_mutex_unlock(&fake.lock);
	return KILN_OK;
}

static kiln_status fake_put_many(void *ctx, kiln_storage_put_item *items, size_t count)
{
	pthread_mutex_lock(&fake.lock);
	fake.puts_in_flight++;
	fake.put_overlapped_get |= fake.gets_in_flight > 0;
	pthread_mutex_unlock(&fake.lock);
	sleep_ms(fake.put_delay_ms * (unsigned)count);
	for (size_t i = 0; i < count; i++) {
		items[i].status = fake.fail_puts ? KILN_ERR_PERMISSION : KILN_OK;
		snprintf(items[i].msg, sizeof items[i].msg, "%s", fake.fail_puts ? "fake put: access denied" : "");
	}
	pthread_mutex_lock(&fake.lock);
	fake.puts_in_flight--;
	pthread_mutex_unlock(&fake.lock);
	return KILN_OK;
}

static const kiln_pipeline_storage fake_storage = {fake_get_many, fake_put_many, NULL};

static void fake_reset(bool gate_open)
{
	pthread_mutex_lock(&fake.lock);
	fake.gate_open = gate_open;
	fake.get_delay_ms = fake.put_delay_ms = 0;
	fake.gets_in_flight = fake.puts_in_flight = fake.max_gets_in_flight = 0;
	fake.put_overlapped_get = false;
	fake.fail_puts = false;
	pthread_mutex_unlock(&fake.lock);
}

static void fake_open_gate(void)
{
	pthread_mutex_lock(&fake.lock);
	fake.gate_open = true;
	pthread_cond_broadcast(&fake.cond);
	pthread_mutex_unlock(&fake.lock);
}

/* Plain paths: the fake reads them directly. */
static void add_plain_item(shard_builder *b, const char *input)
{
	size_t i = b->n++;
	snprintf(b->inputs[i], sizeof b->inputs[i], "%s/in/%s", dir, input);
	snprintf(b->outputs[i], sizeof b->outputs[i], "unused-%zu", i);
	b->items[i] = (kiln_shard_item){.id = i, .input = b->inputs[i], .output = b->outputs[i]};
}

/* One shard of n plain items of `input` (job, shard job.s) through p; every item must
 * succeed. */
static void run_plain_items(kiln_pipeline *p, const char *input, int n, const char *job)
{
	static shard_builder b;
	char shard[64];
	snprintf(shard, sizeof shard, "%s.s", job);
	b.n = 0;
	for (int i = 0; i < n; i++)
		add_plain_item(&b, input);
	kiln_shard_spec spec = spec_of(&b, job, shard);
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	wait_reports(1);
	const report *r = find_report(shard);
	for (int i = 0; i < n; i++)
		cr_expect_eq(r->items[i].status, KILN_OK, "%d: %s", i, r->items[i].error);
}

Test(worker_pipeline, cancel_drops_the_queued_items_of_one_job)
{
	fake_reset(false);
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.storage = &fake_storage;
	kiln_pipeline *p = start(&cfg);
	static shard_builder a, b;
	a.n = b.n = 0;
	for (int i = 0; i < 40; i++)
		add_plain_item(&a, "a.png");
	for (int i = 0; i < 3; i++)
		add_plain_item(&b, "b.png");
	kiln_shard_spec sa = spec_of(&a, "doomed", "doomed.s0"), sb = spec_of(&b, "kept", "kept.s0");
	cr_assert_eq(kiln_pipeline_submit(p, &sa), KILN_OK);
	cr_assert_eq(kiln_pipeline_submit(p, &sb), KILN_OK);
	cr_expect_eq(kiln_pipeline_active(p), 2);
	cr_expect_eq(kiln_pipeline_cancel(p, "doomed"), 1);
	cr_expect_eq(kiln_pipeline_cancel(p, "nobody"), 0);
	fake_open_gate();
	wait_reports(2);
	const report *r = find_report("doomed.s0");
	for (int i = 0; i < 40; i++) {
		cr_expect(r->items[i].cancelled, "item %d", i);
		cr_expect_neq(r->items[i].status, KILN_OK);
		cr_expect_str_eq(r->items[i].error, "cancelled");
	}
	r = find_report("kept.s0");
	for (int i = 0; i < 3; i++)
		cr_expect_eq(r->items[i].status, KILN_OK, "%d: %s", i, r->items[i].error);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, slow_storage_overlaps_fetch_and_upload)
{
	fake_reset(true);
	fake.get_delay_ms = 15;
	fake.put_delay_ms = 15;
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.storage = &fake_storage;
	kiln_pipeline *p = start(&cfg);
	run_plain_items(p, "b.png", 96, "j5");
	cr_expect_gt(fake.max_gets_in_flight, 1, "fetches should run in parallel");
	cr_expect(fake.put_overlapped_get, "uploads should start while fetches are still running");
	kiln_pipeline_destroy(p);
}

/* Outputs waiting for a slow upload count in the pixel budget: decoding waits for them to
 * leave instead of filling the upload queue. big.png: 160,000 bytes decoded, 20,000 of
 * BC1; with a budget of 200,000 one image fits only while at most two outputs wait, and
 * the encoder, which never waits on the budget, adds one output at a time (one image a
 * batch). Before outputs counted, the budget's peak was one image. */
Test(worker_pipeline, outputs_waiting_for_upload_hold_the_pixel_budget)
{
	fake_reset(true);
	fake.put_delay_ms = 10;
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.storage = &fake_storage;
	cfg.pixel_budget = 200000;
	kiln_pipeline *p = start(&cfg);
	run_plain_items(p, "big.png", 40, "j11");
	kiln_pipeline_stats st;
	kiln_pipeline_stats_get(p, &st);
	cr_expect_gt(st.budget_peak, 160000, "outputs are counted beside a decoded image");
	cr_expect_leq(st.budget_peak, 200000 + 20000, "peak %zu: decoding waited for outputs", st.budget_peak);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, failed_uploads_are_item_errors)
{
	fake_reset(true);
	fake.fail_puts = true;
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.storage = &fake_storage;
	kiln_pipeline *p = start(&cfg);
	shard_builder b = {.n = 0};
	add_plain_item(&b, "a.png");
	add_plain_item(&b, "garbage.png");
	kiln_shard_spec spec = spec_of(&b, "j6", "j6.s");
	cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	wait_reports(1);
	const report *r = find_report("j6.s");
	cr_expect_eq(r->items[0].status, KILN_ERR_PERMISSION);
	cr_expect_str_eq(r->items[0].error, "fake put: access denied");
	cr_expect_eq(r->items[1].status, KILN_ERR_CORRUPT, "%s", r->items[1].error);
	kiln_pipeline_destroy(p);
}

Test(worker_pipeline, destroy_reports_what_was_still_queued)
{
	fake_reset(true);
	fake.get_delay_ms = 5;
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cfg.storage = &fake_storage;
	kiln_pipeline *p = start(&cfg);
	static shard_builder b[4];
	char names[4][16];
	for (int s = 0; s < 4; s++) {
		b[s].n = 0;
		for (int i = 0; i < 50; i++)
			add_plain_item(&b[s], "a.png");
		snprintf(names[s], sizeof names[s], "j7.s%d", s);
		kiln_shard_spec spec = spec_of(&b[s], "j7", names[s]);
		cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
	}
	kiln_pipeline_destroy(p);
	cr_expect_eq(seen.n, 4, "every shard is reported before destroy returns");
	size_t cancelled = 0;
	for (int s = 0; s < 4; s++) {
		const report *r = find_report(names[s]);
		for (int i = 0; i < 50; i++) {
			cr_expect(r->items[i].status == KILN_OK || r->items[i].cancelled);
			cancelled += r->items[i].cancelled;
		}
	}
	cr_expect_gt(cancelled, 0);
}

Test(worker_pipeline, refuses_bad_configurations)
{
	kiln_pipeline_config cfg;
	kiln_pipeline *p = NULL;
	kiln_pipeline_config_init(&cfg);
	cfg.report = on_report;
	cfg.batch = KILN_PIPELINE_MAX_BATCH + 1;
	cr_expect_eq(kiln_pipeline_create(&cfg, &p, NULL, 0), KILN_ERR_INVALID_ARG);
	kiln_pipeline_config_init(&cfg);
	cr_expect_eq(kiln_pipeline_create(&cfg, &p, NULL, 0), KILN_ERR_INVALID_ARG, "no report callback");
	kiln_pipeline_config_init(&cfg);
	cfg.report = on_report;
	cfg.devices[0].kind = KILN_DEVICE_AUTO;
	cr_expect_eq(kiln_pipeline_create(&cfg, &p, NULL, 0), KILN_ERR_INVALID_ARG);
	cr_expect_null(p);
	kiln_pipeline_destroy(NULL);
}

/* Both PNG decoders (kiln's, the default, and libpng) write the same files and fail the
 * same items. */
Test(worker_pipeline, png_decoders_write_the_same_outputs)
{
	const char *names[] = {"a.png", "truncated.png", "b.png", "garbage.png", "big.png"};
	kiln_buf out[2][5];
	for (int dec = 0; dec < 2; dec++) {
		kiln_pipeline_config cfg;
		kiln_pipeline_config_init(&cfg);
		cfg.png_decoder = dec ? KILN_PNG_DECODER_LIBPNG : KILN_PNG_DECODER_KILN;
		kiln_pipeline *p = start(&cfg);
		shard_builder b = {.n = 0};
		const char *shard = dec ? "libpng" : "kiln";
		for (int i = 0; i < 5; i++)
			add_item(&b, shard, names[i], "dds");
		kiln_shard_spec spec = spec_of(&b, "jd", shard);
		spec.opts.mipmaps = true;
		cr_assert_eq(kiln_pipeline_submit(p, &spec), KILN_OK);
		wait_reports((size_t)dec + 1);
		kiln_pipeline_destroy(p);
		const report *r = find_report(shard);
		cr_assert_not_null(r);
		for (int i = 0; i < 5; i++) {
			bool ok = i == 0 || i == 2 || i == 4;
			cr_expect_eq(r->items[i].status == KILN_OK, ok, "%s %s: %s", shard, names[i], r->items[i].error);
			kiln_buf_init(&out[dec][i], 1 << 24);
			if (ok)
				cr_assert_eq(kiln_buf_read_file(&out[dec][i], b.outputs[i] + 7), KILN_OK);
		}
	}
	for (int i = 0; i < 5; i++) {
		cr_expect_eq(out[0][i].len, out[1][i].len, "%s", names[i]);
		cr_expect(out[0][i].len == 0 || memcmp(out[0][i].data, out[1][i].data, out[0][i].len) == 0, "%s", names[i]);
		kiln_buf_free(&out[0][i]);
		kiln_buf_free(&out[1][i]);
	}
}

/* ---- the queues on their own ---- */

/* A queued object of one of two kinds (a batch holds one kind, as decoded and undecoded
 * items in the encode queue); the link comes first, so a link is its object. */
typedef struct qobj {
	kiln_qlink link;
	int kind, id;
} qobj;

static bool same_kind(const kiln_qlink *a, const kiln_qlink *b)
{
	return ((const qobj *)a)->kind == ((const qobj *)b)->kind;
}

/* Pushes objects of the kinds in `kinds` ('a', 'b'), ids from *next_id on. */
static void qpush(kiln_queue *q, qobj *objs, int *next_id, const char *kinds)
{
	for (const char *k = kinds; *k; k++) {
		qobj *o = &objs[*next_id];
		o->kind = *k;
		o->id = (*next_id)++;
		cr_assert(kiln_queue_push(q, &o->link));
	}
}

/* Checks that what a pop took (n links) is the ids of `want`, -1-terminated, in order. */
static void qexpect(kiln_qlink **got, size_t n, const int *want, const char *what)
{
	size_t m = 0;
	while (want[m] >= 0)
		m++;
	cr_assert_eq(n, m, "%s: took %zu, want %zu", what, n, m);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(((qobj *)got[i])->id, want[i], "%s: [%zu] is %d, want %d", what, i,
			     ((qobj *)got[i])->id, want[i]);
}

/* Interleaved kinds still make batches of `max`: a pop takes the head's kind from anywhere
 * in the queue in order and leaves the other kind in place (head, tail and count right, so
 * later pushes and pops see one queue). Without a match the head's run is taken, as the
 * fetch, decode and upload stages take it. */
Test(worker_pipeline, queue_takes_one_kind_from_interleaved_items)
{
	kiln_queue q;
	cr_assert_eq(kiln_queue_init(&q, 0), KILN_OK);
	qobj objs[32];
	int id = 0;
	kiln_qlink *got[8];
	qpush(&q, objs, &id, "abababababab"); /* ids 0..11 */
	qexpect(got, kiln_queue_pop(&q, got, 4, same_kind), (int[]){0, 2, 4, 6, -1}, "a");
	qexpect(got, kiln_queue_pop(&q, got, 4, same_kind), (int[]){1, 3, 5, 7, -1}, "b");
	cr_expect_eq(q.count, 4);
	cr_expect_eq(kiln_queue_count(&q), 4);
	qpush(&q, objs, &id, "ab"); /* 12, 13 behind the rest: 8a 9b 10a 11b 12a 13b */
	qexpect(got, kiln_queue_pop(&q, got, 8, same_kind), (int[]){8, 10, 12, -1}, "a to the end");
	cr_expect_eq(((qobj *)q.tail)->id, 13, "the tail is the last link left");
	qpush(&q, objs, &id, "a"); /* 14 after the tail */
	qexpect(got, kiln_queue_pop(&q, got, 1, same_kind), (int[]){9, -1}, "one b");
	qexpect(got, kiln_queue_pop(&q, got, 8, NULL), (int[]){11, 13, 14, -1}, "no match: the run");
	cr_expect_eq(q.count, 0);
	cr_expect_eq(kiln_queue_count(&q), 0);
	cr_expect_null(q.head);
	cr_expect_null(q.tail);
	qpush(&q, objs, &id, "ba"); /* an emptied queue takes pushes again */
	qexpect(got, kiln_queue_pop(&q, got, 8, NULL), (int[]){15, 16, -1}, "after emptying");
	kiln_queue_destroy(&q);
}

/* pop_full submits only a batch that cannot grow: max of one kind (the oldest kind that
 * has max, the head's first), or the head's kind as it is once the queue is at capacity
 * or closed, or once KILN_QUEUE_HEAD_PASSES batches went past it; otherwise nothing, so
 * the encoder collects and lets the queue fill. */
Test(worker_pipeline, queue_pop_full_takes_only_batches_that_cannot_grow)
{
	kiln_queue q;
	cr_assert_eq(kiln_queue_init(&q, 16), KILN_OK);
	qobj objs[32];
	int id = 0;
	kiln_qlink *got[8];
	qpush(&q, objs, &id, "aba"); /* 0a 1b 2a */
	cr_expect_eq(kiln_queue_pop_full(&q, got, 3, same_kind), 0, "no kind has 3: the batch may grow");
	qpush(&q, objs, &id, "bb"); /* 3b 4b */
	qexpect(got, kiln_queue_pop_full(&q, got, 3, same_kind), (int[]){1, 3, 4, -1},
		"b is full before the older a");
	cr_expect_eq(kiln_queue_pop_full(&q, got, 3, same_kind), 0, "a has 2");
	qpush(&q, objs, &id, "babab"); /* 0a 2a 5b 6a 7b 8a 9b */
	qexpect(got, kiln_queue_pop_full(&q, got, 3, same_kind), (int[]){0, 2, 6, -1},
		"both full: the head's kind first");
	qpush(&q, objs, &id, "aababa"); /* 5b 7b 8a 9b 10a 11a 12b 13a 14b 15a */
	qexpect(got, kiln_queue_pop_full(&q, got, 5, same_kind), (int[]){5, 7, 9, 12, 14, -1}, "b's five");
	/* left: 8a 10a 11a 13a 15a */
	qexpect(got, kiln_queue_pop_full(&q, got, 4, same_kind), (int[]){8, 10, 11, 13, -1}, "a's four");
	kiln_queue_destroy(&q);

	/* a head whose kind never fills is passed by KILN_QUEUE_HEAD_PASSES full batches of
	 * another kind at most, then goes as it is */
	cr_assert_eq(kiln_queue_init(&q, 0), KILN_OK);
	id = 0;
	qpush(&q, objs, &id, "abbbbbbbb"); /* 0a, 1b..8b */
	for (unsigned k = 0; k < KILN_QUEUE_HEAD_PASSES; k++)
		qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind), (int[]){1 + 2 * (int)k, 2 + 2 * (int)k, -1},
			"b full, past the head");
	qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind), (int[]){0, -1}, "the head's turn");
	qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind), (int[]){5, 6, -1}, "the head's kind full");
	qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind), (int[]){7, 8, -1}, "again");
	qpush(&q, objs, &id, "abbbbbb"); /* 9a, 10b..15b: a new head, passed as often */
	for (unsigned k = 0; k < KILN_QUEUE_HEAD_PASSES; k++)
		qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind),
			(int[]){10 + 2 * (int)k, 11 + 2 * (int)k, -1}, "b full, past the new head");
	qexpect(got, kiln_queue_pop_full(&q, got, 2, same_kind), (int[]){9, -1}, "the new head's turn");
	kiln_queue_destroy(&q);

	/* at capacity, no kind has max: the head's kind as it is */
	cr_assert_eq(kiln_queue_init(&q, 4), KILN_OK);
	id = 0;
	qpush(&q, objs, &id, "abab");
	qexpect(got, kiln_queue_pop_full(&q, got, 3, same_kind), (int[]){0, 2, -1}, "full queue");
	cr_expect_eq(kiln_queue_pop_full(&q, got, 3, same_kind), 0, "room again: b may grow");
	kiln_queue_close(&q);
	qexpect(got, kiln_queue_pop_full(&q, got, 3, same_kind), (int[]){1, 3, -1}, "closed");
	cr_expect_eq(kiln_queue_pop_full(&q, got, 3, same_kind), 0, "closed and empty");
	cr_expect_eq(kiln_queue_pop(&q, got, 3, same_kind), 0, "closed and empty: pop does not wait");
	cr_expect_not(kiln_queue_push(&q, &objs[10].link), "a closed queue takes nothing");
	kiln_queue_destroy(&q);
}

/* The pixel budget follows the memory the worker may use: 4 GiB at most, a quarter of a
 * smaller limit (a container's), never below 256 MiB; the configuration's default is it. */
Test(worker_pipeline, pixel_budget_follows_the_memory_limit)
{
	const size_t gib = (size_t)1 << 30, mib = (size_t)1 << 20;
	cr_expect_eq(kiln_pipeline_default_budget(0), 4 * gib, "limit unknown");
	cr_expect_eq(kiln_pipeline_default_budget((uint64_t)256 * gib), 4 * gib);
	cr_expect_eq(kiln_pipeline_default_budget((uint64_t)16 * gib), 4 * gib);
	cr_expect_eq(kiln_pipeline_default_budget((uint64_t)8 * gib), 2 * gib, "an 8 GiB pod");
	cr_expect_eq(kiln_pipeline_default_budget((uint64_t)2 * gib), 512 * mib);
	cr_expect_eq(kiln_pipeline_default_budget((uint64_t)512 * mib), 256 * mib, "the floor");
	kiln_pipeline_config cfg;
	kiln_pipeline_config_init(&cfg);
	cr_expect_eq(cfg.pixel_budget, kiln_pipeline_default_budget(kiln_memory_limit()));
}
