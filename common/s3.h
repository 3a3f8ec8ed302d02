/* The S3 client behind kiln_storage (storage.h): internal to common/, callers use
 * storage.h. Requests run through one curl multi handle, so a batch of objects (and the
 * parts of a multipart upload) transfer concurrently, each request with its own retries. */
#ifndef KILN_S3_H
#define KILN_S3_H

#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/storage.h"
#include "common/uri.h"

typedef struct kiln_s3 kiln_s3;

typedef enum kiln_s3_kind {
	KILN_S3_GET,
	KILN_S3_PUT,
	KILN_S3_HEAD,
} kiln_s3_kind;

typedef struct kiln_s3_op {
	kiln_s3_kind kind;
	const char *bucket;
	const char *key;
	kiln_buf *out;                   /* GET: receives the body, appended */
	const void *data;                /* PUT */
	size_t size;                     /* PUT */
	uint64_t size_out;               /* HEAD: the object's size */
	kiln_status status;              /* out */
	char msg[KILN_STORAGE_MSG_MAX];  /* out */
} kiln_s3_op;

/* Resolves cfg against the environment (see kiln_storage_config) and checks it. */
kiln_status kiln_s3_create(const kiln_storage_config *cfg, kiln_s3 **out, char *msg,
			   size_t msg_cap);
void kiln_s3_destroy(kiln_s3 *s3);

/* Runs the operations concurrently; each gets its own status and message. Returns
 * KILN_OK, or KILN_ERR_NOMEM when the batch itself could not be set up. */
kiln_status kiln_s3_run(kiln_s3 *s3, kiln_s3_op *ops, size_t count);

/* ListObjectsV2 over every page under prefix->path (see kiln_storage_list). */
kiln_status kiln_s3_list(kiln_s3 *s3, const kiln_uri *prefix, const char *glob,
			 kiln_storage_list_fn fn, void *ctx, char *msg, size_t msg_cap);

void kiln_s3_stats(const kiln_s3 *s3, kiln_storage_stats *out);

#endif
