/* The worker's protocol client. One thread (the caller of kiln_client_run) owns the socket;
 * pipeline threads hand finished shards over through a locked list of shard records and
 * a self-pipe that wakes zmq_poll (the same pipe carries stop requests from signal
 * handlers).
 *
 * A shard record lives from the `shard` message to the scheduler's `ack`:
 *   ACTIVE (in the pipeline, named in heartbeats) -> DONE (result encoded, not yet sent on
 *   this connection) -> SENT (waiting for its ack) -> freed.
 * A new connection turns SENT back into DONE, so READY's `held` and the re-sent results
 * are the DONE records. */
#include "worker/client.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/host.h"
#include "common/log.h"
#include "common/proto.h"
#include "kernels/astc/astc.h"
#include "worker/devices.h"

#define RESULT_ERROR_MAX 128  /* 4096 items x (error + fields) stays under the frame cap */
#define RESULT_ERROR_MIN 16   /* the fallback when even that does not fit */
/* Default slots (credits) a device: a GPU keeps 3 batches of 32 in flight with more being
 * fetched, decoded and uploaded, which 2 shards of 32 could not feed (one H100, a worker
 * process, 3,600 Kodak files: slots 2 / 4 / 8 / 16 gave ASTC 4x4 fast 549 / 792 / 1,017 /
 * 1,018 images/s, BC1 fast about 1,000 against 1,400-2,300: docs/PERFORMANCE.md); a CPU
 * backend is slower than its shards arrive, and more credits would only keep shards from
 * faster workers. */
#define SLOTS_PER_GPU 8
#define SLOTS_PER_CPU 2
#define RECV_BURST 64         /* messages taken per wake-up, so heartbeats keep their time */
#define BYE_LINGER_MS 1000    /* how long a closing socket may still deliver `bye` */

typedef enum record_state { REC_ACTIVE, REC_DONE, REC_SENT } record_state;
#define STATE_BIT(s) (1 << (s))  /* sets of states, for counting and listing records */

typedef struct record {
	char *shard;
	uint64_t lease;
	record_state state;
	kiln_buf frame;     /* the encoded result (DONE, SENT); empty if it could not be made */
	struct record *next;
} record;

struct kiln_client {
	kiln_client_config cfg;
	char id[256];
	char endpoint[1024];
	bool curve;
	char server_key[KILN_CURVE_KEY_LEN + 1];
	char secret_key[KILN_CURVE_KEY_LEN + 1];
	char public_key[KILN_CURVE_KEY_LEN + 1];
	void *ctx;
	bool own_ctx;
	void *sock;
	int wake[2];              /* self-pipe: read end polled, write end poked */
	atomic_int stop;          /* stop requests so far */
	json_t *devices;          /* READY's devices */
	kiln_pipeline *pipeline;
	pthread_mutex_t lock;     /* records */
	record *records;          /* in arrival order */
	kiln_buf out;             /* scratch for encoding messages */
};

void kiln_client_config_init(kiln_client_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->heartbeat_ms = 1000;
	cfg->liveness = 4;
	cfg->reconnect_min_ms = 100;
	cfg->reconnect_max_ms = 5000;
	cfg->drain_ms = 30000;
	kiln_pipeline_config_init(&cfg->pipeline);
}

const char *kiln_client_id(const kiln_client *c)
{
	return c->id;
}

static void wake(kiln_client *c)
{
	char b = 1;
	/* A full pipe already guarantees a wake-up: the result is irrelevant. */
	ssize_t r = write(c->wake[1], &b, 1);
	(void)r;
}

void kiln_client_stop(kiln_client *c)
{
	atomic_fetch_add(&c->stop, 1);
	wake(c);
}

/* ---- shard records ---- */

static void record_free(record *r)
{
	if (!r)
		return;
	free(r->shard);
	kiln_buf_free(&r->frame);
	free(r);
}

static void record_remove(kiln_client *c, record *victim)
{
	for (record **link = &c->records; *link; link = &(*link)->next)
		if (*link == victim) {
			*link = victim->next;
			record_free(victim);
			return;
		}
}

