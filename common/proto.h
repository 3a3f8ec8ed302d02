/* The scheduler-worker wire protocol (docs/PROTOCOL.md): one JSON frame per message.
 * kiln_proto_parse validates a frame completely against the schema of its type (sizes,
 * field types, no unknown fields), so the scheduler and the worker only ever look at
 * messages that are well formed; kiln_proto_encode serialises a message. */
#ifndef KILN_PROTO_H
#define KILN_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

#define KILN_PROTO_VERSION 1
#define KILN_PROTO_MAX_FRAME (1u << 20)
#define KILN_PROTO_MAX_ITEMS 4096     /* items in one shard or result */
#define KILN_PROTO_MAX_STRING 4096    /* bytes in any string field (URIs included) */
#define KILN_PROTO_MAX_LIST 1024      /* devices, held or active shard ids */

typedef enum kiln_msg_type {
	KILN_MSG_INVALID = 0,
	KILN_MSG_READY,
	KILN_MSG_SHARD,
	KILN_MSG_RESULT,
	KILN_MSG_ACK,
	KILN_MSG_HEARTBEAT,
	KILN_MSG_CANCEL,
	KILN_MSG_BYE,
} kiln_msg_type;

const char *kiln_msg_type_name(kiln_msg_type type);

/* Parses and validates one frame. On success *msg is a new reference (json_decref it) and
 * *type its type. On failure returns KILN_ERR_TOO_LARGE (frame over the cap),
 * KILN_ERR_CORRUPT (not JSON, not an object, schema violation) or KILN_ERR_UNSUPPORTED
 * (another protocol version), with a one-line reason in err. */
kiln_status kiln_proto_parse(const void *frame, size_t len, json_t **msg, kiln_msg_type *type,
			     char *err, size_t err_cap);

/* Validates an already-built message (what kiln_proto_parse checks after JSON decoding). */
kiln_status kiln_proto_validate(const json_t *msg, kiln_msg_type *type, char *err, size_t err_cap);

/* A new message object {"v":1,"type":...}; the caller adds the type's fields. */
json_t *kiln_proto_new(kiln_msg_type type);

/* Serialises msg (compact) into out, replacing its contents; refuses messages that fail
 * validation or exceed KILN_PROTO_MAX_FRAME. */
kiln_status kiln_proto_encode(const json_t *msg, kiln_buf *out);

/* ---- Writing JSON as text, for messages and records built at a high rate ----
 * The dispatcher writes shard and ack frames and journal records straight into a reused
 * buffer instead of building jansson objects and dumping them: the objects' allocations
 * and the dump were most of its CPU per shard. The text is what json_dumps(JSON_COMPACT)
 * would write for the same content, so peers and the journal's replay see no difference.
 * Every function appends to out and fails with KILN_ERR_TOO_LARGE past out's cap. */

/* s (len bytes) as a quoted JSON string, escaped as jansson escapes it: '"', '\\' and
 * control characters (\b \f \n \r \t, the others \u00XX; a NUL byte is \u0000);
 * '/' and non-ASCII are written as they are. KILN_ERR_CORRUPT when s is not valid UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF included), which JSON cannot
 * carry; out is then left as it was. */
kiln_status kiln_json_put_string(kiln_buf *out, const char *s, size_t len);
/* text as it is (the caller's JSON punctuation and keys). */
kiln_status kiln_json_put_raw(kiln_buf *out, const char *text);
kiln_status kiln_json_put_uint(kiln_buf *out, uint64_t v);
kiln_status kiln_json_put_int(kiln_buf *out, int64_t v);

/* A complete `ack` frame for shard, replacing out's contents. */
kiln_status kiln_proto_write_ack(kiln_buf *out, const char *shard);

#endif
