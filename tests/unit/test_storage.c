/* Storage tests: location parsing, the XML scanner on hostile input, local files, retries
 * and caps against a fault-injecting HTTP server, the signed wire requests against
 * botocore, and the S3 client end to end against s3rver on loopback. */
#define _GNU_SOURCE  /* memmem */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/storage.h"
#include "common/uri.h"
#include "common/xmlscan.h"
#include "storage_testutil.h"

#define MIB ((size_t)1 << 20)

/* ---- locations ---- */

Test(storage_uri, accepts_the_three_forms)
{
	kiln_uri u;
	cr_assert_eq(kiln_uri_parse("s3://my-bucket.v2/dir/a b/ü.png", &u), KILN_OK);
	cr_expect_eq(u.scheme, KILN_URI_S3);
	cr_expect_str_eq(u.bucket, "my-bucket.v2");
	cr_expect_str_eq(u.path, "dir/a b/ü.png");
	cr_assert_eq(kiln_uri_parse("s3://bucket", &u), KILN_OK);
	cr_expect_str_eq(u.path, "");
	cr_assert_eq(kiln_uri_parse("s3://bucket/50%25+x", &u), KILN_OK);
	cr_expect_str_eq(u.path, "50%25+x", "keys are not percent-decoded");
	cr_assert_eq(kiln_uri_parse("file:///data/in/a%20b.png", &u), KILN_OK);
	cr_expect_eq(u.scheme, KILN_URI_FILE);
	cr_expect_str_eq(u.path, "/data/in/a b.png");
	cr_assert_eq(kiln_uri_parse("file://localhost/x", &u), KILN_OK);
	cr_expect_str_eq(u.path, "/x");
	cr_assert_eq(kiln_uri_parse("./rel/dir/", &u), KILN_OK);
	cr_expect_str_eq(u.path, "./rel/dir/");
	cr_assert_eq(kiln_uri_parse("C:odd:name", &u), KILN_OK, "no \"://\": a plain path");
}

Test(storage_uri, refuses_what_could_escape_or_confuse)
{
	static const char *const bad[] = {
		"", "s3://", "s3:///key", "s3://ab/key", "s3://Bucket/key", "s3://-bucket/k",
		"s3://bucket-/k", "s3://bu..cket/k", "s3://bucket_x/k", "s3://bucket/../etc/passwd",
		"s3://bucket/a/../b", "s3://bucket/a/./b", "s3://bucket/..", "s3://bucket/a\nb",
		"s3://bucket/a\x7f", "/data/../etc/passwd", "..", "a/..", "../a", "/x/\x01y",
		"file://host/x", "file://x", "file:///a/%2e%2e/b", "file:///a/..%2Fb", "file:///a%00b",
		"file:///a%zz", "file:///a%4", "file:///a%0a",
	};
	kiln_uri u;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_eq(kiln_uri_parse(bad[i], &u), KILN_ERR_INVALID_ARG, "accepted \"%s\"", bad[i]);
		cr_expect_str_eq(u.path, "");
	}
	cr_expect_eq(kiln_uri_parse("gs://bucket/key", &u), KILN_ERR_UNSUPPORTED);
	cr_expect_eq(kiln_uri_parse("http://host/x", &u), KILN_ERR_UNSUPPORTED);
	cr_expect_eq(kiln_uri_parse(NULL, &u), KILN_ERR_INVALID_ARG);

	char long_key[KILN_URI_KEY_MAX + 16] = "s3://bucket/";
	memset(long_key + 12, 'k', KILN_URI_KEY_MAX);
	long_key[12 + KILN_URI_KEY_MAX] = '\0';
	cr_expect_eq(kiln_uri_parse(long_key, &u), KILN_OK);
	strcat(long_key, "k");
	cr_expect_eq(kiln_uri_parse(long_key, &u), KILN_ERR_INVALID_ARG);
}

/* ---- XML ---- */

static kiln_xml_span span(const char *s)
{
	return (kiln_xml_span){s, strlen(s)};
}

Test(storage_xml, finds_elements_and_decodes_text)
{
	const char *doc = "<?xml version=\"1.0\"?><R xmlns=\"x\"><KeyCount>2</KeyCount>"
			  "<Contents><Key>a &amp; b &lt;&#x41;&#66;&gt; &#x1F600;</Key><Size>5</Size></Contents>"
			  "<Contents><Key/><Size>0</Size></Contents></R>";
	char out[64];
	kiln_xml_span c;
	size_t pos = 0;
	cr_assert(kiln_xml_next(span(doc), &pos, "Contents", &c));
	cr_assert_eq(kiln_xml_find_text(c, "Key", out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "a & b <AB> \xf0\x9f\x98\x80");
	cr_assert(kiln_xml_next(span(doc), &pos, "Contents", &c));
	cr_assert_eq(kiln_xml_find_text(c, "Key", out, sizeof out), KILN_OK);
	cr_expect_str_eq(out, "", "<Key/> is empty");
	cr_expect_not(kiln_xml_next(span(doc), &pos, "Contents", &c));
	cr_expect_eq(kiln_xml_find_text(span(doc), "Key", out, 4), KILN_ERR_TOO_LARGE);
	cr_expect_eq(kiln_xml_find_text(span(doc), "Missing", out, sizeof out), KILN_ERR_NOT_FOUND);
}

Test(storage_xml, refuses_hostile_input)
{
	const char *bomb = "<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;\">]>"
			   "<Error><Code>&lol2;</Code></Error>";
	cr_expect_eq(kiln_xml_check(bomb, strlen(bomb)), KILN_ERR_CORRUPT);
	const char *xxe = "<!ENTITY x SYSTEM \"file:///etc/passwd\"><Code>&x;</Code>";
	cr_expect_eq(kiln_xml_check(xxe, strlen(xxe)), KILN_ERR_CORRUPT);
	cr_expect_eq(kiln_xml_check("<a>\0</a>", 8), KILN_ERR_CORRUPT);
	char out[64];
	static const char *const bad_text[] = {"&lol;", "&#0;", "&#xD800;", "&#x110000;", "&amp",
					       "a<b", "&#;", "&#x;", "&#12a;", "&#99999999999;"};
	for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; i++)
		cr_expect_eq(kiln_xml_text(span(bad_text[i]), out, sizeof out), KILN_ERR_CORRUPT, "%s",
			     bad_text[i]);
	/* Unterminated and truncated documents end the search; nothing reads past the span. */
	kiln_xml_span c;
	size_t pos = 0;
	cr_expect_not(kiln_xml_next(span("<Key>abc</Ke"), &pos, "Key", &c));
	pos = 0;
	cr_expect_not(kiln_xml_next(span("<Key"), &pos, "Key", &c));
	pos = 0;
	cr_expect_not(kiln_xml_next((kiln_xml_span){"<Key>a</Key>", 9}, &pos, "Key", &c));
	pos = 0;
	cr_expect_not(kiln_xml_next(span("<KeyCount>1</KeyCount>"), &pos, "Key", &c));
}