static size_t count_records(kiln_client *c, int states)
{
	size_t n = 0;
	pthread_mutex_lock(&c->lock);
	for (record *r = c->records; r; r = r->next)
		n += (states >> r->state) & 1;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* An array of the shard ids of records in the given states, at most the protocol's list
 * size. NULL on allocation failure. */
static json_t *record_ids(kiln_client *c, int states)
{
	json_t *ids = json_array();
	if (!ids)
		return NULL;
	pthread_mutex_lock(&c->lock);
	for (record *r = c->records; r && json_array_size(ids) < KILN_PROTO_MAX_LIST; r = r->next)
		if ((states >> r->state) & 1)
			json_array_append_new(ids, json_string(r->shard));
	pthread_mutex_unlock(&c->lock);
	return ids;
}

/* ---- results (pipeline threads) ---- */

/* Copies a reason as printable ASCII, at most cap bytes: the frame must stay valid UTF-8
 * and under its cap whatever libpng or a file name put into the text. */
static void sanitize(const char *in, char *out, size_t cap)
{
	size_t n = 0;
	for (; in[n] && n + 1 < cap; n++)
		out[n] = (in[n] >= 0x20 && in[n] < 0x7f) ? in[n] : '?';
	out[n] = '\0';
}

static json_t *result_json(const kiln_shard_result *r, size_t error_cap)
{
	json_t *msg = kiln_proto_new(KILN_MSG_RESULT);
	json_t *items = json_array();
	if (!msg || !items)
		goto fail;
	json_object_set_new(msg, "job", json_string(r->job));
	json_object_set_new(msg, "shard", json_string(r->shard));
	json_object_set_new(msg, "lease", json_integer((json_int_t)r->lease));
	for (size_t i = 0; i < r->count; i++) {
		const kiln_item_result *ir = &r->items[i];
		json_t *it = json_pack("{s:I, s:s}", "id", (json_int_t)ir->id, "status",
				       ir->status == KILN_OK ? "ok" : "error");
		if (!it || json_array_append_new(items, it) != 0)
			goto fail;
		if (ir->status == KILN_OK) {
			json_object_set_new(it, "bytes", json_integer((json_int_t)ir->bytes));
			if (ir->psnr_measured)
				json_object_set_new(it, "psnr", json_integer(ir->psnr));
			if (ir->pixels)
				json_object_set_new(it, "pixels", json_integer((json_int_t)ir->pixels));
		} else {
			char text[RESULT_ERROR_MAX + 1];
			sanitize(ir->error[0] ? ir->error : kiln_strerror(ir->status), text,
				 error_cap < sizeof text ? error_cap + 1 : sizeof text);
			json_object_set_new(it, "error", json_string(text));
		}
		if (ir->bytes_in)
			json_object_set_new(it, "bytes_in", json_integer((json_int_t)ir->bytes_in));
	}
	json_object_set_new(msg, "items", items);
	return msg;
fail:
	json_decref(items);
	json_decref(msg);
	return NULL;
}

/* The pipeline's report: encodes the result here, off the socket thread, and hands it to
 * the record. A result that cannot be encoded leaves an empty frame: the record is then
 * dropped and the scheduler's lease runs out, which re-queues the items. */
static void on_report(void *ctx, const kiln_shard_result *r)
{
	kiln_client *c = ctx;
	kiln_buf frame;
	kiln_buf_init(&frame, KILN_PROTO_MAX_FRAME);
	kiln_status st = KILN_ERR_NOMEM;
	for (size_t cap = RESULT_ERROR_MAX; cap >= RESULT_ERROR_MIN && st != KILN_OK; cap /= 8) {
		json_t *msg = result_json(r, cap);
		st = msg ? kiln_proto_encode(msg, &frame) : KILN_ERR_NOMEM;
		json_decref(msg);
	}
	if (st != KILN_OK) {
		KILN_ERROR("cannot encode a result; its items will be re-queued by the scheduler",
			   "shard=%s error=\"%s\"", r->shard, kiln_strerror(st));
		kiln_buf_free(&frame);
	}
	pthread_mutex_lock(&c->lock);
	record *rec = c->records;
	while (rec && !(rec->state == REC_ACTIVE && rec->lease == r->lease && strcmp(rec->shard, r->shard) == 0))
		rec = rec->next;
	if (rec) {
		rec->frame = frame;
		rec->state = REC_DONE;
	} else {
		kiln_buf_free(&frame);
	}
	pthread_mutex_unlock(&c->lock);
	wake(c);
}

/* ---- socket ---- */

static bool send_frame(kiln_client *c, const void *data, size_t len)
{
	if (zmq_send(c->sock, data, len, ZMQ_DONTWAIT) >= 0)
		return true;
	KILN_DEBUG("send deferred", "error=\"%s\"", zmq_strerror(zmq_errno()));
	return false;
}

/* Encodes and sends a message; takes the reference to msg. */
static bool send_msg(kiln_client *c, json_t *msg)
{
	kiln_status st = msg ? kiln_proto_encode(msg, &c->out) : KILN_ERR_NOMEM;
	json_decref(msg);
	if (st != KILN_OK) {
		KILN_ERROR("cannot encode a message", "error=\"%s\"", kiln_strerror(st));
		return false;
	}
	return send_frame(c, c->out.data, c->out.len);
}

static bool send_ready(kiln_client *c)
{
	json_t *msg = kiln_proto_new(KILN_MSG_READY);
	if (!msg)
		return false;
	unsigned slots = c->cfg.slots;
	json_object_set_new(msg, "worker", json_string(c->id));
	json_object_set_new(msg, "slots", json_integer(slots));
	json_object_set(msg, "devices", c->devices);
	json_object_set_new(msg, "codecs", json_pack("[sss]", "bc1", "astc", "png"));
	json_object_set_new(msg, "held", record_ids(c, STATE_BIT(REC_DONE)));
	return send_msg(c, msg);
}

static void send_heartbeat(kiln_client *c)
{
	json_t *msg = kiln_proto_new(KILN_MSG_HEARTBEAT);
	if (msg)
		json_object_set_new(msg, "active", record_ids(c, STATE_BIT(REC_ACTIVE)));
	send_msg(c, msg);
}

/* Sends the results not yet sent on this connection, oldest first; a full socket leaves
 * the rest for the next turn. Records whose result could not be encoded are dropped. */
static void flush_results(kiln_client *c)
{
	pthread_mutex_lock(&c->lock);
	record **link = &c->records;
	while (*link) {
		record *r = *link;
		if (r->state == REC_DONE && r->frame.len == 0) {
			*link = r->next;
			record_free(r);
			continue;
		}
		if (r->state == REC_DONE) {
			if (!c->sock || !send_frame(c, r->frame.data, r->frame.len))
				break;
			r->state = REC_SENT;
		}
		link = &r->next;
	}
	pthread_mutex_unlock(&c->lock);
}

static void close_socket(kiln_client *c, int linger_ms)
{
	if (!c->sock)
		return;
	zmq_setsockopt(c->sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
	zmq_close(c->sock);
	c->sock = NULL;
}

/* A fresh DEALER, announced with READY; what was sent on the old one is sent again. */
static kiln_status open_socket(kiln_client *c)
{
	int zero = 0;
	/* Frames up to twice the cap are read, then refused by the parser with a log line;
	 * anything larger closes the connection unread, so a rogue peer cannot make the
	 * worker buffer gigabytes. */
	int64_t maxmsg = 2 * (int64_t)KILN_PROTO_MAX_FRAME;
	void *s = zmq_socket(c->ctx, ZMQ_DEALER);
	if (!s)
		return KILN_ERR_NOMEM;
	if (zmq_setsockopt(s, ZMQ_ROUTING_ID, c->id, strlen(c->id)) != 0 ||
	    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
	    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0)
		goto fail;
	if (c->curve && (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_key, KILN_CURVE_KEY_LEN + 1) != 0 ||
			 zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->public_key, KILN_CURVE_KEY_LEN + 1) != 0 ||
			 zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key, KILN_CURVE_KEY_LEN + 1) != 0))
		goto fail;
	if (zmq_connect(s, c->endpoint) != 0)
		goto fail;
	c->sock = s;
	pthread_mutex_lock(&c->lock);
	for (record *r = c->records; r; r = r->next)
		if (r->state == REC_SENT)
			r->state = REC_DONE;
	pthread_mutex_unlock(&c->lock);
	send_ready(c);
	flush_results(c);
	KILN_INFO("connecting", "endpoint=%s worker=%s", c->endpoint, c->id);
	return KILN_OK;
