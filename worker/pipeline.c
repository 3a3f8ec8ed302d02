/* The worker pipeline: four stages of threads joined by bounded queues of items.
 *
 *   submit -> [fetch queue, bounded by credits] -> fetch threads (storage get, IO_BATCH
 *   items per call) -> [decode queue] -> decode threads (header, limits, pixel budget,
 *   PNG decode, unless a GPU will decode the file) -> [encode queue] -> one thread per
 *   device (batches of same-option images through its texenc, several in flight on a
 *   GPU; the PSNR, if asked, measured there) -> [upload queue] -> upload threads
 *   (container, storage put) -> done
 *
 * An item lives inside its shard's array and moves between queues by pointer; whatever
 * stage ends it (success, failure, cancel) calls item_finish, which frees what the item
 * still holds and, for the shard's last item, reports the shard. */
#include "worker/pipeline.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/host.h"
#include "common/log.h"
#include "common/png_io.h"
#include "common/pool.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_transcode.h"
#include "kernels/astc/astc.h"
#include "kernels/bc1/bc1.h"
#include "worker/queue.h"

#define IO_BATCH 8  /* items per storage call: S3 runs them concurrently */
#define DEFAULT_MAX_INPUT ((size_t)512 << 20)
/* The pixel budget: 4 GiB, or a quarter of the memory the process may use where that is
 * less (a container's limit; not below 256 MiB). The budget covers decoded images and
 * outputs waiting for upload; the rest of a worker's memory is fetched files (up to
 * DEFAULT_MAX_INPUT each, in bounded queues), a texenc's pinned staging (~70 MB a slot,
 * 3 slots a GPU) and the libraries'. A fixed 4 GiB left a worker in a 4 or 8 GiB
 * container little or nothing for those (not measured: sized, not observed), and the
 * OOM killer ends every shard a worker holds. */
#define DEFAULT_PIXEL_BUDGET ((size_t)4 << 30)
#define MIN_PIXEL_BUDGET ((size_t)256 << 20)
#define MAX_OUTPUT_BYTES ((size_t)4 << 30)  /* a 16384^2 BC1 chain is ~180 MiB: far below */

typedef struct shard shard;

typedef struct item {
	kiln_qlink link;     /* in the queue it waits in */
	shard *shard;
	size_t index;
	char *input;
	char *output;
	kiln_buf data;       /* the fetched input; later the container file */
	kiln_image image;    /* decoded pixels, between decode and encode */
	bool gpu_decode;     /* not decoded yet: data goes to the GPU, which decodes it */
	kiln_pngdec_info png; /* the probe of data, for gpu_decode and format png */
	kiln_png_source src; /* format png: the samples to encode, between decode and encode */
	size_t reserved;     /* pixel budget held for image (or src) */
	kiln_texture tex;    /* encoded levels, between encode and upload */
	uint64_t pixels;     /* level 0's width x height, for the result */
} item;

struct shard {
	char *job;
	char *id;
	uint64_t lease;
	kiln_texenc_opts opts;
	kiln_container container; /* opts.measure: the spec's measure_psnr */
	bool png_out;        /* PNG to PNG: data becomes the output file at encode */
	atomic_bool cancelled;
	size_t count;
	size_t remaining;    /* items not finished; under the pipeline lock */
	item *items;
	kiln_item_result *results;
	shard *prev, *next;  /* active list */
};

typedef struct stage_thread {
	kiln_pipeline *p;
	unsigned index;      /* the device, for encode threads */
	pthread_t tid;
} stage_thread;

typedef struct stage {
	kiln_queue in;
	stage_thread *threads;
	unsigned nthreads;
	unsigned started;
	atomic_uint_fast64_t busy_ns;  /* time spent on items, all threads (kiln_pipeline_stats) */
	atomic_uint_fast64_t items;
	atomic_uint_fast64_t device_wait_ns; /* of busy_ns, in texenc collects' device waits */
} stage;

struct kiln_pipeline {
	kiln_pipeline_config cfg;
	kiln_pool *cpu_pool;     /* the CPU backend's encode pool */
	unsigned gpus;           /* GPU devices among cfg.devices */
	pthread_mutex_t lock;    /* active shards, pixel budget */
	pthread_cond_t changed;  /* a shard ended or budget was released */
	shard *active;
	size_t nactive;
	size_t budget_used;
	size_t budget_peak;      /* most budget_used has been (kiln_pipeline_stats) */
	stage fetch, decode, encode, upload;
	atomic_uint_fast64_t batches;
};

void kiln_pipeline_config_init(kiln_pipeline_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->devices[0].kind = KILN_DEVICE_CPU;
	cfg->ndevices = 1;
	cfg->fetch_threads = 4;
	cfg->batch = KILN_PIPELINE_MAX_BATCH;
	kiln_image_limits_default(&cfg->limits);
	cfg->max_input_bytes = DEFAULT_MAX_INPUT;
	cfg->pixel_budget = kiln_pipeline_default_budget(kiln_memory_limit());
}

size_t kiln_pipeline_default_budget(uint64_t memory_limit)
{
	if (!memory_limit || memory_limit / 4 >= DEFAULT_PIXEL_BUDGET)
		return DEFAULT_PIXEL_BUDGET;
	return memory_limit / 4 > MIN_PIXEL_BUDGET ? (size_t)(memory_limit / 4) : MIN_PIXEL_BUDGET;
}

/* Adds the time since t0 and n items to a stage's figures. */
static void stage_account(stage *s, uint64_t t0, size_t n)
{
	atomic_fetch_add(&s->busy_ns, kiln_now_ns() - t0);
	atomic_fetch_add(&s->items, n);
}