/* ---- local files ---- */

static char tmpdir[64];

static void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/kiln-storage-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	rm_tree(tmpdir);
}

static kiln_storage *make_storage(const kiln_storage_config *cfg)
{
	kiln_storage *st = NULL;
	char msg[256];
	cr_assert_eq(kiln_storage_create(cfg, &st, msg, sizeof msg), KILN_OK, "%s", msg);
	return st;
}

struct listing {
	char names[64][256];
	uint64_t sizes[64];
	size_t count;
};

static kiln_status collect(void *ctx, const kiln_storage_entry *e)
{
	struct listing *l = ctx;
	if (l->count == 64)
		return KILN_ERR_TOO_LARGE;
	snprintf(l->names[l->count], sizeof l->names[0], "%s", e->name);
	l->sizes[l->count++] = e->size;
	return KILN_OK;
}

TestSuite(storage_file, .init = make_tmpdir, .fini = remove_tmpdir);

Test(storage_file, round_trip_creates_parents)
{
	kiln_storage *st = make_storage(NULL);
	char uri[256], path[256], msg[KILN_STORAGE_MSG_MAX];
	snprintf(uri, sizeof uri, "file://%s/new/deeper/a%%20b.bin", tmpdir);
	snprintf(path, sizeof path, "%s/new/deeper/a b.bin", tmpdir);
	cr_assert_eq(kiln_storage_put(st, uri, "hello", 5, msg, sizeof msg), KILN_OK, "%s", msg);
	kiln_buf b;
	kiln_buf_init(&b, 64);
	kiln_buf_append(&b, "stale", 5);
	cr_assert_eq(kiln_storage_get(st, path, &b, msg, sizeof msg), KILN_OK, "%s", msg);
	cr_expect_eq(b.len, 5u, "the buffer is replaced, not appended to");
	cr_expect_eq(memcmp(b.data, "hello", 5), 0);
	cr_expect_str_eq(msg, "");
	uint64_t size = 0;
	bool exists = false;
	cr_expect_eq(kiln_storage_stat(st, uri, &size, NULL, 0), KILN_OK);
	cr_expect_eq(size, 5u);
	cr_expect_eq(kiln_storage_exists(st, path, &exists, NULL, 0), KILN_OK);
	cr_expect(exists);
	/* Empty objects are objects. */
	snprintf(path, sizeof path, "%s/empty", tmpdir);
	cr_expect_eq(kiln_storage_put(st, path, NULL, 0, NULL, 0), KILN_OK);
	cr_expect_eq(kiln_storage_get(st, path, &b, NULL, 0), KILN_OK);
	cr_expect_eq(b.len, 0u);
	/* Over the cap. */
	kiln_buf small;
	kiln_buf_init(&small, 4);
	snprintf(path, sizeof path, "%s/new/deeper/a b.bin", tmpdir);
	cr_expect_eq(kiln_storage_get(st, path, &small, msg, sizeof msg), KILN_ERR_TOO_LARGE);
	cr_expect(strstr(msg, "over the size limit"), "%s", msg);
	kiln_buf_free(&small);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
	kiln_storage_destroy(NULL);
}

