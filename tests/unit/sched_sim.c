/* Simulated workers and an HTTP client for the scheduler tests; see sched_sim.h. */
#include "sched_sim.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "common/buf.h"

struct sim_worker {
	void *ctx;
	void *sock;
	unsigned skipped[KILN_MSG_BYE + 1];
};

void sim_mkdtemp(char *out, size_t cap, const char *prefix)
{
	snprintf(out, cap, "/tmp/kiln-%s-XXXXXX", prefix);
	cr_assert_not_null(mkdtemp(out));
}

void sim_rmdir(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	(void)system(cmd);
}

/* The lowest port the kernel hands out for bind(0) and outgoing connections. */
static unsigned ephemeral_low(void)
{
	unsigned lo = 32768, hi = 0;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	return lo;
}

/* Whether a listener could bind port on 127.0.0.1 now (without SO_REUSEADDR: a port
 * some connection of an earlier test still holds in TIME_WAIT is passed over). */
static int port_bindable(unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return ok;
}

/* A port below the ephemeral range: a port bind(0) chose and released could be taken by
 * any outgoing connection (curl's, ZeroMQ's) of the tests running beside this one before
 * the server under test binds it (seen once as "address in use"). Below that range only
 * listeners bind, and each test process starts at its own place (from its pid) in it. */
