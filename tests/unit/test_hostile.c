/* Hostile inputs through the real job path (issue 7): a folder of PngSuite's broken files
 * (copied from the shared data at test time), good files truncated at every sixteenth of
 * their length, bit flips, a PNG declaring 100000x100000 pixels, empty and non-PNG files,
 * a 250-character name, and a list input with a '..' URI, through `kiln run` ($KILN_BIN):
 * exit 1, the failure list names exactly the bad items, every good output reads back.
 * Then a real `kiln scheduler` process fed job specs with huge, deeply nested and wrongly
 * typed values over HTTP (what test_sched_http.c does not cover already) and malformed or
 * oversized ZeroMQ frames from a rogue DEALER: it stays up and still runs a real job with
 * a real `kiln worker`. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zmq.h>

#include "common/buf.h"
#include "common/container.h"
#include "proc_util.h"
#include "sched_sim.h"
#include "testutil.h"
#include "tests/pngsuite.h"

static char dir[128];
static char bin[PATH_MAX];
static pid_t sched_pid = -1, worker_pid = -1;

static void setup(void)
{
	kiln_bin_abs(bin);
	sim_mkdtemp(dir, sizeof dir, "hostile");
}

#define stop(pid) proc_kill(pid, SIGKILL)

static void teardown(void)
{
	stop(&worker_pid);
	stop(&sched_pid);
	sim_rmdir(dir);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 120);

/* ---- files ------------------------------------------------------------------------------ */

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

