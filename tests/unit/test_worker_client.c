/* `kiln worker` as a real process, driven by a fake scheduler in the test: a ROUTER on
 * tcp://127.0.0.1:<ephemeral> that speaks docs/PROTOCOL.md through common/proto.h (and
 * checks that everything the worker sends validates), over file:// storage with images
 * from `kiln samples` plus broken ones, and over s3:// against a real s3rver (suite
 * worker_s3). KILN_KEEP_TMP=1 keeps the temporary folders and prints each worker's log at
 * the end of its test. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/fileio.h"
#include "common/png_io.h"
#include "common/proto.h"
#include "common/storage.h"
#include "kernels/texenc.h"
#include "proc_util.h"
#include "sched_sim.h"
#include "storage_testutil.h"

static char dir[64];
static pid_t worker_pid;

typedef struct fake_sched {
	void *ctx;
	void *router;
	int port;
	char endpoint[64];
	char peer[256];       /* the worker's identity, once its READY came */
	size_t peer_len;
	long long last_hb;    /* when we last sent the worker a heartbeat */
	const char *curve_secret; /* Z85 server secret key, or NULL */
} fake_sched;

static fake_sched sched;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sched_bind(fake_sched *s, int port)
{
	int zero = 0;
	s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
	cr_assert_not_null(s->router);
	zmq_setsockopt(s->router, ZMQ_LINGER, &zero, sizeof zero);
	/* a worker that reconnects with its identity takes over at once (as the scheduler does) */
	int one = 1;
	zmq_setsockopt(s->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
	if (s->curve_secret) {
		cr_assert_eq(zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &one, sizeof one), 0);
		cr_assert_eq(zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, s->curve_secret, 41), 0);
	}
	if (port == 0) {
		cr_assert_eq(zmq_bind(s->router, "tcp://127.0.0.1:*"), 0);
		char last[64];
		size_t len = sizeof last;
		cr_assert_eq(zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, last, &len), 0);
		s->port = atoi(strrchr(last, ':') + 1);
	} else {
		/* the old listener goes away asynchronously: retry for a while */
		char ep[64];
		snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
		long long until = now_ms() + 5000;
		while (zmq_bind(s->router, ep) != 0) {
			cr_assert(now_ms() < until, "cannot bind %s again: %s", ep, zmq_strerror(zmq_errno()));
			usleep(50000);
		}
	}
	snprintf(s->endpoint, sizeof s->endpoint, "tcp://127.0.0.1:%d", s->port);
}

/* A scheduler that goes away forgets its workers. */
static void sched_close(fake_sched *s)
{
	zmq_close(s->router);
	s->router = NULL;
	s->peer_len = 0;
}

static void send_raw(fake_sched *s, const void *data, size_t len)
{
	cr_assert_gt(s->peer_len, 0, "no worker yet");
	cr_assert_eq(zmq_send(s->router, s->peer, s->peer_len, ZMQ_SNDMORE), (int)s->peer_len);
	cr_assert_eq(zmq_send(s->router, data, len, 0), (int)len);
}

/* Sends a message and releases it. */
static void sched_send(fake_sched *s, json_t *msg)
{
	kiln_buf out;
	kiln_buf_init(&out, KILN_PROTO_MAX_FRAME);
	cr_assert_eq(kiln_proto_encode(msg, &out), KILN_OK);
	send_raw(s, out.data, out.len);
	kiln_buf_free(&out);
	json_decref(msg);
}

/* The next message from the worker (NULL after timeout_ms); heartbeats go out every second
 * meanwhile, as a scheduler's do. Everything the worker sends must validate. */
static json_t *sched_recv(fake_sched *s, int timeout_ms, kiln_msg_type *type)
{
	long long until = now_ms() + timeout_ms;
	for (;;) {
		if (s->peer_len && now_ms() - s->last_hb >= 1000) {
			sched_send(s, kiln_proto_new(KILN_MSG_HEARTBEAT));
			s->last_hb = now_ms();
		}
		zmq_pollitem_t item = {s->router, 0, ZMQ_POLLIN, 0};
		long long left = until - now_ms();
		if (left <= 0)
			return NULL;
		zmq_poll(&item, 1, left < 50 ? left : 50);
		if (!(item.revents & ZMQ_POLLIN))
			continue;
		char id[256], body[65536];
		int idlen = zmq_recv(s->router, id, sizeof id, 0);
		cr_assert_gt(idlen, 0);
		int more;
		size_t ml = sizeof more;
		zmq_getsockopt(s->router, ZMQ_RCVMORE, &more, &ml);
		cr_assert(more, "the worker sent an empty message");
		int len = zmq_recv(s->router, body, sizeof body, 0);
		cr_assert_geq(len, 0);
		cr_assert_lt(len, (int)sizeof body, "message too large for the test");
		zmq_getsockopt(s->router, ZMQ_RCVMORE, &more, &ml);
		cr_assert(!more, "the worker sent a message of several frames");
		json_t *msg;
		char err[256];
		cr_assert_eq(kiln_proto_parse(body, (size_t)len, &msg, type, err, sizeof err), KILN_OK,
			     "invalid message from the worker: %s: %.*s", err, len, body);
		if (*type == KILN_MSG_READY) {
			memcpy(s->peer, id, (size_t)idlen);
			s->peer_len = (size_t)idlen;
		}
		return msg;
	}
}