fail:
	KILN_ERROR("cannot open the scheduler socket", "endpoint=%s error=\"%s\"", c->endpoint,
		   zmq_strerror(zmq_errno()));
	zmq_close(s);
	return KILN_ERR_IO;
}

/* ---- incoming messages ---- */

/* A shard's options into spec (opts, container, measure_psnr, png_out). */
static kiln_status parse_options(const json_t *o, kiln_shard_spec *spec, char *msg, size_t cap)
{
	kiln_texenc_opts *opts = &spec->opts;
	kiln_container *container = &spec->container;
	kiln_texenc_opts_default(opts);
	*container = KILN_CONTAINER_DDS;
	spec->measure_psnr = json_is_true(json_object_get(o, "measure_psnr"));
	const char *s;
	const json_t *v;
	bool astc = (s = json_string_value(json_object_get(o, "format"))) && strcmp(s, "astc") == 0;
	spec->png_out = s && strcmp(s, "png") == 0;
	if (s && !astc && !spec->png_out && strcmp(s, "bc1") != 0) {
		kiln_msgf(msg, cap, "format '%.32s' is not supported by this worker (bc1, astc, png)", s);
		return KILN_ERR_UNSUPPORTED;
	}
	if ((s = json_string_value(json_object_get(o, "quality")))) {
		int q = kiln_quality_parse(s);
		if (q < 0) {
			kiln_msgf(msg, cap, "quality '%.32s' is not fast, medium or high", s);
			return KILN_ERR_INVALID_ARG;
		}
		opts->quality = (kiln_quality)q;
	}
	if (spec->png_out) {
		/* PNG to PNG: only the quality and the container's name apply */
		s = json_string_value(json_object_get(o, "container"));
		if ((s && strcmp(s, "png") != 0) || json_is_true(json_object_get(o, "mipmaps")) ||
		    json_object_get(o, "block")) {
			kiln_msgf(msg, cap, "format png writes PNG files: no container but png, no mipmaps, no block");
			return KILN_ERR_UNSUPPORTED;
		}
		return KILN_OK;
	}
	if (astc) {
		unsigned bw = 4, bh = 4;
		char end;
		opts->format = KILN_TEXFMT_ASTC;
		*container = KILN_CONTAINER_ASTC;
		if ((s = json_string_value(json_object_get(o, "block"))) &&
		    (sscanf(s, "%2ux%2u%c", &bw, &bh, &end) != 2 || !kiln_astc_footprint_valid(bw, bh))) {
			kiln_msgf(msg, cap, "block '%.32s' is not an ASTC footprint", s);
			return KILN_ERR_INVALID_ARG;
		}
		opts->block_w = bw;
		opts->block_h = bh;
	} else if (json_object_get(o, "block")) {
		kiln_msgf(msg, cap, "option 'block' is for astc, not bc1");
		return KILN_ERR_UNSUPPORTED;
	}
	if ((s = json_string_value(json_object_get(o, "container")))) {
		int k = kiln_container_parse(s);
		if (k != KILN_CONTAINER_KTX2 && k != (astc ? KILN_CONTAINER_ASTC : KILN_CONTAINER_DDS)) {
			kiln_msgf(msg, cap, "container '%.32s' is not %s", s, astc ? "astc or ktx2" : "dds or ktx2");
			return KILN_ERR_UNSUPPORTED;
		}
		*container = (kiln_container)k;
	}
	if ((v = json_object_get(o, "mipmaps")))
		opts->mipmaps = json_is_true(v);
	if (opts->mipmaps && *container == KILN_CONTAINER_ASTC) {
		kiln_msgf(msg, cap, "an .astc file holds one level: mipmaps need container ktx2");
		return KILN_ERR_UNSUPPORTED;
	}
	if ((s = json_string_value(json_object_get(o, "colorspace")))) {
		if (strcmp(s, "auto") == 0) {
			opts->colorspace = KILN_COLORSPACE_AUTO;
		} else if (strcmp(s, "srgb") == 0) {
			opts->colorspace = KILN_COLORSPACE_SRGB;
		} else if (strcmp(s, "linear") == 0) {
			opts->colorspace = KILN_COLORSPACE_LINEAR;
		} else {
			kiln_msgf(msg, cap, "colorspace '%.32s' is not auto, srgb or linear", s);
			return KILN_ERR_INVALID_ARG;
		}
	}
	if ((v = json_object_get(o, "alpha_cutoff"))) {
		json_int_t a = json_integer_value(v);
		if (a < 0 || a > 255) {
			kiln_msgf(msg, cap, "alpha_cutoff %lld is not in 0..255", (long long)a);
			return KILN_ERR_INVALID_ARG;
		}
		opts->alpha_cutoff = (int)a;
	}
	return KILN_OK;
}

