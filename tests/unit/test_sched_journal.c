/* The scheduler's journal: records survive close and reopen, a torn last line (a crash in
 * the middle of a write) is dropped and cut off, damage before the end is refused, the
 * state directory is locked, and compaction keeps the state while shrinking the file.
 * Then the same through kiln_jobs: a job's finished items stay finished across reopen,
 * with and without compaction. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proto.h"
#include "sched_sim.h"
#include "scheduler/jobs.h"
#include "scheduler/journal.h"

static char dir[128];
static char path[256];

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "journal");
	snprintf(path, sizeof path, "%s/%s", dir, KILN_JOURNAL_FILE);
}

static void teardown(void)
{
	sim_rmdir(dir);
}

TestSuite(sched_journal, .init = setup, .fini = teardown, .timeout = 30);

typedef struct seen {
	int count;
	long long sum;
} seen;

static kiln_status collect(void *ctx, json_t *rec)
{
	seen *s = ctx;
	s->count++;
	s->sum += json_integer_value(json_object_get(rec, "n"));
	return KILN_OK;
}

static void append_n(kiln_journal *j, int from, int to)
{
	for (int i = from; i < to; i++) {
		json_t *rec = json_pack("{s:s, s:i}", "t", "test", "n", i);
		cr_assert_eq(kiln_journal_commit(j, rec), KILN_OK);
		json_decref(rec);
	}
}

/* Appends the test records from..to-1 to the journal in dir, through a journal opened and
 * closed for it. */
static void write_records(int from, int to)
{
	kiln_journal *j;
	cr_assert_eq(kiln_journal_open(dir, 0, &j), KILN_OK);
	append_n(j, from, to);
	kiln_journal_close(j);
}

static seen replay(void)
{
	kiln_journal *j;
	seen s = {0, 0};
	cr_assert_eq(kiln_journal_open(dir, 0, &j), KILN_OK);
	cr_assert_eq(kiln_journal_replay(j, collect, &s), KILN_OK);
	kiln_journal_close(j);
	return s;
}