/* ---- pixel budget ---- */

/* Adds to the budget's use, p->lock held. */
static void budget_add_locked(kiln_pipeline *p, size_t bytes)
{
	p->budget_used += bytes;
	if (p->budget_used > p->budget_peak)
		p->budget_peak = p->budget_used;
}

/* Waits until `bytes` fit in the budget; an image larger than the whole budget waits for
 * an empty budget instead of forever. */
static size_t budget_acquire(kiln_pipeline *p, size_t bytes)
{
	pthread_mutex_lock(&p->lock);
	while (p->budget_used > 0 &&
	       (p->budget_used >= p->cfg.pixel_budget || bytes > p->cfg.pixel_budget - p->budget_used))
		pthread_cond_wait(&p->changed, &p->lock);
	budget_add_locked(p, bytes);
	pthread_mutex_unlock(&p->lock);
	return bytes;
}

/* Counts an encoded output, from the encode stage to the end of its upload, without
 * waiting: the encoder must never wait on the budget (the decoded images that hold it sit
 * in its own queue), but while outputs wait for a slow upload, the decode threads stop
 * taking more images, so the memory held stays near the budget whatever the upload's pace
 * (before, only the count of queued items bounded the outputs). */
static size_t budget_hold(kiln_pipeline *p, size_t bytes)
{
	pthread_mutex_lock(&p->lock);
	budget_add_locked(p, bytes);
	pthread_mutex_unlock(&p->lock);
	return bytes;
}

static void budget_release(kiln_pipeline *p, size_t bytes)
{
	if (!bytes)
		return;
	pthread_mutex_lock(&p->lock);
	p->budget_used -= bytes;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
}

/* ---- shards and items ---- */

static void shard_free(shard *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->count; i++) {
		free(s->items[i].input);
		free(s->items[i].output);
	}
	free(s->items);
	free(s->results);
	free(s->job);
	free(s->id);
	free(s);
}

/* Reports a shard whose items have all ended, then forgets it. */
static void shard_complete(kiln_pipeline *p, shard *s)
{
	kiln_shard_result r = {.job = s->job, .shard = s->id, .lease = s->lease,
			       .items = s->results, .count = s->count};
	p->cfg.report(p->cfg.report_ctx, &r);
	pthread_mutex_lock(&p->lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		p->active = s->next;
	if (s->next)
		s->next->prev = s->prev;
	p->nactive--;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
	shard_free(s);
}

static void item_release(kiln_pipeline *p, item *it)
{
	kiln_buf_free(&it->data);
	kiln_image_free(&it->image);
	kiln_png_source_free(&it->src);
	budget_release(p, it->reserved);
	it->reserved = 0;
	kiln_texture_free_levels(&it->tex);
	memset(&it->tex, 0, sizeof it->tex);
}

/* Ends an item with a status (and, for errors, a reason); reports its shard when it was
 * the last. The item must not be touched afterwards: its shard may be gone. */
static void item_finish(kiln_pipeline *p, item *it, kiln_status status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void item_finish(kiln_pipeline *p, item *it, kiln_status status, const char *fmt, ...)
{
	shard *s = it->shard;
	kiln_item_result *r = &s->results[it->index];
	r->status = status;
	if (status != KILN_OK && fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->error, sizeof r->error, fmt, ap);
		va_end(ap);
		if (!r->cancelled) {
			char q[KILN_ITEM_ERROR_MAX + 16];
			KILN_WARN("item failed", "shard=%s item=%llu error=%s", s->id,
				  (unsigned long long)r->id, kiln_log_quote(r->error, q, sizeof q));
		}
	}
	item_release(p, it);
	pthread_mutex_lock(&p->lock);
	bool last = --s->remaining == 0;
	pthread_mutex_unlock(&p->lock);
	if (last)
		shard_complete(p, s);
}

static void item_cancel(kiln_pipeline *p, item *it)
{
	it->shard->results[it->index].cancelled = true;
	item_finish(p, it, KILN_ERR_CANCELLED, "cancelled");
}

/* Finishes the cancelled items among items[0..n) and compacts the rest to the front;
 * returns how many remain. */
static size_t drop_cancelled(kiln_pipeline *p, item **items, size_t n)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (atomic_load(&items[i]->shard->cancelled))
			item_cancel(p, items[i]);
		else
			items[m++] = items[i];
	}
	return m;
}

/* The item a queue link is in. */
static item *item_of(const kiln_qlink *link)
{
	return (item *)((const char *)link - offsetof(item, link));
}

_Static_assert(IO_BATCH <= KILN_PIPELINE_MAX_BATCH, "pop_items takes at most KILN_PIPELINE_MAX_BATCH");

/* kiln_queue_pop (full: kiln_queue_pop_full) into an array of items. */
static size_t pop_items(kiln_queue *q, item **out, size_t max, kiln_qmatch_fn match, bool full)
{
	kiln_qlink *links[KILN_PIPELINE_MAX_BATCH];
	size_t n = full ? kiln_queue_pop_full(q, links, max, match) : kiln_queue_pop(q, links, max, match);
	for (size_t i = 0; i < n; i++)
		out[i] = item_of(links[i]);
	return n;
}

/* Passes an item on; a closed queue (the pipeline is stopping) cancels it. */
static void item_forward(kiln_pipeline *p, kiln_queue *q, item *it)
{
	if (!kiln_queue_push(q, &it->link))
		item_cancel(p, it);
}