static void handle_shard(kiln_client *c, const json_t *msg)
{
	const char *shard_id = json_string_value(json_object_get(msg, "shard"));
	if (atomic_load(&c->stop)) {
		/* stopping: the scheduler re-queues it when our `bye` arrives */
		KILN_INFO("shard refused while stopping", "shard=%s", shard_id);
		return;
	}
	const json_t *items = json_object_get(msg, "items");
	size_t n = json_array_size(items);
	char reason[KILN_ITEM_ERROR_MAX] = "";
	kiln_shard_spec spec = {
		.job = json_string_value(json_object_get(msg, "job")),
		.shard = shard_id,
		.lease = (uint64_t)json_integer_value(json_object_get(msg, "lease")),
		.count = n,
	};
	spec.reject = parse_options(json_object_get(msg, "options"), &spec, reason, sizeof reason);
	spec.reject_msg = reason;
	kiln_shard_item *list = kiln_calloc(n ? n : 1, sizeof *list);
	record *rec = kiln_calloc(1, sizeof *rec);
	if (rec)
		rec->shard = kiln_strdup(shard_id);
	if (!list || !rec || !rec->shard) {
		KILN_ERROR("out of memory for a shard; its lease will run out", "shard=%s", shard_id);
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *it = json_array_get(items, i);
		list[i].id = (uint64_t)json_integer_value(json_object_get(it, "id"));
		list[i].input = json_string_value(json_object_get(it, "input"));
		list[i].output = json_string_value(json_object_get(it, "output"));
	}
	spec.items = list;
	rec->lease = spec.lease;
	rec->state = REC_ACTIVE;
	kiln_buf_init(&rec->frame, KILN_PROTO_MAX_FRAME);
	size_t active = count_records(c, STATE_BIT(REC_ACTIVE));
	if (active >= c->cfg.slots)
		KILN_WARN("shard beyond the announced slots", "shard=%s slots=%u active=%zu", shard_id,
			  c->cfg.slots, active);
	/* The record goes in first: the pipeline may report the shard before submit returns. */
	pthread_mutex_lock(&c->lock);
	record **link = &c->records;
	while (*link)
		link = &(*link)->next;
	*link = rec;
	pthread_mutex_unlock(&c->lock);
	kiln_status st = kiln_pipeline_submit(c->pipeline, &spec);
	if (st != KILN_OK) {
		KILN_ERROR("cannot queue a shard; its lease will run out", "shard=%s error=\"%s\"", shard_id,
			   kiln_strerror(st));
		pthread_mutex_lock(&c->lock);
		record_remove(c, rec);
		pthread_mutex_unlock(&c->lock);
		rec = NULL;
		goto fail;
	}
	KILN_DEBUG("shard queued", "shard=%s items=%zu", shard_id, n);
	free(list);
	return;
fail:
	record_free(rec);
	free(list);
}

