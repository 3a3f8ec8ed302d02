/* The wire protocol parser: every message type of docs/PROTOCOL.md is accepted, and every
 * kind of malformed frame (not JSON, oversized, wrong version, unknown or missing fields,
 * wrong types, NUL in strings, too many items, random mutations) is refused cleanly. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/proto.h"

static const char *const valid[] = {
	"{\"v\":1,\"type\":\"ready\",\"worker\":\"n1-1\",\"slots\":4,"
	"\"devices\":[{\"id\":\"gpu:0\",\"name\":\"H100\",\"memory\":85045379072},{\"id\":\"cpu\",\"threads\":16}],"
	"\"codecs\":[\"bc1\"],\"held\":[\"j1.s2\"]}",
	"{\"v\":1,\"type\":\"shard\",\"job\":\"j1\",\"shard\":\"j1.s17\",\"lease\":3,\"lease_ms\":30000,"
	"\"options\":{\"format\":\"bc1\",\"quality\":\"high\",\"container\":\"dds\",\"mipmaps\":true,"
	"\"colorspace\":\"auto\",\"alpha_cutoff\":128},"
	"\"items\":[{\"id\":544,\"input\":\"s3://in/a/x.png\",\"output\":\"s3://out/a/x.dds\"}]}",
	"{\"v\":1,\"type\":\"result\",\"job\":\"j1\",\"shard\":\"j1.s17\",\"lease\":3,"
	"\"items\":[{\"id\":544,\"status\":\"ok\",\"bytes\":98432,\"bytes_in\":1180231},"
	"{\"id\":545,\"status\":\"error\",\"error\":\"corrupt data\"}]}",
	"{\"v\":1,\"type\":\"ack\",\"shard\":\"j1.s17\"}",
	"{\"v\":1,\"type\":\"heartbeat\",\"active\":[\"j1.s17\",\"j1.s18\"]}",
	"{\"v\":1,\"type\":\"heartbeat\"}",
	"{\"v\":1,\"type\":\"cancel\",\"job\":\"j1\"}",
	"{\"v\":1,\"type\":\"bye\"}",
};

static kiln_status parse(const char *text, kiln_msg_type *type, char *err, size_t cap)
{
	json_t *msg;
	kiln_status st = kiln_proto_parse(text, strlen(text), &msg, type, err, cap);
	json_decref(msg);
	return st;
}

Test(proto, accepts_every_documented_message_and_round_trips)
{
	static const kiln_msg_type expect[] = {KILN_MSG_READY, KILN_MSG_SHARD, KILN_MSG_RESULT, KILN_MSG_ACK,
					       KILN_MSG_HEARTBEAT, KILN_MSG_HEARTBEAT, KILN_MSG_CANCEL, KILN_MSG_BYE};
	for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
		json_t *msg;
		kiln_msg_type type;
		char err[200] = "";
		cr_assert_eq(kiln_proto_parse(valid[i], strlen(valid[i]), &msg, &type, err, sizeof err), KILN_OK,
			     "%s: %s", valid[i], err);
		cr_expect_eq(type, expect[i]);
		kiln_buf out;
		kiln_buf_init(&out, KILN_PROTO_MAX_FRAME);
		cr_assert_eq(kiln_proto_encode(msg, &out), KILN_OK);
		json_t *again;
		kiln_msg_type type2;
		cr_assert_eq(kiln_proto_parse(out.data, out.len, &again, &type2, NULL, 0), KILN_OK);
		cr_expect(json_equal(msg, again));
		kiln_buf_free(&out);
		json_decref(msg);
		json_decref(again);
	}
}

Test(proto, refuses_malformed_frames_with_a_reason)
{
	static const struct { const char *text; kiln_status st; const char *why; } bad[] = {
		{"", KILN_ERR_CORRUPT, "not JSON"},
		{"{\"v\":1,", KILN_ERR_CORRUPT, "not JSON"},
		{"[1,2]", KILN_ERR_CORRUPT, "not a JSON object"},
		{"{\"type\":\"bye\"}", KILN_ERR_CORRUPT, "version"},
		{"{\"v\":2,\"type\":\"bye\"}", KILN_ERR_UNSUPPORTED, "version 2"},
		{"{\"v\":\"1\",\"type\":\"bye\"}", KILN_ERR_CORRUPT, "version"},
		{"{\"v\":1}", KILN_ERR_CORRUPT, "type"},
		{"{\"v\":1,\"type\":\"launch\"}", KILN_ERR_CORRUPT, "unknown message type"},
		{"{\"v\":1,\"type\":\"bye\",\"extra\":1}", KILN_ERR_CORRUPT, "unknown field"},
		{"{\"v\":1,\"type\":\"ack\"}", KILN_ERR_CORRUPT, "missing field 'shard'"},
		{"{\"v\":1,\"type\":\"ack\",\"shard\":7}", KILN_ERR_CORRUPT, "wrong type"},
		{"{\"v\":1,\"type\":\"ack\",\"shard\":\"a\\u0000b\"}", KILN_ERR_CORRUPT, "not JSON"},
		{"{\"v\":1,\"type\":\"ack\",\"shard\":\"a\",\"shard\":\"b\"}", KILN_ERR_CORRUPT, "duplicate"},
		{"{\"v\":1,\"type\":\"cancel\",\"job\":[\"j\"]}", KILN_ERR_CORRUPT, "wrong type"},
		{"{\"v\":1,\"type\":\"shard\",\"job\":\"j\",\"shard\":\"s\",\"lease\":-1,\"lease_ms\":1,"
		 "\"options\":{},\"items\":[]}", KILN_ERR_CORRUPT, "lease"},
		{"{\"v\":1,\"type\":\"shard\",\"job\":\"j\",\"shard\":\"s\",\"lease\":1,\"lease_ms\":1,"
		 "\"options\":{\"speed\":\"max\"},\"items\":[]}", KILN_ERR_CORRUPT, "unknown field 'speed'"},
		{"{\"v\":1,\"type\":\"shard\",\"job\":\"j\",\"shard\":\"s\",\"lease\":1,\"lease_ms\":1,"
		 "\"options\":{},\"items\":[{\"id\":1,\"input\":\"a\"}]}", KILN_ERR_CORRUPT, "missing field 'output'"},
		{"{\"v\":1,\"type\":\"result\",\"job\":\"j\",\"shard\":\"s\",\"lease\":1,\"items\":[5]}",
		 KILN_ERR_CORRUPT, "expected an object"},
		{"{\"v\":1,\"type\":\"heartbeat\",\"active\":[1]}", KILN_ERR_CORRUPT, "wrong type"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		kiln_msg_type type = KILN_MSG_BYE;
		char err[200] = "";
		cr_expect_eq(parse(bad[i].text, &type, err, sizeof err), bad[i].st, "%s -> %s", bad[i].text, err);
		cr_expect_eq(type, KILN_MSG_INVALID);
		cr_expect(strstr(err, bad[i].why) != NULL, "%s: reason '%s' lacks '%s'", bad[i].text, err, bad[i].why);
	}
}

Test(proto, caps_frame_size_item_count_and_string_length)
{
	size_t big = KILN_PROTO_MAX_FRAME + 1;
	char *frame = malloc(big);
	memset(frame, ' ', big);
	json_t *msg;
	kiln_msg_type type;
	cr_expect_eq(kiln_proto_parse(frame, big, &msg, &type, NULL, 0), KILN_ERR_TOO_LARGE);
	free(frame);

	json_t *shard = kiln_proto_new(KILN_MSG_SHARD);
	json_object_set_new(shard, "job", json_string("j"));
	json_object_set_new(shard, "shard", json_string("s"));
	json_object_set_new(shard, "lease", json_integer(1));
	json_object_set_new(shard, "lease_ms", json_integer(1000));
	json_object_set_new(shard, "options", json_object());
	json_t *items = json_array();
	for (int i = 0; i <= KILN_PROTO_MAX_ITEMS; i++)
		json_array_append_new(items, json_pack("{s:i,s:s,s:s}", "id", i, "input", "a", "output", "b"));
	json_object_set_new(shard, "items", items);
	kiln_buf out;
	kiln_buf_init(&out, KILN_PROTO_MAX_FRAME);
	cr_expect_eq(kiln_proto_encode(shard, &out), KILN_ERR_CORRUPT, "too many items");
	json_array_remove(items, 0);
	cr_expect_eq(kiln_proto_encode(shard, &out), KILN_OK);

	char *longs = malloc(KILN_PROTO_MAX_STRING + 2);
	memset(longs, 'k', KILN_PROTO_MAX_STRING + 1);
	longs[KILN_PROTO_MAX_STRING + 1] = '\0';
	json_object_set_new(shard, "job", json_string(longs));
	cr_expect_eq(kiln_proto_encode(shard, &out), KILN_ERR_CORRUPT, "string over the cap");
	free(longs);
	json_decref(shard);
	kiln_buf_free(&out);
	cr_expect_null(kiln_proto_new(KILN_MSG_INVALID));
}

Test(proto, random_mutations_never_crash)
{
	uint32_t s = 12345;
	for (int trial = 0; trial < 20000; trial++) {
		const char *src = valid[trial % (sizeof valid / sizeof valid[0])];
		size_t len = strlen(src);
		char buf[1024];
		memcpy(buf, src, len);
		for (int k = 0; k < 1 + trial % 4; k++) {
			s = s * 1103515245u + 12345u;
			buf[(s >> 8) % len] = (char)(s >> 24);
		}
		json_t *msg;
		kiln_msg_type type;
		kiln_status st = kiln_proto_parse(buf, len, &msg, &type, NULL, 0);
		if (st == KILN_OK) {
			cr_expect_neq(type, KILN_MSG_INVALID);
			json_decref(msg);
		} else {
			cr_expect_null(msg);
		}
	}
}

/* The text writers make what json_dumps(JSON_COMPACT) makes of the same string: every
 * byte value that needs escaping, multi-byte UTF-8 of every length, and text around them. */
