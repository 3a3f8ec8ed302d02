/* The dispatcher: the scheduler's side of docs/PROTOCOL.md on a ZeroMQ ROUTER socket.
 *
 * One thread owns the socket and runs a zmq_poll loop: it registers workers (`ready`,
 * with their slots as credits), hands shards to the least-loaded worker with a free slot
 * and the job's codec, renews leases from heartbeats, re-queues the shards of workers that
 * go silent for 4 heartbeat intervals or whose lease runs out, and acknowledges results
 * after kiln_jobs_complete has journaled them.
 *
 * Other threads never touch the socket. They change state through kiln_jobs (a mutex) and
 * then ring the dispatcher's doorbell, an eventfd polled beside the socket
 * (kiln_dispatch_wake, installed as the jobs' wakeup), so new jobs and cancels are acted on
 * at once rather than at the next tick. */
#ifndef KILN_SCHED_DISPATCH_H
#define KILN_SCHED_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "scheduler/jobs.h"

typedef struct kiln_dispatch kiln_dispatch;

typedef struct kiln_dispatch_config {
	const char *listen;     /* e.g. "tcp://0.0.0.0:5555"; port "*" picks a free one */
	unsigned heartbeat_ms;  /* 0: 1000 */
	unsigned lease_ms;      /* 0: 30000 */
	unsigned max_slots;     /* a worker announcing more is given this many; 0: 256 */
	void *zmq_context;      /* shared context (for inproc://), or NULL for an own one */
	const char *curve_secret_key;  /* Z85 text: CURVE server with this key; NULL: plain */
} kiln_dispatch_config;

/* Binds the socket (so the endpoint is known before the thread starts). With a CURVE key,
 * a worker that does not know the matching public key fails the handshake and is never
 * heard: it cannot announce itself, take shards or send results. */
kiln_status kiln_dispatch_create(const kiln_dispatch_config *cfg, kiln_jobs *jobs, kiln_dispatch **out);
/* The endpoint actually bound, with the port filled in. */
const char *kiln_dispatch_endpoint(const kiln_dispatch *d);
kiln_status kiln_dispatch_start(kiln_dispatch *d);
/* Rings the doorbell; safe from any thread (ctx is the kiln_dispatch). */
void kiln_dispatch_wake(void *ctx);
/* Says `bye` to the workers and joins the thread. Safe to call twice. */
void kiln_dispatch_stop(kiln_dispatch *d);
/* Stops if needed and frees; NULL is accepted. */
void kiln_dispatch_destroy(kiln_dispatch *d);

#define KILN_LATENCY_BUCKETS 12
extern const double kiln_dispatch_latency_bounds[KILN_LATENCY_BUCKETS];  /* seconds */

typedef struct kiln_dispatch_stats {
	unsigned workers;
	unsigned slots;        /* sum over workers */
	uint64_t shards_sent;
	uint64_t results;      /* applied */
	uint64_t stale_results;
	uint64_t leases_lost;
	/* shard round trip: sent to a worker until its result is journaled */
	uint64_t latency_buckets[KILN_LATENCY_BUCKETS];  /* cumulative counts, as Prometheus */
	uint64_t latency_count;
	double latency_sum;
} kiln_dispatch_stats;

void kiln_dispatch_get_stats(kiln_dispatch *d, kiln_dispatch_stats *out);

#endif
