/* The REST API over real HTTP (libcurl) against a scheduler started in-process on
 * ephemeral ports: 202 + Location, idempotency, the error statuses (400, 401, 404, 405,
 * 409, 413), failures, cancel, and /metrics checked line by line against the Prometheus
 * text format. */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_sim.h"
#include "scheduler/http.h"
#include "scheduler/scheduler.h"

#define TOKEN "s3cr3t-token-for-tests"

static char dir[128];
static char base[64];
static kiln_scheduler *sched;

static const char *const auth[] = {"Authorization: Bearer " TOKEN, NULL};

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "http");
	char token_file[256], state[256];
	snprintf(token_file, sizeof token_file, "%s/token", dir);
	snprintf(state, sizeof state, "%s/state", dir);
	FILE *f = fopen(token_file, "w");
	cr_assert_not_null(f);
	fputs("  " TOKEN "\n", f);
	fclose(f);
	kiln_scheduler_config cfg = {.listen = "tcp://127.0.0.1:*", .http = "127.0.0.1:0", .state_dir = state,
				     .token_file = token_file};
	cr_assert_eq(kiln_scheduler_create(&cfg, &sched), KILN_OK);
	snprintf(base, sizeof base, "http://127.0.0.1:%u", kiln_scheduler_http_port(sched));
}

static void teardown(void)
{
	kiln_scheduler_destroy(sched);
	sim_rmdir(dir);
}

TestSuite(sched_http, .init = setup, .fini = teardown, .timeout = 60);

static long req(const char *method, const char *path, const char *body, const char *const *headers, json_t **out,
		char *location)
{
	char url[256];
	snprintf(url, sizeof url, "%s%s", base, path);
	return sim_http(method, url, body, headers, out, NULL, 0, location, location ? 256 : 0);
}

static const char *error_of(const json_t *body)
{
	const char *e = json_string_value(json_object_get(body, "error"));
	return e ? e : "";
}

#define SPEC "{\"input\":[\"s3://bkt/in/a.png\",\"s3://bkt/in/b/../../x.png\",\"s3://bkt/in/c.png\"]," \
	     "\"output\":\"s3://bkt/out/\",\"shard_size\":2}"

Test(sched_http, post_returns_202_location_and_the_job)
{
	json_t *job;
	char location[256];
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, auth, &job, location), 202);
	cr_assert_not_null(job);
	char id[32];
	cr_assert_not_null(json_string_value(json_object_get(job, "id")));
	snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")));
	char want[64];
	snprintf(want, sizeof want, "/v1/jobs/%s", id);
	cr_expect_str_eq(location, want);
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "queued");
	json_t *items = json_object_get(job, "items");
	cr_expect_eq(json_integer_value(json_object_get(items, "total")), 3);
	cr_expect_eq(json_integer_value(json_object_get(items, "failed")), 1, "the '..' name fails at planning");
	cr_expect_eq(json_integer_value(json_object_get(items, "pending")), 2);
	cr_expect(json_is_null(json_object_get(job, "eta_s")));
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(job, "spec"), "format")), "bc1");
	json_decref(job);

	cr_assert_eq(req("GET", want, NULL, auth, &job, NULL), 200);
	cr_expect_str_eq(json_string_value(json_object_get(job, "id")), id);
	json_decref(job);

	cr_assert_eq(req("GET", "/v1/jobs", NULL, auth, &job, NULL), 200);
	cr_expect_eq(json_array_size(json_object_get(job, "jobs")), 1);
	json_decref(job);

	snprintf(want, sizeof want, "/v1/jobs/%s/failures", id);
	cr_assert_eq(req("GET", want, NULL, auth, &job, NULL), 200);
	json_t *f = json_array_get(json_object_get(job, "failures"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(f, "input")), "s3://bkt/in/b/../../x.png");
	cr_expect_neq(json_string_value(json_object_get(f, "error")), NULL);
	cr_expect_eq(json_integer_value(json_object_get(f, "attempts")), 0);
	json_decref(job);
}

Test(sched_http, idempotency_key_returns_the_same_job)
{
	const char *const h1[] = {auth[0], "Idempotency-Key: abc-123", NULL};
	const char *const h2[] = {auth[0], "Idempotency-Key: other", NULL};
	json_t *a, *b, *c;
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, h1, &a, NULL), 202);
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, h1, &b, NULL), 202);
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, h2, &c, NULL), 202);
	cr_expect_str_eq(json_string_value(json_object_get(a, "id")), json_string_value(json_object_get(b, "id")));
	cr_expect_str_neq(json_string_value(json_object_get(a, "id")), json_string_value(json_object_get(c, "id")));
	json_decref(a);
	json_decref(b);
	json_decref(c);
	cr_assert_eq(req("GET", "/v1/jobs", NULL, auth, &a, NULL), 200);
	cr_expect_eq(json_array_size(json_object_get(a, "jobs")), 2);
	json_decref(a);
}

