/* Planning an s3:// input against a real S3 server (s3rver on loopback): the listing is
 * followed across pages (continuation tokens, both with a small page size and past the
 * server's 1,000-key page), nested prefixes keep their relative names under the output
 * prefix, the glob filters on the last name segment, and a sibling prefix that merely
 * starts with the same letters is not taken. The second test goes through kiln_jobs_submit,
 * whose storage comes from the AWS_* environment as in `kiln scheduler`. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/storage.h"
#include "sched_sim.h"
#include "scheduler/jobs.h"
#include "scheduler/planner.h"
#include "scheduler/spec.h"
#include "storage_testutil.h"

#define BUCKET "kiln-plan"
#define MANY 1010  /* past one default page of 1,000 keys */

static s3rver srv;

/* Keys under in/ besides in/many/: what the glob keeps and what it drops. */
static const char *const fixed_keys[] = {
	"in/a.png",               /* kept */
	"in/b.PNG",               /* dropped: fnmatch is case-sensitive */
	"in/notes.txt",           /* dropped */
	"in/sub/c.png",           /* kept, nested */
	"in/sub/deeper/d.png",    /* kept, nested twice */
	"in/sub/deeper/e.jpg",    /* dropped */
	"in-sibling/x.png",       /* not under in/ at all */
	"other/y.png",            /* not under in/ at all */
};
#define FIXED_KEPT 3

static kiln_storage *storage(unsigned page_size)
{
	kiln_storage_config cfg;
	kiln_storage_config_init(&cfg);
	cfg.endpoint = srv.endpoint;
	cfg.addressing = KILN_S3_ADDRESSING_PATH;
	cfg.access_key_id = "S3RVER";  /* s3rver's own key; it does not check signatures */
	cfg.secret_access_key = "S3RVER";
	cfg.list_page_size = page_size;
	cfg.backoff_base_ms = 10;
	kiln_storage *st = NULL;
	char msg[256];
	cr_assert_eq(kiln_storage_create(&cfg, &st, msg, sizeof msg), KILN_OK, "%s", msg);
	return st;
}

static void setup(void)
{
	cr_assert(s3rver_start(&srv, BUCKET, NULL, NULL), "could not start tools/s3rver.sh (needs nodejs and npm)");
	size_t n = MANY + sizeof fixed_keys / sizeof fixed_keys[0];
	kiln_storage_put_item *puts = calloc(n, sizeof *puts);
	char (*uris)[96] = calloc(n, sizeof *uris);
	cr_assert(puts && uris);
	for (size_t i = 0; i < n; i++) {
		if (i < MANY)
			snprintf(uris[i], sizeof uris[i], "s3://" BUCKET "/in/many/%02zu/img-%04zu.png", i % 7, i);
		else
			snprintf(uris[i], sizeof uris[i], "s3://" BUCKET "/%s", fixed_keys[i - MANY]);
		puts[i] = (kiln_storage_put_item){.uri = uris[i], .data = "x", .size = 1};
	}
	kiln_storage *st = storage(0);
	cr_assert_eq(kiln_storage_put_many(st, puts, n), KILN_OK, "%s", puts[0].msg);
	kiln_storage_destroy(st);
	free(puts);
	free(uris);
}

static void teardown(void)
{
	s3rver_stop(&srv);
}

TestSuite(sched_s3, .init = setup, .fini = teardown, .timeout = 150);

static void parse_spec(const char *text, kiln_job_spec *spec)
{
	char err[256];
	json_t *in = json_loads(text, 0, NULL);
	cr_assert_not_null(in);
	cr_assert_eq(kiln_job_spec_parse(in, spec, err, sizeof err), KILN_OK, "%s", err);
	json_decref(in);
}

static const kiln_plan_item *find(const kiln_plan *p, const char *input)
{
	for (size_t i = 0; i < kiln_plan_count(p); i++)
		if (strcmp(kiln_plan_items(p)[i].input, input) == 0)
			return &kiln_plan_items(p)[i];
	return NULL;
}

static void expect_item(const kiln_plan *p, const char *input, const char *output)
{
	const kiln_plan_item *it = find(p, input);
	cr_assert_not_null(it, "no item for %s", input);
	cr_expect_null(it->error, "%s failed: %s", input, it->error);
	cr_expect_str_eq(it->output ? it->output : "(null)", output);
}