static void read_file(const char *path, kiln_buf *buf)
{
	kiln_buf_init(buf, 1 << 26);
	cr_assert_eq(kiln_buf_read_file(buf, path), KILN_OK, "%s", path);
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Appends a chunk with a correct CRC. */
static size_t put_chunk(uint8_t *p, const char *type, const uint8_t *data, uint32_t len)
{
	put_be32(p, len);
	memcpy(p + 4, type, 4);
	if (len)
		memcpy(p + 8, data, len);
	put_be32(p + 8 + len, (uint32_t)crc32(0, p + 4, 4 + len));
	return 12 + (size_t)len;
}

/* A well-formed PNG whose IHDR declares w x h RGBA8 and whose IDAT holds one tiny zlib
 * stream: only a decoder that allocates from the header before checking it would care. */
static size_t huge_png(uint8_t *out, uint32_t w, uint32_t h)
{
	static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	uint8_t ihdr[13] = {0}, zdata[64];
	put_be32(ihdr, w);
	put_be32(ihdr + 4, h);
	ihdr[8] = 8, ihdr[9] = 6;
	uLongf zlen = sizeof zdata;
	static const uint8_t row[16] = {0};
	cr_assert_eq(compress(zdata, &zlen, row, sizeof row), Z_OK);
	memcpy(out, sig, 8);
	size_t n = 8;
	n += put_chunk(out + n, "IHDR", ihdr, 13);
	n += put_chunk(out + n, "IDAT", zdata, (uint32_t)zlen);
	n += put_chunk(out + n, "IEND", NULL, 0);
	return n;
}

/* Offset and length of the data of the first IDAT chunk of a PNG in buf. */
static void find_idat(const kiln_buf *buf, size_t *off, size_t *len)
{
	size_t p = 8;
	while (p + 12 <= buf->len) {
		uint32_t n = (uint32_t)buf->data[p] << 24 | (uint32_t)buf->data[p + 1] << 16 |
			     (uint32_t)buf->data[p + 2] << 8 | buf->data[p + 3];
		if (memcmp(buf->data + p + 4, "IDAT", 4) == 0) {
			*off = p + 8, *len = n;
			return;
		}
		p += 12 + (size_t)n;
	}
	cr_assert_fail("no IDAT");
}

/* Names under in/ that must fail and that must succeed, as the test builds them. */
#define MAX_NAMES 128
static char bad[MAX_NAMES][256], good[MAX_NAMES][256];
static size_t nbad, ngood;

static void add_name(char (*list)[256], size_t *n, const char *name)
{
	cr_assert_lt(*n, MAX_NAMES);
	snprintf(list[(*n)++], 256, "%s", name);
}

static void copy_shared(const char *name, const char *as, bool is_bad)
{
	char src[PATH_MAX], dst[PATH_MAX];
	kiln_buf b;
	read_file(test_data_path(src, sizeof src, "pngsuite", name), &b);
	snprintf(dst, sizeof dst, "%s/in/%s", dir, as);
	write_file(dst, b.data, b.len);
	kiln_buf_free(&b);
	add_name(is_bad ? bad : good, is_bad ? &nbad : &ngood, as);
}

/* Builds dir/in with every hostile kind beside good files. */
static void build_inputs(void)
{
	char cmd[PATH_MAX + 256], path[PATH_MAX];
	snprintf(cmd, sizeof cmd, "'%s' samples -o %s/in >/dev/null", bin, dir);
	cr_assert_eq(system(cmd), 0, "kiln samples failed");
	static const char *const samples[] = {"checker-alpha.png", "gradient.png", "noise.png",
					      "pixel.png", "solid-5x3.png", "wide.png"};
	for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
		add_name(good, &ngood, samples[i]);

	/* PngSuite: every x*.png is broken; two good ones beside them */
	static pngsuite_list broken;
	pngsuite_list_files(&broken, PNGSUITE_BROKEN);
	for (size_t i = 0; i < broken.n; i++)
		copy_shared(broken.names[i], broken.names[i], true);
	cr_assert_geq(broken.n, 10, "PngSuite's x*.png files are there");
	copy_shared("basn6a16.png", "ok-basn6a16.png", false);
	copy_shared("basi3p02.png", "ok-basi3p02.png", false);

	/* truncated at every sixteenth (the zeroth is the empty file) */
	kiln_buf noise;
	snprintf(path, sizeof path, "%s/in/noise.png", dir);
	read_file(path, &noise);
	for (size_t k = 0; k < 16; k++) {
		char name[64];
		snprintf(name, sizeof name, "cut-%02zu.png", k);
		snprintf(path, sizeof path, "%s/in/%s", dir, name);
		write_file(path, noise.data, noise.len * k / 16);
		add_name(bad, &nbad, name);
	}

	/* bit flips inside IDAT: its CRC no longer matches, a critical-chunk error */
	size_t idat, idat_len;
	find_idat(&noise, &idat, &idat_len);
	unsigned seed = 7;  /* fixed: the same files on every run */
	for (int k = 0; k < 8; k++) {
		snprintf(path, sizeof path, "%s/in/noise.png", dir);
		kiln_buf_free(&noise);
		read_file(path, &noise);
		for (int f = 0; f <= k % 3; f++) {
			size_t bit = (size_t)rand_r(&seed) % (idat_len * 8);
			noise.data[idat + bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		char name[64];
		snprintf(name, sizeof name, "flip-%d.png", k);
		snprintf(path, sizeof path, "%s/in/%s", dir, name);
		write_file(path, noise.data, noise.len);
		add_name(bad, &nbad, name);
	}
	kiln_buf_free(&noise);

	uint8_t huge[256];
	snprintf(path, sizeof path, "%s/in/huge-100000x100000.png", dir);
	write_file(path, huge, huge_png(huge, 100000, 100000));
	add_name(bad, &nbad, "huge-100000x100000.png");

	snprintf(path, sizeof path, "%s/in/text.png", dir);
	static const char text[] = "this is a text file that calls itself a PNG\n";
	write_file(path, text, sizeof text - 1);
	add_name(bad, &nbad, "text.png");

	/* a valid name of 250 bytes (NAME_MAX is 255): a good input like any other */
	char longname[251];
	memset(longname, 'l', 246);
	memcpy(longname + 246, ".png", 5);
	kiln_buf px;
	snprintf(path, sizeof path, "%s/in/pixel.png", dir);
	read_file(path, &px);
	snprintf(path, sizeof path, "%s/in/%s", dir, longname);
	write_file(path, px.data, px.len);
	kiln_buf_free(&px);
	add_name(good, &ngood, longname);
}

/* Runs kiln with args (a shell fragment); stdout and stderr into dir. */
#define kiln(...) proc_kiln(bin, NULL, dir, "stdout", "stderr", __VA_ARGS__)

static json_t *stdout_json(void)
{
	char path[256];
	snprintf(path, sizeof path, "%s/stdout", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	cr_assert_not_null(j, "stdout is not JSON: %s", err.text);
	return j;
}

/* The base name of every failure's input, checked against the expected bad names. */
static void expect_failures_exactly(const json_t *job, char (*want)[256], size_t nwant)
{
	const json_t *failures = json_object_get(job, "failures");
	cr_assert(json_is_array(failures));
	bool seen[MAX_NAMES] = {0};
	size_t i;
	const json_t *f;
	json_array_foreach(failures, i, f) {
		const char *input = json_string_value(json_object_get(f, "input"));
		const char *why = json_string_value(json_object_get(f, "error"));
		cr_assert_not_null(input);
		cr_expect(why && why[0], "%s has a reason", input);
		const char *base = strrchr(input, '/');
		base = base ? base + 1 : input;
		size_t k = 0;
		while (k < nwant && strcmp(want[k], base) != 0)
			k++;
		cr_expect_lt(k, nwant, "%s failed (%s) but is not a bad input", input, why);
		if (k < nwant) {
			cr_expect(!seen[k], "%s listed twice", input);
			seen[k] = true;
		}
	}
	for (size_t k = 0; k < nwant; k++)
		cr_expect(seen[k], "bad input %s is not on the failure list", want[k]);
	cr_expect_eq(json_array_size(failures), nwant);
}

/* out/<stem>.dds exists and reads back as a texture. */
static void expect_output(const char *name)
{
	char path[PATH_MAX];
	const char *dot = strrchr(name, '.');
	snprintf(path, sizeof path, "%s/out/%.*s.dds", dir, (int)(dot - name), name);
	kiln_buf b;
	kiln_buf_init(&b, 1 << 26);
	cr_assert_eq(kiln_buf_read_file(&b, path), KILN_OK, "no output for good input %s", name);
	kiln_texture tex;
	cr_expect_eq(kiln_container_read(b.data, b.len, &tex), KILN_OK, "%s does not read back", path);
	kiln_buf_free(&b);
}

Test(hostile, a_folder_of_bad_pngs_fails_exactly_the_bad_items)
{
	nbad = ngood = 0;
	build_inputs();
	int rc = kiln("run --input %s/in --output %s/out --device cpu --quality fast --max-attempts 1 --json -q",
		      dir, dir);
	json_t *job = stdout_json();
	cr_assert_eq(rc, 1, "exit status %d", rc);
	json_t *items = json_object_get(job, "items");
	cr_expect_eq(json_integer_value(json_object_get(items, "total")), (json_int_t)(nbad + ngood));
	cr_expect_eq(json_integer_value(json_object_get(items, "done")), (json_int_t)ngood);
	expect_failures_exactly(job, bad, nbad);
	/* the oversized header was refused from its header, not after an allocation */
	size_t i;
	const json_t *f;
	json_array_foreach(json_object_get(job, "failures"), i, f)
		if (strstr(json_string_value(json_object_get(f, "input")), "huge-"))
			cr_expect(strstr(json_string_value(json_object_get(f, "error")), "limit") != NULL, "%s",
				  json_string_value(json_object_get(f, "error")));
	json_decref(job);
	for (size_t k = 0; k < ngood; k++)
		expect_output(good[k]);
}

Test(hostile, a_list_input_with_a_dotdot_uri_fails_only_that_item)
{
	char cmd[PATH_MAX + 256];
	snprintf(cmd, sizeof cmd, "'%s' samples -o %s/in >/dev/null", bin, dir);
	cr_assert_eq(system(cmd), 0);
	int rc = kiln("run --input %s/in/gradient.png --input %s/in/noise.png --input file://%s/in/../in/pixel.png "
		      "--output %s/out --device cpu --quality fast --max-attempts 1 --json -q",
		      dir, dir, dir, dir);
	json_t *job = stdout_json();
	cr_assert_eq(rc, 1, "exit status %d", rc);
	char want[1][256] = {"pixel.png"};
	expect_failures_exactly(job, want, 1);
	const char *why = json_string_value(json_object_get(json_array_get(json_object_get(job, "failures"), 0), "error"));
	cr_expect(why && strstr(why, ".."), "the reason names '..': %s", why);
	json_decref(job);
	expect_output("gradient.png");
	expect_output("noise.png");
}

/* ---- a real scheduler under attack ----------------------------------------------------- */

static char endpoint[64], base[64];

static pid_t spawn(const char *log, const char *const *argv)
{
	return proc_spawn(&(proc_spec){.path = bin, .log = log}, argv);
}

static long http(const char *method, const char *path, const char *body, json_t **out)
{
	char url[256];
	snprintf(url, sizeof url, "%s%s", base, path);
	return sim_http(method, url, body, NULL, out, NULL, 0, NULL, 0);
}

static void expect_alive(const char *after)
{
	int status;
	cr_assert_eq(waitpid(sched_pid, &status, WNOHANG), 0, "the scheduler died after %s (see %s/sched.log)",
		     after, dir);
	cr_assert_eq(http("GET", "/healthz", NULL, NULL), 200, "no /healthz after %s", after);
}

/* "prefix" + n copies of open + inner + n copies of close + "suffix", malloc'ed. */
static char *nested(const char *prefix, const char *open, const char *inner, const char *close, size_t n,
		    const char *suffix)
{
	size_t lo = strlen(open), lc = strlen(close);
	size_t cap = strlen(prefix) + n * (lo + lc) + strlen(inner) + strlen(suffix) + 1;
	char *s = malloc(cap), *p = s;
	cr_assert_not_null(s);
	p += sprintf(p, "%s", prefix);
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s", open);
	p += sprintf(p, "%s", inner);
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s", close);
	sprintf(p, "%s", suffix);
	return s;
}

static void hostile_specs(void)
{
	static const char *const wrong[] = {
		"[]", "\"spec\"", "5", "null", "{}",
		"{\"input\":5,\"output\":\"/o\"}",
		"{\"input\":true,\"output\":\"/o\"}",
		"{\"input\":[],\"output\":\"/o\"}",
		"{\"input\":[\"/a.png\",null],\"output\":\"/o\"}",
		"{\"input\":[\"/a.png\",[\"/b.png\"]],\"output\":\"/o\"}",
		"{\"input\":{\"manifest\":5},\"output\":\"/o\"}",
		"{\"input\":{\"manifest\":\"/m\",\"x\":1},\"output\":\"/o\"}",
		"{\"input\":{},\"output\":\"/o\"}",
		"{\"input\":\"/i\",\"output\":[\"/o\"]}",
		"{\"input\":\"/i\",\"output\":\"/o\\u0000/x\"}",
		"{\"input\":\"/i\\u0000\",\"output\":\"/o\"}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"format\":7}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"format\":null}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"mipmaps\":\"yes\"}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"mipmaps\":1}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"alpha_cutoff\":1.5}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"alpha_cutoff\":-1}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"shard_size\":1e400}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"shard_size\":99999999999999999999999999}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"max_attempts\":9223372036854775807}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"max_attempts\":-9223372036854775808}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"quality\":{\"level\":\"high\"}}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"block\":\"4x4\"}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"format\":\"astc\",\"block\":\"13x13\"}",
		"{\"input\":\"/i\",\"output\":\"/o\",\"container\":\"ktx2\",\"format\":\"png\"}",
		"{\"input\":\"/i\",\"output\":\"/o\xff\xfe\"}",
		"{\"input\":\"relative/in\",\"output\":\"/o\"}",
		"{\"input\":\"/i\",\"output\":\"ftp://host/o\"}",
	};
	for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
		json_t *body = NULL;
		cr_expect_eq(http("POST", "/v1/jobs", wrong[i], &body), 400, "%s", wrong[i]);
		cr_expect(json_is_string(json_object_get(body, "error")), "an error message for %s", wrong[i]);
		json_decref(body);
	}
	expect_alive("wrongly typed specs");

	/* deeply nested values: in a known field, in the manifest object, at the top; under
	 * the 1 MiB body cap, so the parser (not the size check) must refuse them */
	char *deep[] = {
		nested("{\"input\":", "[", "\"/a.png\"", "]", 200000, ",\"output\":\"/o\"}"),
		nested("{\"input\":\"/i\",\"output\":\"/o\",\"mipmaps\":", "{\"a\":", "1", "}", 100000, "}"),
		nested("{\"input\":", "{\"manifest\":", "\"/m\"", "}", 50000, ",\"output\":\"/o\"}"),
		nested("", "[", "", "]", 300000, ""),
	};
	for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
		cr_expect_eq(http("POST", "/v1/jobs", deep[i], NULL), 400, "nesting #%zu", i);
		free(deep[i]);
	}
	expect_alive("deeply nested specs");

	/* huge values: a string of 900 kB, a list one URI over the cap */
	size_t n = 900000;
	char *s = malloc(n + 64);
	cr_assert_not_null(s);
	int k = sprintf(s, "{\"input\":\"/i\",\"output\":\"/");
	memset(s + k, 'o', n);
	strcpy(s + k + n, "\"}");
	cr_expect_eq(http("POST", "/v1/jobs", s, NULL), 400, "a 900 kB output");
	free(s);
	s = malloc(100001 * 5 + 64);
	cr_assert_not_null(s);
	char *p = s + sprintf(s, "{\"output\":\"/o\",\"input\":[");
	for (size_t i = 0; i < 100001; i++)
		p += sprintf(p, "%s\"/a\"", i ? "," : "");
	strcpy(p, "]}");
	json_t *body = NULL;
	cr_expect_eq(http("POST", "/v1/jobs", s, &body), 400, "a list of 100001 URIs");
	cr_expect(strstr(json_string_value(json_object_get(body, "error")) ?: "", "100000") != NULL);
	json_decref(body);
	free(s);
	expect_alive("huge specs");
	/* none of it became a job */
	cr_assert_eq(http("GET", "/v1/jobs", NULL, &body), 200);
	cr_expect_eq(json_array_size(json_object_get(body, "jobs")), 0);
	json_decref(body);
}

static void rogue_send(void *sock, const void *data, size_t len, int flags)
{
	/* ZMQ_DONTWAIT: a full pipe (the scheduler dropped us) must not hang the test */
	zmq_send(sock, data, len, flags | ZMQ_DONTWAIT);
}

static void rogue_frames(void)
{
	void *ctx = zmq_ctx_new();
	void *sock = zmq_socket(ctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(sock, ZMQ_ROUTING_ID, "rogue", 5);
	cr_assert_eq(zmq_connect(sock, endpoint), 0);
	sleep_ms(200);

	static const char *const frames[] = {
		"", "not json", "[1,2,3]", "null", "{}", "{\"v\":1}",
		"{\"v\":1,\"type\":\"ready\",\"worker\":5,\"slots\":-1,\"devices\":{},\"codecs\":\"bc1\"}",
		"{\"v\":1,\"type\":\"ack\",\"shard\":\"\xff\xfe\"}",
		"{\"v\":1,\"type\":\"result\",\"job\":\"j999\",\"shard\":\"j999.s1\",\"lease\":1,\"items\":"
		"[{\"id\":0,\"status\":\"ok\"}]}",
		"{\"v\":1,\"type\":\"heartbeat\",\"active\":[\"j1.s1\",\"j1.s2\"]}",
		"{\"v\":1,\"type\":\"cancel\",\"job\":\"j1\"}",
		"{\"v\":1,\"type\":\"shard\",\"job\":\"j1\",\"shard\":\"j1.s1\",\"lease\":1,\"lease_ms\":1,"
		"\"options\":{},\"items\":[]}",
		"{\"v\":1,\"type\":\"bye\",\"v\":1}",
		"{\"v\":18446744073709551616,\"type\":\"bye\"}",
	};
	for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++)
		rogue_send(sock, frames[i], strlen(frames[i]), 0);

	/* another protocol version: answered with bye, not a crash */
	const char *v2 = "{\"v\":2,\"type\":\"ready\",\"worker\":\"rogue\",\"slots\":1,\"devices\":[],\"codecs\":[]}";
	rogue_send(sock, v2, strlen(v2), 0);
	/* (the stale result above is acknowledged first, as docs/PROTOCOL.md says) */
	zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
	bool bye = false;
	while (!bye && zmq_poll(&item, 1, 2000) > 0) {
		char reply[256] = "";
		if (zmq_recv(sock, reply, sizeof reply - 1, ZMQ_DONTWAIT) > 0)
			bye = strstr(reply, "\"bye\"") != NULL;
	}
	cr_expect(bye, "a v2 ready is answered with bye");

	/* multipart messages, binary garbage, a deeply nested frame under the cap */
	rogue_send(sock, "a", 1, ZMQ_SNDMORE);
	rogue_send(sock, "b", 1, ZMQ_SNDMORE);
	rogue_send(sock, "{\"v\":1,\"type\":\"bye\"}", 20, 0);
	uint8_t garbage[4096];
	unsigned seed = 11;
	for (size_t i = 0; i < sizeof garbage; i++)
		garbage[i] = (uint8_t)rand_r(&seed);
	for (int i = 0; i < 500; i++)
		rogue_send(sock, garbage + (i % 64), sizeof garbage - (i % 64), 0);
	char *deep = nested("", "[", "", "]", 400000, "");
	rogue_send(sock, deep, strlen(deep), 0);
	free(deep);
	deep = nested("{\"v\":1,\"type\":\"heartbeat\",\"active\":", "[", "", "]", 100000, "}");
	rogue_send(sock, deep, strlen(deep), 0);
	free(deep);
	sleep_ms(300);
	expect_alive("malformed frames");

	/* over KILN_PROTO_MAX_FRAME: just over it, then 16 MiB */
	size_t sizes[] = {(1u << 20) + 1, 16u << 20};
	for (size_t i = 0; i < 2; i++) {
		char *big = malloc(sizes[i]);
		cr_assert_not_null(big);
		memset(big, '{', sizes[i]);
		rogue_send(sock, big, sizes[i], 0);
		free(big);
		sleep_ms(300);
		expect_alive("an oversized frame");
	}
	zmq_close(sock);
	zmq_ctx_term(ctx);
}

/* Submits a job over the samples and waits for it with a real worker. */
static void real_job_still_runs(void)
{
	char log[256];
	kiln_samples(bin, dir);
	snprintf(log, sizeof log, "%s/worker.log", dir);
	const char *const wargv[] = {"kiln", "worker", "--connect", endpoint, "--devices", "cpu", NULL};
	worker_pid = spawn(log, wargv);
	char spec[512];
	snprintf(spec, sizeof spec, "{\"input\":\"%s/in\",\"output\":\"%s/out\",\"quality\":\"fast\",\"max_attempts\":1}",
		 dir, dir);
	char url[256], location[256] = "";
	snprintf(url, sizeof url, "%s/v1/jobs", base);
	cr_assert_eq(sim_http("POST", url, spec, NULL, NULL, NULL, 0, location, sizeof location), 202);
	json_t *job = NULL;
	const char *state = "";
	for (int i = 0; i < 600; i++) {
		json_decref(job);
		cr_assert_eq(http("GET", location, NULL, &job), 200);
		state = json_string_value(json_object_get(job, "state"));
		if (state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0))
			break;
		sleep_ms(100);
	}
	cr_assert_str_eq(state, "done", "the real job did not finish (see %s/*.log)", dir);
	json_t *items = json_object_get(job, "items");
	cr_expect_eq(json_integer_value(json_object_get(items, "done")), 6);
	cr_expect_eq(json_integer_value(json_object_get(items, "failed")), 0);
	json_decref(job);
	expect_output("noise.png");
	expect_output("checker-alpha.png");
}

Test(hostile, a_scheduler_process_survives_hostile_specs_and_rogue_frames)
{
	char state[256], log[256];
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(log, sizeof log, "%s/sched.log", dir);
	snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", sim_free_port());
	unsigned port = sim_free_port();
	snprintf(base, sizeof base, "http://127.0.0.1:%u", port);
	const char *const argv[] = {"kiln", "scheduler", "--listen", endpoint, "--http", base + 7,
				    "--state-dir", state, "--heartbeat-ms", "100", NULL};
	sched_pid = spawn(log, argv);
	bool up = proc_wait_healthy(base);
	cr_assert(up, "the scheduler did not come up (see %s)", log);

	hostile_specs();
	rogue_frames();
	real_job_still_runs();

	/* and it stops cleanly: it never crashed on the way */
	stop(&worker_pid);
	kill(sched_pid, SIGTERM);
	int status;
	cr_assert_eq(waitpid(sched_pid, &status, 0), sched_pid);
	sched_pid = -1;
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "scheduler exit status %d", status);
}