Test(storage_file, missing_things_are_not_found)
{
	kiln_storage *st = make_storage(NULL);
	char path[256], msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, 64);
	bool exists = true;
	snprintf(path, sizeof path, "%s/no/such/dir/x.png", tmpdir);
	cr_expect_eq(kiln_storage_get(st, path, &b, msg, sizeof msg), KILN_ERR_NOT_FOUND);
	cr_expect(strstr(msg, "x.png"), "%s", msg);
	cr_expect_eq(kiln_storage_exists(st, path, &exists, msg, sizeof msg), KILN_OK);
	cr_expect_not(exists);
	cr_expect_str_eq(msg, "");
	/* A directory is not an object. */
	cr_expect_eq(kiln_storage_get(st, tmpdir, &b, NULL, 0), KILN_ERR_NOT_FOUND);
	cr_expect_eq(kiln_storage_stat(st, tmpdir, NULL, NULL, 0), KILN_ERR_NOT_FOUND);
	struct listing l = {0};
	snprintf(path, sizeof path, "%s/no/such/dir/", tmpdir);
	cr_expect_eq(kiln_storage_list(st, path, NULL, collect, &l, msg, sizeof msg), KILN_ERR_NOT_FOUND);
	cr_expect(strstr(msg, "not found"), "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_file, traversal_is_refused)
{
	kiln_storage *st = make_storage(NULL);
	char path[256], msg[KILN_STORAGE_MSG_MAX];
	snprintf(path, sizeof path, "%s/out/../escaped.bin", tmpdir);
	cr_expect_eq(kiln_storage_put(st, path, "x", 1, msg, sizeof msg), KILN_ERR_INVALID_ARG);
	cr_expect(strstr(msg, "invalid location"), "%s", msg);
	snprintf(path, sizeof path, "%s/escaped.bin", tmpdir);
	cr_expect_neq(access(path, F_OK), 0);
	snprintf(path, sizeof path, "file://%s/a/%%2e%%2e/escaped.bin", tmpdir);
	cr_expect_eq(kiln_storage_put(st, path, "x", 1, NULL, 0), KILN_ERR_INVALID_ARG);
	kiln_buf b;
	kiln_buf_init(&b, 64);
	cr_expect_eq(kiln_storage_get(st, "/etc/../etc/passwd", &b, NULL, 0), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_storage_get(st, "s3://bucket/a/../../x", &b, NULL, 0), KILN_ERR_INVALID_ARG);
	struct listing l = {0};
	cr_expect_eq(kiln_storage_list(st, "/tmp/..", NULL, collect, &l, NULL, 0), KILN_ERR_INVALID_ARG);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

static size_t count_dir_entries(const char *dir, bool hidden_only)
{
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (!hidden_only || de->d_name[0] == '.'))
			n++;
	if (d)
		closedir(d);
	return n;
}

Test(storage_file, writes_are_atomic_and_leave_no_temporaries)
{
	kiln_storage *st = make_storage(NULL);
	char path[256], dir[256];
	snprintf(dir, sizeof dir, "%s/out", tmpdir);
	snprintf(path, sizeof path, "%s/out/a.dds", tmpdir);
	static uint8_t big[3 << 20];
	memset(big, 0xab, sizeof big);
	for (int i = 0; i < 5; i++) {
		big[0] = (uint8_t)i;
		cr_assert_eq(kiln_storage_put(st, path, big, sizeof big - (size_t)i, NULL, 0), KILN_OK);
	}
	/* A put that fails (a directory is in the way) leaves nothing behind either. */
	char blocked[256];
	snprintf(blocked, sizeof blocked, "%s/out/blocked", tmpdir);
	cr_assert_eq(mkdir(blocked, 0777), 0);
	cr_expect_neq(kiln_storage_put(st, blocked, "x", 1, NULL, 0), KILN_OK);
	cr_expect_eq(count_dir_entries(dir, true), 0u, "temporary files were left in %s", dir);
	cr_expect_eq(count_dir_entries(dir, false), 2u);
	kiln_buf b;
	kiln_buf_init(&b, 4 << 20);
	cr_assert_eq(kiln_storage_get(st, path, &b, NULL, 0), KILN_OK);
	cr_expect_eq(b.len, sizeof big - 4);
	cr_expect_eq(b.data[0], 4);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_file, list_is_sorted_recursive_and_globbed)
{
	kiln_storage *st = make_storage(NULL);
	static const char *const files[] = {"in/b.png", "in/a.png", "in/a/c.png", "in/a.txt",
					    "in/sub/deep/z.png", "in/.hidden.png", "in2/x.png",
					    "in/sub/y.PNG"};
	char path[256], msg[KILN_STORAGE_MSG_MAX];
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", tmpdir, files[i]);
		cr_assert_eq(kiln_storage_put(st, path, files[i], strlen(files[i]), NULL, 0), KILN_OK);
	}
	snprintf(path, sizeof path, "%s/in/lnk", tmpdir);
	char target[256];
	snprintf(target, sizeof target, "%s/in", tmpdir);
	cr_assert_eq(symlink(target, path), 0, "a directory symlink loop");

	/* A directory lists its contents, in byte order of full paths ("a.png" < "a/c.png"). */
	struct listing l = {0};
	snprintf(path, sizeof path, "%s/in", tmpdir);
	cr_assert_eq(kiln_storage_list(st, path, NULL, collect, &l, msg, sizeof msg), KILN_OK, "%s", msg);
	static const char *const all[] = {"a.png", "a.txt", "a/c.png", "b.png", "sub/deep/z.png",
					  "sub/y.PNG"};
	cr_assert_eq(l.count, 6u);
	for (size_t i = 0; i < 6; i++)
		cr_expect_str_eq(l.names[i], all[i]);
	cr_expect_eq(l.sizes[0], strlen("in/a.png"));

	memset(&l, 0, sizeof l);
	snprintf(path, sizeof path, "file://%s/in/", tmpdir);
	cr_assert_eq(kiln_storage_list(st, path, "*.png", collect, &l, NULL, 0), KILN_OK);
	static const char *const pngs[] = {"a.png", "a/c.png", "b.png", "sub/deep/z.png"};
	cr_assert_eq(l.count, 4u);
	for (size_t i = 0; i < 4; i++)
		cr_expect_str_eq(l.names[i], pngs[i]);

	/* A prefix that is not a directory filters names, as an S3 prefix would. */
	memset(&l, 0, sizeof l);
	snprintf(path, sizeof path, "%s/in/a.", tmpdir);
	cr_assert_eq(kiln_storage_list(st, path, NULL, collect, &l, NULL, 0), KILN_OK);
	cr_assert_eq(l.count, 2u);
	cr_expect_str_eq(l.names[0], "png");
	cr_expect_str_eq(l.names[1], "txt");
	memset(&l, 0, sizeof l);
	snprintf(path, sizeof path, "%s/in/a", tmpdir);
	cr_assert_eq(kiln_storage_list(st, path, NULL, collect, &l, NULL, 0), KILN_OK);
	cr_assert_eq(l.count, 1u, "in/a is a directory: its contents");
	cr_expect_str_eq(l.names[0], "c.png");
	memset(&l, 0, sizeof l);
	snprintf(path, sizeof path, "%s/i", tmpdir);
	cr_assert_eq(kiln_storage_list(st, path, "x.*", collect, &l, NULL, 0), KILN_OK);
	cr_assert_eq(l.count, 1u);
	cr_expect_str_eq(l.names[0], "n2/x.png");
	kiln_storage_destroy(st);
}

