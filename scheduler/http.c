/* REST routes, authentication, body capping and the metrics page; see http.h. */
#include "scheduler/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"

#define JOBS_PREFIX "/v1/jobs"
#define FAILURES_DEFAULT_LIMIT 1000
#define FAILURES_MAX_LIMIT 100000

struct kiln_http {
	struct MHD_Daemon *daemon;
	kiln_jobs *jobs;
	kiln_dispatch *dispatch;
	char *token;
	size_t max_body;
	unsigned port;
};

/* Per-request state across the handler's calls (headers, body chunks, the end). */
typedef struct request {
	kiln_buf body;
	bool too_large;
} request;

bool kiln_http_token_equal(const char *given, const char *expected)
{
	size_t glen = strlen(given), elen = strlen(expected);
	unsigned char diff = glen != elen;
	for (size_t i = 0; i < elen; i++)
		diff |= (unsigned char)((i < glen ? given[i] : 0) ^ expected[i]);
	return diff == 0;
}

/* ---- responses ---- */

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, char *text,
				    size_t len, const char *type, const char *location, const char *allow)
{
	/* text is malloc'd (or NULL after a failed allocation: then an empty 500) */
	if (!text) {
		status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		len = 0;
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text ? text : (char *)"",
								 text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (location)
		MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, location);
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"kiln\"");
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* Sends body (consumed) as JSON. */
static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned status, json_t *body,
				    const char *location)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	size_t len = text ? strlen(text) : 0;
	if (text) {
		/* a trailing newline keeps `curl` output tidy on a terminal */
		char *t = realloc(text, len + 2);
		if (t) {
			text = t;
			text[len++] = '\n';
			text[len] = '\0';
		}
	}
	return respond_text(conn, status, text, len, "application/json", location, NULL);
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, unsigned status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return respond_json(conn, status, json_pack("{s:s}", "error", msg), NULL);
}

static enum MHD_Result respond_method(struct MHD_Connection *conn, const char *allow)
{
	char *text = kiln_strdup("{\"error\":\"method not allowed\"}\n");
	return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, text ? strlen(text) : 0,
			    "application/json", NULL, allow);
}

/* A view, or the HTTP status a kiln_status means. */
static enum MHD_Result respond_view(struct MHD_Connection *conn, kiln_status st, json_t *view,
				    const char *id)
{
	switch (st) {
	case KILN_OK: return respond_json(conn, MHD_HTTP_OK, view, NULL);
	case KILN_ERR_NOT_FOUND: return respond_error(conn, MHD_HTTP_NOT_FOUND, "no job '%.64s'", id);
	case KILN_ERR_UNSUPPORTED:
		return respond_error(conn, MHD_HTTP_CONFLICT, "job '%.64s' is cancelled or could not run", id);
	default: return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", kiln_strerror(st));
	}
}

/* ---- metrics ---- */