Test(proto, json_put_string_escapes_as_jansson_does)
{
	char all[128];
	for (int i = 0; i < 127; i++)
		all[i] = (char)(i + 1);
	all[127] = '\0';
	const char *cases[] = {"", "plain s3://b/k/x.png", "\"", "\\", "a\"b\\c/d", "\b\f\n\r\t\x01\x1f\x7f",
			       "caf\xc3\xa9", "\xe2\x82\xac euro", "\xf0\x9f\x98\x80 4 bytes", "\xef\xbf\xbf", all};
	kiln_buf out;
	kiln_buf_init(&out, 1u << 16);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		kiln_buf_reset(&out);
		cr_assert_eq(kiln_json_put_string(&out, cases[c], strlen(cases[c])), KILN_OK, "case %zu", c);
		json_t *s = json_string(cases[c]);
		cr_assert_not_null(s);
		char *dumped = json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY);
		cr_expect(strlen(dumped) == out.len && memcmp(dumped, out.data, out.len) == 0, "case %zu: %s vs %.*s",
			  c, dumped, (int)out.len, (const char *)out.data);
		free(dumped);
		json_decref(s);
	}
	/* a NUL inside is written as \u0000 (as json_stringn would dump it) */
	kiln_buf_reset(&out);
	cr_assert_eq(kiln_json_put_string(&out, "a\0b", 3), KILN_OK);
	cr_expect(out.len == 10 && memcmp(out.data, "\"a\\u0000b\"", 10) == 0);
	/* not UTF-8: refused, and the buffer is left as it was */
	const char *bad[] = {"\x80", "\xc0\xaf", "\xc3", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
			     "\xf8\x88\x80\x80\x80", "ok\xff"};
	for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
		kiln_buf_reset(&out);
		cr_assert_eq(kiln_buf_append(&out, "x", 1), KILN_OK);
		cr_expect_eq(kiln_json_put_string(&out, bad[c], strlen(bad[c])), KILN_ERR_CORRUPT, "bad %zu", c);
		cr_expect_eq(out.len, 1);
		cr_expect(json_string(bad[c]) == NULL, "jansson refuses bad %zu too", c);
	}
	/* over the cap: refused, nothing half written */
	kiln_buf small;
	kiln_buf_init(&small, 8);
	cr_expect_eq(kiln_json_put_string(&small, "0123456789", 10), KILN_ERR_TOO_LARGE);
	cr_expect_eq(small.len, 0);
	kiln_buf_free(&small);
	/* numbers and the ack frame */
	kiln_buf_reset(&out);
	cr_assert_eq(kiln_json_put_uint(&out, UINT64_MAX), KILN_OK);
	cr_assert_eq(kiln_json_put_raw(&out, " "), KILN_OK);
	cr_assert_eq(kiln_json_put_int(&out, INT64_MIN), KILN_OK);
	cr_assert_eq(kiln_json_put_raw(&out, " "), KILN_OK);
	cr_assert_eq(kiln_json_put_int(&out, 0), KILN_OK);
	cr_expect(out.len == 43 && memcmp(out.data, "18446744073709551615 -9223372036854775808 0", 43) == 0, "%.*s",
		  (int)out.len, (const char *)out.data);
	cr_assert_eq(kiln_proto_write_ack(&out, "j1.s17"), KILN_OK);
	json_t *msg;
	kiln_msg_type type;
	cr_assert_eq(kiln_proto_parse(out.data, out.len, &msg, &type, NULL, 0), KILN_OK);
	cr_expect_eq(type, KILN_MSG_ACK);
	cr_expect_str_eq(json_string_value(json_object_get(msg, "shard")), "j1.s17");
	json_decref(msg);
	kiln_buf_free(&out);
}

