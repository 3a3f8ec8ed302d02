/* kiln wait and kiln submit --wait: the waits between polls (cli/wait_poll.h), and a real
 * submit --wait against a scheduler and a worker process, with its exit codes and lines. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/wait_poll.h"
#include "proc_util.h"
#include "sched_sim.h"

Test(cli_wait, polls_start_fast_and_grow_by_half_to_500_ms)
{
	static const unsigned want[] = {25, 37, 55, 82, 123, 184, 276, 414, 500, 500, 500};
	unsigned ms = 0, at = 0;
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		ms = cli_wait_poll_next_ms(ms);
		cr_expect_eq(ms, want[i], "wait %zu: %u ms, expected %u", i, ms, want[i]);
		at += ms;
	}
	cr_expect_eq(CLI_WAIT_POLL_FIRST_MS, 25u);
	cr_expect_eq(CLI_WAIT_POLL_MAX_MS, 500u);
	/* a job that ends at once is seen by the second poll, 25 ms in; the 500 ms steady
	 * state is reached within 2 s, so a long job costs the scheduler what it did */
	cr_expect_eq(cli_wait_poll_next_ms(0), 25u);
	cr_expect_leq(at - 3 * 500, 2000u, "the waits before the steady 500 ms took %u ms", at - 3 * 500);
}

Test(cli_wait, the_wait_never_shrinks_and_never_exceeds_the_cap)
{
	for (unsigned prev = 0; prev <= 100000; prev++) {
		unsigned next = cli_wait_poll_next_ms(prev);
		cr_assert_geq(next, CLI_WAIT_POLL_FIRST_MS, "after %u", prev);
		cr_assert_leq(next, CLI_WAIT_POLL_MAX_MS, "after %u", prev);
		cr_assert(next >= prev || next == CLI_WAIT_POLL_MAX_MS, "after %u: %u", prev, next);
		/* the growth is bounded: a wait is never more than 1.5x the one before */
		cr_assert(prev < CLI_WAIT_POLL_FIRST_MS || next <= prev + prev / 2 || next == CLI_WAIT_POLL_MAX_MS,
			  "after %u: %u", prev, next);
	}
	/* from anywhere, the cap comes and stays */
	unsigned ms = 1;
	for (int i = 0; i < 20; i++)
		ms = cli_wait_poll_next_ms(ms);
	cr_expect_eq(ms, CLI_WAIT_POLL_MAX_MS);
	cr_expect_eq(cli_wait_poll_next_ms(UINT32_MAX), CLI_WAIT_POLL_MAX_MS);
}

/* ---- end to end: kiln scheduler, kiln worker, kiln submit --wait ---- */

static char dir[64];
static pid_t sched_pid = -1, worker_pid = -1;
static char server[96];

static void start_cluster(void)
{
	sim_mkdtemp(dir, sizeof dir, "cliwait");
	kiln_samples(NULL, dir);
	char endpoint[64], http[64], state[128], slog[128], wlog[128];
	snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", sim_free_port());
	snprintf(http, sizeof http, "127.0.0.1:%u", sim_free_port());
	snprintf(server, sizeof server, "http://%s", http);
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(slog, sizeof slog, "%s/scheduler.log", dir);
	snprintf(wlog, sizeof wlog, "%s/worker.log", dir);
	proc_spec spec = {.log = slog, .out = PROC_STDOUT_LOG, .die_with_parent = true};
	const char *sargv[] = {"kiln", "scheduler", "--listen", endpoint, "--http", http, "--state-dir", state, NULL};
	sched_pid = proc_spawn(&spec, sargv);
	cr_assert(proc_wait_healthy(server), "the scheduler did not start: %s", proc_slurp(dir, "scheduler.log", ""));
	spec.log = wlog;
	const char *wargv[] = {"kiln", "worker", "--connect", endpoint, "--devices", "cpu", "--threads", "2", NULL};
	worker_pid = proc_spawn(&spec, wargv);
}

static void stop_cluster(void)
{
	proc_kill(&worker_pid, SIGTERM);
	proc_kill(&sched_pid, SIGTERM);
	sim_rmdir(dir);
}

#define kiln(...) proc_kiln(NULL, NULL, dir, "stdout", "stderr", __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, "")

TestSuite(cli_wait_e2e, .init = start_cluster, .fini = stop_cluster, .timeout = 90);

Test(cli_wait_e2e, submit_wait_ends_with_the_job_and_its_exit_code)
{
	int rc = kiln("submit --server %s --input %s/in --output %s/out --quality fast --wait", server, dir, dir);
	cr_assert_eq(rc, 0, "stdout: %s\nstderr: %s\nworker: %s", slurp("stdout"), slurp("stderr"),
		     proc_slurp(dir, "worker.log", ""));
	const char *out = slurp("stdout");
	cr_expect(strstr(out, " done: ") && strstr(out, ", 0 failed"), "the final line: %s", out);
	const char *names[] = {"gradient", "checker-alpha", "noise", "solid-5x3", "pixel", "wide"};
	for (int i = 0; i < 6; i++) {
		char path[256];
		snprintf(path, sizeof path, "%s/out/%s.dds", dir, names[i]);
		cr_expect_eq(access(path, F_OK), 0, "%s was not written", path);
	}
	/* kiln wait on the ended job: the first poll sees it; --json prints the job */
	char id[32] = "";
	sscanf(out, "%31[j0-9]", id);
	cr_assert_neq(id[0], '\0', "no job id at the start of: %s", out);
	cr_expect_eq(kiln("wait --server %s --json %s", server, id), 0, "%s", slurp("stderr"));
	json_error_t jerr;
	json_t *job = json_loads(slurp("stdout"), 0, &jerr);
	cr_assert_not_null(job, "%s: %s", jerr.text, slurp("stdout"));
	cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "done");
	json_decref(job);

	/* a job with a broken input: exit 1, the rest written */
	kiln_broken_sample(dir);
	rc = kiln("submit --server %s --input %s/in --output %s/out2 --quality fast --max-attempts 1 --wait", server,
		  dir, dir);
	cr_expect_eq(rc, 1, "stdout: %s\nstderr: %s", slurp("stdout"), slurp("stderr"));
	cr_expect(strstr(slurp("stdout"), ", 1 failed"), "%s", slurp("stdout"));
}