/* ---- stages ---- */

/* The storage a fetch or upload thread uses, behind the injected storage's two calls so
 * that both stages call one interface: the injected one (cfg.storage; own stays NULL) or
 * a common/storage handle of the thread's own. open_st and msg: why opening that handle
 * failed, which the thread's items finish with. */
typedef struct io_storage {
	kiln_pipeline_storage calls;
	kiln_storage *own;
	kiln_status open_st;
	char msg[KILN_STORAGE_MSG_MAX];
} io_storage;

static kiln_status own_get_many(void *st, kiln_storage_get_item *items, size_t count)
{
	return kiln_storage_get_many(st, items, count);
}

static kiln_status own_put_many(void *st, kiln_storage_put_item *items, size_t count)
{
	return kiln_storage_put_many(st, items, count);
}

static void io_storage_open(kiln_pipeline *p, io_storage *io)
{
	io->own = NULL;
	io->msg[0] = '\0';
	io->open_st = KILN_OK;
	if (p->cfg.storage) {
		io->calls = *p->cfg.storage;
		return;
	}
	io->open_st = kiln_storage_create(p->cfg.storage_config, &io->own, io->msg, sizeof io->msg);
	io->calls = (kiln_pipeline_storage){own_get_many, own_put_many, io->own};
}

/* Finishes an item whose storage request failed (true), with the request's message or
 * the status's words; false when it succeeded. */
static bool io_failed(kiln_pipeline *p, item *it, kiln_status st, const char *msg)
{
	if (st == KILN_OK)
		return false;
	item_finish(p, it, st, "%s", msg[0] ? msg : kiln_strerror(st));
	return true;
}

static void *fetch_main(void *arg)
{
	stage_thread *t = arg;
	kiln_pipeline *p = t->p;
	io_storage io;
	io_storage_open(p, &io);
	item *batch[IO_BATCH];
	kiln_storage_get_item gets[IO_BATCH];
	size_t n;
	while ((n = pop_items(&p->fetch.in, batch, IO_BATCH, NULL, false)) > 0) {
		n = drop_cancelled(p, batch, n);
		if (io.open_st != KILN_OK) {
			for (size_t i = 0; i < n; i++)
				item_finish(p, batch[i], io.open_st, "storage: %s", io.msg);
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			kiln_buf_init(&batch[i]->data, p->cfg.max_input_bytes);
			memset(&gets[i], 0, sizeof gets[i]);
			gets[i].uri = batch[i]->input;
			gets[i].out = &batch[i]->data;
		}
		uint64_t t0 = kiln_now_ns();
		io.calls.get_many(io.calls.ctx, gets, n);
		stage_account(&p->fetch, t0, n);
		for (size_t i = 0; i < n; i++) {
			item *it = batch[i];
			if (io_failed(p, it, gets[i].status, gets[i].msg))
				continue;
			it->shard->results[it->index].bytes_in = it->data.len;
			item_forward(p, &p->decode.in, it);
		}
	}
	kiln_storage_destroy(io.own);
	return NULL;
}

/* Decode threads per GPU from which ASTC's inputs are decoded on the host while the GPUs
 * have work waiting. The ASTC kernel keeps a GPU busy longer than decoding the batch's
 * PNG files there (Kodak files, 4x4 fast, one H100 with 16 decode threads: the kernel
 * 0.43 ms a file, the GPU's decode and the rest of its path about 0.33 ms), while the
 * host decodes about 90 of them a second a thread: decoded on the host alone, 1,070-1,350
 * files/s, the decode threads the limit; on the GPU alone, 1,300-1,330, the GPU the limit
 * (docs/PERFORMANCE.md, worker, session 21). So each file goes to whichever is short of
 * work: to the GPU undecoded while the encode stage has less than a batch a GPU waiting
 * (the GPUs would soon have nothing to do), else decoded on the host. With fewer than 8
 * decode threads a GPU (the worker's --threads, not the host's cores: e.g. --threads 4,
 * ~360 files/s on the host) every file goes to the GPU. BC1's kernel is cheap: its files
 * always go to the GPU, which decodes them faster than the host's threads could. */
#define ASTC_HOST_DECODERS_PER_GPU 8

/* Whether an item's PNG goes to the encode stage undecoded, for a GPU to decode: kiln's
 * decoder is chosen, the file is one the GPU decoder takes fast (kiln_texenc_png_gpu_decodes),
 * a GPU will encode it, and the GPU has no better use for its time (ASTC: above). A PSNR,
 * when wanted, is measured on the GPU too (opts.measure). */
static bool decode_on_gpu(kiln_pipeline *p, const item *it, const kiln_pngdec_info *info)
{
	if (p->cfg.png_decoder != KILN_PNG_DECODER_KILN || !kiln_texenc_png_gpu_decodes(info) ||
	    !kiln_texenc_gpu_supported(it->shard->opts.format) || p->gpus == 0)
		return false;
	if (it->shard->opts.format == KILN_TEXFMT_ASTC && p->decode.nthreads >= ASTC_HOST_DECODERS_PER_GPU * p->gpus)
		return kiln_queue_count(&p->encode.in) < (size_t)p->cfg.batch * p->gpus;
	return true;
}

static void png_opts_of(const kiln_pipeline *p, const shard *sh, kiln_png_transcode_opts *opts)
{
	kiln_png_transcode_opts_default(opts);
	opts->quality = sh->opts.quality;
	opts->limits = &p->cfg.limits;
}

/* Format png: the probed file's samples are read here (the file stays: its chunks go
 * along) and the encode stage writes the new file on its device. */
