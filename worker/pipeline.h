/* The worker's pipeline: shards of (input URI, output URI) items in, one report per shard
 * out. Stages, each a set of threads joined by bounded queues, so every stage works on
 * different items at once:
 *
 *   fetch (storage get) -> decode (limits, PNG) -> encode (batches per device, texenc)
 *   -> upload (container, storage put) -> report
 *
 * A bad item (missing input, corrupt PNG, too many pixels, failed upload) is recorded in its
 * own result; its shard and the other items go on. docs/WORKER.md describes the design. */
#ifndef KILN_WORKER_PIPELINE_H
#define KILN_WORKER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/container.h"
#include "common/error.h"
#include "common/image.h"
#include "common/storage.h"
#include "kernels/gpu.h"
#include "kernels/png/png_file.h"
#include "kernels/texenc.h"

#define KILN_PIPELINE_MAX_DEVICES 16
#define KILN_PIPELINE_MAX_BATCH 32
#define KILN_ITEM_ERROR_MAX 256

/* The outcome of one item. */
typedef struct kiln_item_result {
	uint64_t id;
	kiln_status status;
	bool cancelled;                   /* dropped by kiln_pipeline_cancel (status is an error) */
	uint64_t bytes;                   /* size of the written output (status KILN_OK) */
	uint64_t bytes_in;                /* size of the input, once it was fetched */
	bool psnr_measured;               /* psnr holds a value (measure_psnr, status KILN_OK) */
	int32_t psnr;                     /* RGB PSNR of level 0 in centi-dB: 3657 = 36.57 dB */
	uint64_t pixels;                  /* width x height of the input (status KILN_OK), 0: unknown */
	char error[KILN_ITEM_ERROR_MAX];  /* "" on success, else a one-line reason */
} kiln_item_result;

/* A finished shard: every item's result, in the order the shard listed them. */
typedef struct kiln_shard_result {
	const char *job;
	const char *shard;
	uint64_t lease;
	const kiln_item_result *items;
	size_t count;
} kiln_shard_result;

/* Called once per shard when its last item is done, on a pipeline thread, with no pipeline
 * lock held. The result is valid only during the call. It should return quickly: the
 * stage that finished the shard waits for it. */
typedef void (*kiln_pipeline_report_fn)(void *ctx, const kiln_shard_result *result);

/* Where inputs come from and outputs go. NULL in the config: common/storage, one handle per
 * I/O thread. Tests put a fake here (slow or failing storage). Both calls have the
 * semantics of kiln_storage_get_many / kiln_storage_put_many and may run on several
 * threads at once. */
typedef struct kiln_pipeline_storage {
	kiln_status (*get_many)(void *ctx, kiln_storage_get_item *items, size_t count);
	kiln_status (*put_many)(void *ctx, kiln_storage_put_item *items, size_t count);
	void *ctx;
} kiln_pipeline_storage;

typedef struct kiln_pipeline_config {
	kiln_device devices[KILN_PIPELINE_MAX_DEVICES];  /* resolved: CPU or GPU N, no AUTO */
	size_t ndevices;
	unsigned cpu_threads;      /* encode pool of the CPU backend; 0: all cores */
	unsigned decode_threads;   /* 0: all cores */
	unsigned fetch_threads;    /* parallel fetches (4) */
	unsigned upload_threads;   /* parallel uploads; 0 (the default): 4 per device, as every
				    * device's encoder feeds the one upload stage */
	unsigned batch;            /* images per encode batch, 1..KILN_PIPELINE_MAX_BATCH (32) */
	kiln_image_limits limits;  /* checked from the PNG header, before decoding */
	/* kiln's decoder (default): on a GPU device, files travel compressed to the encode
	 * stage and the GPU decodes them; on the CPU the decode threads run it. libpng: the
	 * decode threads run libpng. */
	kiln_png_decoder png_decoder;
	size_t max_input_bytes;    /* cap on one fetched input (512 MiB) */
	size_t pixel_budget;       /* bytes of decoded RGBA images and of encoded outputs not
				    * yet uploaded held at once, all stages (4 GiB, less in a
				    * smaller memory limit: kiln_pipeline_default_budget):
				    * decoding waits while they fill it; an image larger than
				    * the budget still runs, alone */
	const kiln_storage_config *storage_config;  /* for common/storage; NULL: defaults/env */
	const kiln_pipeline_storage *storage;       /* NULL: common/storage */
	kiln_pipeline_report_fn report;
	void *report_ctx;
} kiln_pipeline_config;