static void append_raw(const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static off_t file_size(void)
{
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	return sb.st_size;
}

Test(sched_journal, records_survive_reopen)
{
	write_records(0, 100);
	seen s = replay();
	cr_expect_eq(s.count, 100);
	cr_expect_eq(s.sum, 4950);
}

Test(sched_journal, torn_last_line_is_dropped_and_cut_off)
{
	write_records(0, 10);
	off_t good = file_size();
	append_raw("{\"t\":\"test\",\"n\":10");  /* a crash in the middle of a write */
	seen s = replay();
	cr_expect_eq(s.count, 10);
	cr_expect_eq(file_size(), good, "the torn tail must be truncated");

	/* appends after recovery start on a clean line */
	kiln_journal *j;
	cr_assert_eq(kiln_journal_open(dir, 0, &j), KILN_OK);
	s = (seen){0, 0};
	cr_assert_eq(kiln_journal_replay(j, collect, &s), KILN_OK);
	append_n(j, 10, 12);
	kiln_journal_close(j);
	s = replay();
	cr_expect_eq(s.count, 12);
	cr_expect_eq(s.sum, 66);

	/* a complete object without its newline was never acknowledged either */
	append_raw("{\"t\":\"test\",\"n\":1000}");
	s = replay();
	cr_expect_eq(s.count, 12);
}

Test(sched_journal, damage_before_the_end_is_refused)
{
	kiln_journal *j;
	write_records(0, 3);
	append_raw("{garbage\n");
	cr_assert_eq(kiln_journal_open(dir, 0, &j), KILN_OK);
	append_n(j, 3, 4);
	seen s = {0, 0};
	cr_expect_eq(kiln_journal_replay(j, collect, &s), KILN_ERR_CORRUPT);
	kiln_journal_close(j);
}

Test(sched_journal, state_directory_is_locked)
{
	kiln_journal *a, *b;
	cr_assert_eq(kiln_journal_open(dir, 0, &a), KILN_OK);
	cr_expect_eq(kiln_journal_open(dir, 0, &b), KILN_ERR_PERMISSION);
	kiln_journal_close(a);
	cr_expect_eq(kiln_journal_open(dir, 0, &b), KILN_OK);
	kiln_journal_close(b);
}

static kiln_status dump_sum(void *ctx, kiln_journal_sink *sink)
{
	json_t *rec = json_pack("{s:s, s:I}", "t", "test", "n", (json_int_t)*(long long *)ctx);
	kiln_status st = kiln_journal_sink_put(sink, rec);
	json_decref(rec);
	return st;
}

Test(sched_journal, compaction_rewrites_the_live_state)
{
	kiln_journal *j;
	cr_assert_eq(kiln_journal_open(dir, 512, &j), KILN_OK);
	append_n(j, 0, 100);
	cr_expect(kiln_journal_wants_compaction(j));
	long long sum = 4950;
	cr_assert_eq(kiln_journal_compact(j, dump_sum, &sum), KILN_OK);
	cr_expect_lt(kiln_journal_size(j), 64u);
	cr_expect(!kiln_journal_wants_compaction(j));
	append_n(j, 100, 101);  /* appends go to the new file */
	kiln_journal_close(j);
	seen s = replay();
	cr_expect_eq(s.count, 2);
	cr_expect_eq(s.sum, 4950 + 100);
	cr_expect_eq(access("journal.jsonl.tmp", F_OK), -1);
}

/* ---- through kiln_jobs ---- */

static kiln_jobs *open_jobs(uint64_t compact)
{
	kiln_jobs_config cfg = {dir, compact, 0, 5000};
	kiln_jobs *js;
	cr_assert_eq(kiln_jobs_open(&cfg, &js), KILN_OK);
	return js;
}

static json_t *list_spec(int n, int shard_size)
{
	json_t *inputs = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(inputs, json_sprintf("s3://bucket/in/img%04d.png", i));
	return json_pack("{s:o, s:s, s:i, s:i}", "input", inputs, "output", "s3://bucket/out/", "shard_size",
			 shard_size, "max_attempts", 2);
}

static json_int_t count(json_t *view, const char *name)
{
	return json_integer_value(json_object_get(json_object_get(view, "items"), name));
}

/* Finishes up to `shards` shards (all if < 0): the first item of each fails, the rest
 * succeed. Returns how many were finished. */
static int finish_shards(kiln_jobs *js, int shards)
{
	int s;
	for (s = 0; shards < 0 || s < shards; s++) {
		kiln_lease lease;
		json_t *msg;
		kiln_status st = kiln_jobs_next_shard(js, NULL, &lease, &msg);
		if (st == KILN_ERR_NOT_FOUND && shards < 0)
			break;
		cr_assert_eq(st, KILN_OK);
		json_t *res = json_pack("{s:i, s:s, s:O, s:O, s:O, s:[]}", "v", 1, "type", "result", "job",
					json_object_get(msg, "job"), "shard", json_object_get(msg, "shard"), "lease",
					json_object_get(msg, "lease"), "items");
		size_t i;
		const json_t *it;
		json_array_foreach(json_object_get(msg, "items"), i, it)
			json_array_append_new(json_object_get(res, "items"),
					      i == 0 ? json_pack("{s:O, s:s, s:s}", "id", json_object_get(it, "id"),
								 "status", "error", "error", "corrupt data")
						     : json_pack("{s:O, s:s, s:i, s:i}", "id", json_object_get(it, "id"),
								 "status", "ok", "bytes", 10, "bytes_in", 20));
		bool applied;
		kiln_lease closed;
		cr_assert_eq(kiln_jobs_complete(js, res, &applied, &closed), KILN_OK);
		cr_assert(applied);
		json_decref(res);
		json_decref(msg);
	}
	return s;
}

static void expect_final(kiln_jobs *js)
{
	json_t *view;
	cr_assert_eq(kiln_jobs_view(js, "j1", &view), KILN_OK);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "done");
	cr_expect_eq(count(view, "done"), 90);
	cr_expect_eq(count(view, "failed"), 10);
	cr_expect_eq(count(view, "pending"), 0);
	json_decref(view);
	cr_assert_eq(kiln_jobs_failures(js, "j1", 0, 1000, &view), KILN_OK);
	json_t *f = json_array_get(json_object_get(view, "failures"), 0);
	cr_expect_eq(json_array_size(json_object_get(view, "failures")), 10);
	cr_expect_str_eq(json_string_value(json_object_get(f, "input")), "s3://bucket/in/img0000.png");
	cr_expect_str_eq(json_string_value(json_object_get(f, "error")), "corrupt data");
	cr_expect_eq(json_integer_value(json_object_get(f, "attempts")), 2);
	json_decref(view);
}