static void read_source(kiln_pipeline *p, item *it, uint64_t t0)
{
	char err[200] = "";
	kiln_png_transcode_opts opts;
	png_opts_of(p, it->shard, &opts);
	kiln_status st = kiln_png_source_read(it->data.data, it->data.len, &it->png, &opts, NULL, &it->src, err,
					      sizeof err);
	stage_account(&p->decode, t0, 1);
	if (st != KILN_OK) {
		item_finish(p, it, st, "%s: %s", kiln_strerror(st), err);
		return;
	}
	item_forward(p, &p->encode.in, it);
}

/* Reads the header and reserves the pixel budget from it, so a decompression bomb is
 * refused and big images wait for memory before anything is allocated for them; then
 * decodes, or leaves the file for the GPU, or (format png) re-encodes it. */
static void decode_one(kiln_pipeline *p, item *it)
{
	uint32_t w = 0, h = 0;
	size_t bytes;
	char err[200] = "";
	uint64_t t0 = kiln_now_ns();
	kiln_pngdec_info info;
	kiln_status st;
	if (p->cfg.png_decoder == KILN_PNG_DECODER_KILN || it->shard->png_out) {
		/* the whole container is checked here (chunks, CRCs, limits) */
		st = kiln_pngdec_probe(it->data.data, it->data.len, &p->cfg.limits, &info, err, sizeof err);
		if (st != KILN_OK) {
			stage_account(&p->decode, t0, 1);
			item_finish(p, it, st, "%s: %s", kiln_strerror(st), err);
			return;
		}
		w = info.width;
		h = info.height;
	} else {
		st = kiln_png_probe(it->data.data, it->data.len, &w, &h);
	}
	if (st == KILN_OK) {
		st = kiln_image_check_size(w, h, &p->cfg.limits);
		if (st != KILN_OK) {
			item_finish(p, it, st, "%s: %ux%u pixels (limits: %ux%u, %llu pixels)", kiln_strerror(st), w,
				    h, p->cfg.limits.max_width, p->cfg.limits.max_height,
				    (unsigned long long)p->cfg.limits.max_pixels);
			return;
		}
		if (it->shard->png_out)
			bytes = kiln_png_source_memory(&info, false);
		else if (!kiln_size_mul3(w, h, 4, &bytes)) {
			item_finish(p, it, KILN_ERR_OVERFLOW, "%s", kiln_strerror(KILN_ERR_OVERFLOW));
			return;
		}
		uint64_t wait = kiln_now_ns();
		it->reserved = budget_acquire(p, bytes);
		t0 += kiln_now_ns() - wait; /* waiting for memory is not decoding */
	}
	if (it->shard->png_out) {
		it->png = info;
		read_source(p, it, t0);
		return;
	}
	if (p->cfg.png_decoder == KILN_PNG_DECODER_KILN && decode_on_gpu(p, it, &info)) {
		it->gpu_decode = true;
		it->png = info;
		stage_account(&p->decode, t0, 1);
		item_forward(p, &p->encode.in, it);
		return;
	}
	if (p->cfg.png_decoder == KILN_PNG_DECODER_KILN) /* probed above: not parsed again */
		st = kiln_pngdec_decode_probed_image(it->data.data, &info, &p->cfg.limits, &it->image, NULL, err,
						     sizeof err);
	else /* a header that did not probe is decoded anyway: libpng stops at it with the reason */
		st = kiln_png_decode(it->data.data, it->data.len, &p->cfg.limits, &it->image, err, sizeof err);
	stage_account(&p->decode, t0, 1);
	if (st != KILN_OK) {
		item_finish(p, it, st, "%s: %s", kiln_strerror(st), err);
		return;
	}
	kiln_buf_free(&it->data);
	item_forward(p, &p->encode.in, it);
}

static void *decode_main(void *arg)
{
	stage_thread *t = arg;
	kiln_pipeline *p = t->p;
	item *it;
	while (pop_items(&p->decode.in, &it, 1, NULL, false) > 0) {
		if (atomic_load(&it->shard->cancelled))
			item_cancel(p, it);
		else
			decode_one(p, it);
	}
	return NULL;
}

static bool opts_equal(const kiln_texenc_opts *a, const kiln_texenc_opts *b)
{
	return a->format == b->format && a->quality == b->quality && a->alpha_cutoff == b->alpha_cutoff &&
	       a->mipmaps == b->mipmaps && a->colorspace == b->colorspace && a->measure == b->measure &&
	       (a->format != KILN_TEXFMT_ASTC || (a->block_w == b->block_w && a->block_h == b->block_h));
}

/* A batch runs through one texenc (or, format png, one PNG runner), so it holds images of
 * one set of options, all decoded or all left for the GPU to decode. */
static bool same_opts(const kiln_qlink *first_link, const kiln_qlink *next_link)
{
	const item *first = item_of(first_link), *next = item_of(next_link);
	return opts_equal(&first->shard->opts, &next->shard->opts) && first->gpu_decode == next->gpu_decode &&
	       first->shard->png_out == next->shard->png_out;
}

static void device_name(const kiln_device *d, char *out, size_t cap)
{
	if (d->kind == KILN_DEVICE_GPU)
		snprintf(out, cap, "gpu:%d", d->index);
	else
		snprintf(out, cap, "cpu");
}

/* A batch handed to the device and not yet collected. */
typedef struct encode_batch {
	item *items[KILN_PIPELINE_MAX_BATCH];
	size_t n;
	kiln_texenc *enc; /* the device's texenc, which holds it */
	uint64_t ticket;
	kiln_status st;   /* not KILN_OK: the batch never reached the device (no ticket) */
} encode_batch;