static void handle_ack(kiln_client *c, const json_t *msg)
{
	const char *shard_id = json_string_value(json_object_get(msg, "shard"));
	pthread_mutex_lock(&c->lock);
	record *r = c->records;
	while (r && !(r->state != REC_ACTIVE && strcmp(r->shard, shard_id) == 0))
		r = r->next;
	if (r)
		record_remove(c, r);
	pthread_mutex_unlock(&c->lock);
	if (!r)
		KILN_DEBUG("ack for a result not held", "shard=%s", shard_id);
}

/* Handles one frame. Returns false when the scheduler said bye. */
static bool handle_frame(kiln_client *c, const void *data, size_t len)
{
	json_t *msg;
	kiln_msg_type type;
	char err[256];
	if (kiln_proto_parse(data, len, &msg, &type, err, sizeof err) != KILN_OK) {
		char q[300];
		KILN_WARN("dropped a malformed message", "bytes=%zu error=%s", len, kiln_log_quote(err, q, sizeof q));
		return true;
	}
	bool alive = true;
	switch (type) {
	case KILN_MSG_SHARD:
		handle_shard(c, msg);
		break;
	case KILN_MSG_ACK:
		handle_ack(c, msg);
		break;
	case KILN_MSG_CANCEL: {
		const char *job = json_string_value(json_object_get(msg, "job"));
		size_t n = kiln_pipeline_cancel(c->pipeline, job);
		KILN_INFO("job cancelled", "job=%s shards=%zu", job, n);
		break;
	}
	case KILN_MSG_HEARTBEAT:
		break;
	case KILN_MSG_BYE:
		KILN_INFO("the scheduler said bye", "endpoint=%s", c->endpoint);
		alive = false;
		break;
	default:
		KILN_WARN("dropped a message meant for a scheduler", "type=%s", kiln_msg_type_name(type));
		break;
	}
	json_decref(msg);
	return alive;
}

