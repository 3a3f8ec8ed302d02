/* Helpers for the storage and SigV4 tests: an s3rver process on loopback, a small
 * fault-injecting HTTP server on a thread, and the botocore reference signer
 * (tests/tools/sigv4_ref.py) driven through a pipe. */
#ifndef KILN_STORAGE_TESTUTIL_H
#define KILN_STORAGE_TESTUTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/sigv4.h"

/* ---- botocore reference lines (see tests/tools/sigv4_ref.py) ---- */

/* Starts a line of the given kind ('S' or 'W') in b. */
void ref_begin(kiln_buf *b, char kind);
/* Appends a tab and the hex of len bytes. */
void ref_field(kiln_buf *b, const void *data, size_t len);
void ref_field_str(kiln_buf *b, const char *s);
/* Appends a list: entries joined by \x01, name and value by \x00. */
void ref_field_pairs(kiln_buf *b, const kiln_sigv4_kv *kv, size_t count);
void ref_end(kiln_buf *b);
/* Runs the reference over all lines in input; writes one Authorization per line into
 * out[i] (cap bytes each). Returns the number of lines read back. */
size_t ref_run(const kiln_buf *input, char *out, size_t cap, size_t max_lines);

/* ---- s3rver ---- */

typedef struct s3rver {
	pid_t pid;
	int port;
	char dir[128];
	char endpoint[64];   /* http://127.0.0.1:PORT */
} s3rver;

/* Starts tools/s3rver.sh on a free port serving a fresh temporary directory, with bucket
 * created; waits until it listens. extra (may be NULL) is one more s3rver option pair. */
bool s3rver_start(s3rver *s, const char *bucket, const char *extra_opt, const char *extra_val);
/* s3rver again on its old port and data directory, after it was stopped (its output to
 * s->dir/log2); waits until it listens. */
bool s3rver_restart(s3rver *s, const char *bucket);
void s3rver_stop(s3rver *s);

/* ---- fault-injecting server ---- */

typedef enum fault_mode {
	FAULT_OK,               /* GET: "hello" (or an empty listing), PUT: 200 with an ETag */
	FAULT_FAIL_THEN_OK,     /* the first `failures` requests get `status` + code */
	FAULT_CLOSE_THEN_OK,    /* the first `failures` connections close without an answer */
	FAULT_SILENT,           /* never answers */
	FAULT_HUGE_BODY,        /* 200 with a 1 GiB body, sent until the client hangs up */
	FAULT_MULTIPART,        /* create and parts succeed, except part 2: `status` + code */
	FAULT_SLOW,             /* like FAULT_OK, after delay_ms */
} fault_mode;

#define FAULT_MAX_CONNECTIONS 256

typedef struct fault_server {
	fault_mode mode;
	int failures;
	int status;
	const char *code;       /* S3 error code in the <Error> body */
	int retry_after_s;      /* -1: no Retry-After header */
	int delay_ms;           /* FAULT_SLOW */
	int port;
	int listen_fd;
	pthread_t thread;
	atomic_bool stop;
	atomic_int requests;
	atomic_int aborts;
	atomic_int completes;
	atomic_int open_now;    /* FAULT_SLOW requests in progress (see serve) */
	atomic_int open_peak;
	pthread_t workers[FAULT_MAX_CONNECTIONS];
	int worker_count;
	pthread_mutex_t lock;
	char last_head[16384];  /* the last request's head, as received */
	kiln_buf last_body;     /* and its body (up to 1 MiB) */
} fault_server;

/* Zeroes *fs and sets the defaults (mode FAULT_OK, no Retry-After). */
void fault_init(fault_server *fs);
/* Binds 127.0.0.1:0 and serves on a thread, each connection on a thread of its own. */
bool fault_start(fault_server *fs);
void fault_stop(fault_server *fs);
/* Copies the value of header name (any case) from the last request; false if absent. */
bool fault_last_header(fault_server *fs, const char *name, char *out, size_t cap);

/* Removes a directory tree (test temporaries). */
void rm_tree(const char *path);

#endif