Test(proto, result_items_may_carry_pixels_and_unknown_keys_stay_refused)
{
	const char *ok = "{\"v\":1,\"type\":\"result\",\"job\":\"j1\",\"shard\":\"j1.s1\",\"lease\":3,"
			 "\"items\":[{\"id\":1,\"status\":\"ok\",\"bytes\":9,\"psnr\":3657,\"pixels\":262144}]}";
	kiln_msg_type type;
	char err[200] = "";
	cr_expect_eq(parse(ok, &type, err, sizeof err), KILN_OK, "%s", err);
	const char *neg = "{\"v\":1,\"type\":\"result\",\"job\":\"j1\",\"shard\":\"j1.s1\",\"lease\":3,"
			  "\"items\":[{\"id\":1,\"status\":\"ok\",\"pixels\":-1}]}";
	cr_expect_eq(parse(neg, &type, err, sizeof err), KILN_ERR_CORRUPT);
	/* same length and first letter as a known key, or a known key's prefix: still unknown */
	const char *near[] = {"{\"v\":1,\"type\":\"ack\",\"shard\":\"j1.s1\",\"shart\":\"x\"}",
			      "{\"v\":1,\"type\":\"ack\",\"shard\":\"j1.s1\",\"shar\":\"x\"}",
			      "{\"v\":1,\"type\":\"ack\",\"shard\":\"j1.s1\",\"\":1}",
			      "{\"v\":1,\"type\":\"ack\",\"shard\":\"j1.s1\",\"shard\\u0000x\":\"y\"}"};
	for (size_t i = 0; i < sizeof near / sizeof near[0]; i++)
		cr_expect_eq(parse(near[i], &type, err, sizeof err), KILN_ERR_CORRUPT, "%s", near[i]);
	cr_expect_eq(parse("{\"v\":1,\"type\":\"ack\"}", &type, err, sizeof err), KILN_ERR_CORRUPT);
	cr_expect(strstr(err, "missing field 'shard'") != NULL, "%s", err);
}
