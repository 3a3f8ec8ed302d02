/* Credentials never reach a log: a scheduler with a bearer token and a worker with S3
 * credentials (key, secret, session token) run a job whose S3 input cannot be reached, so
 * retries and failures are logged at debug level; requests with wrong tokens are refused.
 * None of the secret values may appear in any output of either process. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/unit/proc_util.h"
#include "tests/unit/sched_sim.h"

#define TOKEN "tok-Qm9vYmFyLXNlY3JldC10b2tlbg"
#define KEY_ID "AKIDKILNLOGTEST7"
#define SECRET "sEcReT/kiln+log+test+0123456789abcdef"
#define SESSION "SeSsIoN-kiln-log-test-token"

Test(secrets, credentials_and_tokens_never_reach_the_logs, .timeout = 120)
{
	char dir[256], state[300], tokfile[300], endpoint[64], http[64], base[96], cmd[4096];
	sim_mkdtemp(dir, sizeof dir, "kiln-secrets");
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(tokfile, sizeof tokfile, "%s/token", dir);
	FILE *f = fopen(tokfile, "w");
	cr_assert_not_null(f);
	fprintf(f, "%s\n", TOKEN);
	fclose(f);
	chmod(tokfile, 0600);
	snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", sim_free_port());
	snprintf(http, sizeof http, "127.0.0.1:%u", sim_free_port());
	snprintf(base, sizeof base, "http://%s", http);
	char slog[300], wlog[300];
	snprintf(slog, sizeof slog, "%s/scheduler.log", dir);
	snprintf(wlog, sizeof wlog, "%s/worker.log", dir);

	static const char *const env[] = {
		"KILN_LOG_LEVEL=debug", "AWS_ACCESS_KEY_ID=" KEY_ID, "AWS_SECRET_ACCESS_KEY=" SECRET,
		"AWS_SESSION_TOKEN=" SESSION, "AWS_REGION=us-east-1",
		/* nothing listens there: every request fails and is retried, and logged */
		"AWS_ENDPOINT_URL=http://127.0.0.1:9", "KILN_S3_MAX_ATTEMPTS=2", "KILN_S3_BACKOFF_MAX_MS=100", NULL};
	proc_spec spec = {.log = slog, .out = PROC_STDOUT_LOG, .die_with_parent = true, .env = env};
	const char *sargv[] = {"kiln", "scheduler", "--listen", endpoint, "--http", http, "--state-dir", state,
			       "--token-file", tokfile, NULL};
	pid_t sched = proc_spawn(&spec, sargv);
	cr_assert(proc_wait_healthy(base), "scheduler did not start: %s", proc_slurp(dir, "scheduler.log", ""));
	spec.log = wlog;
	const char *wargv[] = {"kiln", "worker", "--connect", endpoint, "--devices", "cpu", NULL};
	pid_t worker = proc_spawn(&spec, wargv);
	sleep_ms(300);
	cr_assert(proc_alive(worker), "worker did not start: %s", proc_slurp(dir, "worker.log", ""));

	/* wrong and missing tokens are refused (and must not be echoed into the log) */
	snprintf(cmd, sizeof cmd, "KILN_TOKEN=wrong-%s %s jobs --server %s >>%s/cli.log 2>&1", TOKEN, kiln_bin(),
		 base, dir);
	cr_expect_neq(system(cmd), 0, "a wrong token must be refused");
	/* a job over S3 (planning fails: the listing cannot reach the endpoint) and one whose
	 * inputs are listed from a local manifest of s3:// URIs (fetches fail on the worker) */
	snprintf(cmd, sizeof cmd,
		 "printf 's3://bkt/a.png\\ns3://bkt/b.png\\n' > %s/manifest; "
		 "KILN_TOKEN=%s %s submit --server %s --input s3://bkt/in/ --output %s/out >>%s/cli.log 2>&1; "
		 "KILN_TOKEN=%s timeout 60 %s submit --server %s --manifest %s/manifest --output s3://bkt/out/ --max-attempts 1 "
		 "--wait >>%s/cli.log 2>&1",
		 dir, TOKEN, kiln_bin(), base, dir, dir, TOKEN, kiln_bin(), base, dir, dir);
	cr_expect_neq(system(cmd), 0, "the job's items cannot succeed");
	char *cli = proc_slurp(dir, "cli.log", "");
	cr_expect(strstr(cli, "fail") || strstr(cli, "error"), "the CLI says what failed: %s", cli);

	proc_kill(&worker, SIGTERM);
	proc_kill(&sched, SIGTERM);
	static const char *const logs[] = {"scheduler.log", "worker.log", "cli.log"};
	static const char *const secrets[] = {TOKEN, KEY_ID, SECRET, SESSION};
	for (size_t l = 0; l < 3; l++) {
		char *text = proc_slurp(dir, logs[l], "");
		cr_expect(strlen(text) > 0 || l == 2, "%s is empty: the test logged nothing to check", logs[l]);
		for (size_t s = 0; s < 4; s++)
			cr_expect_null(strstr(text, secrets[s]), "%s contains a secret (%zu): %s", logs[l], s, text);
	}
	/* the worker did try (and log) S3 requests, so the check above meant something */
	cr_expect(strstr(proc_slurp(dir, "worker.log", ""), "s3") != NULL, "%s", proc_slurp(dir, "worker.log", ""));
	sim_rmdir(dir);
}