Test(storage_file, batches_report_each_item)
{
	kiln_storage *st = make_storage(NULL);
	char uris[3][256];
	snprintf(uris[0], sizeof uris[0], "%s/b/one", tmpdir);
	snprintf(uris[1], sizeof uris[1], "%s/b/../two", tmpdir);
	snprintf(uris[2], sizeof uris[2], "%s/b/three", tmpdir);
	kiln_storage_put_item puts[3] = {{.uri = uris[0], .data = "1", .size = 1},
					 {.uri = uris[1], .data = "2", .size = 1},
					 {.uri = uris[2], .data = "3", .size = 1}};
	cr_expect_eq(kiln_storage_put_many(st, puts, 3), KILN_ERR_INVALID_ARG);
	cr_expect_eq(puts[0].status, KILN_OK);
	cr_expect_eq(puts[1].status, KILN_ERR_INVALID_ARG);
	cr_expect_neq(puts[1].msg[0], '\0');
	cr_expect_eq(puts[2].status, KILN_OK);
	kiln_buf bufs[3];
	kiln_storage_get_item gets[3];
	for (int i = 0; i < 3; i++) {
		kiln_buf_init(&bufs[i], 16);
		gets[i] = (kiln_storage_get_item){.uri = uris[i], .out = &bufs[i]};
	}
	snprintf(uris[1], sizeof uris[1], "%s/b/missing", tmpdir);
	cr_expect_eq(kiln_storage_get_many(st, gets, 3), KILN_ERR_NOT_FOUND);
	cr_expect_eq(gets[0].status, KILN_OK);
	cr_expect_eq(gets[1].status, KILN_ERR_NOT_FOUND);
	cr_expect_eq(gets[2].status, KILN_OK);
	cr_expect_eq(bufs[2].len, 1u);
	cr_expect_eq(bufs[2].data[0], '3');
	cr_expect_eq(kiln_storage_get_many(st, gets, 0), KILN_OK);
	for (int i = 0; i < 3; i++)
		kiln_buf_free(&bufs[i]);
	kiln_storage_destroy(st);
}

/* ---- configuration ---- */

Test(storage_config, refuses_bad_settings)
{
	kiln_storage_config cfg;
	kiln_storage *st = NULL;
	char msg[256];
	kiln_storage_config_init(&cfg);
	cfg.part_size = 4 << 20;
	cr_expect_eq(kiln_storage_create(&cfg, &st, msg, sizeof msg), KILN_ERR_INVALID_ARG);
	cr_expect(strstr(msg, "part size"), "%s", msg);
	cr_expect_null(st);
	static const char *const endpoints[] = {"ftp://x", "http://", "http://h/path", "h:9000",
						"http://user@h", "http://h?x"};
	for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
		kiln_storage_config_init(&cfg);
		cfg.endpoint = endpoints[i];
		cr_expect_eq(kiln_storage_create(&cfg, &st, msg, sizeof msg), KILN_ERR_INVALID_ARG,
			     "%s", endpoints[i]);
	}
	kiln_storage_config_init(&cfg);
	cfg.access_key_id = "AKID";
	cr_expect_eq(kiln_storage_create(&cfg, &st, msg, sizeof msg), KILN_ERR_INVALID_ARG);
	cfg.secret_access_key = "secret\r\nX-Injected: 1";
	cr_expect_eq(kiln_storage_create(&cfg, &st, msg, sizeof msg), KILN_ERR_INVALID_ARG);
	cr_expect_null(strstr(msg, "secret"), "messages never hold credentials: %s", msg);
	/* The environment fills what the config leaves out. */
	setenv("AWS_ENDPOINT_URL", "not a url", 1);
	cr_expect_eq(kiln_storage_create(NULL, &st, msg, sizeof msg), KILN_ERR_INVALID_ARG);
	setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
	cr_expect_eq(kiln_storage_create(NULL, &st, msg, sizeof msg), KILN_OK, "%s", msg);
	kiln_storage_destroy(st);
}

/* ---- retries, caps and wire format against a fault-injecting server ---- */

static fault_server fs;

static void start_fault(void)
{
	fault_init(&fs);
	cr_assert(fault_start(&fs));
	/* The retry warnings are expected here; keep the test output readable. */
	kiln_log_set_level(KILN_LOG_ERROR);
}

static void stop_fault(void)
{
	fault_stop(&fs);
}

/* A default config pointing at the fault server (endpoint: cap bytes, kept by cfg). */
static void fault_config(kiln_storage_config *cfg, char *endpoint, size_t cap)
{
	snprintf(endpoint, cap, "http://127.0.0.1:%d", fs.port);
	kiln_storage_config_init(cfg);
	cfg->endpoint = endpoint;
}

/* The first failures requests get HTTP status with S3 error code; the rest succeed. */
static void fail_then_ok(int failures, int status, const char *code)
{
	fs.mode = FAULT_FAIL_THEN_OK;
	fs.failures = failures;
	fs.status = status;
	fs.code = code;
}

static kiln_storage *fault_storage(unsigned attempts, const char *token)
{
	char endpoint[64];
	kiln_storage_config cfg;
	fault_config(&cfg, endpoint, sizeof endpoint);
	cfg.access_key_id = "AKIDFAULTTEST";
	cfg.secret_access_key = "fault/secret/key";
	cfg.session_token = token;
	cfg.max_attempts = attempts;
	cfg.backoff_base_ms = 1;
	cfg.backoff_max_ms = 5000;
	cfg.jitter_seed = 42;
	cfg.multipart_threshold = 5 * MIB;
	cfg.part_size = 5 * MIB;
	return make_storage(&cfg);
}

TestSuite(storage_retry, .init = start_fault, .fini = stop_fault, .timeout = 30);