unsigned sim_free_port(void)
{
	static unsigned next;
	unsigned first = 10000, lo = ephemeral_low();
	if (lo < first + 1000) {
		/* no room below the range: let the kernel pick */
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert(fd >= 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t len = sizeof a;
		cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
		cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
		close(fd);
		return ntohs(a.sin_port);
	}
	unsigned span = lo - first;
	if (!next)
		next = first + (unsigned)getpid() * 97u % span;
	for (unsigned tries = 0; tries < span; tries++) {
		unsigned port = next;
		next = first + (next - first + 1) % span;
		if (port_bindable(port))
			return port;
	}
	cr_assert_fail("no free port on 127.0.0.1 below %u", lo);
	return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	return kiln_buf_append(ctx, data, size * n) == KILN_OK ? size * n : 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
	char *loc = ctx;
	size_t len = size * n;
	if (loc && len > 10 && strncasecmp(data, "Location:", 9) == 0) {
		const char *v = data + 9;
		while (*v == ' ')
			v++;
		size_t vlen = len - (size_t)(v - data);
		while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n'))
			vlen--;
		snprintf(loc, 256, "%.*s", (int)vlen, v);
	}
	return len;
}

long sim_http(const char *method, const char *url, const char *body, const char *const *headers,
	      json_t **json, char *body_out, size_t body_cap, char *location, size_t loc_cap)
{
	char loc[256] = "";
	kiln_buf resp;
	kiln_buf_init(&resp, 64u << 20);
	struct curl_slist *hl = NULL;
	for (size_t i = 0; headers && headers[i]; i++)
		hl = curl_slist_append(hl, headers[i]);
	CURL *h = curl_easy_init();
	cr_assert_not_null(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, loc);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	long status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (json)
		*json = json_loadb((const char *)resp.data, resp.len, 0, NULL);
	if (body_out && body_cap) {
		size_t n = resp.len < body_cap - 1 ? resp.len : body_cap - 1;
		memcpy(body_out, resp.data ? (const char *)resp.data : "", n);
		body_out[n] = '\0';
	}
	if (location && loc_cap)
		snprintf(location, loc_cap, "%s", loc);
	curl_easy_cleanup(h);
	curl_slist_free_all(hl);
	kiln_buf_free(&resp);
	return status;
}

sim_worker *sim_worker_new(const char *endpoint, const char *name, unsigned slots, json_t *held)
{
	sim_worker *w = calloc(1, sizeof *w);
	cr_assert_not_null(w);
	w->ctx = zmq_ctx_new();
	w->sock = zmq_socket(w->ctx, ZMQ_DEALER);
	int zero = 0;
	zmq_setsockopt(w->sock, ZMQ_LINGER, &zero, sizeof zero);
	zmq_setsockopt(w->sock, ZMQ_ROUTING_ID, name, strlen(name));
	cr_assert_eq(zmq_connect(w->sock, endpoint), 0, "connect %s", endpoint);
	json_t *ready = kiln_proto_new(KILN_MSG_READY);
	json_object_set_new(ready, "worker", json_string(name));
	json_object_set_new(ready, "slots", json_integer(slots));
	json_object_set_new(ready, "devices", json_pack("[{s:s, s:i}]", "id", "cpu", "threads", 1));
	json_object_set_new(ready, "codecs", json_pack("[s]", "bc1"));
	if (held)
		json_object_set_new(ready, "held", held);
	sim_send(w, ready);
	return w;
}

void sim_worker_free(sim_worker *w)
{
	if (!w)
		return;
	zmq_close(w->sock);
	zmq_ctx_term(w->ctx);
	free(w);
}

void sim_send(sim_worker *w, json_t *msg)
{
	kiln_buf out;
	kiln_buf_init(&out, KILN_PROTO_MAX_FRAME);
	cr_assert_eq(kiln_proto_encode(msg, &out), KILN_OK, "the simulated worker built a bad message");
	cr_assert_eq(zmq_send(w->sock, out.data, out.len, 0), (int)out.len);
	kiln_buf_free(&out);
	json_decref(msg);
}

json_t *sim_parse(const void *data, size_t size, kiln_msg_type *type)
{
	json_t *msg;
	char err[200];
	kiln_status st = kiln_proto_parse(data, size, &msg, type, err, sizeof err);
	cr_assert_eq(st, KILN_OK, "the scheduler sent an invalid message: %s", err);
	return msg;
}

json_t *sim_recv(sim_worker *w, kiln_msg_type want, int timeout_ms)
{
	for (;;) {
		zmq_pollitem_t item = {w->sock, 0, ZMQ_POLLIN, 0};
		if (zmq_poll(&item, 1, timeout_ms) <= 0)
			return NULL;
		zmq_msg_t m;
		zmq_msg_init(&m);
		cr_assert(zmq_msg_recv(&m, w->sock, 0) >= 0);
		kiln_msg_type type;
		json_t *msg = sim_parse(zmq_msg_data(&m), zmq_msg_size(&m), &type);
		zmq_msg_close(&m);
		if (type == want)
			return msg;
		w->skipped[type]++;
		json_decref(msg);
	}
}

unsigned sim_skipped(const sim_worker *w, kiln_msg_type type)
{
	return w->skipped[type];
}

void sim_heartbeat(sim_worker *w, json_t *active)
{
	json_t *hb = kiln_proto_new(KILN_MSG_HEARTBEAT);
	if (active)
		json_object_set_new(hb, "active", active);
	sim_send(w, hb);
}

void sim_result_lease(sim_worker *w, const json_t *shard, long long lease, const char *error)
{
	json_t *res = kiln_proto_new(KILN_MSG_RESULT), *items = json_array();
	json_object_set(res, "job", json_object_get(shard, "job"));
	json_object_set(res, "shard", json_object_get(shard, "shard"));
	json_object_set_new(res, "lease", json_integer(lease));
	size_t i;
	const json_t *it;
	json_array_foreach(json_object_get(shard, "items"), i, it) {
		json_t *r = error ? json_pack("{s:O, s:s, s:s}", "id", json_object_get(it, "id"), "status", "error",
					      "error", error)
				  : json_pack("{s:O, s:s, s:i, s:i}", "id", json_object_get(it, "id"), "status", "ok",
					      "bytes", 100, "bytes_in", 1000);
		json_array_append_new(items, r);
	}
	json_object_set_new(res, "items", items);
	sim_send(w, res);
}

void sim_result(sim_worker *w, const json_t *shard, const char *error)
{
	sim_result_lease(w, shard, json_integer_value(json_object_get(shard, "lease")), error);
}
