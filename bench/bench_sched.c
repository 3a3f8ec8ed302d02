/* Scheduler scale (issue 6): a 1,000,000-item job planned in under 10 s and under 1 GiB,
 * and at least 5,000 shards dispatched per second, with simulated workers.
 *
 * Everything is in this process and goes through the real interfaces: an in-process
 * scheduler (journal, REST on 127.0.0.1, ROUTER on tcp://127.0.0.1), a job submitted with
 * POST /v1/jobs whose input is a manifest file of N URIs (the input form that scales: an
 * inline list is capped at 100,000 URIs and 1 MiB of body, and creating a million files
 * for a directory walk would measure the file system), and simulated workers: DEALER
 * sockets on threads of their own, each with several slots, answering every shard at once
 * with an "ok" result, as docs/PROTOCOL.md says. The inputs need not exist: nothing reads
 * them.
 *
 * Planning: wall time of the POST (manifest read, names checked, items journaled and
 * fsynced before the 202), and the peak resident memory it caused (VmHWM, reset through
 * /proc/self/clear_refs before the POST, so the Kodak set loaded by other sections does
 * not count; the figure is the peak minus the resident size before).
 * Dispatch: workers connect after the job is planned; the time from their start until
 * the job is done (every result journaled, fsynced and acknowledged), polled through GET
 * /v1/jobs/j1, gives shards/s and items/s end to end. The job's own "rate" (items ended
 * per second since its first dispatch) is reported beside it. */
#define _GNU_SOURCE  /* memmem */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "bench/bench_util.h"
#include "common/buf.h"
#include "scheduler/scheduler.h"

#define SCHED_ITEMS_FULL 1000000u
#define SCHED_ITEMS_QUICK 100000u
#define SCHED_SHARD_SIZE 32u
#define SCHED_WORKERS 16u
#define SCHED_SLOTS 8u
#define SCHED_TIMEOUT_S 600.0
#define PLAN_TARGET_S 10.0
#define PLAN_TARGET_BYTES (1024.0 * 1024 * 1024)
#define DISPATCH_TARGET 5000.0

/* ---- memory -------------------------------------------------------------------------- */

/* A field of /proc/self/status in bytes ("VmHWM", "VmRSS"), or 0. */
static uint64_t proc_status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kib = 0;
	size_t n = strlen(field);
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			kib = strtoull(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return kib * 1024;
}

/* Resets VmHWM to the current resident size (Linux 4.0+); false when not possible. */
static bool reset_peak_rss(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, "5", 1) == 1;
	close(fd);
	return ok;
}

/* CPU seconds (user + system) used so far by the threads of this process named name
 * (the scheduler names its dispatch thread "kiln-dispatch"); -1 when none is found. */