/* One device's encoder. Its texenc (and the device buffers it holds) lives as long as the
 * thread; each batch sets its options. */
typedef struct encoder {
	kiln_pipeline *p;
	const kiln_device *dev;
	char name[32];
	kiln_texenc *enc;
	kiln_pngenc_runner *png; /* format png, made at its first batch */
	encode_batch flight[KILN_TEXENC_MAX_INFLIGHT];  /* a ring, oldest at head */
	size_t head, nflight;
} encoder;

/* Format png: the batch's files are written on the device at once (no batch is kept in
 * flight: the encoder is far faster than the decode threads that feed it) and go to upload
 * as they are. */
static void encode_png(encoder *e, item **batch, size_t n)
{
	kiln_pipeline *p = e->p;
	uint64_t t0 = kiln_now_ns();
	kiln_png_source *srcs[KILN_PIPELINE_MAX_BATCH];
	kiln_buf out[KILN_PIPELINE_MAX_BATCH];
	kiln_status status[KILN_PIPELINE_MAX_BATCH];
	char why[200] = "";
	for (size_t i = 0; i < n; i++) {
		srcs[i] = &batch[i]->src;
		kiln_buf_init(&out[i], MAX_OUTPUT_BYTES);
	}
	kiln_png_transcode_opts opts;
	png_opts_of(p, batch[0]->shard, &opts);
	bool on_cpu = e->dev->kind == KILN_DEVICE_CPU;
	kiln_status st = e->png ? KILN_OK : kiln_pngenc_runner_create(e->dev, on_cpu ? p->cpu_pool : NULL, &e->png);
	if (st == KILN_OK)
		st = kiln_png_source_encode(e->png, &opts, srcs, n, out, status, why, sizeof why);
	else
		snprintf(why, sizeof why, "%s", kiln_strerror(st));
	atomic_fetch_add(&p->batches, 1);
	stage_account(&p->encode, t0, n);
	if (st == KILN_ERR_CUDA)
		KILN_WARN("batch failed on the device; it was reset", "device=%s images=%zu error=\"%s\"", e->name, n,
			  why);
	for (size_t i = 0; i < n; i++) {
		item *it = batch[i];
		it->pixels = (uint64_t)it->src.info.width * it->src.info.height;
		kiln_png_source_free(&it->src);
		budget_release(p, it->reserved);
		it->reserved = 0;
		kiln_buf_free(&it->data);
		it->data = out[i];
		it->reserved = budget_hold(p, it->data.len);
		if (st != KILN_OK || status[i] != KILN_OK) {
			item_finish(p, it, st != KILN_OK ? st : status[i], "PNG encode on %s: %s%s%s", e->name,
				    kiln_strerror(st != KILN_OK ? st : status[i]), st != KILN_OK ? ": " : "",
				    st != KILN_OK ? why : "");
			continue;
		}
		if (atomic_load(&it->shard->cancelled))
			item_cancel(p, it);
		else
			item_forward(p, &p->upload.in, it);
	}
}

/* Hands a batch to the device. The texenc has copied the pixels once submit returns, so
 * they are freed here. */
static void encode_submit(encoder *e, item **batch, size_t n)
{
	kiln_pipeline *p = e->p;
	uint64_t t0 = kiln_now_ns();
	encode_batch *b = &e->flight[(e->head + e->nflight) % KILN_TEXENC_MAX_INFLIGHT];
	e->nflight++;
	memcpy(b->items, batch, n * sizeof *batch);
	b->n = n;
	b->ticket = 0;
	const kiln_texenc_opts *opts = &batch[0]->shard->opts;
	bool on_cpu = e->dev->kind == KILN_DEVICE_CPU;
	b->st = e->enc ? kiln_texenc_set_opts(e->enc, opts)
		       : kiln_texenc_create(e->dev, opts, on_cpu ? p->cpu_pool : NULL, &e->enc);
	b->enc = e->enc;
	if (b->st == KILN_OK && batch[0]->gpu_decode) {
		kiln_texenc_png files[KILN_PIPELINE_MAX_BATCH];
		for (size_t i = 0; i < n; i++)
			files[i] = (kiln_texenc_png){batch[i]->data.data, batch[i]->data.len, batch[i]->png};
		b->st = kiln_texenc_submit_png(b->enc, files, n, &b->ticket);
	} else if (b->st == KILN_OK) {
		kiln_image images[KILN_PIPELINE_MAX_BATCH];
		for (size_t i = 0; i < n; i++)
			images[i] = batch[i]->image;
		b->st = kiln_texenc_submit(b->enc, images, n, &b->ticket);
	}
	for (size_t i = 0; i < n; i++) {
		item *it = batch[i];
		kiln_buf_free(&it->data); /* a PNG the GPU decodes: submit has copied it */
		kiln_image_free(&it->image);
		budget_release(p, it->reserved);
		it->reserved = 0;
	}
	atomic_fetch_add(&p->batches, 1);
	stage_account(&p->encode, t0, 0);
}

static size_t texture_bytes(const kiln_texture *tex)
{
	size_t n = 0;
	for (uint32_t l = 0; l < tex->num_levels; l++)
		n += tex->levels[l].size;
	return n;
}

