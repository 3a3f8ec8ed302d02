/* Schema-driven validation of protocol messages. Each message type is a table of fields
 * (name, JSON type, required, and for arrays/objects the schema of their elements), so a
 * new field is one table row, and every message goes through the same checks. */
#include "common/proto.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum field_kind { F_INT, F_UINT, F_STRING, F_BOOL, F_OBJECT, F_ARRAY } field_kind;

typedef struct field {
	const char *name;
	unsigned char len;          /* strlen(name), filled in by the F() macro */
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

/* A table row: the name's length is a compile-time constant, so a key is matched by its
 * length and first byte before any memcmp (see find_field). */
#define F(name, ...) {name, (unsigned char)(sizeof name - 1), __VA_ARGS__}

#define SCHEMA(name, ...)                                                           \
	static const field name##_fields[] = {__VA_ARGS__};                         \
	static const schema name = {name##_fields, sizeof name##_fields / sizeof name##_fields[0]}

#define HEADER F("v", F_UINT, true, NULL, 0, 0), F("type", F_STRING, true, NULL, 0, 0)

SCHEMA(device_schema,
       F("id", F_STRING, true, NULL, 0, 0),
       F("name", F_STRING, false, NULL, 0, 0),
       F("memory", F_UINT, false, NULL, 0, 0),
       F("threads", F_UINT, false, NULL, 0, 0));

SCHEMA(options_schema,
       F("format", F_STRING, false, NULL, 0, 0),
       F("quality", F_STRING, false, NULL, 0, 0),
       F("container", F_STRING, false, NULL, 0, 0),
       F("mipmaps", F_BOOL, false, NULL, 0, 0),
       F("colorspace", F_STRING, false, NULL, 0, 0),
       F("alpha_cutoff", F_UINT, false, NULL, 0, 0),
       F("block", F_STRING, false, NULL, 0, 0),
       F("measure_psnr", F_BOOL, false, NULL, 0, 0));

SCHEMA(shard_item_schema,
       F("id", F_UINT, true, NULL, 0, 0),
       F("input", F_STRING, true, NULL, 0, 0),
       F("output", F_STRING, true, NULL, 0, 0));

SCHEMA(result_item_schema,
       F("id", F_UINT, true, NULL, 0, 0),
       F("status", F_STRING, true, NULL, 0, 0),
       F("bytes", F_UINT, false, NULL, 0, 0),
       F("bytes_in", F_UINT, false, NULL, 0, 0),
       F("psnr", F_INT, false, NULL, 0, 0),
       F("pixels", F_UINT, false, NULL, 0, 0),
       F("error", F_STRING, false, NULL, 0, 0));

SCHEMA(ready_schema, HEADER,
       F("worker", F_STRING, true, NULL, 0, 0),
       F("slots", F_UINT, true, NULL, 0, 0),
       F("devices", F_ARRAY, true, &device_schema, 0, KILN_PROTO_MAX_LIST),
       F("codecs", F_ARRAY, true, NULL, F_STRING, 16),
       F("held", F_ARRAY, false, NULL, F_STRING, KILN_PROTO_MAX_LIST));

SCHEMA(shard_schema, HEADER,
       F("job", F_STRING, true, NULL, 0, 0),
       F("shard", F_STRING, true, NULL, 0, 0),
       F("lease", F_UINT, true, NULL, 0, 0),
       F("lease_ms", F_UINT, true, NULL, 0, 0),
       F("options", F_OBJECT, true, &options_schema, 0, 0),
       F("items", F_ARRAY, true, &shard_item_schema, 0, KILN_PROTO_MAX_ITEMS));

SCHEMA(result_schema, HEADER,
       F("job", F_STRING, true, NULL, 0, 0),
       F("shard", F_STRING, true, NULL, 0, 0),
       F("lease", F_UINT, true, NULL, 0, 0),
       F("items", F_ARRAY, true, &result_item_schema, 0, KILN_PROTO_MAX_ITEMS));

SCHEMA(ack_schema, HEADER, F("shard", F_STRING, true, NULL, 0, 0));
SCHEMA(heartbeat_schema, HEADER, F("active", F_ARRAY, false, NULL, F_STRING, KILN_PROTO_MAX_LIST));
SCHEMA(cancel_schema, HEADER, F("job", F_STRING, true, NULL, 0, 0));
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

/* The row of s named key (len bytes), or NULL. Tables hold at most a dozen rows, so a
 * scan that compares length and first byte before memcmp touches no other memory and
 * calls nothing for the keys that do not match (the old strcmp of every key against every
 * row was a visible part of the dispatcher's profile). */
static const field *find_field(const schema *s, const char *key, size_t len)
{
	if (len == 0 || len > 255)
		return NULL;
	for (size_t k = 0; k < s->count; k++) {
		const field *f = &s->fields[k];
		if (f->len == len && f->name[0] == key[0] && memcmp(f->name, key, len) == 0)
			return f;
	}
	return NULL;
}

static kiln_status check_object(const json_t *obj, const schema *s, const char *where, char *err, size_t cap)
{
	/* fields seen, as bits of their row numbers: the required ones are checked against
	 * this mask instead of a lookup each (every table has fewer than 32 rows) */
	uint32_t seen = 0;
	void *iter = json_object_iter((json_t *)obj);
	for (; iter; iter = json_object_iter_next((json_t *)obj, iter)) {
		const char *key = json_object_iter_key(iter);
		/* the key's real length: one with a NUL inside never matches a row */
		const field *f = find_field(s, key, json_object_iter_key_len(iter));
		if (!f)
			return reject(err, cap, "%s: unknown field '%.64s'", where, key);
		seen |= 1u << (f - s->fields);
		kiln_status st = check_field(json_object_iter_value(iter), f, where, err, cap);
		if (st != KILN_OK)
			return st;
	}
	for (size_t k = 0; k < s->count; k++)
		if (s->fields[k].required && !(seen & (1u << k)))
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

/* ---- text writers ---- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0: the rules of RFC 3629,
 * as jansson's own check applies them (no overlong forms, no surrogates, nothing past
 * U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;  /* a continuation byte first, 0xC0/0xC1 (overlong) or 0xF5.. */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
	    (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

kiln_status kiln_json_put_string(kiln_buf *out, const char *str, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str;
	size_t start = out->len;
	/* the common case, nothing to escape, costs one reserve and one copy per run */
	kiln_status st = kiln_buf_append(out, "\"", 1);
	size_t run = 0;  /* bytes at s[i - run .. i) waiting to be copied as they are */
	for (size_t i = 0; i < len && st == KILN_OK;) {
		unsigned c = s[i];
		if (c >= 0x80) {
			size_t n = utf8_seq(s + i, len - i);
			if (n == 0) {
				out->len = start;
				return KILN_ERR_CORRUPT;
			}
			i += n;
			run += n;
			continue;
		}
		if (c >= 0x20 && c != '"' && c != '\\') {
			i++;
			run++;
			continue;
		}
		if (run)
			st = kiln_buf_append(out, s + i - run, run);
		run = 0;
		char esc[6] = {'\\', 0, 0, 0, 0, 0};
		size_t n = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			n = 6;
		}
		if (st == KILN_OK)
			st = kiln_buf_append(out, esc, n);
		i++;
	}
	if (st == KILN_OK && run)
		st = kiln_buf_append(out, s + len - run, run);
	if (st == KILN_OK)
		st = kiln_buf_append(out, "\"", 1);
	if (st != KILN_OK)
		out->len = start;
	return st;
}

kiln_status kiln_json_put_raw(kiln_buf *out, const char *text)
{
	return kiln_buf_append(out, text, strlen(text));
}

kiln_status kiln_json_put_uint(kiln_buf *out, uint64_t v)
{
	char digits[20];
	size_t n = sizeof digits;
	do {
		digits[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return kiln_buf_append(out, digits + n, sizeof digits - n);
}

kiln_status kiln_json_put_int(kiln_buf *out, int64_t v)
{
	if (v >= 0)
		return kiln_json_put_uint(out, (uint64_t)v);
	kiln_status st = kiln_buf_append(out, "-", 1);
	/* the magnitude in unsigned arithmetic: -INT64_MIN does not fit an int64_t */
	return st == KILN_OK ? kiln_json_put_uint(out, 0 - (uint64_t)v) : st;
}

kiln_status kiln_proto_write_ack(kiln_buf *out, const char *shard)
{
	kiln_buf_reset(out);
	kiln_status st = kiln_json_put_raw(out, "{\"v\":1,\"type\":\"ack\",\"shard\":");
	if (st == KILN_OK)
		st = kiln_json_put_string(out, shard, strlen(shard));
	return st == KILN_OK ? kiln_buf_append(out, "}", 1) : st;
}