/* Defaults: one CPU device, the sizes above; report must still be set. */
void kiln_pipeline_config_init(kiln_pipeline_config *cfg);

/* The default pixel budget for a process that may use memory_limit bytes (0: unknown;
 * kiln_memory_limit, common/host.h): 4 GiB, or a quarter of the limit where that is
 * less, at least 256 MiB. */
size_t kiln_pipeline_default_budget(uint64_t memory_limit);

typedef struct kiln_pipeline kiln_pipeline;

/* Starts every stage's threads. msg (may be NULL) receives a reason on failure. */
kiln_status kiln_pipeline_create(const kiln_pipeline_config *cfg, kiln_pipeline **out, char *msg,
				 size_t msg_cap);
/* Cancels whatever is still queued (those shards are reported, their items "cancelled"),
 * waits for the stages to stop and frees everything. NULL is accepted. */
void kiln_pipeline_destroy(kiln_pipeline *p);

typedef struct kiln_shard_item {
	uint64_t id;
	const char *input;
	const char *output;
} kiln_shard_item;

/* One shard as the pipeline takes it. Strings and items are copied. */
typedef struct kiln_shard_spec {
	const char *job;
	const char *shard;
	uint64_t lease;
	kiln_texenc_opts opts;
	kiln_container container;
	bool measure_psnr;         /* report each output's PSNR (level 0, measured by the texenc) */
	/* Format png: each input PNG is read in the decode stage (kernels/png/png_transcode.h)
	 * and re-encoded by kiln's PNG codec at opts.quality in batches on a device (the PNG
	 * runner, kernels/png/png_runner.h), then written as it is; opts other than quality,
	 * container and measure_psnr do not apply. */
	bool png_out;
	const kiln_shard_item *items;
	size_t count;
	/* Not KILN_OK: the shard cannot run (e.g. options this worker does not support); every
	 * item is reported failed with this status and reject_msg, through the same path. */
	kiln_status reject;
	const char *reject_msg;
} kiln_shard_spec;

/* Queues a shard; never blocks on the stages (the scheduler's credits bound how much is
 * queued). A shard of zero items is reported at once. */
kiln_status kiln_pipeline_submit(kiln_pipeline *p, const kiln_shard_spec *spec);

/* Items of the job not yet encoded are dropped and reported "cancelled"; items past the
 * encoder finish. Returns the number of shards of the job that were in the pipeline. */
size_t kiln_pipeline_cancel(kiln_pipeline *p, const char *job);

/* Shards submitted and not yet reported. */
size_t kiln_pipeline_active(kiln_pipeline *p);

/* Waits until no shard is active or timeout_ms passes; true when idle. */
bool kiln_pipeline_wait_idle(kiln_pipeline *p, unsigned timeout_ms);

/* Where the time went, per stage, since the pipeline started: busy_s is the time the
 * stage's threads spent on items, summed over its threads, leaving out waiting for input,
 * for the pixel budget and for room in the next queue. items / (busy_s / threads) is what
 * the stage alone could sustain; the stage with the highest busy_s / threads limits.
 * Encode counts submit and collect (for a GPU, collect includes waiting for the device). */
typedef struct kiln_pipeline_stage_stats {
	unsigned threads;
	double busy_s;
	uint64_t items;           /* items that went through the stage's work */
	double device_wait_s;     /* of busy_s, waiting for GPUs to finish batches (encode) */
} kiln_pipeline_stage_stats;

typedef struct kiln_pipeline_stats {
	kiln_pipeline_stage_stats fetch, decode, encode, upload;
	uint64_t batches;         /* encode batches submitted */
	size_t budget_peak;       /* most bytes of the pixel budget held at once */
} kiln_pipeline_stats;

void kiln_pipeline_stats_get(kiln_pipeline *p, kiln_pipeline_stats *out);

#endif