static double thread_cpu_s(const char *name)
{
	DIR *dir = opendir("/proc/self/task");
	double total = -1;
	struct dirent *e;
	while (dir && (e = readdir(dir))) {
		char path[300], buf[1024];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		bool match = f && fgets(buf, sizeof buf, f) && strncmp(buf, name, strlen(name)) == 0 &&
			     (buf[strlen(name)] == '\n' || buf[strlen(name)] == '\0');
		if (f)
			fclose(f);
		if (!match)
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
		f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = '\0';
		/* fields after the parenthesised name: state is field 3, utime 14, stime 15 */
		const char *p = strrchr(buf, ')');
		unsigned long long ut = 0, st = 0;
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
			total = (total < 0 ? 0 : total) + (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	}
	if (dir)
		closedir(dir);
	return total;
}

static double process_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

/* ---- REST ---------------------------------------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	return kiln_buf_append(ctx, data, size * n) == KILN_OK ? size * n : 0;
}

/* One request to the in-process scheduler; the parsed body (or NULL) in *out. */
static long http(const char *method, const char *url, const char *body, json_t **out)
{
	CURL *h = curl_easy_init();
	if (!h)
		return 0;
	kiln_buf resp;
	kiln_buf_init(&resp, 64u << 20);
	struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 300000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	long status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (out)
		*out = resp.len ? json_loadb((const char *)resp.data, resp.len, 0, NULL) : NULL;
	curl_slist_free_all(hl);
	curl_easy_cleanup(h);
	kiln_buf_free(&resp);
	return status;
}

/* A sample of /metrics: value of the line that starts with name followed by a space. */
static double metric(const char *base, const char *name)
{
	char url[128];
	snprintf(url, sizeof url, "%s/metrics", base);
	CURL *h = curl_easy_init();
	kiln_buf resp;
	kiln_buf_init(&resp, 1u << 20);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	double v = -1;
	if (curl_easy_perform(h) == CURLE_OK && kiln_buf_append(&resp, "", 1) == KILN_OK) {
		size_t n = strlen(name);
		for (const char *p = (const char *)resp.data; p; p = strchr(p, '\n')) {
			p += *p == '\n';
			if (strncmp(p, name, n) == 0 && p[n] == ' ') {
				v = strtod(p + n + 1, NULL);
				break;
			}
		}
	}
	curl_easy_cleanup(h);
	kiln_buf_free(&resp);
	return v;
}

/* ---- simulated workers ---------------------------------------------------------------- */

typedef struct sim_ctx {
	void *zmq;
	const char *endpoint;
	unsigned index, slots;
	atomic_bool *stop;
	uint64_t shards, items;  /* answered; read after join */
	bool failed;
} sim_ctx;

static bool send_text(void *sock, const char *text, size_t len)
{
	return zmq_send(sock, text, len, 0) == (int)len;
}

/* The text of a top-level string or integer field ("key":value) of a compact JSON message,
 * copied into out; false when absent. The scheduler's messages are jansson's compact
 * output, and "\"key\":" cannot occur inside a JSON string (its quotes would be escaped). */
static bool scan_field(const char *msg, size_t len, const char *key, char *out, size_t cap)
{
	char pat[32];
	int n = snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = memmem(msg, len, pat, (size_t)n), *end = msg + len;
	if (!p)
		return false;
	p += n;
	bool quoted = p < end && *p == '"';
	p += quoted;
	size_t k = 0;
	while (p < end && k + 1 < cap && (quoted ? *p != '"' : (*p >= '0' && *p <= '9')))
		out[k++] = *p++;
	out[k] = '\0';
	return k > 0;
}

/* Answers one shard message: every item ok. The message is scanned as text and the result
 * written as text, so the simulated side costs little of the cores it shares with the
 * scheduler (a real worker runs on another machine). */
static bool answer(void *sock, const char *msg, size_t len, kiln_buf *out, sim_ctx *c)
{
	char job[32], shard[48], lease[32], head[256];
	if (!scan_field(msg, len, "job", job, sizeof job) || !scan_field(msg, len, "shard", shard, sizeof shard) ||
	    !scan_field(msg, len, "lease", lease, sizeof lease))
		return false;
	kiln_buf_reset(out);
	int n = snprintf(head, sizeof head, "{\"v\":1,\"type\":\"result\",\"job\":\"%s\",\"shard\":\"%s\","
					    "\"lease\":%s,\"items\":[", job, shard, lease);
	kiln_status st = kiln_buf_append(out, head, (size_t)n);
	size_t items = 0;
	static const char pat[] = "\"id\":";
	for (const char *p = msg, *end = msg + len; (p = memmem(p, (size_t)(end - p), pat, sizeof pat - 1));) {
		p += sizeof pat - 1;
		char *stop;
		long long id = strtoll(p, &stop, 10);
		p = stop;
		n = snprintf(head, sizeof head, "%s{\"id\":%lld,\"status\":\"ok\",\"bytes\":100,\"bytes_in\":1000}",
			     items++ ? "," : "", id);
		if (st == KILN_OK)
			st = kiln_buf_append(out, head, (size_t)n);
	}
	if (st == KILN_OK)
		st = kiln_buf_append(out, "]}", 2);
	c->shards++;
	c->items += items;
	return st == KILN_OK && items > 0 && send_text(sock, (const char *)out->data, out->len);
}

static void *sim_worker_main(void *arg)
{
	sim_ctx *c = arg;
	char name[32], text[512];
	snprintf(name, sizeof name, "bench-sim-%u", c->index);
	pthread_setname_np(pthread_self(), "sim-worker");  /* tells them apart in perf */
	void *sock = zmq_socket(c->zmq, ZMQ_DEALER);
	int zero = 0;
	kiln_buf out;
	kiln_buf_init(&out, 1u << 20);
	if (!sock) {
		c->failed = true;
		return NULL;
	}
	zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(sock, ZMQ_ROUTING_ID, name, strlen(name));
	int n = snprintf(text, sizeof text, "{\"v\":1,\"type\":\"ready\",\"worker\":\"%s\",\"slots\":%u,"
					    "\"devices\":[{\"id\":\"cpu\",\"threads\":1}],\"codecs\":[\"bc1\"]}",
			 name, c->slots);
	if (zmq_connect(sock, c->endpoint) != 0 || !send_text(sock, text, (size_t)n)) {
		c->failed = true;
		goto done;
	}
	static const char hb[] = "{\"v\":1,\"type\":\"heartbeat\"}";
	double last_sent = bench_now();
	while (!atomic_load(c->stop)) {
		zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
		if (zmq_poll(&item, 1, 100) > 0) {
			/* drain what is there before looking at the clock again */
			for (;;) {
				zmq_msg_t m;
				zmq_msg_init(&m);
				if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
					zmq_msg_close(&m);
					break;
				}
				const char *text = zmq_msg_data(&m);
				size_t len = zmq_msg_size(&m);
				char type[16];
				if (scan_field(text, len, "type", type, sizeof type) && strcmp(type, "shard") == 0) {
					if (!answer(sock, text, len, &out, c))
						c->failed = true;
					last_sent = bench_now();
				}
				zmq_msg_close(&m);
			}
		}
		/* heartbeats keep an idle worker alive while the others finish */
		if (bench_now() - last_sent > 0.5) {
			send_text(sock, hb, sizeof hb - 1);
			last_sent = bench_now();
		}
	}
	static const char bye[] = "{\"v\":1,\"type\":\"bye\"}";
	send_text(sock, bye, sizeof bye - 1);
done:
	zmq_close(sock);
	kiln_buf_free(&out);
	return NULL;
}

