/* The scheduler's REST API over libmicrohttpd (docs/API.md, docs/openapi.yaml): jobs,
 * their failures, cancel and retry, /healthz and Prometheus /metrics.
 *
 * Requests run on a small pool of libmicrohttpd threads and call into kiln_jobs, which
 * has its own lock; nothing here touches the dispatcher's socket. Bodies are capped
 * (413 past the cap, checked from Content-Length before reading when it is given), and
 * every route but /healthz wants "Authorization: Bearer TOKEN" when a token is set,
 * compared in constant time and never logged. */
#ifndef KILN_SCHED_HTTP_H
#define KILN_SCHED_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "scheduler/dispatch.h"
#include "scheduler/jobs.h"

typedef struct kiln_http kiln_http;

#define KILN_HTTP_DEFAULT_MAX_BODY (1u << 20)

typedef struct kiln_http_config {
	const char *address;  /* "ADDR:PORT", "[v6addr]:PORT" or ":PORT" (all interfaces); port 0 picks one */
	const char *token;    /* NULL or "": no authentication */
	size_t max_body;      /* 0: KILN_HTTP_DEFAULT_MAX_BODY */
	unsigned threads;     /* 0: 4 */
} kiln_http_config;

/* Starts serving at once. dispatch (may be NULL) feeds the worker and latency metrics. */
kiln_status kiln_http_create(const kiln_http_config *cfg, kiln_jobs *jobs, kiln_dispatch *dispatch,
			     kiln_http **out);
/* The port actually bound. */
unsigned kiln_http_port(const kiln_http *http);
/* Stops serving (waits for requests in progress) and frees; NULL is accepted. */
void kiln_http_destroy(kiln_http *http);

/* Constant-time comparison of a presented secret with the expected one: the time taken
 * depends only on the expected secret's length. Exposed for tests. */
bool kiln_http_token_equal(const char *given, const char *expected);

#endif