/* The next message that is not a heartbeat; it must be of type want. */
static json_t *sched_expect(fake_sched *s, kiln_msg_type want, int timeout_ms)
{
	long long until = now_ms() + timeout_ms;
	for (;;) {
		kiln_msg_type type;
		long long left = until - now_ms();
		json_t *msg = left > 0 ? sched_recv(s, (int)left, &type) : NULL;
		cr_assert_not_null(msg, "no %s from the worker within %d ms", kiln_msg_type_name(want), timeout_ms);
		if (type == KILN_MSG_HEARTBEAT && want != KILN_MSG_HEARTBEAT) {
			json_decref(msg);
			continue;
		}
		cr_assert_eq(type, want, "expected %s, got %s", kiln_msg_type_name(want), kiln_msg_type_name(type));
		return msg;
	}
}

/* Starts kiln worker on the CPU with extra options and env ("NAME=value ...", may be "")
 * added to its environment; KILN_WORKER_THREADS is cleared first, so that a developer's
 * own setting does not change what a test sees. exec: worker_pid is kiln's own. */
static void start_worker_env(const char *env, const char *extra)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "exec env -u KILN_WORKER_THREADS %s %s worker --connect %s --devices cpu %s 2>>%s/worker.log",
		 env, kiln_bin(), sched.endpoint, extra, dir);
	const char *const argv[] = {"sh", "-c", cmd, NULL};
	worker_pid = proc_spawn(&(proc_spec){.path = "/bin/sh", .out = PROC_STDOUT_INHERIT}, argv);
}

static void start_worker(const char *extra)
{
	start_worker_env("", extra);
}

/* Exit status of the worker, waiting up to timeout_ms; -1 if it is still running. */
static int wait_worker(int timeout_ms)
{
	long long until = now_ms() + timeout_ms;
	int status;
	while (waitpid(worker_pid, &status, WNOHANG) == 0) {
		if (now_ms() >= until)
			return -1;
		usleep(20000);
	}
	worker_pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define worker_alive() proc_alive(worker_pid)

static void write_file(const char *name, const void *data, size_t len)
{
	char path[256];
	snprintf(path, sizeof path, "%s/in/%s", dir, name);
	cr_assert_eq(kiln_file_write_atomic(path, data, len), KILN_OK);
}

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "wcli");
	kiln_samples(NULL, dir);
	kiln_buf f;
	kiln_buf_init(&f, 1 << 20);
	char path[256];
	snprintf(path, sizeof path, "%s/in/noise.png", dir);
	cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK);
	write_file("cut.png", f.data, f.len / 3);
	f.data[40] ^= 0x55; /* inside IHDR or the first chunk: the CRC no longer matches */
	write_file("crc.png", f.data, f.len);
	kiln_buf_free(&f);
	write_file("garbage.png", "GIF89a definitely not a png", 27);
	memset(&sched, 0, sizeof sched);
	sched.ctx = zmq_ctx_new();
	worker_pid = 0;
}

static void setup_bound(void)
{
	setup();
	sched_bind(&sched, 0);
}

static void teardown(void)
{
	if (worker_pid > 0) {
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
	}
	if (sched.router)
		zmq_close(sched.router);
	zmq_ctx_term(sched.ctx);
	char cmd[128];
	snprintf(cmd, sizeof cmd, getenv("KILN_KEEP_TMP") ? "cat %s/worker.log >&2" : "rm -rf %s", dir);
	(void)system(cmd);
}

/* A shard of inputs dir/in/NAME with outputs file://dir/out/SHARD/NAME.dds; options may be
 * NULL (fast BC1 in DDS). */
static json_t *make_shard(const char *job, const char *shard, int lease, const char *const *names, size_t n,
			  json_t *options)
{
	json_t *msg = kiln_proto_new(KILN_MSG_SHARD);
	json_t *items = json_array();
	for (size_t i = 0; i < n; i++) {
		char in[256], out[256];
		snprintf(in, sizeof in, "%s/in/%s", dir, names[i]);
		snprintf(out, sizeof out, "file://%s/out/%s/%zu-%s.dds", dir, shard, i, names[i]);
		json_array_append_new(items, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)(100 + i), "input", in,
						       "output", out));
	}
	json_object_set_new(msg, "job", json_string(job));
	json_object_set_new(msg, "shard", json_string(shard));
	json_object_set_new(msg, "lease", json_integer(lease));
	json_object_set_new(msg, "lease_ms", json_integer(30000));
	json_object_set_new(msg, "options", options ? options : json_pack("{s:s, s:s}", "format", "bc1", "quality", "fast"));
	json_object_set_new(msg, "items", items);
	return msg;
}

static json_t *make_simple(kiln_msg_type type, const char *key, const char *value)
{
	json_t *msg = kiln_proto_new(type);
	json_object_set_new(msg, key, json_string(value));
	return msg;
}

static const char *str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "";
}

/* The worker's READY, checked. */
static json_t *expect_ready(int timeout_ms)
{
	json_t *ready = sched_expect(&sched, KILN_MSG_READY, timeout_ms);
	cr_expect_eq(strlen(str(ready, "worker")), sched.peer_len, "the identity is the worker id");
	cr_expect_eq(memcmp(str(ready, "worker"), sched.peer, sched.peer_len), 0);
	return ready;
}

