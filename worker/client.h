/* The worker's side of the wire protocol (docs/PROTOCOL.md): a ZeroMQ DEALER connected to
 * the scheduler's ROUTER. It announces the worker (READY with devices, codecs, slots),
 * feeds shards to the pipeline, sends one result per shard and keeps it until the
 * scheduler acks it, heartbeats every interval, and when the scheduler falls silent
 * re-creates its socket with backoff, announces itself again with the results it holds,
 * and delivers them. kiln_client_stop (signal-safe) lets shards in progress finish, hands
 * back the rest with `bye`, and makes kiln_client_run return. */
#ifndef KILN_WORKER_CLIENT_H
#define KILN_WORKER_CLIENT_H

#include <stddef.h>

#include "common/curve.h"
#include "common/error.h"
#include "worker/pipeline.h"

typedef struct kiln_client_config {
	const char *endpoint;          /* tcp://HOST:PORT (inproc:// with zmq_context) */
	const char *worker_id;         /* socket identity; NULL: hostname-pid */
	unsigned slots;                /* credits announced in READY; 0: 8 a GPU, 2 a CPU device */
	unsigned heartbeat_ms;         /* (1000) */
	unsigned liveness;             /* silent intervals after which the scheduler is dead (4) */
	unsigned reconnect_min_ms;     /* first wait before a new socket, doubling (100) */
	unsigned reconnect_max_ms;     /* (5000) */
	unsigned drain_ms;             /* on stop: time for shards in progress to finish (30000) */
	const char *curve_server_key;  /* Z85 text; NULL: no CURVE */
	const char *curve_secret_key;  /* Z85 text of this worker's secret key (with server key) */
	void *zmq_context;             /* NULL: the client makes its own; else borrowed */
	kiln_pipeline_config pipeline; /* its report callback is the client's own */
} kiln_client_config;

void kiln_client_config_init(kiln_client_config *cfg);

typedef struct kiln_client kiln_client;

/* Validates the settings, makes the socket identity and starts the pipeline (no network
 * traffic yet). msg (may be NULL) receives a reason on failure. */
kiln_status kiln_client_create(const kiln_client_config *cfg, kiln_client **out, char *msg,
			       size_t msg_cap);
/* Stops the pipeline and frees everything. NULL is accepted. */
void kiln_client_destroy(kiln_client *c);

/* Talks to the scheduler until kiln_client_stop; returns KILN_OK after an orderly stop. */
kiln_status kiln_client_run(kiln_client *c);

/* Asks run to stop: the first call drains (up to drain_ms), a second hands back at once.
 * Safe from a signal handler and from any thread. */
void kiln_client_stop(kiln_client *c);

/* The socket identity in use (hostname-pid unless configured). */
const char *kiln_client_id(const kiln_client *c);

#endif