static void put(kiln_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(kiln_buf *b, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)kiln_buf_append(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void put_family(kiln_buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static enum MHD_Result serve_metrics(kiln_http *h, struct MHD_Connection *conn)
{
	kiln_jobs_stats js;
	kiln_dispatch_stats ds = {0};
	kiln_jobs_get_stats(h->jobs, &js);
	if (h->dispatch)
		kiln_dispatch_get_stats(h->dispatch, &ds);
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	put_family(&b, "kiln_jobs", "gauge", "Jobs by state.");
	for (int s = 0; s < KILN_JOB_STATES_; s++)
		put(&b, "kiln_jobs{state=\"%s\"} %llu\n", kiln_job_state_name((kiln_job_state)s),
		    (unsigned long long)js.jobs[s]);
	put_family(&b, "kiln_items", "gauge", "Items of all jobs by state.");
	put(&b, "kiln_items{state=\"pending\"} %llu\n", (unsigned long long)js.items_pending);
	put(&b, "kiln_items{state=\"in_flight\"} %llu\n", (unsigned long long)js.items_in_flight);
	put(&b, "kiln_items{state=\"done\"} %llu\n", (unsigned long long)js.items_done);
	put(&b, "kiln_items{state=\"failed\"} %llu\n", (unsigned long long)js.items_failed);
	put_family(&b, "kiln_shards_in_flight", "gauge", "Shards leased to workers.");
	put(&b, "kiln_shards_in_flight %llu\n", (unsigned long long)js.shards_in_flight);
	put_family(&b, "kiln_workers", "gauge", "Workers connected.");
	put(&b, "kiln_workers %u\n", ds.workers);
	put_family(&b, "kiln_worker_slots", "gauge", "Shard slots announced by the connected workers.");
	put(&b, "kiln_worker_slots %u\n", ds.slots);
	put_family(&b, "kiln_dispatch_latency_seconds", "histogram",
		   "Seconds from sending a shard to a worker until its result is journaled.");
	for (int i = 0; i < KILN_LATENCY_BUCKETS; i++)
		put(&b, "kiln_dispatch_latency_seconds_bucket{le=\"%g\"} %llu\n", kiln_dispatch_latency_bounds[i],
		    (unsigned long long)ds.latency_buckets[i]);
	put(&b, "kiln_dispatch_latency_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)ds.latency_count);
	put(&b, "kiln_dispatch_latency_seconds_sum %.6f\n", ds.latency_sum);
	put(&b, "kiln_dispatch_latency_seconds_count %llu\n", (unsigned long long)ds.latency_count);
	put_family(&b, "kiln_shards_dispatched_total", "counter", "Shards sent to workers.");
	put(&b, "kiln_shards_dispatched_total %llu\n", (unsigned long long)ds.shards_sent);
	put_family(&b, "kiln_leases_lost_total", "counter", "Leases that ended without a result.");
	put(&b, "kiln_leases_lost_total %llu\n", (unsigned long long)ds.leases_lost);
	put_family(&b, "kiln_stale_results_total", "counter", "Late results acknowledged and ignored.");
	put(&b, "kiln_stale_results_total %llu\n", (unsigned long long)ds.stale_results);
	put_family(&b, "kiln_bytes_in_total", "counter", "Bytes of input read by workers for finished items.");
	put(&b, "kiln_bytes_in_total %llu\n", (unsigned long long)js.bytes_in);
	put_family(&b, "kiln_bytes_out_total", "counter", "Bytes of output written by workers.");
	put(&b, "kiln_bytes_out_total %llu\n", (unsigned long long)js.bytes_out);
	put_family(&b, "kiln_journal_bytes", "gauge", "Size of the journal file.");
	put(&b, "kiln_journal_bytes %llu\n", (unsigned long long)js.journal_bytes);
	char *text = kiln_malloc(b.len + 1);
	if (text) {
		memcpy(text, b.data, b.len);
		text[b.len] = '\0';
	}
	size_t len = b.len;
	kiln_buf_free(&b);
	return respond_text(conn, MHD_HTTP_OK, text, len, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

/* ---- routes ---- */

static enum MHD_Result post_job(kiln_http *h, struct MHD_Connection *conn, const request *req)
{
	json_error_t jerr;
	json_t *spec = json_loadb((const char *)req->body.data, req->body.len, JSON_REJECT_DUPLICATES, &jerr);
	if (!spec)
		return respond_error(conn, MHD_HTTP_BAD_REQUEST, "malformed JSON: %s (line %d, column %d)",
				     jerr.text, jerr.line, jerr.column);
	const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
	char err[512] = "";
	json_t *view = NULL;
	bool created;
	kiln_status st = kiln_jobs_submit(h->jobs, spec, key, &view, &created, err, sizeof err);
	json_decref(spec);
	if (st == KILN_ERR_INVALID_ARG)
		return respond_error(conn, MHD_HTTP_BAD_REQUEST, "%s", err[0] ? err : "invalid job spec");
	if (st != KILN_OK)
		return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "%s", err[0] ? err : kiln_strerror(st));
	char location[64];
	snprintf(location, sizeof location, JOBS_PREFIX "/%s", json_string_value(json_object_get(view, "id")));
	return respond_json(conn, MHD_HTTP_ACCEPTED, view, location);
}

/* ?offset=&limit= for the failure list, as non-negative integers */
static bool query_size(struct MHD_Connection *conn, const char *name, size_t def, size_t max, size_t *out)
{
	const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
	*out = def;
	if (!v)
		return true;
	char *end;
	unsigned long long n = strtoull(v, &end, 10);
	if (!v[0] || *end || v[0] == '-' || n > max)
		return false;
	*out = (size_t)n;
	return true;
}

/* /v1/jobs/{id}[/failures|/retry-failed] */
static enum MHD_Result job_route(kiln_http *h, struct MHD_Connection *conn, const char *rest,
				 const char *method)
{
	char id[32];
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	if (n == 0 || n >= sizeof id)
		return respond_error(conn, MHD_HTTP_NOT_FOUND, "no such resource");
	memcpy(id, rest, n);
	id[n] = '\0';
	const char *sub = slash ? slash + 1 : NULL;
	json_t *view = NULL;
	kiln_status st;
	if (!sub) {
		if (strcmp(method, "GET") == 0)
			st = kiln_jobs_view(h->jobs, id, &view);
		else if (strcmp(method, "DELETE") == 0)
			st = kiln_jobs_cancel(h->jobs, id, &view);
		else
			return respond_method(conn, "GET, DELETE");
		return respond_view(conn, st, view, id);
	}
	if (strcmp(sub, "failures") == 0) {
		if (strcmp(method, "GET") != 0)
			return respond_method(conn, "GET");
		size_t offset, limit;
		if (!query_size(conn, "offset", 0, SIZE_MAX / 2, &offset) ||
		    !query_size(conn, "limit", FAILURES_DEFAULT_LIMIT, FAILURES_MAX_LIMIT, &limit))
			return respond_error(conn, MHD_HTTP_BAD_REQUEST,
					     "offset and limit are whole numbers (limit at most %d)", FAILURES_MAX_LIMIT);
		st = kiln_jobs_failures(h->jobs, id, offset, limit, &view);
		return respond_view(conn, st, view, id);
	}
	if (strcmp(sub, "retry-failed") == 0) {
		if (strcmp(method, "POST") != 0)
			return respond_method(conn, "POST");
		st = kiln_jobs_retry_failed(h->jobs, id, &view);
		return respond_view(conn, st, view, id);
	}
	return respond_error(conn, MHD_HTTP_NOT_FOUND, "no such resource");
}

static bool authorized(kiln_http *h, struct MHD_Connection *conn)
{
	if (!h->token)
		return true;
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
		return false;
	auth += 7;
	while (*auth == ' ')
		auth++;
	return kiln_http_token_equal(auth, h->token);
}

static enum MHD_Result route(kiln_http *h, struct MHD_Connection *conn, const char *url,
			     const char *method, const request *req)
{
	if (req->too_large)
		return respond_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %zu bytes", h->max_body);
	if (strcmp(url, "/metrics") == 0)
		return strcmp(method, "GET") == 0 ? serve_metrics(h, conn) : respond_method(conn, "GET");
	if (strcmp(url, JOBS_PREFIX) == 0 || strcmp(url, JOBS_PREFIX "/") == 0) {
		if (strcmp(method, "GET") == 0)
			return respond_json(conn, MHD_HTTP_OK, kiln_jobs_list(h->jobs), NULL);
		if (strcmp(method, "POST") == 0)
			return post_job(h, conn, req);
		return respond_method(conn, "GET, POST");
	}
	if (strncmp(url, JOBS_PREFIX "/", sizeof JOBS_PREFIX) == 0)
		return job_route(h, conn, url + sizeof JOBS_PREFIX, method);
	return respond_error(conn, MHD_HTTP_NOT_FOUND, "no such resource");
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload_data, size_t *upload_data_size,
			       void **con_cls)
{
	kiln_http *h = cls;
	request *req = *con_cls;
	if (!req) {
		/* the headers have arrived: answer what can be answered before any body */
		if (strcmp(url, "/healthz") == 0)
			return strcmp(method, "GET") == 0
				       ? respond_json(conn, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"), NULL)
				       : respond_method(conn, "GET");
		if (!authorized(h, conn))
			return respond_error(conn, MHD_HTTP_UNAUTHORIZED, "missing or wrong bearer token");
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > h->max_body)
			return respond_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %zu bytes",
					     h->max_body);
		req = kiln_calloc(1, sizeof *req);
		if (!req)
			return MHD_NO;
		kiln_buf_init(&req->body, h->max_body);
		*con_cls = req;
		return MHD_YES;
	}
	if (*upload_data_size) {
		/* past the cap the rest is read and dropped, so the 413 reaches the client */
		if (!req->too_large && kiln_buf_append(&req->body, upload_data, *upload_data_size) != KILN_OK)
			req->too_large = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	return route(h, conn, url, method, req);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		      enum MHD_RequestTerminationCode code)
{
	request *req = *con_cls;
	if (req) {
		kiln_buf_free(&req->body);
		free(req);
		*con_cls = NULL;
	}
}

/* "host:port", "[v6]:port" or ":port" -> a socket address */
static kiln_status parse_address(const char *address, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[256];
	const char *colon = strrchr(address, ':');
	if (!colon || !colon[1])
		return KILN_ERR_INVALID_ARG;
	size_t hlen = (size_t)(colon - address);
	const char *h = address;
	if (hlen >= 2 && address[0] == '[' && address[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen >= sizeof host)
		return KILN_ERR_INVALID_ARG;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	if (getaddrinfo(hlen ? host : NULL, colon + 1, &hints, &res) != 0 || !res)
		return KILN_ERR_INVALID_ARG;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return KILN_OK;
}

kiln_status kiln_http_create(const kiln_http_config *cfg, kiln_jobs *jobs, kiln_dispatch *dispatch,
			     kiln_http **out)
{
	*out = NULL;
	if (!cfg || !cfg->address || !jobs)
		return KILN_ERR_INVALID_ARG;
	struct sockaddr_storage ss;
	socklen_t sslen;
	if (parse_address(cfg->address, &ss, &sslen) != KILN_OK) {
		KILN_ERROR("bad HTTP address; expected HOST:PORT", "address=%s", cfg->address);
		return KILN_ERR_INVALID_ARG;
	}
	kiln_http *h = kiln_calloc(1, sizeof *h);
	if (!h)
		return KILN_ERR_NOMEM;
	kiln_status st = KILN_ERR_NOMEM;
	h->jobs = jobs;
	h->dispatch = dispatch;
	h->max_body = cfg->max_body ? cfg->max_body : KILN_HTTP_DEFAULT_MAX_BODY;
	if (cfg->token && cfg->token[0] && !(h->token = kiln_strdup(cfg->token)))
		goto fail;
	unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, handler, h,
				     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				     MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->threads ? cfg->threads : 4),
				     MHD_OPTION_CONNECTION_TIMEOUT, 60u,
				     MHD_OPTION_CONNECTION_LIMIT, 512u,
				     MHD_OPTION_NOTIFY_COMPLETED, completed, h,
				     MHD_OPTION_END);
	st = KILN_ERR_IO;
	if (!h->daemon) {
		KILN_ERROR("cannot serve HTTP (address in use?)", "address=%s", cfg->address);
		goto fail;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : 0;
	*out = h;
	return KILN_OK;
fail:
	kiln_http_destroy(h);
	return st;
}

unsigned kiln_http_port(const kiln_http *h)
{
	return h->port;
}

void kiln_http_destroy(kiln_http *h)
{
	if (!h)
		return;
	if (h->daemon)
		MHD_stop_daemon(h->daemon);
	if (h->token) {
		/* volatile: the wipe must not be optimised away as a dead store */
		volatile char *p = h->token;
		while (*p)
			*p++ = 0;
		free(h->token);
	}
	free(h);
}