static void check_resumes(uint64_t compact)
{
	kiln_jobs *js = open_jobs(compact);
	json_t *spec = list_spec(100, 10), *view;
	bool created;
	char err[256];
	cr_assert_eq(kiln_jobs_submit(js, spec, "key-1", &view, &created, err, sizeof err), KILN_OK, "%s", err);
	cr_assert(created);
	json_decref(view);
	finish_shards(js, 4);  /* 36 done, 4 with one failed attempt */
	kiln_lease lease;
	json_t *msg;
	cr_assert_eq(kiln_jobs_next_shard(js, NULL, &lease, &msg), KILN_OK);  /* in flight at the crash */
	json_decref(msg);
	kiln_jobs_close(js);

	js = open_jobs(compact);
	cr_assert_eq(kiln_jobs_view(js, "j1", &view), KILN_OK);
	cr_expect_eq(count(view, "total"), 100);
	cr_expect_eq(count(view, "done"), 36);
	cr_expect_eq(count(view, "pending"), 64);
	cr_expect_eq(count(view, "in_flight"), 0);
	cr_expect_eq(json_integer_value(json_object_get(view, "bytes_out")), 360);
	json_decref(view);
	/* the idempotency key came back too */
	cr_assert_eq(kiln_jobs_submit(js, spec, "key-1", &view, &created, err, sizeof err), KILN_OK);
	cr_expect(!created);
	cr_expect_str_eq(json_string_value(json_object_get(view, "id")), "j1");
	json_decref(view);
	/* second failures reach max_attempts = 2 */
	finish_shards(js, -1);
	expect_final(js);
	kiln_jobs_close(js);

	js = open_jobs(compact);
	expect_final(js);
	json_decref(spec);
	kiln_jobs_close(js);
}

Test(sched_journal, jobs_resume_after_reopen)
{
	check_resumes(0);
}

Test(sched_journal, jobs_resume_with_compaction_on_every_commit)
{
	check_resumes(1);
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_lt(sb.st_size, 20000, "journal of %lld bytes", (long long)sb.st_size);
}

/* Finishes every shard: items ok with psnr 3000 + id (centi-dB) and 100 pixels each, except
 * item 0, which fails with an error text that needs escaping in the journal's records. */
static void finish_with_quality(kiln_jobs *js, const char *error)
{
	kiln_lease lease;
	json_t *msg;
	while (kiln_jobs_next_shard(js, NULL, &lease, &msg) == KILN_OK) {
		json_t *res = json_pack("{s:i, s:s, s:O, s:O, s:O, s:[]}", "v", 1, "type", "result", "job",
					json_object_get(msg, "job"), "shard", json_object_get(msg, "shard"), "lease",
					json_object_get(msg, "lease"), "items");
		size_t i;
		const json_t *it;
		json_array_foreach(json_object_get(msg, "items"), i, it) {
			json_int_t id = json_integer_value(json_object_get(it, "id"));
			json_array_append_new(json_object_get(res, "items"),
					      id == 0 ? json_pack("{s:I, s:s, s:s}", "id", id, "status", "error", "error", error)
						      : json_pack("{s:I, s:s, s:i, s:i, s:I, s:i}", "id", id, "status", "ok",
								  "bytes", 10, "psnr", 3000 + (int)id, "pixels",
								  (json_int_t)100, "bytes_in", 20));
		}
		kiln_msg_type type;
		cr_assert_eq(kiln_proto_validate(res, &type, NULL, 0), KILN_OK, "the test's result is valid");
		bool applied;
		kiln_lease closed;
		cr_assert_eq(kiln_jobs_complete(js, res, &applied, &closed), KILN_OK);
		cr_assert(applied);
		json_decref(res);
		json_decref(msg);
	}
}

