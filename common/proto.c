/* Schema-driven validation of protocol messages. Each message type is a table of fields
 * (name, JSON type, required, and for arrays/objects the schema of their elements), so a
 * new field is one table row, and every message goes through the same checks. */
#include "common/proto.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum field_kind { F_INT, F_UINT, F_STRING, F_BOOL, F_OBJECT, F_ARRAY } field_kind;

typedef struct field {
	const char *name;
	field_kind kind;
	bool required;
	const struct schema *elem;  /* F_OBJECT: its schema; F_ARRAY: schema of object elements */
	field_kind elem_kind;       /* F_ARRAY of scalars: their kind (elem == NULL) */
	size_t max_elems;           /* F_ARRAY */
} field;

typedef struct schema {
	const field *fields;
	size_t count;
} schema;

#define SCHEMA(name, ...)                                                           \
	static const field name##_fields[] = {__VA_ARGS__};                         \
	static const schema name = {name##_fields, sizeof name##_fields / sizeof name##_fields[0]}

#define HEADER {"v", F_UINT, true, NULL, 0, 0}, {"type", F_STRING, true, NULL, 0, 0}

SCHEMA(device_schema,
       {"id", F_STRING, true, NULL, 0, 0},
       {"name", F_STRING, false, NULL, 0, 0},
       {"memory", F_UINT, false, NULL, 0, 0},
       {"threads", F_UINT, false, NULL, 0, 0});

SCHEMA(options_schema,
       {"format", F_STRING, false, NULL, 0, 0},
       {"quality", F_STRING, false, NULL, 0, 0},
       {"container", F_STRING, false, NULL, 0, 0},
       {"mipmaps", F_BOOL, false, NULL, 0, 0},
       {"colorspace", F_STRING, false, NULL, 0, 0},
       {"alpha_cutoff", F_UINT, false, NULL, 0, 0},
       {"block", F_STRING, false, NULL, 0, 0},
       {"measure_psnr", F_BOOL, false, NULL, 0, 0});

SCHEMA(shard_item_schema,
       {"id", F_UINT, true, NULL, 0, 0},
       {"input", F_STRING, true, NULL, 0, 0},
       {"output", F_STRING, true, NULL, 0, 0});

SCHEMA(result_item_schema,
       {"id", F_UINT, true, NULL, 0, 0},
       {"status", F_STRING, true, NULL, 0, 0},
       {"bytes", F_UINT, false, NULL, 0, 0},
       {"bytes_in", F_UINT, false, NULL, 0, 0},
       {"psnr", F_INT, false, NULL, 0, 0},
       {"error", F_STRING, false, NULL, 0, 0});

SCHEMA(ready_schema, HEADER,
       {"worker", F_STRING, true, NULL, 0, 0},
       {"slots", F_UINT, true, NULL, 0, 0},
       {"devices", F_ARRAY, true, &device_schema, 0, KILN_PROTO_MAX_LIST},
       {"codecs", F_ARRAY, true, NULL, F_STRING, 16},
       {"held", F_ARRAY, false, NULL, F_STRING, KILN_PROTO_MAX_LIST});

SCHEMA(shard_schema, HEADER,
       {"job", F_STRING, true, NULL, 0, 0},
       {"shard", F_STRING, true, NULL, 0, 0},
       {"lease", F_UINT, true, NULL, 0, 0},
       {"lease_ms", F_UINT, true, NULL, 0, 0},
       {"options", F_OBJECT, true, &options_schema, 0, 0},
       {"items", F_ARRAY, true, &shard_item_schema, 0, KILN_PROTO_MAX_ITEMS});

SCHEMA(result_schema, HEADER,
       {"job", F_STRING, true, NULL, 0, 0},
       {"shard", F_STRING, true, NULL, 0, 0},
       {"lease", F_UINT, true, NULL, 0, 0},
       {"items", F_ARRAY, true, &result_item_schema, 0, KILN_PROTO_MAX_ITEMS});

SCHEMA(ack_schema, HEADER, {"shard", F_STRING, true, NULL, 0, 0});
SCHEMA(heartbeat_schema, HEADER, {"active", F_ARRAY, false, NULL, F_STRING, KILN_PROTO_MAX_LIST});
SCHEMA(cancel_schema, HEADER, {"job", F_STRING, true, NULL, 0, 0});
SCHEMA(bye_schema, HEADER);

static const struct {
	const char *name;
	const schema *schema;
} types[] = {
	[KILN_MSG_READY] = {"ready", &ready_schema},
	[KILN_MSG_SHARD] = {"shard", &shard_schema},
	[KILN_MSG_RESULT] = {"result", &result_schema},
	[KILN_MSG_ACK] = {"ack", &ack_schema},
	[KILN_MSG_HEARTBEAT] = {"heartbeat", &heartbeat_schema},
	[KILN_MSG_CANCEL] = {"cancel", &cancel_schema},
	[KILN_MSG_BYE] = {"bye", &bye_schema},
};
#define NTYPES (sizeof types / sizeof types[0])

const char *kiln_msg_type_name(kiln_msg_type type)
{
	return (unsigned)type < NTYPES && types[type].name ? types[type].name : "invalid";
}

static kiln_status reject(char *err, size_t cap, const char *fmt, ...)
{
	if (err && cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, cap, fmt, ap);
		va_end(ap);
	}
	return KILN_ERR_CORRUPT;
}