static bool file_exists(const char *uri)
{
	return access(strncmp(uri, "file://", 7) == 0 ? uri + 7 : uri, F_OK) == 0;
}

TestSuite(worker_client, .init = setup_bound, .fini = teardown, .timeout = 40);

Test(worker_client, ready_announces_slots_devices_and_codecs)
{
	start_worker("--slots 3");
	json_t *ready = expect_ready(5000);
	cr_expect_eq(json_integer_value(json_object_get(ready, "slots")), 3);
	json_t *devices = json_object_get(ready, "devices");
	cr_assert_eq(json_array_size(devices), 1);
	cr_expect_str_eq(str(json_array_get(devices, 0), "id"), "cpu");
	cr_expect_gt(json_integer_value(json_object_get(json_array_get(devices, 0), "threads")), 0);
	json_t *codecs = json_object_get(ready, "codecs");
	cr_expect_eq(json_array_size(codecs), 3);
	cr_expect_str_eq(json_string_value(json_array_get(codecs, 0)), "bc1");
	cr_expect_str_eq(json_string_value(json_array_get(codecs, 1)), "astc");
	cr_expect_str_eq(json_string_value(json_array_get(codecs, 2)), "png");
	cr_expect_eq(json_array_size(json_object_get(ready, "held")), 0);
	char host[128] = "";
	gethostname(host, sizeof host);
	char want[200];
	snprintf(want, sizeof want, "%s-%d", host, (int)worker_pid);
	cr_expect_str_eq(str(ready, "worker"), want);
	json_decref(ready);
}

Test(worker_client, default_slots_are_two_per_device)
{
	start_worker("");
	json_t *ready = expect_ready(5000);
	cr_expect_eq(json_integer_value(json_object_get(ready, "slots")), 2);
	json_decref(ready);
}

/* Threads of process pid whose name (/proc/PID/task/TID/comm) starts with prefix. */
static int threads_named(pid_t pid, const char *prefix)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	cr_assert_not_null(d, "%s", path);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char comm_path[sizeof path + sizeof e->d_name + 8], comm[32] = "";
		snprintf(comm_path, sizeof comm_path, "%s/%s/comm", path, e->d_name);
		FILE *f = fopen(comm_path, "r");
		if (!f)
			continue; /* a thread that ended meanwhile */
		if (fgets(comm, sizeof comm, f) && strncmp(comm, prefix, strlen(prefix)) == 0)
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

static json_int_t ready_cpu_threads(const json_t *ready)
{
	const json_t *devices = json_object_get(ready, "devices");
	const json_t *cpu = json_array_get(devices, json_array_size(devices) - 1);
	cr_assert_str_eq(str(cpu, "id"), "cpu", "the CPU is the last device READY lists");
	return json_integer_value(json_object_get(cpu, "threads"));
}

/* The worker's host threads as it runs them and as READY announces them: kiln-decode/N is
 * the decode stage, kiln-cpu/N the CPU backend's pool (whose caller, the encode thread,
 * is its last thread). The pipeline has started them all before READY is sent. */
static void expect_host_threads(const json_t *ready, int want)
{
	cr_expect_eq(ready_cpu_threads(ready), want, "READY's cpu threads");
	cr_expect_eq(threads_named(worker_pid, "kiln-decode/"), want, "decode threads");
	cr_expect_eq(threads_named(worker_pid, "kiln-cpu/"), want - 1, "CPU pool threads beside the encode thread");
}

Test(worker_client, threads_option_sizes_the_decode_stage_and_the_cpu_pool)
{
	start_worker("--threads 3");
	json_t *ready = expect_ready(5000);
	expect_host_threads(ready, 3);
	json_decref(ready);
	/* and it encodes with them */
	static const char *const names[] = {"gradient.png", "noise.png", "pixel.png", "wide.png"};
	sched_send(&sched, make_shard("jt", "jt.s0", 1, names, 4, NULL));
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 15000);
	json_t *items = json_object_get(res, "items");
	cr_assert_eq(json_array_size(items), 4);
	for (size_t i = 0; i < 4; i++)
		cr_expect_str_eq(str(json_array_get(items, i), "status"), "ok", "%s", names[i]);
	json_decref(res);
	cr_expect_eq(threads_named(worker_pid, "kiln-decode/"), 3, "decode threads after a shard");
}

Test(worker_client, threads_from_the_environment_and_the_option_wins)
{
	start_worker_env("KILN_WORKER_THREADS=2", "");
	json_t *ready = expect_ready(5000);
	expect_host_threads(ready, 2);
	json_decref(ready);
	kill(worker_pid, SIGKILL);
	wait_worker(5000);
	start_worker_env("KILN_WORKER_THREADS=2", "--threads 3");
	ready = expect_ready(5000);
	expect_host_threads(ready, 3);
	json_decref(ready);
}

Test(worker_client, default_threads_are_the_cores)
{
	start_worker("");
	json_t *ready = expect_ready(5000);
	expect_host_threads(ready, (int)sysconf(_SC_NPROCESSORS_ONLN));
	json_decref(ready);
}

