/* Helpers for the scheduler tests (test_sched_*.c): simulated workers that speak
 * docs/PROTOCOL.md over real DEALER sockets, a small libcurl HTTP client, temporary state
 * directories and free loopback ports. */
#ifndef KILN_TEST_SCHED_SIM_H
#define KILN_TEST_SCHED_SIM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/proto.h"

/* A new empty directory under /tmp (prefix names the test), removed by sim_rmdir. */
void sim_mkdtemp(char *out, size_t cap, const char *prefix);
void sim_rmdir(const char *dir);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
unsigned sim_free_port(void);

/* One HTTP request. headers: NULL-terminated "Name: value" lines, or NULL. Returns the
 * status (0 on transport failure); *json (if given) receives the parsed body or NULL;
 * body_out (if given) the raw body; location (if given) the Location header or "". */
long sim_http(const char *method, const char *url, const char *body, const char *const *headers,
	      json_t **json, char *body_out, size_t body_cap, char *location, size_t loc_cap);

typedef struct sim_worker sim_worker;

/* Connects a DEALER with identity name to endpoint and sends `ready` with slots and one
 * codec ("bc1"); held: NULL or a JSON array of shard ids (consumed). */
sim_worker *sim_worker_new(const char *endpoint, const char *name, unsigned slots, json_t *held);
void sim_worker_free(sim_worker *w);  /* closes without a bye: a crash, for the scheduler */
void sim_send(sim_worker *w, json_t *msg);  /* consumes msg */
/* The next message of type want within timeout_ms, skipping (and counting) others;
 * NULL on timeout. Every received message is validated with kiln_proto_parse. */
json_t *sim_recv(sim_worker *w, kiln_msg_type want, int timeout_ms);
/* A heartbeat naming the given shards (a JSON array, consumed; NULL: none). */
void sim_heartbeat(sim_worker *w, json_t *active);
/* Answers shard: every item "ok" (bytes 100, bytes_in 1000), or status "error" with error. */
void sim_result(sim_worker *w, const json_t *shard, const char *error);
/* Same, with the lease number given (for late results). */
void sim_result_lease(sim_worker *w, const json_t *shard, long long lease, const char *error);
/* A message from the scheduler (size bytes), parsed with kiln_proto_parse: asserts that
 * it is valid. */
json_t *sim_parse(const void *data, size_t size, kiln_msg_type *type);
/* Messages of another type seen while waiting in sim_recv. */
unsigned sim_skipped(const sim_worker *w, kiln_msg_type type);

#endif