/* Collects the oldest batch in flight and passes its items on. */
static void encode_finish(encoder *e)
{
	kiln_pipeline *p = e->p;
	uint64_t t0 = kiln_now_ns();
	encode_batch *b = &e->flight[e->head];
	e->head = (e->head + 1) % KILN_TEXENC_MAX_INFLIGHT;
	e->nflight--;
	kiln_texture out[KILN_PIPELINE_MAX_BATCH];
	kiln_status status[KILN_PIPELINE_MAX_BATCH];
	kiln_texerr err[KILN_PIPELINE_MAX_BATCH];
	kiln_status st = b->st;
	const char *why = ""; /* the texenc's reason for a whole-batch failure */
	if (st == KILN_OK) {
		uint64_t waited = kiln_texenc_device_wait_ns(b->enc);
		st = kiln_texenc_collect_measured(b->enc, b->ticket, out, status, err);
		atomic_fetch_add(&p->encode.device_wait_ns, kiln_texenc_device_wait_ns(b->enc) - waited);
		if (st != KILN_OK)
			why = kiln_texenc_last_error(b->enc);
	} else {
		for (size_t i = 0; i < b->n; i++)
			status[i] = st;
	}
	stage_account(&p->encode, t0, b->n);
	if (st == KILN_ERR_CUDA)
		KILN_WARN("batch failed on the device; it was reset", "device=%s images=%zu error=\"%s\"", e->name,
			  b->n, why);
	for (size_t i = 0; i < b->n; i++) {
		item *it = b->items[i];
		if (status[i] != KILN_OK) {
			item_finish(p, it, status[i], "%s on %s: %s%s%s%s", it->gpu_decode ? "PNG decode + encode" : "encode",
				    e->name, kiln_strerror(status[i]),
				    why[0] ? ": " : "", why, st != KILN_OK ? " (whole batch)" : "");
			continue;
		}
		it->tex = out[i];
		if (it->shard->opts.measure) {
			kiln_item_result *r = &it->shard->results[it->index];
			r->psnr_measured = kiln_texerr_psnr(&err[i], &r->psnr);
		}
		it->reserved += budget_hold(p, texture_bytes(&it->tex));
		if (atomic_load(&it->shard->cancelled))
			item_cancel(p, it); /* frees the texture: nothing left to upload */
		else
			item_forward(p, &p->upload.in, it);
	}
}

/* The encode loop. With nothing in flight it takes whatever is queued (at once, so an idle
 * device starts work without waiting for a full batch): the oldest item and the queued
 * items of its kind (same_opts). With batches in flight it submits another only when one
 * cannot grow any more (kiln_queue_pop_full: a full batch of one kind, the oldest kind
 * first, or the oldest kind as it is when the queue is full or closed or two full batches
 * went past it); otherwise it collects the oldest first, which lets the queue fill
 * meanwhile. Batches take their items from anywhere in the queue, so items of kinds
 * interleaved (shards of different options, files decoded on the host beside files left
 * to the GPU, decode_on_gpu) still make full batches. On a GPU this keeps up
 * to KILN_TEXENC_MAX_INFLIGHT batches in flight, so the upload of one overlaps the kernels
 * of another and the download of a third; on the CPU one batch at a time. */
static void *encode_main(void *arg)
{
	stage_thread *t = arg;
	kiln_pipeline *p = t->p;
	encoder e = {.p = p, .dev = &p->cfg.devices[t->index]};
	device_name(e.dev, e.name, sizeof e.name);
	item *batch[KILN_PIPELINE_MAX_BATCH];
	for (;;) {
		unsigned depth = e.enc ? kiln_texenc_depth(e.enc) : 1;
		size_t n = 0;
		if (e.nflight == 0)
			n = pop_items(&p->encode.in, batch, p->cfg.batch, same_opts, false);
		else if (e.nflight < depth)
			n = pop_items(&p->encode.in, batch, p->cfg.batch, same_opts, true);
		if (n == 0) {
			if (e.nflight == 0)
				break; /* closed and drained */
			encode_finish(&e);
			continue;
		}
		n = drop_cancelled(p, batch, n);
		if (n && batch[0]->shard->png_out)
			encode_png(&e, batch, n);
		else if (n)
			encode_submit(&e, batch, n);
	}
	kiln_texenc_destroy(e.enc);
	kiln_pngenc_runner_destroy(e.png);
	return NULL;
}

static void *upload_main(void *arg)
{
	stage_thread *t = arg;
	kiln_pipeline *p = t->p;
	io_storage io;
	io_storage_open(p, &io);
	item *batch[IO_BATCH];
	kiln_storage_put_item puts[IO_BATCH];
	size_t n;
	/* Items that reached this stage were encoded: they finish even when cancelled. */
	while ((n = pop_items(&p->upload.in, batch, IO_BATCH, NULL, false)) > 0) {
		size_t m = 0;
		uint64_t t0 = kiln_now_ns();
		for (size_t i = 0; i < n; i++) {
			item *it = batch[i];
			kiln_status cs = io.open_st;
			if (!it->shard->png_out) { /* a PNG's data is its output file already */
				kiln_buf_init(&it->data, MAX_OUTPUT_BYTES);
				if (cs == KILN_OK)
					cs = kiln_container_write(it->shard->container, &it->tex, &it->data);
				/* reported with the item's result once its upload succeeds */
				it->pixels = (uint64_t)it->tex.levels[0].width * it->tex.levels[0].height;
				kiln_texture_free_levels(&it->tex);
				memset(&it->tex, 0, sizeof it->tex);
			}
			if (cs != KILN_OK) {
				item_finish(p, it, cs, "%s: %s", io.open_st != KILN_OK ? "storage" : "container",
					    io.open_st != KILN_OK ? io.msg : kiln_strerror(cs));
				continue;
			}
			memset(&puts[m], 0, sizeof puts[m]);
			puts[m].uri = it->output;
			puts[m].data = it->data.data;
			puts[m].size = it->data.len;
			batch[m++] = it;
		}
		if (m)
			io.calls.put_many(io.calls.ctx, puts, m);
		stage_account(&p->upload, t0, n);
		for (size_t i = 0; i < m; i++) {
			item *it = batch[i];
			if (io_failed(p, it, puts[i].status, puts[i].msg))
				continue;
			it->shard->results[it->index].bytes = it->data.len;
			it->shard->results[it->index].pixels = it->pixels;
			item_finish(p, it, KILN_OK, NULL);
		}
	}
	kiln_storage_destroy(io.own);
	return NULL;
}

