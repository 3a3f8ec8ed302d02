/* The scheduler as a real process ($KILN_BIN scheduler): killed with SIGKILL in the middle
 * of a job and restarted on the same state directory, it resumes the job without redoing
 * any item whose result it had acknowledged. And the client commands (submit, status,
 * wait, failures, jobs, cancel) against it, with a bearer token. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_util.h"
#include "sched_sim.h"

#define NITEMS 40
#define SHARD 4

static char dir[128], state[256], endpoint[64], base[64];
static pid_t pid = -1;

/* Starts the scheduler (with a token file if token is set) and waits for /healthz. */
static void start(const char *token_file)
{
	char log[256];
	snprintf(log, sizeof log, "%s/scheduler.log", dir);
	const char *const argv[] = {"kiln", "scheduler", "--listen", endpoint, "--http", base + 7, "--state-dir", state,
				    "--heartbeat-ms", "100", token_file ? "--token-file" : NULL, token_file, NULL};
	pid = proc_spawn(&(proc_spec){.log = log, .out = PROC_STDOUT_INHERIT}, argv);
	cr_assert(proc_wait_healthy(base), "the scheduler did not come up (see %s/scheduler.log)", dir);
}

#define kill9() proc_kill(&pid, SIGKILL)

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "restart");
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", sim_free_port());
	snprintf(base, sizeof base, "http://127.0.0.1:%u", sim_free_port());
}

static void teardown(void)
{
	proc_kill(&pid, SIGTERM);
	sim_rmdir(dir);
}

TestSuite(sched_restart, .init = setup, .fini = teardown, .timeout = 90);

static json_t *job_view(const char *const *headers)
{
	char url[128];
	json_t *view;
	snprintf(url, sizeof url, "%s/v1/jobs/j1", base);
	cr_assert_eq(sim_http("GET", url, NULL, headers, &view, NULL, 0, NULL, 0), 200);
	return view;
}

static json_int_t items(json_t *view, const char *name)
{
	return json_integer_value(json_object_get(json_object_get(view, "items"), name));
}

/* Answers one shard ok and waits for its ack (heartbeating); marks its items in done[].
 * Returns how many of them were already done (redone work). */
static int serve_one(sim_worker *w, bool done[NITEMS], int timeout_ms)
{
	json_t *shard = NULL;
	for (int t = 0; t < timeout_ms && !shard; t += 50) {
		sim_heartbeat(w, NULL);
		shard = sim_recv(w, KILN_MSG_SHARD, 50);
	}
	if (!shard)
		return -1;
	sim_result(w, shard, NULL);
	json_t *ack = NULL;
	for (int t = 0; t < 5000 && !ack; t += 50)
		ack = sim_recv(w, KILN_MSG_ACK, 50);
	cr_assert_not_null(ack, "no ack");
	json_decref(ack);
	int redone = 0;
	size_t i;
	const json_t *it;
	json_array_foreach(json_object_get(shard, "items"), i, it) {
		json_int_t id = json_integer_value(json_object_get(it, "id"));
		cr_assert(id >= 0 && id < NITEMS);
		redone += done[id];
		done[id] = true;
	}
	json_decref(shard);
	return redone;
}

Test(sched_restart, kill_9_mid_job_resumes_without_redoing_acknowledged_items)
{
	start(NULL);
	json_t *inputs = json_array();
	for (int i = 0; i < NITEMS; i++)
		json_array_append_new(inputs, json_sprintf("s3://bkt/in/%02d.png", i));
	json_t *spec = json_pack("{s:o, s:s, s:i}", "input", inputs, "output", "s3://bkt/out/", "shard_size", SHARD);
	char *body = json_dumps(spec, JSON_COMPACT), url[128];
	snprintf(url, sizeof url, "%s/v1/jobs", base);
	cr_assert_eq(sim_http("POST", url, body, NULL, NULL, NULL, 0, NULL, 0), 202);
	free(body);
	json_decref(spec);

	bool done[NITEMS] = {0};
	sim_worker *w = sim_worker_new(endpoint, "w-before", 1, NULL);
	for (int s = 0; s < 5; s++)
		cr_assert_eq(serve_one(w, done, 5000), 0);
	/* one more shard is taken but its result never arrives: the crash */
	json_t *lost = NULL;
	for (int t = 0; t < 5000 && !lost; t += 50) {
		sim_heartbeat(w, NULL);
		lost = sim_recv(w, KILN_MSG_SHARD, 50);
	}
	cr_assert_not_null(lost);
	kill9();
	sim_worker_free(w);

	start(NULL);
	json_t *view = job_view(NULL);
	cr_expect_eq(items(view, "done"), 5 * SHARD, "acknowledged items were lost");
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "running");
	json_decref(view);
	w = sim_worker_new(endpoint, "w-after", 1, NULL);
	int redone = 0, shards = 0;
	for (;;) {
		int r = serve_one(w, done, 1500);
		if (r < 0)
			break;
		redone += r;
		shards++;
	}
	cr_expect_eq(redone, 0, "%d finished items were done again", redone);
	cr_expect_eq(shards, NITEMS / SHARD - 5, "the unacknowledged shard must be redone");
	view = job_view(NULL);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "done");
	cr_expect_eq(items(view, "done"), NITEMS);
	json_decref(view);
	json_decref(lost);
	sim_worker_free(w);
}

