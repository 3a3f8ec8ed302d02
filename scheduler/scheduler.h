/* The scheduler as one object: the journaled job store, the ZeroMQ dispatcher and the
 * REST server, started together and stopped in the order that loses nothing (REST first,
 * so no new work arrives; then the dispatcher, which says `bye` to the workers; then the
 * journal). `kiln scheduler` runs one in the foreground; tests run one in-process. */
#ifndef KILN_SCHED_SCHEDULER_H
#define KILN_SCHED_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct kiln_scheduler kiln_scheduler;

typedef struct kiln_scheduler_config {
	const char *listen;      /* ZeroMQ endpoint for workers: "tcp://ADDR:PORT" (port "*": any) */
	const char *http;        /* "ADDR:PORT" for the REST API (port 0: any) */
	const char *state_dir;   /* journal and lock */
	const char *token_file;  /* NULL: no authentication */
	unsigned heartbeat_ms;   /* 0: 1000 */
	unsigned lease_ms;       /* 0: 30000 */
	uint64_t compact_bytes;  /* journal compaction threshold; 0: default */
	size_t max_items;        /* per job; 0: default */
	void *zmq_context;       /* NULL: own context; shared for inproc:// (kiln run) */
	const char *curve_secret_key;  /* Z85 text (common/curve.h): workers must use CURVE
					* with the matching public key; NULL: plain */
} kiln_scheduler_config;

/* Replays the journal, binds both endpoints and starts serving. */
kiln_status kiln_scheduler_create(const kiln_scheduler_config *cfg, kiln_scheduler **out);
/* Blocks until kiln_scheduler_stop (e.g. from a signal handler: it is async-signal-safe).
 * Meanwhile it returns the heap's free pages to the kernel every 10 s (malloc_trim). */
void kiln_scheduler_run(kiln_scheduler *s);
void kiln_scheduler_stop(kiln_scheduler *s);
/* Stops everything and frees; NULL is accepted. */
void kiln_scheduler_destroy(kiln_scheduler *s);

/* What was bound, for tests and logs. */
const char *kiln_scheduler_endpoint(const kiln_scheduler *s);
unsigned kiln_scheduler_http_port(const kiln_scheduler *s);

/* Reads a token file: the first line, surrounding whitespace removed; an empty token or a
 * file over 4 KiB is KILN_ERR_INVALID_ARG. */
kiln_status kiln_read_token_file(const char *path, char *out, size_t cap);

#endif