static kiln_status fault_get(kiln_storage *st, char *msg, size_t cap, kiln_buf *b)
{
	return kiln_storage_get(st, "s3://kiln-test/some/key.png", b, msg, cap);
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

Test(storage_retry, slowdown_is_retried_until_it_succeeds)
{
	fail_then_ok(3, 503, "SlowDown");
	fs.retry_after_s = 0;
	kiln_storage *st = fault_storage(5, NULL);
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_assert_eq(fault_get(st, msg, sizeof msg, &b), KILN_OK, "%s", msg);
	cr_expect_eq(b.len, 5u);
	cr_expect_eq(memcmp(b.data, "hello", 5), 0, "error bodies never reach the caller's buffer");
	cr_expect_eq(atomic_load(&fs.requests), 4);
	kiln_storage_stats stats;
	kiln_storage_get_stats(st, &stats);
	cr_expect_eq(stats.http_requests, 4u);
	cr_expect_eq(stats.http_retries, 3u);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, server_errors_give_up_after_max_attempts)
{
	fail_then_ok(1000, 500, "InternalError");
	kiln_storage *st = fault_storage(3, NULL);
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_expect_eq(fault_get(st, msg, sizeof msg, &b), KILN_ERR_IO);
	cr_expect_eq(atomic_load(&fs.requests), 3);
	cr_expect(strstr(msg, "HTTP 500 InternalError after 3 attempts"), "%s", msg);
	cr_expect(strstr(msg, "kiln-test/some/key.png"), "%s", msg);
	cr_expect_null(strstr(msg, "fault/secret"), "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, backoff_grows_exponentially_with_jitter)
{
	fail_then_ok(1000, 503, "SlowDown");
	char endpoint[64];
	kiln_storage_config cfg;
	fault_config(&cfg, endpoint, sizeof endpoint);
	cfg.max_attempts = 4;
	cfg.backoff_base_ms = 60;
	cfg.backoff_max_ms = 5000;
	cfg.jitter_seed = 7;
	kiln_storage *st = make_storage(&cfg);
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_expect_eq(fault_get(st, NULL, 0, &b), KILN_ERR_IO);
	double elapsed = seconds_since(&t0);
	/* Waits of 60, 120 and 240 ms, each between half and all of that: 210 to 420 ms. */
	cr_expect(elapsed >= 0.2 && elapsed < 2.0, "took %.3f s", elapsed);
	cr_expect_eq(atomic_load(&fs.requests), 4);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, too_many_requests_is_retried)
{
	fail_then_ok(1, 429, "TooManyRequests");
	kiln_storage *st = fault_storage(5, NULL);
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_expect_eq(fault_get(st, NULL, 0, &b), KILN_OK);
	cr_expect_eq(atomic_load(&fs.requests), 2);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

static void expect_not_retried(int status, const char *code, kiln_status expected)
{
	fail_then_ok(1000, status, code);
	kiln_storage *st = fault_storage(5, NULL);
	char msg[KILN_STORAGE_MSG_MAX], want[64];
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_expect_eq(fault_get(st, msg, sizeof msg, &b), expected, "HTTP %d", status);
	cr_expect_eq(atomic_load(&fs.requests), 1, "HTTP %d must not be retried", status);
	snprintf(want, sizeof want, "HTTP %d %s", status, code);
	cr_expect(strstr(msg, want), "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, forbidden_is_not_retried)
{
	expect_not_retried(403, "AccessDenied", KILN_ERR_PERMISSION);
}

Test(storage_retry, not_found_is_not_retried)
{
	expect_not_retried(404, "NoSuchKey", KILN_ERR_NOT_FOUND);
}

Test(storage_retry, bad_request_is_not_retried)
{
	expect_not_retried(400, "InvalidRequest", KILN_ERR_IO);
}

Test(storage_retry, closed_connections_are_retried)
{
	fs.mode = FAULT_CLOSE_THEN_OK;
	fs.failures = 2;
	kiln_storage *st = fault_storage(5, NULL);
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_expect_eq(fault_get(st, msg, sizeof msg, &b), KILN_OK, "%s", msg);
	cr_expect_eq(atomic_load(&fs.requests), 3);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, timeouts_are_retried)
{
	fs.mode = FAULT_SILENT;
	char endpoint[64];
	kiln_storage_config cfg;
	fault_config(&cfg, endpoint, sizeof endpoint);
	cfg.max_attempts = 2;
	cfg.backoff_base_ms = 1;
	cfg.request_timeout_ms = 200;
	kiln_storage *st = make_storage(&cfg);
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	cr_expect_eq(fault_get(st, msg, sizeof msg, &b), KILN_ERR_IO);
	cr_expect_eq(atomic_load(&fs.requests), 2);
	cr_expect(strstr(msg, "timed out") && strstr(msg, "after 2 attempts"), "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, retry_after_is_honoured)
{
	fail_then_ok(1, 503, "SlowDown");
	fs.retry_after_s = 1;
	kiln_storage *st = fault_storage(3, NULL);
	kiln_buf b;
	kiln_buf_init(&b, 1024);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_expect_eq(fault_get(st, NULL, 0, &b), KILN_OK);
	double elapsed = seconds_since(&t0);
	cr_expect(elapsed >= 0.95, "waited %.3f s; the server asked for 1 s (backoff alone is 1 ms)",
		  elapsed);
	cr_expect_eq(atomic_load(&fs.requests), 2);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, huge_body_hits_the_cap)
{
	fs.mode = FAULT_HUGE_BODY;
	kiln_storage *st = fault_storage(5, NULL);
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_buf b;
	kiln_buf_init(&b, MIB);
	cr_expect_eq(fault_get(st, msg, sizeof msg, &b), KILN_ERR_TOO_LARGE);
	cr_expect(b.len <= MIB);
	cr_expect_eq(atomic_load(&fs.requests), 1, "an oversized object is not retried");
	cr_expect(strstr(msg, "larger than"), "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_retry, failed_multipart_upload_is_aborted)
{
	fs.mode = FAULT_MULTIPART;
	fs.status = 403;
	fs.code = "AccessDenied";
	kiln_storage *st = fault_storage(5, NULL);
	size_t size = 11 * MIB;  /* parts of 5, 5 and 1 MiB */
	uint8_t *data = calloc(1, size);
	char msg[KILN_STORAGE_MSG_MAX];
	cr_expect_eq(kiln_storage_put(st, "s3://kiln-test/big.bin", data, size, msg, sizeof msg),
		     KILN_ERR_PERMISSION);
	cr_expect(strstr(msg, "UploadPart") && strstr(msg, "403 AccessDenied"), "%s", msg);
	cr_expect_eq(atomic_load(&fs.aborts), 1);
	cr_expect_eq(atomic_load(&fs.completes), 0);
	kiln_storage_stats stats;
	kiln_storage_get_stats(st, &stats);
	cr_expect_eq(stats.multipart_aborts, 1u);
	/* The abort names the upload the server gave, decoded from its XML and re-encoded. */
	cr_expect(strstr(fs.last_head, "DELETE /kiln-test/big.bin?uploadId=upload%261 "), "%s",
		  fs.last_head);
	free(data);
	kiln_storage_destroy(st);
}

Test(storage_retry, multipart_upload_completes)
{
	fs.mode = FAULT_OK;
	kiln_storage *st = fault_storage(5, NULL);
	size_t size = 11 * MIB;
	uint8_t *data = calloc(1, size);
	char msg[KILN_STORAGE_MSG_MAX];
	cr_expect_eq(kiln_storage_put(st, "s3://kiln-test/big.bin", data, size, msg, sizeof msg),
		     KILN_OK, "%s", msg);
	cr_expect_eq(atomic_load(&fs.requests), 5, "create, three parts, complete");
	cr_expect_eq(atomic_load(&fs.completes), 1);
	cr_expect_eq(atomic_load(&fs.aborts), 0);
	/* The Complete document lists every part, in order, with the ETags the parts returned. */
	const char *body = (const char *)fs.last_body.data;
	cr_assert_not_null(body);
	const char *p1 = memmem(body, fs.last_body.len, "<PartNumber>1</PartNumber>", 26);
	const char *p3 = memmem(body, fs.last_body.len, "<PartNumber>3</PartNumber>", 26);
	cr_expect(p1 && p3 && p1 < p3);
	cr_expect(memmem(body, fs.last_body.len, "<ETag>\"0123456789abcdef0123456789abcdef\"</ETag>", 46));
	free(data);
	kiln_storage_destroy(st);
}

Test(storage_retry, batches_run_concurrently_within_the_limit)
{
	enum { N = 16 };
	fs.mode = FAULT_SLOW;
	fs.delay_ms = 200;
	char endpoint[64];
	kiln_storage_config cfg;
	fault_config(&cfg, endpoint, sizeof endpoint);
	cfg.concurrency = 4;
	kiln_storage *st = make_storage(&cfg);
	static char uris[N][64];
	static kiln_buf bufs[N];
	static kiln_storage_get_item items[N];
	for (int i = 0; i < N; i++) {
		snprintf(uris[i], sizeof uris[i], "s3://kiln-test/c/%d.png", i);
		kiln_buf_init(&bufs[i], 64);
		items[i] = (kiln_storage_get_item){.uri = uris[i], .out = &bufs[i]};
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(kiln_storage_get_many(st, items, N), KILN_OK, "%s", items[0].msg);
	double elapsed = seconds_since(&t0);
	cr_expect_eq(atomic_load(&fs.requests), N);
	/* The limit holds however the machine is loaded: never more than 4 at once, so 16
	 * requests of 200 ms take at least 0.8 s. That they overlap at all shows in the peak
	 * and in finishing well before the 3.2 s that one at a time would take. */
	int peak = atomic_load(&fs.open_peak);
	cr_expect(peak >= 2 && peak <= 4, "the server saw %d requests at once", peak);
	cr_expect(elapsed >= 0.78 && elapsed < 2.4, "took %.3f s", elapsed);
	for (int i = 0; i < N; i++) {
		cr_expect_eq(bufs[i].len, 5u);
		kiln_buf_free(&bufs[i]);
	}
	kiln_storage_destroy(st);
}

/* Re-signs the last request the server received with botocore, from what was on the wire
 * (path and query as sent, the headers kiln said it signed, the body as received), and
 * compares with the Authorization header kiln sent. */
static void expect_wire_signature_matches(const char *token)
{
	char auth[1024], date[64], host[128], signed_names[256];
	cr_assert(fault_last_header(&fs, "Authorization", auth, sizeof auth));
	cr_assert(fault_last_header(&fs, "x-amz-date", date, sizeof date));
	cr_assert(fault_last_header(&fs, "Host", host, sizeof host));
	const char *sh = strstr(auth, "SignedHeaders=");
	cr_assert_not_null(sh);
	snprintf(signed_names, sizeof signed_names, "%.*s", (int)strcspn(sh + 14, ","), sh + 14);
	cr_expect(strstr(signed_names, "host") && strstr(signed_names, "x-amz-content-sha256") &&
		  strstr(signed_names, "x-amz-date"), "%s", signed_names);
	cr_expect_eq(strstr(signed_names, "x-amz-security-token") != NULL, token != NULL, "%s",
		     signed_names);

	char method[16], target[4096];
	cr_assert_eq(sscanf(fs.last_head, "%15s %4095s", method, target), 2);
	char url[4352];
	snprintf(url, sizeof url, "http://%s%s", host, target);
	kiln_sigv4_kv headers[8];
	char values[8][2048], names[8][64];
	size_t nh = 0;
	for (char *name = strtok(signed_names, ";"); name && nh < 8; name = strtok(NULL, ";")) {
		snprintf(names[nh], sizeof names[nh], "%s", name);
		cr_assert(fault_last_header(&fs, name, values[nh], sizeof values[nh]), "%s", name);
		headers[nh] = (kiln_sigv4_kv){names[nh], values[nh]};
		nh++;
	}
	kiln_buf in;
	kiln_buf_init(&in, 4 << 20);
	ref_begin(&in, 'W');
	ref_field_str(&in, method);
	ref_field_str(&in, url);
	ref_field_pairs(&in, headers, nh);
	ref_field(&in, fs.last_body.data, fs.last_body.len);
	ref_field_str(&in, "AKIDFAULTTEST");
	ref_field_str(&in, "fault/secret/key");
	ref_field_str(&in, token);
	ref_field_str(&in, "us-east-1");
	ref_field_str(&in, date);
	ref_end(&in);
	char ref[1][1024];
	cr_assert_eq(ref_run(&in, ref[0], sizeof ref[0], 1), 1u, "botocore reference failed");
	cr_expect_str_eq(auth, ref[0], "request: %s %s", method, target);
	kiln_buf_free(&in);
}

Test(storage_retry, signed_put_on_the_wire_matches_botocore)
{
	const char *token = "IQoJb3JpZ2luX2VjE+/token==";
	kiln_storage *st = fault_storage(1, token);
	static const uint8_t body[] = "\x00\xff binary payload \r\n";
	char msg[KILN_STORAGE_MSG_MAX];
	cr_assert_eq(kiln_storage_put(st, "s3://kiln-test/out dir/ünïcødé+(1)~.dds", body,
				      sizeof body, msg, sizeof msg), KILN_OK, "%s", msg);
	cr_expect(strstr(fs.last_head,
			 "PUT /kiln-test/out%20dir/%C3%BCn%C3%AFc%C3%B8d%C3%A9%2B%281%29~.dds "),
		  "%s", fs.last_head);
	char token_sent[128];
	cr_expect(fault_last_header(&fs, "x-amz-security-token", token_sent, sizeof token_sent));
	cr_expect_str_eq(token_sent, token);
	expect_wire_signature_matches(token);
	kiln_storage_destroy(st);
}

static kiln_status ignore_entry(void *ctx, const kiln_storage_entry *e)
{
	return KILN_OK;
}

Test(storage_retry, signed_listing_on_the_wire_matches_botocore)
{
	kiln_storage *st = fault_storage(1, NULL);
	char msg[KILN_STORAGE_MSG_MAX];
	cr_assert_eq(kiln_storage_list(st, "s3://kiln-test/in put/ü=&+/", "*.png", ignore_entry, NULL,
				       msg, sizeof msg), KILN_OK, "%s", msg);
	cr_expect(strstr(fs.last_head, "GET /kiln-test?list-type=2&prefix=in%20put%2F%C3%BC%3D%26%2B%2F "),
		  "%s", fs.last_head);
	expect_wire_signature_matches(NULL);
	kiln_storage_destroy(st);
}

/* ---- end to end against s3rver ---- */

static s3rver srv;

static void start_s3rver(void)
{
	cr_assert(s3rver_start(&srv, "kiln-test", "--service-endpoint", "localhost"),
		  "could not start tools/s3rver.sh (needs nodejs and npm)");
}

static void stop_s3rver(void)
{
	s3rver_stop(&srv);
}

static kiln_storage *s3rver_storage(kiln_s3_addressing addressing, unsigned page_size)
{
	kiln_storage_config cfg;
	char endpoint[64];
	kiln_storage_config_init(&cfg);
	if (addressing == KILN_S3_ADDRESSING_VIRTUAL_HOST) {
		/* curl resolves *.localhost to loopback, and s3rver (with --service-endpoint
		 * localhost) takes the bucket from a host named <bucket>.s3.localhost. */
		snprintf(endpoint, sizeof endpoint, "http://s3.localhost:%d", srv.port);
		cfg.endpoint = endpoint;
	} else {
		cfg.endpoint = srv.endpoint;
	}
	cfg.addressing = addressing;
	cfg.access_key_id = "S3RVER";  /* s3rver knows this key (it does not check signatures) */
	cfg.secret_access_key = "S3RVER";
	cfg.multipart_threshold = 5 * MIB;
	cfg.part_size = 5 * MIB;
	cfg.list_page_size = page_size;
	cfg.backoff_base_ms = 10;
	return make_storage(&cfg);
}

TestSuite(storage_s3, .init = start_s3rver, .fini = stop_s3rver, .timeout = 150);

Test(storage_s3, round_trip_stat_and_not_found)
{
	kiln_storage *st = s3rver_storage(KILN_S3_ADDRESSING_AUTO, 0);
	char msg[KILN_STORAGE_MSG_MAX];
	static uint8_t data[100000];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 131 + 7);
	cr_assert_eq(kiln_storage_put(st, "s3://kiln-test/out/a.dds", data, sizeof data, msg,
				      sizeof msg), KILN_OK, "%s", msg);
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	cr_assert_eq(kiln_storage_get(st, "s3://kiln-test/out/a.dds", &b, msg, sizeof msg), KILN_OK,
		     "%s", msg);
	cr_assert_eq(b.len, sizeof data);
	cr_expect_eq(memcmp(b.data, data, sizeof data), 0);
	uint64_t size = 0;
	cr_expect_eq(kiln_storage_stat(st, "s3://kiln-test/out/a.dds", &size, msg, sizeof msg), KILN_OK,
		     "%s", msg);
	cr_expect_eq(size, sizeof data);
	bool exists = true;
	cr_expect_eq(kiln_storage_exists(st, "s3://kiln-test/out/missing.dds", &exists, NULL, 0), KILN_OK);
	cr_expect_not(exists);
	cr_expect_eq(kiln_storage_get(st, "s3://kiln-test/out/missing.dds", &b, msg, sizeof msg),
		     KILN_ERR_NOT_FOUND);
	cr_expect(strstr(msg, "HTTP 404 NoSuchKey"), "%s", msg);
	cr_expect_eq(kiln_storage_get(st, "s3://no-such-bucket/x", &b, msg, sizeof msg),
		     KILN_ERR_NOT_FOUND);
	cr_expect(strstr(msg, "NoSuchBucket"), "%s", msg);
	kiln_buf small;
	kiln_buf_init(&small, 1000);
	cr_expect_eq(kiln_storage_get(st, "s3://kiln-test/out/a.dds", &small, NULL, 0),
		     KILN_ERR_TOO_LARGE);
	kiln_buf_free(&small);
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

Test(storage_s3, multipart_upload_reads_back_identical)
{
	kiln_storage *st = s3rver_storage(KILN_S3_ADDRESSING_PATH, 0);
	size_t size = 12 * MIB + 12345;
	uint8_t *data = malloc(size);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < size; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[i] = (uint8_t)x;
	}
	char msg[KILN_STORAGE_MSG_MAX];
	cr_assert_eq(kiln_storage_put(st, "s3://kiln-test/big/mip chain.ktx2", data, size, msg,
				      sizeof msg), KILN_OK, "%s", msg);
	kiln_storage_stats stats;
	kiln_storage_get_stats(st, &stats);
	cr_expect_eq(stats.http_requests, 5u, "create, 3 parts of 5+5+2 MiB, complete");
	kiln_buf b;
	kiln_buf_init(&b, 16 * MIB);
	cr_assert_eq(kiln_storage_get(st, "s3://kiln-test/big/mip chain.ktx2", &b, msg, sizeof msg),
		     KILN_OK, "%s", msg);
	cr_assert_eq(b.len, size);
	cr_expect_eq(memcmp(b.data, data, size), 0);
	kiln_buf_free(&b);
	free(data);
	kiln_storage_destroy(st);
}

Test(storage_s3, awkward_keys_survive)
{
	kiln_storage *st = s3rver_storage(KILN_S3_ADDRESSING_PATH, 0);
	static const char *const keys[] = {
		"s3://kiln-test/with space/and  two.png",
		"s3://kiln-test/ünïcødé/画像.png",
		"s3://kiln-test/sym+bols=&;,@$!'()*~_-%41.png",
	};
	char msg[KILN_STORAGE_MSG_MAX];
	for (size_t i = 0; i < 3; i++)
		cr_assert_eq(kiln_storage_put(st, keys[i], keys[i], strlen(keys[i]), msg, sizeof msg),
			     KILN_OK, "%s: %s", keys[i], msg);
	kiln_buf b;
	kiln_buf_init(&b, 4096);
	for (size_t i = 0; i < 3; i++) {
		cr_assert_eq(kiln_storage_get(st, keys[i], &b, msg, sizeof msg), KILN_OK, "%s", msg);
		cr_expect_eq(b.len, strlen(keys[i]));
		cr_expect_eq(memcmp(b.data, keys[i], b.len), 0, "%s", keys[i]);
	}
	struct listing l = {0};
	cr_assert_eq(kiln_storage_list(st, "s3://kiln-test/", "*.png", collect, &l, msg, sizeof msg),
		     KILN_OK, "%s", msg);
	cr_assert_eq(l.count, 3u);
	cr_expect_str_eq(l.names[0], "sym+bols=&;,@$!'()*~_-%41.png");
	cr_expect_str_eq(l.names[1], "with space/and  two.png");
	cr_expect_str_eq(l.names[2], "ünïcødé/画像.png");
	kiln_buf_free(&b);
	kiln_storage_destroy(st);
}

struct uri_list {
	char uris[128][128];
	size_t count;
};

static kiln_status collect_uris(void *ctx, const kiln_storage_entry *e)
{
	struct uri_list *l = ctx;
	if (l->count == 128)
		return KILN_ERR_TOO_LARGE;
	snprintf(l->uris[l->count++], sizeof l->uris[0], "%s", e->uri);
	return KILN_OK;
}

Test(storage_s3, batches_and_paged_listing)
{
	enum { N = 50 };
	kiln_storage *st = s3rver_storage(KILN_S3_ADDRESSING_PATH, 7);
	static char uris[N][64];
	static uint8_t payload[N][3000];
	static kiln_storage_put_item puts[N];
	for (int i = 0; i < N; i++) {
		snprintf(uris[i], sizeof uris[i], "s3://kiln-test/batch/img-%03d.dds", i);
		memset(payload[i], i + 1, sizeof payload[i]);
		puts[i] = (kiln_storage_put_item){.uri = uris[i], .data = payload[i],
						  .size = sizeof payload[i] - (size_t)i};
	}
	cr_assert_eq(kiln_storage_put_many(st, puts, N), KILN_OK, "%s", puts[0].msg);
	for (int i = 0; i < N; i++)
		cr_expect_eq(puts[i].status, KILN_OK, "%d: %s", i, puts[i].msg);
	cr_assert_eq(kiln_storage_put(st, "s3://kiln-test/batch-other", "x", 1, NULL, 0), KILN_OK);

	/* 50 keys in pages of 7: eight pages, joined by continuation tokens. */
	static struct uri_list l;
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_storage_stats before, after;
	kiln_storage_get_stats(st, &before);
	cr_assert_eq(kiln_storage_list(st, "s3://kiln-test/batch/", NULL, collect_uris, &l, msg,
				       sizeof msg), KILN_OK, "%s", msg);
	kiln_storage_get_stats(st, &after);
	cr_expect_eq(after.http_requests - before.http_requests, 8u);
	cr_assert_eq(l.count, (size_t)N);
	for (int i = 0; i < N; i++)
		cr_expect_str_eq(l.uris[i], uris[i]);

	static kiln_buf bufs[N + 1];
	static kiln_storage_get_item gets[N + 1];
	for (int i = 0; i < N; i++) {
		kiln_buf_init(&bufs[i], 4096);
		gets[i] = (kiln_storage_get_item){.uri = l.uris[i], .out = &bufs[i]};
	}
	kiln_buf_init(&bufs[N], 4096);
	gets[N] = (kiln_storage_get_item){.uri = "s3://kiln-test/batch/missing", .out = &bufs[N]};
	cr_expect_eq(kiln_storage_get_many(st, gets, N + 1), KILN_ERR_NOT_FOUND);
	for (int i = 0; i < N; i++) {
		cr_expect_eq(gets[i].status, KILN_OK, "%d: %s", i, gets[i].msg);
		cr_expect_eq(bufs[i].len, sizeof payload[i] - (size_t)i);
		cr_expect_eq(memcmp(bufs[i].data, payload[i], bufs[i].len), 0, "%d", i);
		kiln_buf_free(&bufs[i]);
	}
	cr_expect_eq(gets[N].status, KILN_ERR_NOT_FOUND);
	kiln_buf_free(&bufs[N]);
	kiln_storage_destroy(st);
}

Test(storage_s3, virtual_host_addressing)
{
	kiln_storage *st = s3rver_storage(KILN_S3_ADDRESSING_VIRTUAL_HOST, 0);
	char msg[KILN_STORAGE_MSG_MAX];
	cr_assert_eq(kiln_storage_put(st, "s3://kiln-test/vhost/a.png", "vhost", 5, msg, sizeof msg),
		     KILN_OK, "%s", msg);
	kiln_buf b;
	kiln_buf_init(&b, 64);
	cr_assert_eq(kiln_storage_get(st, "s3://kiln-test/vhost/a.png", &b, msg, sizeof msg), KILN_OK,
		     "%s", msg);
	cr_expect_eq(b.len, 5u);
	struct listing l = {0};
	cr_assert_eq(kiln_storage_list(st, "s3://kiln-test/vhost/", NULL, collect, &l, msg, sizeof msg),
		     KILN_OK, "%s", msg);
	cr_expect_eq(l.count, 1u);
	/* The same object through path-style addressing: the bucket really came from the host. */
	kiln_storage *path = s3rver_storage(KILN_S3_ADDRESSING_PATH, 0);
	cr_expect_eq(kiln_storage_get(path, "s3://kiln-test/vhost/a.png", &b, msg, sizeof msg), KILN_OK,
		     "%s", msg);
	kiln_buf_free(&b);
	kiln_storage_destroy(path);
	kiln_storage_destroy(st);
}