Test(worker_client, a_shard_of_good_and_bad_pngs_gives_one_result)
{
	start_worker("--slots 2");
	json_decref(expect_ready(5000));
	static const char *const names[] = {"gradient.png", "cut.png", "checker-alpha.png", "garbage.png",
					    "noise.png", "missing.png", "solid-5x3.png", "crc.png",
					    "pixel.png", "wide.png"};
	static const bool good[] = {true, false, true, false, true, false, true, false, true, true};
	size_t n = sizeof names / sizeof names[0];
	json_t *shard = make_shard("j1", "j1.s1", 4, names, n, NULL);
	json_t *items = json_incref(json_object_get(shard, "items"));
	sched_send(&sched, shard);
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 15000);
	cr_expect_str_eq(str(res, "job"), "j1");
	cr_expect_str_eq(str(res, "shard"), "j1.s1");
	cr_expect_eq(json_integer_value(json_object_get(res, "lease")), 4);
	json_t *ritems = json_object_get(res, "items");
	cr_assert_eq(json_array_size(ritems), n);
	for (size_t i = 0; i < n; i++) {
		json_t *r = json_array_get(ritems, i);
		const char *output = str(json_array_get(items, i), "output");
		cr_expect_eq(json_integer_value(json_object_get(r, "id")), (json_int_t)(100 + i));
		if (!good[i]) {
			cr_expect_str_eq(str(r, "status"), "error", "%s", names[i]);
			cr_expect_gt(strlen(str(r, "error")), 0, "%s has a reason", names[i]);
			cr_expect(!file_exists(output), "%s: no output for a failed item", names[i]);
			continue;
		}
		cr_expect_str_eq(str(r, "status"), "ok", "%s: %s", names[i], str(r, "error"));
		kiln_buf f;
		kiln_buf_init(&f, 1 << 24);
		cr_assert_eq(kiln_buf_read_file(&f, output + 7), KILN_OK, "%s", output);
		kiln_texture tex;
		cr_expect_eq(kiln_container_read(f.data, f.len, &tex), KILN_OK, "%s", output);
		cr_expect_eq(json_integer_value(json_object_get(r, "bytes")), (json_int_t)f.len, "%s", names[i]);
		cr_expect_gt(json_integer_value(json_object_get(r, "bytes_in")), 0);
		kiln_buf_free(&f);
	}
	cr_expect(strstr(str(json_array_get(ritems, 5), "error"), "not found") != NULL, "%s",
		  str(json_array_get(ritems, 5), "error"));
	json_decref(res);
	json_decref(items);
	sched_send(&sched, make_simple(KILN_MSG_ACK, "shard", "j1.s1"));
	cr_expect(worker_alive());
}

Test(worker_client, results_come_back_per_shard)
{
	start_worker("--slots 2");
	json_t *ready = expect_ready(5000);
	int slots = (int)json_integer_value(json_object_get(ready, "slots"));
	json_decref(ready);
	static const char *const a[] = {"gradient.png", "noise.png"}, *const b[] = {"pixel.png"};
	cr_assert_eq(slots, 2);
	sched_send(&sched, make_shard("j2", "j2.a", 1, a, 2, NULL));
	sched_send(&sched, make_shard("j2", "j2.b", 9, b, 1, NULL));
	bool seen_a = false, seen_b = false;
	for (int i = 0; i < slots; i++) {
		json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 15000);
		const char *id = str(res, "shard");
		bool is_a = strcmp(id, "j2.a") == 0;
		cr_expect(is_a || strcmp(id, "j2.b") == 0, "%s", id);
		cr_expect_eq(json_array_size(json_object_get(res, "items")), is_a ? 2u : 1u);
		cr_expect_eq(json_integer_value(json_object_get(res, "lease")), is_a ? 1 : 9);
		seen_a |= is_a;
		seen_b |= !is_a;
		sched_send(&sched, make_simple(KILN_MSG_ACK, "shard", id));
		json_decref(res);
	}
	cr_expect(seen_a && seen_b);
	/* acked: nothing is re-sent, and nothing is active any more */
	json_t *hb = sched_expect(&sched, KILN_MSG_HEARTBEAT, 2500);
	cr_expect_eq(json_array_size(json_object_get(hb, "active")), 0);
	json_decref(hb);
}

Test(worker_client, heartbeats_about_every_second_name_active_shards_and_cancel_works)
{
	start_worker("--slots 1");
	json_decref(expect_ready(5000));
	/* intervals between heartbeats */
	long long prev = 0;
	for (int i = 0; i < 4; i++) {
		json_decref(sched_expect(&sched, KILN_MSG_HEARTBEAT, 2500));
		long long t = now_ms();
		if (prev)
			cr_expect(t - prev > 600 && t - prev < 1600, "heartbeat interval %lld ms", t - prev);
		prev = t;
	}
	/* a shard long enough to be seen working, then cancelled */
	enum { N = 400 };
	static const char *names[N];
	for (int i = 0; i < N; i++)
		names[i] = "gradient.png";
	sched_send(&sched, make_shard("slow", "slow.s0", 1, names, N,
				      json_pack("{s:s, s:b}", "quality", "high", "mipmaps", 1)));
	json_t *hb = sched_expect(&sched, KILN_MSG_HEARTBEAT, 2500);
	json_t *active = json_object_get(hb, "active");
	cr_expect_eq(json_array_size(active), 1);
	cr_expect_str_eq(json_string_value(json_array_get(active, 0)), "slow.s0");
	json_decref(hb);
	sched_send(&sched, make_simple(KILN_MSG_CANCEL, "job", "slow"));
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 20000);
	json_t *items = json_object_get(res, "items");
	cr_assert_eq(json_array_size(items), N);
	size_t ok = 0, cancelled = 0;
	for (size_t i = 0; i < N; i++) {
		json_t *it = json_array_get(items, i);
		if (strcmp(str(it, "status"), "ok") == 0)
			ok++;
		else if (strcmp(str(it, "error"), "cancelled") == 0)
			cancelled++;
	}
	cr_expect_eq(ok + cancelled, N, "every item is done or cancelled");
	cr_expect_gt(cancelled, 0);
	json_decref(res);
}