Test(sched_http, error_statuses)
{
	json_t *body;
	/* 401: no token, wrong token, wrong scheme; /healthz needs none */
	cr_expect_eq(req("GET", "/v1/jobs", NULL, NULL, NULL, NULL), 401);
	const char *const wrong[] = {"Authorization: Bearer " TOKEN "x", NULL};
	cr_expect_eq(req("GET", "/v1/jobs", NULL, wrong, NULL, NULL), 401);
	const char *const shorter[] = {"Authorization: Bearer s3cr3t", NULL};
	cr_expect_eq(req("GET", "/metrics", NULL, shorter, NULL, NULL), 401);
	const char *const basic[] = {"Authorization: Basic " TOKEN, NULL};
	cr_expect_eq(req("POST", "/v1/jobs", SPEC, basic, NULL, NULL), 401);
	cr_expect_eq(req("GET", "/healthz", NULL, NULL, &body, NULL), 200);
	cr_expect_str_eq(json_string_value(json_object_get(body, "status")), "ok");
	json_decref(body);

	/* 404 */
	cr_expect_eq(req("GET", "/v1/jobs/j99", NULL, auth, &body, NULL), 404);
	cr_expect_neq(error_of(body)[0], '\0');
	json_decref(body);
	cr_expect_eq(req("GET", "/v1/nothing", NULL, auth, NULL, NULL), 404);
	cr_expect_eq(req("GET", "/v1/jobs/j1/whatever", NULL, auth, NULL, NULL), 404);
	cr_expect_eq(req("GET", "/v1/jobs/not-an-id", NULL, auth, NULL, NULL), 404);

	/* 405 */
	cr_expect_eq(req("PUT", "/v1/jobs", SPEC, auth, NULL, NULL), 405);
	cr_expect_eq(req("POST", "/v1/jobs/j1", "{}", auth, NULL, NULL), 405);
	cr_expect_eq(req("GET", "/v1/jobs/j1/retry-failed", NULL, auth, NULL, NULL), 405);
	cr_expect_eq(req("DELETE", "/metrics", NULL, auth, NULL, NULL), 405);

	/* 400: malformed JSON, unknown fields, wrong types, with a message */
	cr_expect_eq(req("POST", "/v1/jobs", "{\"input\":", auth, &body, NULL), 400);
	cr_expect(strstr(error_of(body), "malformed JSON") != NULL, "%s", error_of(body));
	json_decref(body);
	cr_expect_eq(req("POST", "/v1/jobs", "{\"input\":\"/a\",\"output\":\"/b\",\"speed\":9}", auth, &body, NULL), 400);
	cr_expect(strstr(error_of(body), "speed") != NULL, "%s", error_of(body));
	json_decref(body);
	cr_expect_eq(req("POST", "/v1/jobs", "{\"input\":\"/a\",\"output\":\"/b\",\"shard_size\":\"x\"}", auth, &body,
			 NULL), 400);
	json_decref(body);
	cr_expect_eq(req("POST", "/v1/jobs", "{\"a\":1,\"a\":2}", auth, NULL, NULL), 400);
	cr_expect_eq(req("GET", "/v1/jobs/j1/failures?limit=-3", NULL, auth, NULL, NULL), 400);

	/* 413: a body over 1 MiB, with and without a Content-Length the server can check first */
	size_t n = (1u << 20) + 100;
	char *big = malloc(n + 1);
	cr_assert_not_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	cr_expect_eq(req("POST", "/v1/jobs", big, auth, &body, NULL), 413);
	json_decref(body);
	const char *const chunked[] = {auth[0], "Transfer-Encoding: chunked", NULL};
	cr_expect_eq(req("POST", "/v1/jobs", big, chunked, NULL, NULL), 413);
	free(big);
	/* the server still answers afterwards */
	cr_expect_eq(req("GET", "/healthz", NULL, NULL, NULL, NULL), 200);
}