/* ---- lifecycle ---- */

static kiln_status stage_start(kiln_pipeline *p, stage *s, const char *name, unsigned nthreads,
			       size_t queue_cap, void *(*fn)(void *))
{
	kiln_status st = kiln_queue_init(&s->in, queue_cap);
	if (st != KILN_OK)
		return st;
	s->threads = kiln_calloc(nthreads, sizeof *s->threads);
	if (!s->threads)
		return KILN_ERR_NOMEM;
	s->nthreads = nthreads;
	for (unsigned i = 0; i < nthreads; i++) {
		s->threads[i].p = p;
		s->threads[i].index = i;
		if (pthread_create(&s->threads[i].tid, NULL, fn, &s->threads[i]) != 0)
			return KILN_ERR_NOMEM;
		kiln_thread_name(s->threads[i].tid, name, i);
		s->started++;
	}
	return KILN_OK;
}

/* Closes the stage's input and waits for its threads: everything it held has moved on. */
static void stage_stop(stage *s)
{
	if (!s->threads)
		return;
	kiln_queue_close(&s->in);
	for (unsigned i = 0; i < s->started; i++)
		pthread_join(s->threads[i].tid, NULL);
	free(s->threads);
	s->threads = NULL;
	kiln_queue_destroy(&s->in);
}

static bool link_cancelled(const kiln_qlink *link)
{
	return atomic_load(&item_of(link)->shard->cancelled);
}

/* Marks shards cancelled (job NULL: all) and ends their not-yet-fetched items now, so a
 * cancel does not wait for the fetchers to reach them. */
static size_t cancel_shards(kiln_pipeline *p, const char *job)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (shard *s = p->active; s; s = s->next)
		if (!job || strcmp(s->job, job) == 0) {
			atomic_store(&s->cancelled, true);
			n++;
		}
	pthread_mutex_unlock(&p->lock);
	if (n) {
		kiln_qlink *link = kiln_queue_take_if(&p->fetch.in, link_cancelled);
		while (link) {
			kiln_qlink *next = link->next;
			item_cancel(p, item_of(link));
			link = next;
		}
	}
	return n;
}

kiln_status kiln_pipeline_create(const kiln_pipeline_config *cfg, kiln_pipeline **out, char *msg,
				 size_t msg_cap)
{
	*out = NULL;
	kiln_msgf(msg, msg_cap, "%s", "");
	if (!cfg->report || cfg->ndevices == 0 || cfg->ndevices > KILN_PIPELINE_MAX_DEVICES ||
	    cfg->batch == 0 || cfg->batch > KILN_PIPELINE_MAX_BATCH || !cfg->fetch_threads ||
	    !cfg->max_input_bytes || !cfg->pixel_budget) {
		kiln_msgf(msg, msg_cap, "invalid pipeline configuration");
		return KILN_ERR_INVALID_ARG;
	}
	for (size_t d = 0; d < cfg->ndevices; d++)
		if (cfg->devices[d].kind == KILN_DEVICE_AUTO) {
			kiln_msgf(msg, msg_cap, "device %zu is not resolved", d);
			return KILN_ERR_INVALID_ARG;
		}
	kiln_status st = KILN_ERR_NOMEM;
	kiln_pipeline *p = kiln_calloc(1, sizeof *p);
	if (!p)
		return st;
	p->cfg = *cfg;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->changed, NULL);

	/* The CPU backend's pool, for a CPU device's encoders; a pipeline of GPUs only has
	 * none (their encoders take a NULL pool). */
	bool cpu_device = false;
	for (size_t d = 0; d < cfg->ndevices; d++) {
		cpu_device |= cfg->devices[d].kind == KILN_DEVICE_CPU;
		p->gpus += cfg->devices[d].kind == KILN_DEVICE_GPU;
	}
	if (cpu_device && (st = kiln_pool_create(cfg->cpu_threads, &p->cpu_pool)) != KILN_OK) {
		kiln_msgf(msg, msg_cap, "cannot start the CPU encoder threads");
		goto fail;
	}
	kiln_pool_set_name(p->cpu_pool, "kiln-cpu");
	if (!cfg->storage) {
		/* Fail now on a bad storage setting, not later for every item. */
		kiln_storage *probe = NULL;
		st = kiln_storage_create(cfg->storage_config, &probe, msg, msg_cap);
		kiln_storage_destroy(probe);
		if (st != KILN_OK)
			goto fail;
	}
	unsigned decoders = cfg->decode_threads ? cfg->decode_threads : kiln_cpu_count();
	size_t in_flight = (size_t)cfg->batch * 2 * cfg->ndevices; /* one batch encoding, one ready */
	unsigned uploaders = cfg->upload_threads ? cfg->upload_threads : 4 * (unsigned)cfg->ndevices;
	if ((st = stage_start(p, &p->upload, "kiln-upload", uploaders, in_flight, upload_main)) != KILN_OK ||
	    (st = stage_start(p, &p->encode, "kiln-encode", (unsigned)cfg->ndevices, in_flight, encode_main)) !=
		    KILN_OK ||
	    (st = stage_start(p, &p->decode, "kiln-decode", decoders, (size_t)decoders * 2, decode_main)) != KILN_OK ||
	    (st = stage_start(p, &p->fetch, "kiln-fetch", cfg->fetch_threads, 0, fetch_main)) != KILN_OK) {
		kiln_msgf(msg, msg_cap, "cannot start the pipeline threads");
		goto fail;
	}
	/* what the pipeline took of its host (affinity, cgroup limits: common/host.h) */
	KILN_INFO("host resources", "decode_threads=%u pixel_budget_mib=%zu memory_limit_mib=%llu", decoders,
		  cfg->pixel_budget >> 20, (unsigned long long)(kiln_memory_limit() >> 20));
	*out = p;
	return KILN_OK;