Test(worker_client, scheduler_restart_gets_ready_with_held_and_the_results_again, .timeout = 60)
{
	start_worker("");
	json_decref(expect_ready(5000));
	static const char *const names[] = {"gradient.png", "garbage.png"};
	sched_send(&sched, make_shard("j3", "j3.s0", 2, names, 2, NULL));
	json_t *first = sched_expect(&sched, KILN_MSG_RESULT, 15000);
	/* no ack: the scheduler "crashes" and comes back on the same port */
	int port = sched.port;
	sched_close(&sched);
	usleep(300000);
	sched_bind(&sched, port);
	json_t *ready = sched_expect(&sched, KILN_MSG_READY, 15000);
	json_t *held = json_object_get(ready, "held");
	cr_assert_eq(json_array_size(held), 1);
	cr_expect_str_eq(json_string_value(json_array_get(held, 0)), "j3.s0");
	json_t *again = sched_expect(&sched, KILN_MSG_RESULT, 3000);
	cr_expect(json_equal(first, again), "the same result is delivered again");
	sched_send(&sched, make_simple(KILN_MSG_ACK, "shard", "j3.s0"));
	/* acked: not sent again, and the worker goes on working */
	static const char *const more[] = {"pixel.png"};
	sched_send(&sched, make_shard("j3", "j3.s1", 1, more, 1, NULL));
	json_t *next = sched_expect(&sched, KILN_MSG_RESULT, 10000);
	cr_expect_str_eq(str(next, "shard"), "j3.s1");
	json_decref(first);
	json_decref(again);
	json_decref(ready);
	json_decref(next);
}

Test(worker_client, malformed_and_oversized_frames_do_not_kill_the_worker)
{
	start_worker("");
	json_decref(expect_ready(5000));
	static const char *const junk[] = {
		"not json",
		"{}",
		"[1,2,3]",
		"{\"v\":2,\"type\":\"shard\"}",
		"{\"v\":1,\"type\":\"launch-missiles\"}",
		"{\"v\":1,\"type\":\"shard\",\"job\":\"x\"}",
		"{\"v\":1,\"type\":\"ack\",\"shard\":\"never-seen\"}",
		"{\"v\":1,\"type\":\"ack\",\"shard\":\"a\",\"extra\":1}",
		"{\"v\":1,\"type\":\"cancel\",\"job\":17}",
		"{\"v\":1,\"type\":\"ready\",\"worker\":\"x\",\"slots\":1,\"devices\":[],\"codecs\":[]}",
		"{\"v\":1,\"type\":\"result\",\"job\":\"j\",\"shard\":\"s\",\"lease\":1,\"items\":[]}",
		"{\"v\":1,\"type\":\"heartbeat\",\"v\":1}",
		"",
	};
	for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
		send_raw(&sched, junk[i], strlen(junk[i]));
	send_raw(&sched, "\0\xff\xfe{\"v\":1}", 10);
	/* a message of two frames */
	cr_assert_eq(zmq_send(sched.router, sched.peer, sched.peer_len, ZMQ_SNDMORE), (int)sched.peer_len);
	zmq_send(sched.router, "{\"v\":1,", 7, ZMQ_SNDMORE);
	zmq_send(sched.router, "\"type\":\"bye\"}", 13, 0);
	/* a shard whose item list is wrong in depth */
	json_t *bad = make_shard("j4", "j4.bad", 1, NULL, 0, NULL);
	json_array_append_new(json_object_get(bad, "items"), json_pack("{s:s}", "id", "not-a-number"));
	char *text = json_dumps(bad, JSON_COMPACT);
	send_raw(&sched, text, strlen(text));
	free(text);
	json_decref(bad);
	/* over the frame cap: read and refused by the parser */
	size_t big = KILN_PROTO_MAX_FRAME + 100;
	char *huge = malloc((size_t)8 << 20);
	memset(huge, 'x', (size_t)8 << 20);
	send_raw(&sched, huge, big);
	usleep(300000);
	json_decref(sched_expect(&sched, KILN_MSG_HEARTBEAT, 3000));
	/* far over it: libzmq closes the connection unread; the worker finds its way back */
	send_raw(&sched, huge, (size_t)8 << 20);
	free(huge);
	usleep(300000);
	cr_assert(worker_alive(), "the worker died");
	kiln_msg_type type;
	json_t *msg;
	while ((msg = sched_recv(&sched, 8000, &type)) && type == KILN_MSG_HEARTBEAT)
		json_decref(msg);
	cr_assert_not_null(msg, "the worker did not come back");
	cr_expect_eq(type, KILN_MSG_READY, "%s", kiln_msg_type_name(type));
	json_decref(msg);
	static const char *const names[] = {"pixel.png"};
	sched_send(&sched, make_shard("j4", "j4.s0", 1, names, 1, NULL));
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 10000);
	cr_expect_str_eq(str(res, "shard"), "j4.s0");
	cr_expect_str_eq(str(json_array_get(json_object_get(res, "items"), 0), "status"), "ok");
	json_decref(res);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "grep -c 'dropped a malformed message' %s/worker.log", dir);
	FILE *p = popen(cmd, "r");
	int dropped = 0;
	cr_assert_eq(fscanf(p, "%d", &dropped), 1);
	pclose(p);
	cr_expect_geq(dropped, 13, "each malformed frame is logged (%d)", dropped);
}