static bool scalar_ok(const json_t *v, field_kind kind)
{
	switch (kind) {
	case F_INT: return json_is_integer(v);
	case F_UINT: return json_is_integer(v) && json_integer_value(v) >= 0;
	case F_STRING: return json_is_string(v) && json_string_length(v) <= KILN_PROTO_MAX_STRING &&
			      strlen(json_string_value(v)) == json_string_length(v); /* no NUL inside */
	case F_BOOL: return json_is_boolean(v);
	default: return false;
	}
}

static kiln_status check_object(const json_t *obj, const schema *s, const char *where, char *err, size_t cap);

static kiln_status check_field(const json_t *v, const field *f, const char *where, char *err, size_t cap)
{
	if (f->kind == F_OBJECT) {
		if (!json_is_object(v))
			return reject(err, cap, "%s.%s: expected an object", where, f->name);
		return check_object(v, f->elem, f->name, err, cap);
	}
	if (f->kind != F_ARRAY)
		return scalar_ok(v, f->kind) ? KILN_OK
					     : reject(err, cap, "%s.%s: wrong type or too long", where, f->name);
	if (!json_is_array(v))
		return reject(err, cap, "%s.%s: expected an array", where, f->name);
	if (json_array_size(v) > f->max_elems)
		return reject(err, cap, "%s.%s: more than %zu elements", where, f->name, f->max_elems);
	size_t i;
	const json_t *e;
	json_array_foreach(v, i, e) {
		kiln_status st;
		if (f->elem)
			st = json_is_object(e) ? check_object(e, f->elem, f->name, err, cap)
					       : reject(err, cap, "%s.%s[%zu]: expected an object", where, f->name, i);
		else
			st = scalar_ok(e, f->elem_kind) ? KILN_OK
							: reject(err, cap, "%s.%s[%zu]: wrong type", where, f->name, i);
		if (st != KILN_OK)
			return st;
	}
	return KILN_OK;
}

static kiln_status check_object(const json_t *obj, const schema *s, const char *where, char *err, size_t cap)
{
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)obj, key, v) {
		size_t k;
		for (k = 0; k < s->count && strcmp(s->fields[k].name, key) != 0; k++)
			;
		if (k == s->count)
			return reject(err, cap, "%s: unknown field '%.64s'", where, key);
		kiln_status st = check_field(v, &s->fields[k], where, err, cap);
		if (st != KILN_OK)
			return st;
	}
	for (size_t k = 0; k < s->count; k++)
		if (s->fields[k].required && !json_object_get(obj, s->fields[k].name))
			return reject(err, cap, "%s: missing field '%s'", where, s->fields[k].name);
	return KILN_OK;
}

kiln_status kiln_proto_validate(const json_t *msg, kiln_msg_type *type, char *err, size_t err_cap)
{
	*type = KILN_MSG_INVALID;
	if (!json_is_object(msg))
		return reject(err, err_cap, "message is not a JSON object");
	const json_t *v = json_object_get(msg, "v");
	if (!json_is_integer(v))
		return reject(err, err_cap, "message has no version 'v'");
	if (json_integer_value(v) != KILN_PROTO_VERSION) {
		reject(err, err_cap, "protocol version %lld, expected %d", (long long)json_integer_value(v),
		       KILN_PROTO_VERSION);
		return KILN_ERR_UNSUPPORTED;
	}
	const char *name = json_string_value(json_object_get(msg, "type"));
	if (!name)
		return reject(err, err_cap, "message has no 'type'");
	for (size_t t = 1; t < NTYPES; t++) {
		if (strcmp(types[t].name, name) != 0)
			continue;
		kiln_status st = check_object(msg, types[t].schema, name, err, err_cap);
		if (st == KILN_OK)
			*type = (kiln_msg_type)t;
		return st;
	}
	return reject(err, err_cap, "unknown message type '%.32s'", name);
}

kiln_status kiln_proto_parse(const void *frame, size_t len, json_t **msg, kiln_msg_type *type,
			     char *err, size_t err_cap)
{
	*msg = NULL;
	*type = KILN_MSG_INVALID;
	if (len > KILN_PROTO_MAX_FRAME) {
		reject(err, err_cap, "frame of %zu bytes is over the %u-byte cap", len, KILN_PROTO_MAX_FRAME);
		return KILN_ERR_TOO_LARGE;
	}
	json_error_t jerr;
	/* JSON_REJECT_DUPLICATES: two values for one key would let peers disagree on which counts */
	json_t *root = json_loadb(frame, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return reject(err, err_cap, "not JSON: %s (column %d)", jerr.text, jerr.column);
	kiln_status st = kiln_proto_validate(root, type, err, err_cap);
	if (st != KILN_OK) {
		json_decref(root);
		return st;
	}
	*msg = root;
	return KILN_OK;
}

json_t *kiln_proto_new(kiln_msg_type type)
{
	if (type <= KILN_MSG_INVALID || (unsigned)type >= NTYPES)
		return NULL;
	return json_pack("{s:i, s:s}", "v", KILN_PROTO_VERSION, "type", types[type].name);
}

kiln_status kiln_proto_encode(const json_t *msg, kiln_buf *out)
{
	kiln_msg_type type;
	char err[160];
	kiln_status st = kiln_proto_validate(msg, &type, err, sizeof err);
	if (st != KILN_OK)
		return st;
	char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		return KILN_ERR_NOMEM;
	size_t len = strlen(text);
	kiln_buf_reset(out);
	st = len > KILN_PROTO_MAX_FRAME ? KILN_ERR_TOO_LARGE : kiln_buf_append(out, text, len);
	free(text);
	return st;
}