/* Reads what is waiting (at most a burst). *heard: something came in. Returns false when
 * the scheduler said bye. */
static bool receive(kiln_client *c, bool *heard)
{
	*heard = false;
	for (int i = 0; i < RECV_BURST; i++) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return true;
		}
		*heard = true;
		bool more = zmq_msg_more(&m);
		bool alive = true;
		if (!more) {
			alive = handle_frame(c, zmq_msg_data(&m), zmq_msg_size(&m));
		} else {
			/* The protocol is one frame per message: read the rest and drop it whole. */
			size_t parts = 1;
			while (more && zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) >= 0) {
				more = zmq_msg_more(&m);
				parts++;
			}
			KILN_WARN("dropped a message of several frames", "frames=%zu", parts);
		}
		zmq_msg_close(&m);
		if (!alive)
			return false;
	}
	return true;
}

/* ---- the loop ---- */

kiln_status kiln_client_run(kiln_client *c)
{
	const uint64_t hb = c->cfg.heartbeat_ms, dead_after = hb * c->cfg.liveness;
	uint64_t now = kiln_now_ms();
	uint64_t backoff = c->cfg.reconnect_min_ms, next_connect = now;
	uint64_t last_heard = now, next_hb = now;
	uint64_t stop_at = 0, drained_at = 0;
	bool stopping = false;
	for (;;) {
		now = kiln_now_ms();
		int stops = atomic_load(&c->stop);
		if (stops && !stopping) {
			stopping = true;
			stop_at = now;
			KILN_INFO("stopping: finishing the shards in progress", "active=%zu",
				  count_records(c, STATE_BIT(REC_ACTIVE)));
		}
		if (stopping) {
			size_t active = count_records(c, STATE_BIT(REC_ACTIVE));
			size_t held = count_records(c, STATE_BIT(REC_DONE) | STATE_BIT(REC_SENT));
			if (active == 0 && !drained_at)
				drained_at = now;
			/* drained: wait a little for the acks of the last results */
			if (active == 0 && (held == 0 || !c->sock || now >= drained_at + 2 * hb))
				break;
			if (stops > 1 || now >= stop_at + c->cfg.drain_ms) {
				KILN_WARN("stopping now: handing back unfinished shards", "active=%zu", active);
				break;
			}
		}
		if (!c->sock && now >= next_connect) {
			if (open_socket(c) != KILN_OK) {
				next_connect = now + backoff;
				backoff = backoff * 2 < c->cfg.reconnect_max_ms ? backoff * 2 : c->cfg.reconnect_max_ms;
			}
			last_heard = now;
			next_hb = now + hb;
		}
		flush_results(c);

		uint64_t wake_at = c->sock ? (next_hb < last_heard + dead_after ? next_hb : last_heard + dead_after)
					   : next_connect;
		if (stopping && wake_at > now + 100)
			wake_at = now + 100; /* re-check the drain often */
		zmq_pollitem_t items[2] = {{NULL, c->wake[0], ZMQ_POLLIN, 0}, {c->sock, 0, ZMQ_POLLIN, 0}};
		long timeout = wake_at > now ? (long)(wake_at - now) : 0;
		if (zmq_poll(items, c->sock ? 2 : 1, timeout) < 0 && zmq_errno() != EINTR) {
			KILN_ERROR("poll failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
			close_socket(c, 0);
			return KILN_ERR_IO;
		}
		char drain[64];
		while (read(c->wake[0], drain, sizeof drain) > 0)
			;
		now = kiln_now_ms();
		if (c->sock && (items[1].revents & ZMQ_POLLIN)) {
			bool heard;
			bool alive = receive(c, &heard);
			if (heard) {
				last_heard = now;
				backoff = c->cfg.reconnect_min_ms;
			}
			if (!alive) {
				close_socket(c, 0);
				next_connect = now + backoff;
				continue;
			}
		}
		if (c->sock && now >= last_heard + dead_after) {
			KILN_WARN("the scheduler is silent; reconnecting", "endpoint=%s silent_ms=%llu backoff_ms=%llu",
				  c->endpoint, (unsigned long long)(now - last_heard), (unsigned long long)backoff);
			close_socket(c, 0);
			next_connect = now + backoff;
			backoff = backoff * 2 < c->cfg.reconnect_max_ms ? backoff * 2 : c->cfg.reconnect_max_ms;
			continue;
		}
		if (c->sock && now >= next_hb) {
			send_heartbeat(c);
			next_hb = now + hb;
		}
	}
	if (c->sock) {
		send_msg(c, kiln_proto_new(KILN_MSG_BYE));
		close_socket(c, BYE_LINGER_MS);
	}
	KILN_INFO("stopped", "worker=%s", c->id);
	return KILN_OK;
}

/* ---- lifecycle ---- */

kiln_status kiln_client_create(const kiln_client_config *cfg, kiln_client **out, char *msg,
			       size_t msg_cap)
{
	*out = NULL;
	kiln_msgf(msg, msg_cap, "%s", "");
	if (!cfg->endpoint || strlen(cfg->endpoint) >= sizeof((kiln_client *)0)->endpoint ||
	    !cfg->heartbeat_ms || !cfg->liveness || !cfg->reconnect_min_ms ||
	    cfg->reconnect_max_ms < cfg->reconnect_min_ms || cfg->slots > 1u << 20 ||
	    (cfg->worker_id && (!cfg->worker_id[0] || strlen(cfg->worker_id) > 255))) {
		kiln_msgf(msg, msg_cap, "invalid worker configuration");
		return KILN_ERR_INVALID_ARG;
	}
	if (!cfg->curve_server_key != !cfg->curve_secret_key) {
		kiln_msgf(msg, msg_cap, "CURVE needs both the server's public key and this worker's secret key");
		return KILN_ERR_INVALID_ARG;
	}
	kiln_status st = KILN_ERR_NOMEM;
	kiln_client *c = kiln_calloc(1, sizeof *c);
	if (!c)
		return st;
	c->cfg = *cfg;
	c->wake[0] = c->wake[1] = -1;
	pthread_mutex_init(&c->lock, NULL);
	kiln_buf_init(&c->out, KILN_PROTO_MAX_FRAME);
	strcpy(c->endpoint, cfg->endpoint);
	if (cfg->worker_id) {
		strcpy(c->id, cfg->worker_id);
	} else {
		char host[200] = "worker";
		gethostname(host, sizeof host - 1);
		host[sizeof host - 1] = '\0';
		snprintf(c->id, sizeof c->id, "%s-%ld", host, (long)getpid());
	}
	if (!c->cfg.slots)
		for (size_t d = 0; d < cfg->pipeline.ndevices; d++)
			c->cfg.slots += cfg->pipeline.devices[d].kind == KILN_DEVICE_GPU ? SLOTS_PER_GPU : SLOTS_PER_CPU;
	c->cfg.endpoint = c->endpoint;
	c->cfg.worker_id = c->id;

	if (cfg->curve_server_key) {
		st = KILN_ERR_INVALID_ARG;
		if (!zmq_has("curve")) {
			kiln_msgf(msg, msg_cap, "this libzmq has no CURVE support");
			goto fail;
		}
		if (strlen(cfg->curve_server_key) != KILN_CURVE_KEY_LEN ||
		    strlen(cfg->curve_secret_key) != KILN_CURVE_KEY_LEN) {
			kiln_msgf(msg, msg_cap, "CURVE keys are %d characters of Z85 text", KILN_CURVE_KEY_LEN);
			goto fail;
		}
		strcpy(c->server_key, cfg->curve_server_key);
		strcpy(c->secret_key, cfg->curve_secret_key);
		if (zmq_curve_public(c->public_key, c->secret_key) != 0) {
			kiln_msgf(msg, msg_cap, "the CURVE secret key is not valid Z85 text");
			goto fail;
		}
		c->curve = true;
		c->cfg.curve_server_key = c->server_key;
		c->cfg.curve_secret_key = c->secret_key;
	}
	st = KILN_ERR_IO;
	if (pipe(c->wake) != 0 || fcntl(c->wake[0], F_SETFL, O_NONBLOCK) != 0 ||
	    fcntl(c->wake[1], F_SETFL, O_NONBLOCK) != 0 || fcntl(c->wake[0], F_SETFD, FD_CLOEXEC) != 0 ||
	    fcntl(c->wake[1], F_SETFD, FD_CLOEXEC) != 0) {
		kiln_msgf(msg, msg_cap, "cannot create a pipe: %s", strerror(errno));
		goto fail;
	}
	c->ctx = cfg->zmq_context;
	if (!c->ctx) {
		c->ctx = zmq_ctx_new();
		c->own_ctx = c->ctx != NULL;
		if (!c->ctx) {
			kiln_msgf(msg, msg_cap, "cannot create a ZeroMQ context");
			goto fail;
		}
	}
	/* A malformed endpoint is a setup error now, not a reconnect loop later. */
	void *probe = zmq_socket(c->ctx, ZMQ_DEALER);
	int zero = 0;
	bool connects = probe && zmq_setsockopt(probe, ZMQ_LINGER, &zero, sizeof zero) == 0 &&
			zmq_connect(probe, c->endpoint) == 0;
	if (!connects)
		kiln_msgf(msg, msg_cap, "cannot connect to '%s': %s", c->endpoint, zmq_strerror(zmq_errno()));
	zmq_close(probe);
	if (!connects) {
		st = KILN_ERR_INVALID_ARG;
		goto fail;
	}
	const kiln_pipeline_config *pc = &cfg->pipeline;
	c->devices = kiln_worker_devices_json(pc->devices, pc->ndevices,
					      pc->cpu_threads ? pc->cpu_threads : kiln_cpu_count());
	if (!c->devices) {
		st = KILN_ERR_NOMEM;
		goto fail;
	}
	c->cfg.pipeline.report = on_report;
	c->cfg.pipeline.report_ctx = c;
	if ((st = kiln_pipeline_create(&c->cfg.pipeline, &c->pipeline, msg, msg_cap)) != KILN_OK)
		goto fail;
	*out = c;
	return KILN_OK;
fail:
	kiln_client_destroy(c);
	return st;
}

void kiln_client_destroy(kiln_client *c)
{
	if (!c)
		return;
	/* first: the pipeline reports into the records while it stops */
	kiln_pipeline_destroy(c->pipeline);
	close_socket(c, 0);
	while (c->records) {
		record *r = c->records;
		c->records = r->next;
		record_free(r);
	}
	if (c->own_ctx)
		zmq_ctx_term(c->ctx);
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	json_decref(c->devices);
	kiln_buf_free(&c->out);
	/* the secret key does not outlive the client in freed memory */
	explicit_bzero(c->secret_key, sizeof c->secret_key);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