static void expect_quality(kiln_jobs *js, const char *error)
{
	json_t *view;
	cr_assert_eq(kiln_jobs_view(js, "j1", &view), KILN_OK);
	/* items 1..9 ok: psnr 3001..3009 centi-dB, mean 30.05 dB; 9 x 100 pixels */
	cr_expect_float_eq(json_number_value(json_object_get(view, "psnr_mean_db")), 30.05, 1e-9);
	cr_expect_float_eq(json_number_value(json_object_get(view, "mpix")), 900 / 1e6, 1e-12);
	cr_expect(json_is_number(json_object_get(view, "mpix_per_s")));
	cr_expect_eq(count(view, "done"), 9);
	json_decref(view);
	cr_assert_eq(kiln_jobs_failures(js, "j1", 0, 10, &view), KILN_OK);
	json_t *f = json_array_get(json_object_get(view, "failures"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(f, "error")), error);
	json_decref(view);
}

static void check_quality(uint64_t compact)
{
	static const char error[] = "bad \"name\" \\ tab\t nl\n ctl\x01 caf\xc3\xa9 \xe2\x82\xac /";
	kiln_jobs *js = open_jobs(compact);
	json_t *spec = list_spec(10, 3), *view;
	json_object_set_new(spec, "max_attempts", json_integer(1));
	json_object_set_new(spec, "measure_psnr", json_true());
	bool created;
	char err[256];
	cr_assert_eq(kiln_jobs_submit(js, spec, NULL, &view, &created, err, sizeof err), KILN_OK, "%s", err);
	cr_expect(json_is_true(json_object_get(json_object_get(view, "spec"), "measure_psnr")));
	cr_expect(json_is_null(json_object_get(view, "psnr_mean_db")), "no PSNR before any result");
	json_decref(view);
	finish_with_quality(js, error);
	expect_quality(js, error);
	kiln_jobs_close(js);
	/* the figures and the escaped error come back from the journal */
	js = open_jobs(compact);
	expect_quality(js, error);
	kiln_jobs_close(js);
	json_decref(spec);
}

Test(sched_journal, psnr_pixels_and_escaped_errors_survive_reopen)
{
	check_quality(0);
}

Test(sched_journal, psnr_pixels_and_escaped_errors_survive_compaction)
{
	check_quality(1);
}

Test(sched_journal, shard_messages_are_valid_and_measure_psnr_defaults_to_false)
{
	kiln_jobs *js = open_jobs(0);
	json_t *spec = list_spec(3, 2), *view;
	json_array_append_new(json_object_get(spec, "input"), json_string("s3://bucket/in/sp ace\"q\\.png"));
	bool created;
	char err[256];
	cr_assert_eq(kiln_jobs_submit(js, spec, NULL, &view, &created, err, sizeof err), KILN_OK, "%s", err);
	cr_expect(json_is_false(json_object_get(json_object_get(view, "spec"), "measure_psnr")));
	json_decref(view);
	kiln_buf out;
	kiln_buf_init(&out, KILN_PROTO_MAX_FRAME);
	kiln_lease lease;
	int shards = 0;
	bool found = false;
	while (kiln_jobs_next_shard_text(js, NULL, &lease, &out) == KILN_OK) {
		json_t *msg;
		kiln_msg_type type;
		cr_assert_eq(kiln_proto_parse(out.data, out.len, &msg, &type, err, sizeof err), KILN_OK, "%s", err);
		cr_expect_eq(type, KILN_MSG_SHARD);
		cr_expect(json_is_false(json_object_get(json_object_get(msg, "options"), "measure_psnr")));
		/* what json_dumps writes for the same message, byte for byte */
		char *dumped = json_dumps(msg, JSON_COMPACT);
		cr_expect(strlen(dumped) == out.len && memcmp(dumped, out.data, out.len) == 0, "%s\n%.*s", dumped,
			  (int)out.len, (const char *)out.data);
		free(dumped);
		size_t i;
		const json_t *it;
		json_array_foreach(json_object_get(msg, "items"), i, it)
			found |= strcmp(json_string_value(json_object_get(it, "input")),
					"s3://bucket/in/sp ace\"q\\.png") == 0;
		json_decref(msg);
		shards++;
	}
	cr_expect_eq(shards, 2);
	cr_expect(found, "the name with a quote and a backslash arrived intact");
	kiln_buf_free(&out);
	json_decref(spec);
	kiln_jobs_close(js);
}
