/* The ROUTER side of the wire protocol: workers, credits, leases, heartbeats; see
 * dispatch.h. Every worker record and lease here belongs to the dispatch thread alone;
 * only the statistics are shared (under stats_lock). */
#define _GNU_SOURCE  /* pthread_setname_np */
#include "scheduler/dispatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/buf.h"
#include "common/curve.h"
#include "common/log.h"
#include "common/pool.h"
#include "common/proto.h"

#define IDENT_MAX 255        /* ZeroMQ's limit on routing ids */
#define DEAD_INTERVALS 4     /* heartbeats of silence that mean death (PROTOCOL.md) */
#define RECV_BURST 256       /* messages per wake-up, so timers keep their time */
#define MAX_CANCELS 64       /* cancels announced per wake-up */

const double kiln_dispatch_latency_bounds[KILN_LATENCY_BUCKETS] = {
	0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

typedef struct lease_rec {
	kiln_lease lease;
	char shard[32];
	double deadline;
	double sent;
} lease_rec;

typedef struct pending_result {
	uint8_t ident[IDENT_MAX];
	size_t ident_len;
	json_t *msg;
} pending_result;

typedef struct worker {
	uint8_t ident[IDENT_MAX];
	size_t ident_len;
	char name[64];
	unsigned slots;
	json_t *codecs;
	lease_rec *leases;  /* slots entries; nleases in use: a lease is a used credit */
	size_t nleases;
	double last_seen, last_sent;
	bool idle;          /* no shard it can take was found this round */
} worker;

struct kiln_dispatch {
	kiln_dispatch_config cfg;
	kiln_jobs *jobs;
	void *ctx;
	bool own_ctx;
	void *sock;
	int bell;           /* eventfd */
	char endpoint[256];
	pthread_t thread;
	bool started;
	atomic_bool stopping;
	double resume_at;   /* no shards are handed out before this time (see kiln_dispatch_start) */
	worker **workers;
	size_t nworkers, workers_cap;
	kiln_buf out;       /* encoded outgoing message */
	/* results received in this burst, journaled together (one fsync) by flush_results
	 * before anything else from the socket is acted on, so the order of messages holds */
	pending_result pending[RECV_BURST];
	size_t npending;
	pthread_mutex_t stats_lock;
	kiln_dispatch_stats stats;
};

static void worker_free(worker *w)
{
	if (!w)
		return;
	json_decref(w->codecs);
	free(w->leases);
	free(w);
}

/* ---- sending ---- */

/* Sends msg (consumed) to w. A worker that is gone (EHOSTUNREACH under
 * ZMQ_ROUTER_MANDATORY) or whose queue is full reports failure; the caller decides. */
static kiln_status send_to(kiln_dispatch *d, worker *w, json_t *msg)
{
	kiln_status st = msg ? kiln_proto_encode(msg, &d->out) : KILN_ERR_NOMEM;
	json_decref(msg);
	if (st != KILN_OK)
		return st;
	if (zmq_send(d->sock, w->ident, w->ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(d->sock, d->out.data, d->out.len, ZMQ_DONTWAIT) < 0)
		return KILN_ERR_IO;
	w->last_sent = kiln_now_s();
	return KILN_OK;
}

/* Sends the frame already in d->out. */
static kiln_status send_out(kiln_dispatch *d, const uint8_t *ident, size_t len)
{
	if (zmq_send(d->sock, ident, len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(d->sock, d->out.data, d->out.len, ZMQ_DONTWAIT) < 0)
		return KILN_ERR_IO;
	return KILN_OK;
}

static void send_ident(kiln_dispatch *d, const uint8_t *ident, size_t len, json_t *msg)
{
	worker tmp = {.ident_len = len};
	memcpy(tmp.ident, ident, len);
	(void)send_to(d, &tmp, msg);
}

/* ---- workers ---- */

static worker *find_worker(kiln_dispatch *d, const uint8_t *ident, size_t len, size_t *index)
{
	for (size_t i = 0; i < d->nworkers; i++)
		if (d->workers[i]->ident_len == len && memcmp(d->workers[i]->ident, ident, len) == 0) {
			if (index)
				*index = i;
			return d->workers[i];
		}
	return NULL;
}

static void update_worker_stats(kiln_dispatch *d)
{
	unsigned slots = 0;
	for (size_t i = 0; i < d->nworkers; i++)
		slots += d->workers[i]->slots;
	pthread_mutex_lock(&d->stats_lock);
	d->stats.workers = (unsigned)d->nworkers;
	d->stats.slots = slots;
	pthread_mutex_unlock(&d->stats_lock);
}

/* Ends lease k of w without a result and returns its credit. */
static void lose_lease(kiln_dispatch *d, worker *w, size_t k, const char *why)
{
	char reason[160];
	snprintf(reason, sizeof reason, "%s (worker %s)", why, w->name);
	kiln_status st = kiln_jobs_release(d->jobs, &w->leases[k].lease, reason);
	if (st != KILN_OK)
		KILN_ERROR("could not record a lost lease", "shard=%s error=\"%s\"", w->leases[k].shard,
			   kiln_strerror(st));
	w->leases[k] = w->leases[--w->nleases];
	pthread_mutex_lock(&d->stats_lock);
	d->stats.leases_lost++;
	pthread_mutex_unlock(&d->stats_lock);
}

static void drop_worker(kiln_dispatch *d, size_t index, const char *why)
{
	worker *w = d->workers[index];
	KILN_WARN("worker gone; its shards are queued again", "worker=%s reason=\"%s\" shards=%zu",
		  w->name, why, w->nleases);
	while (w->nleases)
		lose_lease(d, w, w->nleases - 1, why);
	worker_free(w);
	d->workers[index] = d->workers[--d->nworkers];
	update_worker_stats(d);
}

static bool listed(const json_t *ids, const char *shard)
{
	size_t i;
	const json_t *v;
	json_array_foreach(ids, i, v)
		if (strcmp(json_string_value(v), shard) == 0)
			return true;
	return false;
}

static void on_ready(kiln_dispatch *d, const uint8_t *ident, size_t len, const json_t *msg, double now)
{
	size_t slots = (size_t)json_integer_value(json_object_get(msg, "slots"));
	if (slots > d->cfg.max_slots)
		slots = d->cfg.max_slots;
	worker *w = find_worker(d, ident, len, NULL);
	if (w) {
		/* A reconnect: shards whose results it holds stay leased (the results follow);
		 * the others it no longer has. */
		const json_t *held = json_object_get(msg, "held");
		for (size_t k = w->nleases; k-- > 0;)
			if (!listed(held, w->leases[k].shard))
				lose_lease(d, w, k, "worker reconnected without it");
		if (slots < w->nleases)
			slots = w->nleases;  /* never fewer credits than leases it holds */
	} else {
		if (d->nworkers == d->workers_cap) {
			size_t cap = d->workers_cap ? d->workers_cap * 2 : 16;
			worker **grown = kiln_realloc(d->workers, cap * sizeof *grown);
			if (!grown)
				return;
			d->workers = grown;
			d->workers_cap = cap;
		}
		w = kiln_calloc(1, sizeof *w);
		if (!w)
			return;
		memcpy(w->ident, ident, len);
		w->ident_len = len;
		d->workers[d->nworkers++] = w;
	}
	lease_rec *leases = kiln_realloc(w->leases, (slots ? slots : 1) * sizeof *leases);
	if (!leases)
		return;
	w->leases = leases;
	w->slots = (unsigned)slots;
	snprintf(w->name, sizeof w->name, "%s", json_string_value(json_object_get(msg, "worker")));
	json_decref(w->codecs);
	w->codecs = json_incref(json_object_get(msg, "codecs"));
	w->last_seen = now;
	KILN_INFO("worker ready", "worker=%s slots=%u held=%zu", w->name, w->slots, w->nleases);
	update_worker_stats(d);
}

static void observe_latency(kiln_dispatch *d, double seconds)
{
	pthread_mutex_lock(&d->stats_lock);
	for (int b = 0; b < KILN_LATENCY_BUCKETS; b++)
		if (seconds <= kiln_dispatch_latency_bounds[b])
			d->stats.latency_buckets[b]++;
	d->stats.latency_count++;
	d->stats.latency_sum += seconds;
	d->stats.results++;
	pthread_mutex_unlock(&d->stats_lock);
}

/* Journals the results waiting in d->pending (one fsync for all), then returns their
 * credits, records their latency and acknowledges them. A result that could not be
 * journaled is not acknowledged: the worker keeps it and sends it again. */
static void flush_results(kiln_dispatch *d)
{
	size_t n = d->npending;
	if (n == 0)
		return;
	d->npending = 0;
	const json_t *msgs[RECV_BURST];
	bool applied[RECV_BURST];
	kiln_lease leases[RECV_BURST];
	for (size_t r = 0; r < n; r++)
		msgs[r] = d->pending[r].msg;
	kiln_status st = kiln_jobs_complete_many(d->jobs, msgs, n, applied, leases);
	for (size_t r = 0; r < n; r++) {
		pending_result *p = &d->pending[r];
		const char *shard = json_string_value(json_object_get(p->msg, "shard"));
		if (st != KILN_OK) {
			KILN_ERROR("could not journal a result", "shard=%s error=\"%s\"", shard, kiln_strerror(st));
			json_decref(p->msg);
			continue;
		}
		worker *w = find_worker(d, p->ident, p->ident_len, NULL);
		if (applied[r] && w) {
			for (size_t k = 0; k < w->nleases; k++)
				if (w->leases[k].lease.lease == leases[r].lease) {
					observe_latency(d, kiln_now_s() - w->leases[k].sent);
					w->leases[k] = w->leases[--w->nleases];
					break;
				}
		} else if (!applied[r]) {
			KILN_DEBUG("late result acknowledged and ignored", "shard=%s", shard);
			pthread_mutex_lock(&d->stats_lock);
			d->stats.stale_results++;
			pthread_mutex_unlock(&d->stats_lock);
		}
		/* written as text: the shard id is the validated string the worker sent */
		if (kiln_proto_write_ack(&d->out, shard) == KILN_OK &&
		    send_out(d, p->ident, p->ident_len) == KILN_OK && w)
			w->last_sent = kiln_now_s();
		json_decref(p->msg);
	}
}

static void on_result(kiln_dispatch *d, const uint8_t *ident, size_t len, json_t *msg)
{
	pending_result *p = &d->pending[d->npending++];
	memcpy(p->ident, ident, len);
	p->ident_len = len;
	p->msg = json_incref(msg);
	if (d->npending == RECV_BURST)
		flush_results(d);
}

static void on_heartbeat(worker *w, const json_t *msg, double now, unsigned lease_ms)
{
	const json_t *active = json_object_get(msg, "active");
	for (size_t k = 0; k < w->nleases; k++)
		if (listed(active, w->leases[k].shard))
			w->leases[k].deadline = now + lease_ms / 1000.0;
}

/* Another protocol version: a `ready` is answered with `bye`, anything else dropped. */
static void on_other_version(kiln_dispatch *d, const uint8_t *ident, size_t len, const void *data,
			     size_t size)
{
	json_t *root = json_loadb(data, size, 0, NULL);
	const char *type = json_string_value(json_object_get(root, "type"));
	if (type && strcmp(type, "ready") == 0)
		send_ident(d, ident, len, kiln_proto_new(KILN_MSG_BYE));
	json_decref(root);
}

static void handle_message(kiln_dispatch *d, const uint8_t *ident, size_t len, const void *data,
			   size_t size)
{
	char err[200], who[80];
	json_t *msg;
	kiln_msg_type type;
	double now = kiln_now_s();
	kiln_status st = kiln_proto_parse(data, size, &msg, &type, err, sizeof err);
	worker *w = find_worker(d, ident, len, NULL);
	if (w)
		w->last_seen = now;  /* any message is a sign of life, even a bad one */
	snprintf(who, sizeof who, "%s", w ? w->name : "(unregistered)");
	if (st != KILN_OK) {
		KILN_WARN("message refused", "worker=%s reason=\"%s\"", who, err);
		if (st == KILN_ERR_UNSUPPORTED)
			on_other_version(d, ident, len, data, size);
		return;
	}
	if (type != KILN_MSG_RESULT)
		flush_results(d);  /* what came before this message is acted on first */
	switch (type) {
	case KILN_MSG_READY: on_ready(d, ident, len, msg, now); break;
	case KILN_MSG_RESULT: on_result(d, ident, len, msg); break;
	case KILN_MSG_HEARTBEAT:
		if (w)
			on_heartbeat(w, msg, now, d->cfg.lease_ms);
		else
			/* A worker we do not know: its DEALER reconnected on its own to a restarted
			 * scheduler, or we declared it dead while it was frozen. Without an answer it
			 * would wait out 4 silent heartbeats before announcing itself (and the
			 * results it holds); `bye` makes it send `ready` at once. */
			send_ident(d, ident, len, kiln_proto_new(KILN_MSG_BYE));
		break;
	case KILN_MSG_BYE: {
		size_t index;
		if (find_worker(d, ident, len, &index))
			drop_worker(d, index, "said bye");
		break;
	}
	default:
		KILN_WARN("message type not expected from a worker", "worker=%s type=%s", who,
			  kiln_msg_type_name(type));
	}
	json_decref(msg);
}

/* Reads every waiting message (up to a burst) without blocking. */
static void receive(kiln_dispatch *d)
{
	for (int n = 0; n < RECV_BURST; n++) {
		zmq_msg_t ident, body;
		zmq_msg_init(&ident);
		zmq_msg_init(&body);
		bool got = zmq_msg_recv(&ident, d->sock, ZMQ_DONTWAIT) >= 0;
		if (got && zmq_msg_more(&ident) && zmq_msg_recv(&body, d->sock, ZMQ_DONTWAIT) >= 0) {
			if (zmq_msg_more(&body)) {
				KILN_WARN("message with extra frames dropped", NULL);
			} else if (zmq_msg_size(&ident) <= IDENT_MAX) {
				handle_message(d, zmq_msg_data(&ident), zmq_msg_size(&ident), zmq_msg_data(&body),
					       zmq_msg_size(&body));
			}
			/* drain frames of a malformed multipart message */
			while (zmq_msg_more(&body) && zmq_msg_recv(&body, d->sock, ZMQ_DONTWAIT) >= 0)
				;
		}
		zmq_msg_close(&ident);
		zmq_msg_close(&body);
		if (!got)
			break;
	}
	flush_results(d);
}

/* ---- timers and dispatch ---- */

static void check_liveness(kiln_dispatch *d, double now)
{
	double dead_after = DEAD_INTERVALS * d->cfg.heartbeat_ms / 1000.0;
	for (size_t i = d->nworkers; i-- > 0;) {
		worker *w = d->workers[i];
		if (now - w->last_seen > dead_after) {
			drop_worker(d, i, "silent for 4 heartbeat intervals");
			continue;
		}
		for (size_t k = w->nleases; k-- > 0;)
			if (now > w->leases[k].deadline)
				lose_lease(d, w, k, "lease expired");
	}
}

static void announce_cancels(kiln_dispatch *d)
{
	uint32_t jobs[MAX_CANCELS];
	size_t n = kiln_jobs_take_cancelled(d->jobs, jobs, MAX_CANCELS);
	for (size_t c = 0; c < n; c++) {
		char id[16];
		kiln_jobs_format_id(jobs[c], UINT32_MAX, id, sizeof id);
		for (size_t i = 0; i < d->nworkers; i++) {
			worker *w = d->workers[i];
			bool holds = false;
			for (size_t k = 0; k < w->nleases && !holds; k++)
				holds = w->leases[k].lease.job == jobs[c];
			if (!holds)
				continue;
			json_t *msg = kiln_proto_new(KILN_MSG_CANCEL);
			if (msg)
				json_object_set_new(msg, "job", json_string(id));
			if (send_to(d, w, msg) != KILN_OK)
				KILN_WARN("could not send cancel", "worker=%s job=%s", w->name, id);
		}
	}
}

/* The worker with a free slot and the lowest share of its slots in use. */
static worker *least_loaded(kiln_dispatch *d)
{
	worker *best = NULL;
	for (size_t i = 0; i < d->nworkers; i++) {
		worker *w = d->workers[i];
		if (w->idle || w->nleases >= w->slots)
			continue;
		/* compare nleases/slots without division: a/b < c/e  <=>  a*e < c*b */
		if (!best || (uint64_t)w->nleases * best->slots < (uint64_t)best->nleases * w->slots)
			best = w;
	}
	return best;
}

static void dispatch_shards(kiln_dispatch *d)
{
	for (size_t i = 0; i < d->nworkers; i++)
		d->workers[i]->idle = false;
	worker *w;
	while ((w = least_loaded(d))) {
		kiln_lease lease;
		kiln_status st = kiln_jobs_next_shard_text(d->jobs, w->codecs, &lease, &d->out);
		if (st != KILN_OK) {
			/* nothing for its codecs (others may still get work), or a shard that could
			 * not be written, whose lease kiln_jobs has already released */
			if (st != KILN_ERR_NOT_FOUND) {
				KILN_WARN("could not write a shard message", "worker=%s error=\"%s\"", w->name,
					  kiln_strerror(st));
				pthread_mutex_lock(&d->stats_lock);
				d->stats.leases_lost++;
				pthread_mutex_unlock(&d->stats_lock);
			}
			w->idle = true;
			continue;
		}
		lease_rec *rec = &w->leases[w->nleases++];
		rec->lease = lease;
		kiln_jobs_format_id(lease.job, lease.shard, rec->shard, sizeof rec->shard);
		rec->sent = kiln_now_s();
		rec->deadline = rec->sent + d->cfg.lease_ms / 1000.0;
		st = send_out(d, w->ident, w->ident_len);
		if (st != KILN_OK) {
			lose_lease(d, w, w->nleases - 1, "could not send the shard");
			w->idle = true;
			continue;
		}
		w->last_sent = rec->sent;
		pthread_mutex_lock(&d->stats_lock);
		d->stats.shards_sent++;
		pthread_mutex_unlock(&d->stats_lock);
	}
}

static void send_heartbeats(kiln_dispatch *d, double now)
{
	double interval = d->cfg.heartbeat_ms / 1000.0;
	for (size_t i = 0; i < d->nworkers; i++) {
		worker *w = d->workers[i];
		if (now - w->last_sent >= interval)
			(void)send_to(d, w, kiln_proto_new(KILN_MSG_HEARTBEAT));
	}
}

static void *loop(void *arg)
{
	kiln_dispatch *d = arg;
	pthread_setname_np(pthread_self(), "kiln-dispatch");  /* for top -H and perf */
	/* a quarter interval keeps heartbeats and death detection within 25% of their time */
	long tick = d->cfg.heartbeat_ms / 4 ? d->cfg.heartbeat_ms / 4 : 1;
	while (!atomic_load(&d->stopping)) {
		zmq_pollitem_t items[2] = {{d->sock, 0, ZMQ_POLLIN, 0}, {NULL, d->bell, ZMQ_POLLIN, 0}};
		if (zmq_poll(items, 2, tick) < 0 && zmq_errno() != EINTR) {
			KILN_ERROR("zmq_poll failed", "error=\"%s\"", zmq_strerror(zmq_errno()));
			break;
		}
		if (items[1].revents & ZMQ_POLLIN) {
			uint64_t v;
			if (read(d->bell, &v, sizeof v) < 0 && errno != EAGAIN)
				KILN_WARN("doorbell read failed", "errno=%d", errno);
		}
		if (items[0].revents & ZMQ_POLLIN)
			receive(d);
		double now = kiln_now_s();
		check_liveness(d, now);
		announce_cancels(d);
		if (now >= d->resume_at)
			dispatch_shards(d);
		send_heartbeats(d, now);
	}
	for (size_t i = 0; i < d->nworkers; i++)
		(void)send_to(d, d->workers[i], kiln_proto_new(KILN_MSG_BYE));
	return NULL;
}

/* ---- lifecycle ---- */

kiln_status kiln_dispatch_create(const kiln_dispatch_config *cfg, kiln_jobs *jobs, kiln_dispatch **out)
{
	*out = NULL;
	if (!cfg || !cfg->listen || !jobs)
		return KILN_ERR_INVALID_ARG;
	kiln_dispatch *d = kiln_calloc(1, sizeof *d);
	if (!d)
		return KILN_ERR_NOMEM;
	d->cfg = *cfg;
	d->cfg.listen = NULL;
	d->cfg.curve_secret_key = NULL;  /* used once, below; the caller owns (and wipes) it */
	if (!d->cfg.heartbeat_ms)
		d->cfg.heartbeat_ms = 1000;
	if (!d->cfg.lease_ms)
		d->cfg.lease_ms = 30000;
	if (!d->cfg.max_slots)
		d->cfg.max_slots = 256;
	d->jobs = jobs;
	d->bell = -1;
	pthread_mutex_init(&d->stats_lock, NULL);
	kiln_buf_init(&d->out, KILN_PROTO_MAX_FRAME);
	kiln_status st = KILN_ERR_IO;
	d->ctx = cfg->zmq_context;
	if (!d->ctx) {
		d->ctx = zmq_ctx_new();
		d->own_ctx = true;
		if (!d->ctx)
			goto fail;
	}
	d->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	d->sock = zmq_socket(d->ctx, ZMQ_ROUTER);
	if (d->bell < 0 || !d->sock)
		goto fail;
	int one = 1, zero = 0;
	int64_t maxmsg = KILN_PROTO_MAX_FRAME;
	/* MANDATORY: a send to a vanished worker fails instead of vanishing silently.
	 * HANDOVER: a worker that reconnects under its id takes over from its stale pipe. */
	zmq_setsockopt(d->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
	zmq_setsockopt(d->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
	zmq_setsockopt(d->sock, ZMQ_LINGER, &zero, sizeof zero);
	/* an oversized frame from a peer is refused by ZeroMQ before it is buffered */
	zmq_setsockopt(d->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
	if (cfg->curve_secret_key) {
		st = KILN_ERR_INVALID_ARG;
		if (!zmq_has("curve")) {
			KILN_ERROR("CURVE was asked for, but this libzmq has no CURVE support", NULL);
			goto fail;
		}
		/* both before bind: they apply to the connections the socket accepts from now on */
		if (strlen(cfg->curve_secret_key) != KILN_CURVE_KEY_LEN ||
		    zmq_setsockopt(d->sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
		    zmq_setsockopt(d->sock, ZMQ_CURVE_SECRETKEY, cfg->curve_secret_key, KILN_CURVE_KEY_LEN + 1) != 0) {
			KILN_ERROR("the CURVE secret key is not 40 characters of Z85 text", NULL);
			goto fail;
		}
	}
	if (zmq_bind(d->sock, cfg->listen) != 0) {
		KILN_ERROR("cannot listen", "endpoint=%s error=\"%s\"", cfg->listen, zmq_strerror(zmq_errno()));
		st = KILN_ERR_INVALID_ARG;
		goto fail;
	}
	size_t len = sizeof d->endpoint;
	if (zmq_getsockopt(d->sock, ZMQ_LAST_ENDPOINT, d->endpoint, &len) != 0)
		snprintf(d->endpoint, sizeof d->endpoint, "%s", cfg->listen);
	kiln_jobs_set_wakeup(jobs, kiln_dispatch_wake, d);
	*out = d;
	return KILN_OK;
fail:
	kiln_dispatch_destroy(d);
	return st;
}

const char *kiln_dispatch_endpoint(const kiln_dispatch *d)
{
	return d->endpoint;
}

kiln_status kiln_dispatch_start(kiln_dispatch *d)
{
	if (d->started)
		return KILN_ERR_INVALID_ARG;
	/* Resuming unfinished work after a restart: workers that held results across it need a
	 * moment to reconnect and deliver them (their next heartbeat is answered with `bye`,
	 * then `ready` and the results follow). Handing their shards to whoever registers first
	 * would redo those items (kiln_jobs_complete takes the held results even then, but the
	 * work is done twice). Three heartbeat intervals cover one missed heartbeat and the
	 * reconnect backoff; a scheduler that starts with nothing pending waits for nothing. */
	kiln_jobs_stats js;
	kiln_jobs_get_stats(d->jobs, &js);
	if (js.items_pending > 0)
		d->resume_at = kiln_now_s() + 3.0 * d->cfg.heartbeat_ms / 1000.0;
	if (pthread_create(&d->thread, NULL, loop, d) != 0)
		return KILN_ERR_NOMEM;
	kiln_thread_name(d->thread, "kiln-dispatch", 0);
	d->started = true;
	return KILN_OK;
}

void kiln_dispatch_wake(void *ctx)
{
	kiln_dispatch *d = ctx;
	uint64_t one = 1;
	/* EAGAIN means the counter is already non-zero: the bell is ringing anyway */
	if (write(d->bell, &one, sizeof one) < 0 && errno != EAGAIN)
		KILN_WARN("doorbell write failed", "errno=%d", errno);
}

void kiln_dispatch_stop(kiln_dispatch *d)
{
	if (!d || !d->started)
		return;
	atomic_store(&d->stopping, true);
	kiln_dispatch_wake(d);
	pthread_join(d->thread, NULL);
	d->started = false;
}

void kiln_dispatch_destroy(kiln_dispatch *d)
{
	if (!d)
		return;
	kiln_dispatch_stop(d);
	if (d->jobs)
		kiln_jobs_set_wakeup(d->jobs, NULL, NULL);
	for (size_t i = 0; i < d->nworkers; i++)
		worker_free(d->workers[i]);
	free(d->workers);
	if (d->sock)
		zmq_close(d->sock);
	if (d->own_ctx && d->ctx)
		zmq_ctx_term(d->ctx);
	if (d->bell >= 0)
		close(d->bell);
	kiln_buf_free(&d->out);
	pthread_mutex_destroy(&d->stats_lock);
	free(d);
}

void kiln_dispatch_get_stats(kiln_dispatch *d, kiln_dispatch_stats *out)
{
	pthread_mutex_lock(&d->stats_lock);
	*out = d->stats;
	pthread_mutex_unlock(&d->stats_lock);
}