Test(worker_client, unsupported_options_fail_every_item_with_a_reason)
{
	start_worker("");
	json_decref(expect_ready(5000));
	static const char *const names[] = {"gradient.png", "pixel.png"};
	sched_send(&sched, make_shard("j5", "j5.s0", 1, names, 2, json_pack("{s:s}", "format", "webp")));
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 5000);
	for (size_t i = 0; i < 2; i++) {
		json_t *it = json_array_get(json_object_get(res, "items"), i);
		cr_expect_str_eq(str(it, "status"), "error");
		cr_expect(strstr(str(it, "error"), "webp") != NULL, "%s", str(it, "error"));
	}
	json_decref(res);
	/* astc is supported, but an .astc file holds no mip chain */
	sched_send(&sched, make_shard("j5", "j5.s1", 1, names, 2,
				      json_pack("{s:s, s:s, s:b}", "format", "astc", "block", "6x6", "mipmaps", 1)));
	res = sched_expect(&sched, KILN_MSG_RESULT, 5000);
	for (size_t i = 0; i < 2; i++) {
		json_t *it = json_array_get(json_object_get(res, "items"), i);
		cr_expect_str_eq(str(it, "status"), "error");
		cr_expect(strstr(str(it, "error"), "ktx2") != NULL, "%s", str(it, "error"));
	}
	json_decref(res);
}

Test(worker_client, sigterm_finishes_the_shard_says_bye_and_exits_0)
{
	start_worker("");
	json_decref(expect_ready(5000));
	static const char *const names[] = {"gradient.png", "noise.png", "wide.png"};
	sched_send(&sched, make_shard("j6", "j6.s0", 1, names, 3, NULL));
	usleep(50000);
	kill(worker_pid, SIGTERM);
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 10000);
	for (size_t i = 0; i < 3; i++)
		cr_expect_str_eq(str(json_array_get(json_object_get(res, "items"), i), "status"), "ok");
	sched_send(&sched, make_simple(KILN_MSG_ACK, "shard", "j6.s0"));
	json_decref(res);
	json_decref(sched_expect(&sched, KILN_MSG_BYE, 5000));
	cr_expect_eq(wait_worker(5000), 0);
}

Test(worker_client, sigint_when_idle_says_bye_and_exits_0)
{
	start_worker("");
	json_decref(expect_ready(5000));
	kill(worker_pid, SIGINT);
	json_decref(sched_expect(&sched, KILN_MSG_BYE, 5000));
	cr_expect_eq(wait_worker(5000), 0);
}

Test(worker_client, a_bye_from_the_scheduler_makes_the_worker_announce_itself_again)
{
	start_worker("");
	json_decref(expect_ready(5000));
	sched_send(&sched, kiln_proto_new(KILN_MSG_BYE));
	json_t *ready = sched_expect(&sched, KILN_MSG_READY, 3000);
	json_decref(ready);
}

TestSuite(worker_cli, .init = setup, .fini = teardown, .timeout = 40);

/* kiln ARGS with env ("NAME=value ...") added and KILN_WORKER_THREADS otherwise unset;
 * output in dir/out.txt; the exit status. */