fail:
	kiln_pipeline_destroy(p);
	return st;
}

void kiln_pipeline_destroy(kiln_pipeline *p)
{
	if (!p)
		return;
	if (p->fetch.threads)
		cancel_shards(p, NULL);
	/* upstream first: a stage stops only after everything before it has drained into it */
	stage_stop(&p->fetch);
	stage_stop(&p->decode);
	stage_stop(&p->encode);
	stage_stop(&p->upload);
	kiln_pool_destroy(p->cpu_pool);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->changed);
	free(p);
}

kiln_status kiln_pipeline_submit(kiln_pipeline *p, const kiln_shard_spec *spec)
{
	if (!spec->job || !spec->shard || (spec->count && !spec->items))
		return KILN_ERR_INVALID_ARG;
	shard *s = kiln_calloc(1, sizeof *s);
	if (!s)
		return KILN_ERR_NOMEM;
	s->job = kiln_strdup(spec->job);
	s->id = kiln_strdup(spec->shard);
	s->items = kiln_calloc(spec->count ? spec->count : 1, sizeof *s->items);
	s->results = kiln_calloc(spec->count ? spec->count : 1, sizeof *s->results);
	if (!s->job || !s->id || !s->items || !s->results)
		goto nomem;
	s->count = spec->count;
	for (size_t i = 0; i < spec->count; i++) {
		item *it = &s->items[i];
		it->shard = s;
		it->index = i;
		it->input = kiln_strdup(spec->items[i].input);
		it->output = kiln_strdup(spec->items[i].output);
		if (!it->input || !it->output)
			goto nomem;
		s->results[i].id = spec->items[i].id;
	}
	s->lease = spec->lease;
	s->opts = spec->opts;
	s->opts.measure = spec->measure_psnr; /* the texenc measures, where the pixels are */
	s->container = spec->container;
	s->png_out = spec->png_out;
	s->remaining = spec->count;
	atomic_init(&s->cancelled, false);

	pthread_mutex_lock(&p->lock);
	s->next = p->active;
	if (p->active)
		p->active->prev = s;
	p->active = s;
	p->nactive++;
	pthread_mutex_unlock(&p->lock);

	if (spec->count == 0) {
		shard_complete(p, s);
		return KILN_OK;
	}
	/* The shard may complete (and be freed) while the last items are queued: count first. */
	size_t count = spec->count;
	for (size_t i = 0; i < count; i++) {
		if (spec->reject != KILN_OK)
			item_finish(p, &s->items[i], spec->reject, "%s",
				    spec->reject_msg ? spec->reject_msg : kiln_strerror(spec->reject));
		else
			item_forward(p, &p->fetch.in, &s->items[i]);
	}
	return KILN_OK;
nomem:
	shard_free(s);
	return KILN_ERR_NOMEM;
}

size_t kiln_pipeline_cancel(kiln_pipeline *p, const char *job)
{
	return job ? cancel_shards(p, job) : 0;
}

size_t kiln_pipeline_active(kiln_pipeline *p)
{
	pthread_mutex_lock(&p->lock);
	size_t n = p->nactive;
	pthread_mutex_unlock(&p->lock);
	return n;
}

static void stage_stats(stage *s, kiln_pipeline_stage_stats *out)
{
	out->threads = s->nthreads;
	out->busy_s = (double)atomic_load(&s->busy_ns) / 1e9;
	out->items = atomic_load(&s->items);
	out->device_wait_s = (double)atomic_load(&s->device_wait_ns) / 1e9;
}

void kiln_pipeline_stats_get(kiln_pipeline *p, kiln_pipeline_stats *out)
{
	memset(out, 0, sizeof *out);
	stage_stats(&p->fetch, &out->fetch);
	stage_stats(&p->decode, &out->decode);
	stage_stats(&p->encode, &out->encode);
	stage_stats(&p->upload, &out->upload);
	out->batches = atomic_load(&p->batches);
	pthread_mutex_lock(&p->lock);
	out->budget_peak = p->budget_peak;
	pthread_mutex_unlock(&p->lock);
}

bool kiln_pipeline_wait_idle(kiln_pipeline *p, unsigned timeout_ms)
{
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&p->lock);
	while (p->nactive > 0 && pthread_cond_timedwait(&p->changed, &p->lock, &deadline) == 0)
		;
	bool idle = p->nactive == 0;
	pthread_mutex_unlock(&p->lock);
	return idle;
}