/* Plans the glob input with a storage of the given page size; checks every item. */
static void plan_and_check(unsigned page_size, uint64_t min_requests)
{
	kiln_job_spec spec;
	parse_spec("{\"input\":\"s3://" BUCKET "/in/*.png\",\"output\":\"s3://" BUCKET "/out/tex\"}", &spec);
	kiln_storage *st = storage(page_size);
	kiln_plan *plan;
	char msg[256];
	cr_assert_eq(kiln_plan_create(&plan), KILN_OK);
	kiln_storage_stats before, after;
	kiln_storage_get_stats(st, &before);
	cr_assert_eq(kiln_plan_build(plan, &spec, st, 0, msg, sizeof msg), KILN_OK, "%s", msg);
	kiln_storage_get_stats(st, &after);
	cr_expect_geq(after.http_requests - before.http_requests, min_requests,
		      "%llu list requests: the continuation tokens were not followed",
		      (unsigned long long)(after.http_requests - before.http_requests));

	cr_assert_eq(kiln_plan_count(plan), (size_t)MANY + FIXED_KEPT);
	expect_item(plan, "s3://" BUCKET "/in/a.png", "s3://" BUCKET "/out/tex/a.dds");
	expect_item(plan, "s3://" BUCKET "/in/sub/c.png", "s3://" BUCKET "/out/tex/sub/c.dds");
	expect_item(plan, "s3://" BUCKET "/in/sub/deeper/d.png", "s3://" BUCKET "/out/tex/sub/deeper/d.dds");
	cr_expect_null(find(plan, "s3://" BUCKET "/in/b.PNG"));
	cr_expect_null(find(plan, "s3://" BUCKET "/in/notes.txt"));
	cr_expect_null(find(plan, "s3://" BUCKET "/in/sub/deeper/e.jpg"));
	cr_expect_null(find(plan, "s3://" BUCKET "/in-sibling/x.png"));
	/* every one of the many, once each, with its nested name */
	char in[128], out[128];
	for (size_t i = 0; i < MANY; i++) {
		snprintf(in, sizeof in, "s3://" BUCKET "/in/many/%02zu/img-%04zu.png", i % 7, i);
		snprintf(out, sizeof out, "s3://" BUCKET "/out/tex/many/%02zu/img-%04zu.dds", i % 7, i);
		expect_item(plan, in, out);
	}
	/* listed in key order, as S3 returns them */
	for (size_t i = 1; i < kiln_plan_count(plan); i++)
		cr_expect_lt(strcmp(kiln_plan_items(plan)[i - 1].input, kiln_plan_items(plan)[i].input), 0);
	kiln_plan_destroy(plan);
	kiln_storage_destroy(st);
	kiln_job_spec_free(&spec);
}

Test(sched_s3, glob_over_nested_prefixes_across_small_pages)
{
	/* 1,016 keys under in/ in pages of 100: at least 11 list requests */
	plan_and_check(100, 11);
}

Test(sched_s3, glob_past_the_servers_default_page)
{
	/* the server's own page (1,000 keys): two list requests at least */
	plan_and_check(0, 2);
}

Test(sched_s3, submitted_job_lists_the_bucket_from_the_environment)
{
	setenv("AWS_ENDPOINT_URL_S3", srv.endpoint, 1);
	setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
	setenv("AWS_REGION", "us-east-1", 1);
	unsetenv("AWS_SESSION_TOKEN");
	char dir[128], err[256];
	sim_mkdtemp(dir, sizeof dir, "sched-s3");
	kiln_jobs_config cfg = {.state_dir = dir};
	kiln_jobs *js;
	cr_assert_eq(kiln_jobs_open(&cfg, &js), KILN_OK);
	json_t *spec = json_pack("{s:s, s:s, s:i}", "input", "s3://" BUCKET "/in/sub/*.png", "output",
				 "s3://" BUCKET "/out/", "shard_size", 1);
	json_t *view;
	bool created;
	cr_assert_eq(kiln_jobs_submit(js, spec, NULL, &view, &created, err, sizeof err), KILN_OK, "%s", err);
	cr_expect(created);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "queued", "%s",
			 json_string_value(json_object_get(view, "error")));
	cr_expect_eq(json_integer_value(json_object_get(json_object_get(view, "items"), "total")), 2);
	json_decref(view);

	/* the shards carry the relative names */
	kiln_lease lease;
	json_t *msg;
	size_t seen = 0;
	while (kiln_jobs_next_shard(js, NULL, &lease, &msg) == KILN_OK) {
		const json_t *item = json_array_get(json_object_get(msg, "items"), 0);
		const char *input = json_string_value(json_object_get(item, "input"));
		const char *output = json_string_value(json_object_get(item, "output"));
		if (strcmp(input, "s3://" BUCKET "/in/sub/c.png") == 0) {
			cr_expect_str_eq(output, "s3://" BUCKET "/out/c.dds");
			seen++;
		} else if (strcmp(input, "s3://" BUCKET "/in/sub/deeper/d.png") == 0) {
			cr_expect_str_eq(output, "s3://" BUCKET "/out/deeper/d.dds");
			seen++;
		} else {
			cr_expect_fail("unexpected input %s", input);
		}
		json_decref(msg);
	}
	cr_expect_eq(seen, 2u);

	/* a prefix with nothing under it makes a failed job, not a refused request */
	json_object_set_new(spec, "input", json_string("s3://" BUCKET "/nothing-here/"));
	cr_assert_eq(kiln_jobs_submit(js, spec, NULL, &view, &created, err, sizeof err), KILN_OK, "%s", err);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "failed");
	json_decref(view);
	json_decref(spec);
	kiln_jobs_close(js);
	sim_rmdir(dir);
}