static int run_kiln_env(const char *env, const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "env -u KILN_WORKER_THREADS %s %s %s >%s/out.txt 2>&1", env, kiln_bin(), args, dir);
	int status = system(cmd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_kiln(const char *args)
{
	return run_kiln_env("", args);
}

Test(worker_cli, usage_errors_and_health)
{
	cr_expect_eq(run_kiln("worker"), 2);
	cr_expect_eq(run_kiln("worker --help"), 0);
	cr_expect_eq(run_kiln("worker --connect tcp://127.0.0.1:1 --slots 0"), 2);
	static const char *const bad_threads[] = {"0", "1025", "-3", "4x", "''"};
	for (size_t i = 0; i < sizeof bad_threads / sizeof *bad_threads; i++) {
		char args[128];
		snprintf(args, sizeof args, "worker --connect tcp://127.0.0.1:1 --devices cpu --threads %s", bad_threads[i]);
		cr_expect_eq(run_kiln(args), 2, "--threads %s", bad_threads[i]);
		cr_expect(strstr(proc_slurp(dir, "out.txt", ""), "--threads wants a whole number from 1 to 1024"),
			  "--threads %s: %s", bad_threads[i], proc_slurp(dir, "out.txt", ""));
	}
	cr_expect_eq(run_kiln("worker --health --devices cpu --threads 1024"), 0, "%s", proc_slurp(dir, "out.txt", ""));
	/* the environment is read when the option is absent, and checked like it */
	cr_expect_eq(run_kiln_env("KILN_WORKER_THREADS=0", "worker --health --devices cpu"), 2);
	cr_expect(strstr(proc_slurp(dir, "out.txt", ""), "KILN_WORKER_THREADS wants a whole number from 1 to 1024"),
		  "%s", proc_slurp(dir, "out.txt", ""));
	cr_expect_eq(run_kiln_env("KILN_WORKER_THREADS=lots", "worker --health --devices cpu"), 2);
	cr_expect_eq(run_kiln_env("KILN_WORKER_THREADS=4", "worker --health --devices cpu"), 0);
	cr_expect_eq(run_kiln_env("KILN_WORKER_THREADS=", "worker --health --devices cpu"), 0, "empty: unset");
	cr_expect_eq(run_kiln_env("KILN_WORKER_THREADS=0", "worker --health --devices cpu --threads 2"), 0,
		     "the option wins; the variable is not read");
	cr_expect_eq(run_kiln("worker --help"), 0);
	cr_expect(strstr(proc_slurp(dir, "out.txt", ""), "--threads N"));
	cr_expect(strstr(proc_slurp(dir, "out.txt", ""), "KILN_WORKER_THREADS"));
	cr_expect_eq(run_kiln("worker --connect tcp://127.0.0.1:1 --devices 0,,1"), 2);
	cr_expect_eq(run_kiln("worker --connect tcp://127.0.0.1:1 --devices gpu"), 2);
	cr_expect_eq(run_kiln("worker --connect tcp://127.0.0.1:1 --curve-server-key /nonexistent"), 2);
	cr_expect_eq(run_kiln("worker --health --devices cpu"), 0);
	cr_expect_eq(run_kiln("worker --health --devices 63"), 3, "no such GPU here");
	char args[512];
	snprintf(args, sizeof args, "worker --health --devices cpu --curve-server-key %s/in/pixel.png --curve-secret %s/in/pixel.png",
		 dir, dir);
	cr_expect_eq(run_kiln(args), 3, "keys that are not Z85 text");
	cr_expect_eq(run_kiln("worker --connect not-an-endpoint --devices cpu"), 3);
}

Test(worker_cli, curve_encrypted_connection)
{
	if (!zmq_has("curve"))
		cr_skip_test("libzmq without CURVE");
	char server_pub[41], server_sec[41], client_pub[41], client_sec[41];
	cr_assert_eq(zmq_curve_keypair(server_pub, server_sec), 0);
	cr_assert_eq(zmq_curve_keypair(client_pub, client_sec), 0);
	sched.curve_secret = server_sec;
	sched_bind(&sched, 0);
	char path[256];
	snprintf(path, sizeof path, "%s/server.pub", dir);
	FILE *f = fopen(path, "w");
	fprintf(f, "%s\n", server_pub);
	fclose(f);
	snprintf(path, sizeof path, "%s/worker.key", dir);
	f = fopen(path, "w");
	fprintf(f, "  %s\n\n", client_sec);
	fclose(f);
	char extra[512];
	snprintf(extra, sizeof extra, "--curve-server-key %s/server.pub --curve-secret %s/worker.key", dir, dir);
	start_worker(extra);
	json_t *ready = expect_ready(5000);
	static const char *const names[] = {"pixel.png"};
	sched_send(&sched, make_shard("j7", "j7.s0", 1, names, 1, NULL));
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 10000);
	cr_expect_str_eq(str(json_array_get(json_object_get(res, "items"), 0), "status"), "ok");
	json_decref(res);
	json_decref(ready);
}

/* ---- over S3: a real s3rver, the worker configured from the AWS_* environment ---- */

static s3rver srv;

static void setup_s3(void)
{
	setup_bound();
	cr_assert(s3rver_start(&srv, "kiln-wk", NULL, NULL), "could not start tools/s3rver.sh (needs nodejs and npm)");
	/* the worker process inherits these */
	setenv("AWS_ENDPOINT_URL", srv.endpoint, 1);
	setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
	setenv("AWS_REGION", "us-east-1", 1);
	unsetenv("AWS_ENDPOINT_URL_S3");
	unsetenv("AWS_SESSION_TOKEN");
}

static void teardown_s3(void)
{
	teardown();
	s3rver_stop(&srv);
}

/* What the worker should write for an input: texenc on the CPU, fast, in DDS. */
static void expected_dds(const char *path, kiln_buf *out)
{
	kiln_image img;
	cr_assert_eq(kiln_png_read_file(path, NULL, &img, NULL, 0), KILN_OK, "%s", path);
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.quality = KILN_QUALITY_FAST;
	kiln_device cpu = {KILN_DEVICE_CPU, 0};
	kiln_texenc *enc;
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, NULL, &enc), KILN_OK);
	kiln_texture tex;
	kiln_status st;
	cr_assert_eq(kiln_texenc_encode(enc, &img, 1, &tex, &st), KILN_OK);
	cr_assert_eq(st, KILN_OK);
	cr_assert_eq(kiln_container_write(KILN_CONTAINER_DDS, &tex, out), KILN_OK);
	kiln_texture_free_levels(&tex);
	kiln_texenc_destroy(enc);
	kiln_image_free(&img);
}