/* Runs the kiln binary with args; stdout to dir/out, stderr to dir/err. */
#define kiln(...) proc_kiln(NULL, NULL, dir, "out", "err", __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, NULL)

Test(sched_restart, client_commands)
{
	char token_file[256];
	snprintf(token_file, sizeof token_file, "%s/token", dir);
	FILE *f = fopen(token_file, "w");
	cr_assert_not_null(f);
	fputs("tok-123\n", f);
	fclose(f);
	start(token_file);

	cr_expect_eq(kiln("jobs --server %s", base), 2, "no token must be refused");
	cr_expect(strstr(slurp("err"), "401") != NULL, "%s", slurp("err"));
	cr_expect_eq(kiln("submit --server %s --token-file %s --output s3://bkt/o/", base, token_file), 2);
	cr_assert_eq(kiln("submit --server %s --token-file %s --input s3://bkt/in/a.png --input s3://bkt/in/b.png "
			  "--output s3://bkt/out/ --quality fast --mipmaps --shard-size 1 --max-attempts 1",
			  base, token_file), 0, "%s", slurp("err"));
	cr_expect_str_eq(slurp("out"), "j1\n");
	cr_assert_eq(kiln("status --server %s --token-file %s --json j1", base, token_file), 0);
	json_t *view = json_loads(slurp("out"), 0, NULL);
	cr_assert_not_null(view);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(view, "spec"), "quality")), "fast");
	json_decref(view);
	cr_expect_eq(kiln("status --server %s --token-file %s j404", base, token_file), 2);

	/* one item succeeds, the other fails its only attempt */
	sim_worker *w = sim_worker_new(endpoint, "w-cli", 1, NULL);  /* one at a time: sim_recv skips other types */
	for (int served = 0, t = 0; served < 2 && t < 5000; t += 50) {
		sim_heartbeat(w, NULL);
		json_t *shard = sim_recv(w, KILN_MSG_SHARD, 50);
		if (!shard)
			continue;
		const char *in = json_string_value(json_object_get(json_array_get(json_object_get(shard, "items"), 0), "input"));
		sim_result(w, shard, strstr(in, "b.png") ? "decode: not a PNG" : NULL);
		json_decref(sim_recv(w, KILN_MSG_ACK, 2000));
		json_decref(shard);
		served++;
	}
	sim_worker_free(w);
	setenv("KILN_TOKEN", "tok-123", 1);
	cr_expect_eq(kiln("wait --server %s j1", base), 1, "a job with a failed item waits to exit 1: %s", slurp("err"));
	cr_expect(strstr(slurp("out"), "1/2 done, 1 failed") != NULL, "%s", slurp("out"));
	cr_expect_eq(kiln("failures --server %s j1", base), 0);
	cr_expect(strstr(slurp("out"), "s3://bkt/in/b.png: decode: not a PNG") != NULL, "%s", slurp("out"));
	cr_expect_eq(kiln("jobs --server %s --json", base), 0);
	cr_expect(strstr(slurp("out"), "\"j1\"") != NULL);
	setenv("KILN_SERVER", base, 1);
	cr_expect_eq(kiln("cancel j1"), 0, "%s", slurp("err"));
	cr_expect(strstr(slurp("out"), "j1 done") != NULL, "an ended job stays as it was: %s", slurp("out"));
	unsetenv("KILN_SERVER");
	unsetenv("KILN_TOKEN");
}