/* ---- the bench ------------------------------------------------------------------------ */

static kiln_status write_manifest(const char *path, const char *tmp, size_t count)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return KILN_ERR_IO;
	fprintf(f, "# kiln-bench scheduler scale: %zu inputs\n", count);
	for (size_t i = 0; i < count; i++)
		fprintf(f, "file://%s/in/d%04zu/img%07zu.png\n", tmp, i / 1000, i);
	return fclose(f) == 0 ? KILN_OK : KILN_ERR_IO;
}

static void rm_tree(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "kiln-bench: could not remove %s\n", dir);
}

static double file_size(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (double)sb.st_size : 0;
}

static void fmt_mib(char *out, size_t cap, double bytes)
{
	snprintf(out, cap, "%.0f MiB", bytes / (1024.0 * 1024));
}

int bench_sched(const bench_opts *opts, bench_report *report)
{
	size_t count = opts->quick ? SCHED_ITEMS_QUICK : SCHED_ITEMS_FULL;
	size_t nshards = (count + SCHED_SHARD_SIZE - 1) / SCHED_SHARD_SIZE;
	char tmp[] = "/tmp/kiln-bench-sched-XXXXXX";
	char path[320], state[256], base[64], body[600], url[128], cell[64], what[160];
	int failed = 0;
	kiln_scheduler *s = NULL;
	json_t *job = NULL;
	if (!mkdtemp(tmp)) {
		bench_report_line(report, "scheduler bench: cannot create a temporary directory");
		return 1;
	}
	snprintf(path, sizeof path, "%s/manifest.txt", tmp);
	snprintf(state, sizeof state, "%s/state", tmp);
	if (write_manifest(path, tmp, count) != KILN_OK) {
		bench_report_line(report, "scheduler bench: cannot write %s", path);
		failed = 1;
		goto done;
	}
	kiln_scheduler_config cfg = {.listen = "tcp://127.0.0.1:*", .http = "127.0.0.1:0",
				     .state_dir = state};
	if (kiln_scheduler_create(&cfg, &s) != KILN_OK) {
		bench_report_line(report, "scheduler bench: the scheduler did not start");
		failed = 1;
		goto done;
	}
	snprintf(base, sizeof base, "http://127.0.0.1:%u", kiln_scheduler_http_port(s));

	/* ---- planning ---- */
	snprintf(body, sizeof body, "{\"input\":{\"manifest\":\"file://%s\"},\"output\":\"file://%s/out/\","
				    "\"shard_size\":%u}", path, tmp, SCHED_SHARD_SIZE);
	snprintf(url, sizeof url, "%s/v1/jobs", base);
	uint64_t rss_before = proc_status_kib("VmRSS");
	bool hwm_reset = reset_peak_rss();
	double t0 = bench_now(), pcpu0 = process_cpu_s();
	long status = http("POST", url, body, &job);
	double plan_s = bench_now() - t0, plan_cpu = process_cpu_s() - pcpu0;
	double peak = (double)proc_status_kib("VmHWM");
	const json_t *items = json_object_get(job, "items");
	size_t total = (size_t)json_integer_value(json_object_get(items, "total"));
	if (status != 202 || total != count) {
		bench_report_line(report, "scheduler bench: POST /v1/jobs answered %ld with %zu items (expected 202, %zu)",
				  status, total, count);
		failed = 1;
		goto done;
	}
	char id[32];
	snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")));
	snprintf(path, sizeof path, "%.250s/journal.jsonl", state);
	double journal = file_size(path);

	/* ---- dispatch ---- */
	void *zmq = zmq_ctx_new();
	atomic_bool stop = false;
	sim_ctx sims[SCHED_WORKERS];
	pthread_t threads[SCHED_WORKERS];
	unsigned started = 0;
	double cpu0 = process_cpu_s(), dcpu0 = thread_cpu_s("kiln-dispatch");
	t0 = bench_now();
	for (unsigned i = 0; i < SCHED_WORKERS; i++) {
		sims[i] = (sim_ctx){zmq, kiln_scheduler_endpoint(s), i, SCHED_SLOTS, &stop, 0, 0, false};
		if (pthread_create(&threads[i], NULL, sim_worker_main, &sims[i]) != 0)
			break;
		started++;
	}
	snprintf(url, sizeof url, "%s/v1/jobs/%s", base, id);
	json_t *view = NULL;
	const char *st_name = "";
	double dispatch_s = 0;
	while (bench_now() - t0 < SCHED_TIMEOUT_S) {
		json_decref(view);
		view = NULL;
		http("GET", url, NULL, &view);
		st_name = json_string_value(json_object_get(view, "state"));
		if (st_name && strcmp(st_name, "running") != 0 && strcmp(st_name, "queued") != 0)
			break;
		usleep(20000);
	}
	dispatch_s = bench_now() - t0;
	double cpu = process_cpu_s() - cpu0, dcpu = thread_cpu_s("kiln-dispatch") - dcpu0;
	double latency_sum = metric(base, "kiln_dispatch_latency_seconds_sum");
	double latency_n = metric(base, "kiln_dispatch_latency_seconds_count");
	atomic_store(&stop, true);
	uint64_t answered = 0;
	for (unsigned i = 0; i < started; i++) {
		pthread_join(threads[i], NULL);
		answered += sims[i].shards;
		failed += sims[i].failed;
	}
	zmq_ctx_term(zmq);
	items = json_object_get(view, "items");
	size_t done_items = (size_t)json_integer_value(json_object_get(items, "done"));
	double rate = json_real_value(json_object_get(view, "rate"));
	if (!st_name || strcmp(st_name, "done") != 0 || done_items != count) {
		bench_report_line(report, "scheduler bench: the job ended %s with %zu of %zu items done",
				  st_name ? st_name : "(no answer)", done_items, count);
		failed++;
	}
	double journal_after = file_size(path);
	json_decref(view);

	/* ---- the report ---- */
	char note[512];
	snprintf(note, sizeof note,
		 "In-process scheduler (journal in /tmp, REST and ROUTER on loopback TCP). A job of %zu "
		 "items from a manifest file, shard_size %u, submitted with POST /v1/jobs; then %u "
		 "simulated DEALER workers (threads) with %u slots each answer every shard at once "
		 "with ok. The anchor column holds issue 6's target.",
		 count, SCHED_SHARD_SIZE, SCHED_WORKERS, SCHED_SLOTS);
	bench_section *sec = bench_section_add(report, "Scheduler scale", note);
	if (!sec)
		goto done;
	snprintf(what, sizeof what, "plan %zu items: POST /v1/jobs until 202 (journal fsynced)", count);
	snprintf(cell, sizeof cell, "%.2f s", plan_s);
	bench_row_text(sec, what, cell, count == SCHED_ITEMS_FULL ? "< 10 s" : NULL,
		       count != SCHED_ITEMS_FULL ? "(--quick)" : plan_s < PLAN_TARGET_S ? "met" : "MISSED");
	snprintf(cell, sizeof cell, "%.2f s", plan_cpu);
	bench_row_text(sec, "CPU time of the process during that POST (user + system)", cell, NULL, NULL);
	double grown = peak > (double)rss_before ? peak - (double)rss_before : 0;
	fmt_mib(cell, sizeof cell, grown);
	bench_row_text(sec, hwm_reset ? "peak memory added by planning (VmHWM - VmRSS before)"
				      : "peak memory of the process (VmHWM; could not reset it)",
		       cell, count == SCHED_ITEMS_FULL ? "< 1 GiB" : NULL,
		       count != SCHED_ITEMS_FULL ? "(--quick)" : (hwm_reset ? grown : peak) < PLAN_TARGET_BYTES ? "met" : "MISSED");
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	fmt_mib(cell, sizeof cell, (double)ru.ru_maxrss * 1024);
	bench_row_text(sec, "peak memory of the whole bench process so far (ru_maxrss)", cell, NULL, NULL);
	fmt_mib(cell, sizeof cell, journal);
	bench_row_text(sec, "journal after planning", cell, NULL, NULL);
	snprintf(what, sizeof what, "dispatch %zu shards to %u x %u slots, end to end", nshards, SCHED_WORKERS,
		 SCHED_SLOTS);
	snprintf(cell, sizeof cell, "%.0f shards/s", (double)nshards / dispatch_s);
	bench_row_text(sec, what, cell, ">= 5,000 shards/s",
		       (double)nshards / dispatch_s >= DISPATCH_TARGET ? "met" : "MISSED");
	snprintf(cell, sizeof cell, "%.0f items/s", (double)count / dispatch_s);
	bench_row_text(sec, "the same in items", cell, NULL, NULL);
	snprintf(cell, sizeof cell, "%.0f items/s", rate);
	bench_row_text(sec, "the job's own \"rate\" (GET /v1/jobs/{id})", cell, NULL, NULL);
	if (latency_n > 0) {
		snprintf(cell, sizeof cell, "%.2f ms", latency_sum / latency_n * 1000);
		bench_row_text(sec, "mean shard round trip (sent to journaled), /metrics", cell, NULL, NULL);
	}
	snprintf(cell, sizeof cell, "%.0f us", dcpu / (double)nshards * 1e6);
	snprintf(what, sizeof what, "dispatch thread CPU per shard (%.0f shards/s on one idle core)",
		 dcpu > 0 ? (double)nshards / dcpu : 0);
	if (dcpu0 >= 0)
		bench_row_text(sec, what, cell, NULL, NULL);
	snprintf(cell, sizeof cell, "%.0f us", cpu / (double)nshards * 1e6);
	bench_row_text(sec, "whole process CPU per shard (scheduler, ZeroMQ, REST polls, simulated workers)",
		       cell, NULL, NULL);
	fmt_mib(cell, sizeof cell, journal_after);
	bench_row_text(sec, "journal when the job is done", cell, NULL, NULL);
	snprintf(cell, sizeof cell, "%llu", (unsigned long long)answered);
	bench_row_text(sec, "shards answered by the workers (re-sends included)", cell, NULL, NULL);
done:
	json_decref(job);
	kiln_scheduler_destroy(s);
	rm_tree(tmp);
	return failed;
}