TestSuite(worker_s3, .init = setup_s3, .fini = teardown_s3, .timeout = 150);

Test(worker_s3, inputs_from_s3_and_outputs_to_s3_read_back_identical)
{
	static const char *const names[] = {"gradient.png", "garbage.png", "checker-alpha.png", "missing.png",
					    "noise.png", "wide.png", "cut.png", "pixel.png"};
	static const bool good[] = {true, false, true, false, true, true, false, true};
	enum { N = sizeof names / sizeof names[0] };
	char msg[KILN_STORAGE_MSG_MAX];
	kiln_storage *st;
	cr_assert_eq(kiln_storage_create(NULL, &st, msg, sizeof msg), KILN_OK, "%s", msg);
	for (size_t i = 0; i < N; i++) {
		if (strcmp(names[i], "missing.png") == 0)
			continue;
		char path[256], uri[256];
		snprintf(path, sizeof path, "%s/in/%s", dir, names[i]);
		snprintf(uri, sizeof uri, "s3://kiln-wk/in/%s", names[i]);
		kiln_buf f;
		kiln_buf_init(&f, 1 << 24);
		cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK, "%s", path);
		cr_assert_eq(kiln_storage_put(st, uri, f.data, f.len, msg, sizeof msg), KILN_OK, "%s", msg);
		kiln_buf_free(&f);
	}
	start_worker("");
	json_decref(expect_ready(5000));
	json_t *shard = kiln_proto_new(KILN_MSG_SHARD);
	json_t *items = json_array();
	for (size_t i = 0; i < N; i++) {
		char in[256], out[256];
		snprintf(in, sizeof in, "s3://kiln-wk/in/%s", names[i]);
		snprintf(out, sizeof out, "s3://kiln-wk/out/%zu/%s.dds", i, names[i]);
		json_array_append_new(items, json_pack("{s:I, s:s, s:s}", "id", (json_int_t)i, "input", in, "output", out));
	}
	json_object_set_new(shard, "job", json_string("s3job"));
	json_object_set_new(shard, "shard", json_string("s3job.s0"));
	json_object_set_new(shard, "lease", json_integer(1));
	json_object_set_new(shard, "lease_ms", json_integer(30000));
	json_object_set_new(shard, "options", json_pack("{s:s, s:s, s:b}", "format", "bc1", "quality", "fast",
							"measure_psnr", 1));
	json_object_set_new(shard, "items", json_incref(items));
	sched_send(&sched, shard);
	json_t *res = sched_expect(&sched, KILN_MSG_RESULT, 30000);
	json_t *ritems = json_object_get(res, "items");
	cr_assert_eq(json_array_size(ritems), N);
	for (size_t i = 0; i < N; i++) {
		json_t *r = json_array_get(ritems, i);
		const char *out = str(json_array_get(items, i), "output");
		kiln_buf got;
		kiln_buf_init(&got, 1 << 24);
		kiln_status gst = kiln_storage_get(st, out, &got, msg, sizeof msg);
		if (!good[i]) {
			cr_expect_str_eq(str(r, "status"), "error", "%s", names[i]);
			cr_expect_null(json_object_get(r, "psnr"), "%s", names[i]);
			cr_expect_eq(gst, KILN_ERR_NOT_FOUND, "%s: no output object for a failed item", names[i]);
			kiln_buf_free(&got);
			continue;
		}
		cr_assert_str_eq(str(r, "status"), "ok", "%s: %s", names[i], str(r, "error"));
		cr_assert_eq(gst, KILN_OK, "%s: %s", out, msg);
		cr_expect_eq(json_integer_value(json_object_get(r, "bytes")), (json_int_t)got.len, "%s", names[i]);
		cr_expect_gt(json_integer_value(json_object_get(r, "bytes_in")), 0);
		json_t *psnr = json_object_get(r, "psnr");
		cr_expect(json_is_integer(psnr) && json_integer_value(psnr) > 1500 && json_integer_value(psnr) <= 9900,
			  "%s: psnr %lld centi-dB", names[i], (long long)json_integer_value(psnr));
		kiln_texture tex;
		cr_expect_eq(kiln_container_read(got.data, got.len, &tex), KILN_OK, "%s", out);
		char path[256];
		snprintf(path, sizeof path, "%s/in/%s", dir, names[i]);
		kiln_buf want;
		kiln_buf_init(&want, 1 << 24);
		expected_dds(path, &want);
		cr_expect(want.len == got.len && memcmp(want.data, got.data, got.len) == 0,
			  "%s: the object read back is not the encoder's output", names[i]);
		kiln_buf_free(&want);
		kiln_buf_free(&got);
	}
	cr_expect(strstr(str(json_array_get(ritems, 3), "error"), "missing.png") != NULL, "%s",
		  str(json_array_get(ritems, 3), "error"));
	sched_send(&sched, make_simple(KILN_MSG_ACK, "shard", "s3job.s0"));
	json_decref(res);
	json_decref(items);
	kiln_storage_destroy(st);
	cr_expect(worker_alive());
}