Test(sched_http, cancel_and_retry)
{
	json_t *job;
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, auth, &job, NULL), 202);
	json_decref(job);
	cr_expect_eq(req("POST", "/v1/jobs/j1/retry-failed", "", auth, &job, NULL), 200);
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(job, "items"), "failed")), 1,
		     "items refused at planning are not retried");
	json_decref(job);
	cr_assert_eq(req("DELETE", "/v1/jobs/j1", NULL, auth, &job, NULL), 200);
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "cancelled");
	json_decref(job);
	cr_expect_eq(req("POST", "/v1/jobs/j1/retry-failed", "", auth, NULL, NULL), 409);
	cr_expect_eq(req("DELETE", "/v1/jobs/j7", NULL, auth, NULL, NULL), 404);
}

Test(sched_http, a_job_whose_input_cannot_be_listed_is_failed)
{
	char spec[512];
	json_t *job;
	snprintf(spec, sizeof spec, "{\"input\":\"%s/missing/\",\"output\":\"/tmp/o\"}", dir);
	cr_assert_eq(req("POST", "/v1/jobs", spec, auth, &job, NULL), 202);
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "failed");
	cr_expect_neq(json_string_value(json_object_get(job, "error")), NULL);
	json_decref(job);
}

/* Every line of the exposition is a comment (# HELP / # TYPE), blank, or
 * name{labels} value, and every family has a TYPE before its samples. */
Test(sched_http, metrics_parse_as_prometheus_text)
{
	json_t *job;
	cr_assert_eq(req("POST", "/v1/jobs", SPEC, auth, &job, NULL), 202);
	json_decref(job);
	static char text[1 << 16];
	char url[256];
	snprintf(url, sizeof url, "%s/metrics", base);
	cr_assert_eq(sim_http("GET", url, NULL, auth, NULL, text, sizeof text, NULL, 0), 200);
	regex_t sample, help, type;
	cr_assert_eq(regcomp(&sample,
			     "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\"(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? "
			     "(-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?|\\+Inf|-Inf|NaN)$",
			     REG_EXTENDED | REG_NOSUB), 0);
	cr_assert_eq(regcomp(&help, "^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$", REG_EXTENDED | REG_NOSUB), 0);
	cr_assert_eq(regcomp(&type, "^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)$",
			     REG_EXTENDED | REG_NOSUB), 0);
	int samples = 0;
	char typed[64][64];
	int ntyped = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "# HELP", 6) == 0) {
			cr_expect_eq(regexec(&help, line, 0, NULL, 0), 0, "bad HELP: %s", line);
		} else if (strncmp(line, "# TYPE", 6) == 0) {
			cr_expect_eq(regexec(&type, line, 0, NULL, 0), 0, "bad TYPE: %s", line);
			if (ntyped < 64)
				sscanf(line, "# TYPE %63s", typed[ntyped++]);
		} else {
			cr_expect_eq(regexec(&sample, line, 0, NULL, 0), 0, "bad sample: %s", line);
			bool found = false;
			for (int i = 0; i < ntyped && !found; i++) {
				size_t n = strlen(typed[i]);
				found = strncmp(line, typed[i], n) == 0 &&
					(line[n] == ' ' || line[n] == '{' || line[n] == '_');
			}
			cr_expect(found, "sample before its TYPE: %s", line);
			samples++;
		}
	}
	regfree(&sample);
	regfree(&help);
	regfree(&type);
	cr_expect_gt(samples, 20);
	/* and the values say what happened */
	cr_assert_eq(sim_http("GET", url, NULL, auth, NULL, text, sizeof text, NULL, 0), 200);
	cr_expect(strstr(text, "kiln_jobs{state=\"queued\"} 1\n") != NULL);
	cr_expect(strstr(text, "kiln_items{state=\"pending\"} 2\n") != NULL);
	cr_expect(strstr(text, "kiln_items{state=\"failed\"} 1\n") != NULL);
	cr_expect(strstr(text, "kiln_dispatch_latency_seconds_bucket{le=\"+Inf\"} 0\n") != NULL);
	cr_expect(strstr(text, "kiln_workers 0\n") != NULL);
	cr_expect(strstr(text, "kiln_bytes_out_total 0\n") != NULL);
}

Test(sched_http, token_comparison)
{
	cr_expect(kiln_http_token_equal("abc", "abc"));
	cr_expect(!kiln_http_token_equal("abd", "abc"));
	cr_expect(!kiln_http_token_equal("ab", "abc"));
	cr_expect(!kiln_http_token_equal("abcd", "abc"));
	cr_expect(!kiln_http_token_equal("", "abc"));
}
