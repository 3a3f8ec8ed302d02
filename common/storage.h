/* Object storage for inputs and outputs: local files (`file:///abs/path` or a plain path)
 * and S3-compatible services (`s3://bucket/key`, through libcurl, signed with SigV4).
 *
 * One handle serves both; it keeps the S3 connections alive between calls, so create it
 * once per thread and reuse it (a handle is not safe to share between threads without a
 * lock). Every call reports a kiln_status and, when given a message buffer, a line that
 * says why (the HTTP status and S3 error code for S3 failures); messages and log lines
 * name buckets and keys, never credentials.
 *
 * Outputs are atomic: a file is written under a temporary name and renamed; an S3 object
 * is one PUT or a completed multipart upload (aborted on failure). Anything read is capped
 * by the caller's kiln_buf. Transient S3 failures (timeouts, connection errors, 429, 5xx)
 * are retried with exponential backoff and jitter, honouring Retry-After. */
#ifndef KILN_STORAGE_H
#define KILN_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

typedef struct kiln_storage kiln_storage;

typedef enum kiln_s3_addressing {
	KILN_S3_ADDRESSING_AUTO,          /* path-style with a custom endpoint, else virtual-host */
	KILN_S3_ADDRESSING_PATH,          /* http://endpoint/bucket/key */
	KILN_S3_ADDRESSING_VIRTUAL_HOST,  /* http://bucket.endpoint/key */
} kiln_s3_addressing;

#define KILN_S3_MIN_PART_SIZE ((size_t)5 << 20)  /* S3's minimum for all parts but the last */

/* Settings; kiln_storage_config_init gives the defaults. NULL strings are taken from the
 * environment when the handle is created:
 *   endpoint  $AWS_ENDPOINT_URL_S3, then $AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com
 *   region    $AWS_REGION, then $AWS_DEFAULT_REGION, else us-east-1
 *   keys      $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN; when
 *             access_key_id is set here, the secret and token come from here as well.
 * Without an access key, S3 requests are sent unsigned (public buckets). */
typedef struct kiln_storage_config {
	const char *endpoint;           /* "http[s]://host[:port]" */
	const char *region;
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token;
	kiln_s3_addressing addressing;
	size_t multipart_threshold;     /* objects larger than this are uploaded in parts (8 MiB) */
	size_t part_size;               /* >= KILN_S3_MIN_PART_SIZE (8 MiB); grown past 10000 parts */
	unsigned concurrency;           /* HTTP requests in flight at once in a batch (8) */
	unsigned max_attempts;          /* tries per request, the first included (5) */
	unsigned backoff_base_ms;       /* first retry waits up to this, doubling each time (100) */
	unsigned backoff_max_ms;        /* cap on one wait, Retry-After included (20000) */
	uint64_t jitter_seed;           /* 0: seeded from the clock; tests set it to repeat */
	long connect_timeout_ms;        /* (10000) */
	long request_timeout_ms;        /* whole request, per attempt; 0 = none (0) */
	long stall_timeout_s;           /* give up on a transfer idle this long (30) */
	size_t max_response_body;       /* cap on listing and other XML responses (8 MiB) */
	unsigned list_page_size;        /* max-keys per ListObjectsV2 page; 0 = server default */
} kiln_storage_config;

void kiln_storage_config_init(kiln_storage_config *cfg);

/* Creates a handle; cfg may be NULL for the defaults. Fails with KILN_ERR_INVALID_ARG (and
 * a message) on a bad setting, e.g. a malformed endpoint or a part size under 5 MiB. */
kiln_status kiln_storage_create(const kiln_storage_config *cfg, kiln_storage **out, char *msg,
				size_t msg_cap);
/* Closes connections and wipes the credentials. NULL is accepted. */
void kiln_storage_destroy(kiln_storage *st);

/* Reads the whole object into out, replacing its contents; KILN_ERR_TOO_LARGE when the
 * object is larger than out->max, KILN_ERR_NOT_FOUND when it does not exist.
 * msg (msg_cap bytes, may be NULL) receives a reason on failure and "" on success. */
kiln_status kiln_storage_get(kiln_storage *st, const char *uri, kiln_buf *out, char *msg,
			     size_t msg_cap);
/* Writes the object atomically; for files, missing parent directories are created. */
kiln_status kiln_storage_put(kiln_storage *st, const char *uri, const void *data, size_t size,
			     char *msg, size_t msg_cap);
/* The object's size; KILN_ERR_NOT_FOUND when there is none (a directory is not an object). */
kiln_status kiln_storage_stat(kiln_storage *st, const char *uri, uint64_t *size, char *msg,
			      size_t msg_cap);
/* kiln_storage_stat that answers KILN_ERR_NOT_FOUND with *exists = false and KILN_OK. */
kiln_status kiln_storage_exists(kiln_storage *st, const char *uri, bool *exists, char *msg,
				size_t msg_cap);

typedef struct kiln_storage_entry {
	const char *uri;   /* usable with kiln_storage_get: "s3://bucket/key", or a plain path */
	const char *name;  /* the part after the listed prefix */
	uint64_t size;
} kiln_storage_entry;

/* Called once per object, in byte order of the full names; a status other than KILN_OK
 * stops the listing and is returned by kiln_storage_list. */
typedef kiln_status (*kiln_storage_list_fn)(void *ctx, const kiln_storage_entry *entry);

/* Lists the objects whose names start with prefix, as S3 does ("s3://b/img/" lists a
 * folder; "s3://b/img" also matches "img2/x"). A file prefix that names a directory lists
 * that directory; files are found recursively, directory symlinks are not followed, and
 * hidden names (".x", where kiln_file_write_atomic keeps its temporaries) are skipped.
 * glob (NULL: all) is an fnmatch(3) pattern on the last segment of each name. A missing
 * local directory is KILN_ERR_NOT_FOUND. */
kiln_status kiln_storage_list(kiln_storage *st, const char *prefix, const char *glob,
			      kiln_storage_list_fn fn, void *ctx, char *msg, size_t msg_cap);

#define KILN_STORAGE_MSG_MAX 256

/* Batches: S3 items run concurrently (config.concurrency requests in flight), files one
 * after another. Each item gets its own status and message, so one bad item never fails
 * its batch; the call returns KILN_OK when every item succeeded, else the status of the
 * first item that failed. */
typedef struct kiln_storage_get_item {
	const char *uri;
	kiln_buf *out;                       /* capped by out->max; contents replaced */
	kiln_status status;                  /* out */
	char msg[KILN_STORAGE_MSG_MAX];      /* out: "" on success */
} kiln_storage_get_item;

typedef struct kiln_storage_put_item {
	const char *uri;
	const void *data;
	size_t size;
	kiln_status status;                  /* out */
	char msg[KILN_STORAGE_MSG_MAX];      /* out */
} kiln_storage_put_item;

kiln_status kiln_storage_get_many(kiln_storage *st, kiln_storage_get_item *items, size_t count);
kiln_status kiln_storage_put_many(kiln_storage *st, kiln_storage_put_item *items, size_t count);

/* Counters since creation, for metrics and tests. */
typedef struct kiln_storage_stats {
	uint64_t http_requests;  /* attempts sent, retries included */
	uint64_t http_retries;   /* attempts that were retries */
	uint64_t multipart_aborts;
} kiln_storage_stats;

void kiln_storage_get_stats(const kiln_storage *st, kiln_storage_stats *out);

#endif
