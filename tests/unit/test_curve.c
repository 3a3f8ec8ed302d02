/* CURVE between scheduler and workers, end to end with real processes ($KILN_BIN): kiln
 * keygen's files (modes, Z85, a pair that belongs together), a CURVE scheduler that a
 * worker with the wrong server key or none cannot join (no worker on /metrics, the job
 * does not move) while a worker with the right key finishes the job, the refusal to
 * listen beyond loopback without CURVE, and the loopback rule itself. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/curve.h"
#include "proc_util.h"
#include "sched_sim.h"

#define MAX_PROCS 4

static char dir[128];
static pid_t procs[MAX_PROCS];

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "curve");
	memset(procs, 0, sizeof procs);
}

static void teardown(void)
{
	for (int i = 0; i < MAX_PROCS; i++)
		proc_kill(&procs[i], SIGKILL);
	sim_rmdir(dir);
}

TestSuite(curve, .init = setup, .fini = teardown, .timeout = 90);

/* Runs kiln with args (a shell fragment); stdout and stderr to dir/out and dir/err. */
#define kiln(...) proc_kiln(NULL, NULL, dir, "out", "err", __VA_ARGS__)
#define slurp(name) proc_slurp(dir, name, "(missing)")
#define stop(pid) proc_kill(pid, SIGKILL)
#define healthy(base) proc_wait_healthy(base)

/* Starts kiln with a NULL-terminated argument list, its stderr to dir/log_name. */
static pid_t spawn(const char *log_name, const char *const *args)
{
	char log[256];
	snprintf(log, sizeof log, "%s/%s", dir, log_name);
	const char *argv[32] = {"kiln"};
	for (int i = 0; args[i] && i < 30; i++)
		argv[i + 1] = args[i];
	return proc_spawn(&(proc_spec){.log = log}, argv);
}

/* kiln_workers from /metrics; -1 if it is not there. */
static long workers_on_metrics(const char *base)
{
	char url[128];
	static char body[1 << 16];
	snprintf(url, sizeof url, "%s/metrics", base);
	if (sim_http("GET", url, NULL, NULL, NULL, body, sizeof body, NULL, 0) != 200)
		return -1;
	const char *line = strstr(body, "\nkiln_workers ");
	return line ? strtol(line + 14, NULL, 10) : -1;
}

static json_t *job_view(const char *base, const char *id)
{
	char url[128];
	json_t *job = NULL;
	snprintf(url, sizeof url, "%s/v1/jobs/%s", base, id);
	cr_assert_eq(sim_http("GET", url, NULL, NULL, &job, NULL, 0, NULL, 0), 200);
	return job;
}

static json_int_t items(const json_t *job, const char *name)
{
	return json_integer_value(json_object_get(json_object_get(job, "items"), name));
}

static void file_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

Test(curve, keygen_writes_a_secret_0600_and_a_public_key_in_z85)
{
	cr_assert_eq(kiln("keygen --out %s/sched", dir), 0, "%s", slurp("err"));
	char key_path[256], pub_path[256], sec[KILN_CURVE_KEY_LEN + 1], pub[KILN_CURVE_KEY_LEN + 1];
	char derived[KILN_CURVE_KEY_LEN + 1], msg[256];
	file_path(key_path, sizeof key_path, "sched.key");
	file_path(pub_path, sizeof pub_path, "sched.pub");
	struct stat sb;
	cr_assert_eq(stat(key_path, &sb), 0);
	cr_expect_eq(sb.st_mode & 0777, 0600, "the secret key is mode %o", sb.st_mode & 0777);
	cr_expect_eq(sb.st_size, KILN_CURVE_KEY_LEN + 1, "40 characters and a newline");
	cr_assert_eq(stat(pub_path, &sb), 0);
	cr_expect_eq(sb.st_mode & 0777, 0644);
	cr_expect_eq(sb.st_size, KILN_CURVE_KEY_LEN + 1);
	cr_assert_eq(kiln_curve_key_load(key_path, sec, msg, sizeof msg), KILN_OK, "%s", msg);
	cr_assert_eq(kiln_curve_key_load(pub_path, pub, msg, sizeof msg), KILN_OK, "%s", msg);
	cr_assert_eq(zmq_curve_public(derived, sec), 0);
	cr_expect_str_eq(derived, pub, "the two files are one pair");

	/* an existing key is never overwritten by accident */
	cr_expect_eq(kiln("keygen --out %s/sched", dir), 3);
	char again[KILN_CURVE_KEY_LEN + 1];
	cr_assert_eq(kiln_curve_key_load(key_path, again, msg, sizeof msg), KILN_OK);
	cr_expect_str_eq(again, sec);
	cr_expect_eq(kiln("keygen --out %s/sched --force", dir), 0);
	cr_assert_eq(kiln_curve_key_load(key_path, again, msg, sizeof msg), KILN_OK);
	cr_expect_str_neq(again, sec, "--force made a new pair");
	cr_expect_eq(kiln("keygen"), 2);
	cr_expect_eq(kiln("keygen --help"), 0);

	/* not Z85, wrong length */
	FILE *f = fopen(key_path, "w");
	cr_assert_not_null(f);
	fputs("this is not a key\n", f);
	fclose(f);
	cr_expect_eq(kiln_curve_key_load(key_path, again, msg, sizeof msg), KILN_ERR_CORRUPT);
	cr_expect(strstr(msg, "40 characters") != NULL, "%s", msg);
}

Test(curve, the_loopback_rule)
{
	static const char *const local[] = {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:*", "tcp://127.8.9.10:1",
					    "tcp://localhost:5555", "tcp://[::1]:5555", "inproc://kiln-run",
					    "ipc:///run/kiln.sock"};
	static const char *const remote[] = {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.5:5555",
					     "tcp://eth0:5555", "tcp://[::]:5555", "tcp://sched.example:5555",
					     "tcp://127.0.0.1.evil:5555", "tcp://1270.0.0.1:5", "tcp://127.0.0.256:5",
					     "pgm://eth0;239.1.1.1:5555", "tcp://127.0.0.1"};
	for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
		cr_expect(kiln_endpoint_is_local(local[i]), "%s is local", local[i]);
	for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++)
		cr_expect(!kiln_endpoint_is_local(remote[i]), "%s is reachable from the network", remote[i]);
}

Test(curve, listening_beyond_loopback_needs_curve_or_insecure)
{
	cr_expect_eq(kiln("scheduler --help"), 0);
	cr_expect(strstr(slurp("out"), "--curve-secret") != NULL, "--help lists --curve-secret");
	cr_expect(strstr(slurp("out"), "--insecure") != NULL);

	char state[256], listen[64], http[64], base[96];
	file_path(state, sizeof state, "state");
	unsigned zport = sim_free_port(), hport = sim_free_port();
	snprintf(listen, sizeof listen, "tcp://0.0.0.0:%u", zport);
	snprintf(http, sizeof http, "127.0.0.1:%u", hport);
	snprintf(base, sizeof base, "http://%s", http);
	cr_expect_eq(kiln("scheduler --listen %s --http %s --state-dir %s", listen, http, state), 2);
	const char *err = slurp("err");
	cr_expect(strstr(err, "--curve-secret") && strstr(err, "--insecure") && strstr(err, "kiln keygen"),
		  "the refusal says what to do: %s", err);
	cr_expect_eq(kiln("scheduler --listen 'tcp://*:%u' --http %s --state-dir %s", zport, http, state), 2);

	/* a key that is not one is refused before anything listens */
	char bad_key[256];
	file_path(bad_key, sizeof bad_key, "bad.key");
	FILE *f = fopen(bad_key, "w");
	cr_assert_not_null(f);
	fputs("short\n", f);
	fclose(f);
	cr_expect_eq(kiln("scheduler --listen %s --http %s --state-dir %s --curve-secret %s", listen, http, state,
			  bad_key),
		     3);

	/* --insecure accepts it, with a warning in the log */
	const char *args[] = {"scheduler", "--listen", listen, "--http", http, "--state-dir", state, "--insecure", NULL};
	procs[0] = spawn("insecure.log", args);
	cr_assert(healthy(base), "the scheduler did not start with --insecure: %s", slurp("insecure.log"));
	stop(&procs[0]);
	cr_expect(strstr(slurp("insecure.log"), "plain text") != NULL, "%s", slurp("insecure.log"));
}

Test(curve, a_worker_without_the_right_key_is_refused_and_one_with_it_finishes_the_job)
{
	if (!zmq_has("curve"))
		cr_skip_test("libzmq without CURVE");
	cr_assert_eq(kiln("keygen --out %s/sched", dir), 0);
	cr_assert_eq(kiln("keygen --out %s/worker", dir), 0);
	cr_assert_eq(kiln("keygen --out %s/impostor", dir), 0);
	cr_assert_eq(kiln("samples -o %s/in", dir), 0);

	char state[256], endpoint[64], http[64], base[96], sched_key[256], sched_pub[256], worker_key[256],
		impostor_pub[256];
	file_path(state, sizeof state, "state");
	file_path(sched_key, sizeof sched_key, "sched.key");
	file_path(sched_pub, sizeof sched_pub, "sched.pub");
	file_path(worker_key, sizeof worker_key, "worker.key");
	file_path(impostor_pub, sizeof impostor_pub, "impostor.pub");
	snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", sim_free_port());
	snprintf(http, sizeof http, "127.0.0.1:%u", sim_free_port());
	snprintf(base, sizeof base, "http://%s", http);
	const char *sched_args[] = {"scheduler", "--listen", endpoint, "--http", http, "--state-dir", state,
				    "--heartbeat-ms", "200", "--curve-secret", sched_key, NULL};
	procs[0] = spawn("scheduler.log", sched_args);
	cr_assert(healthy(base), "the scheduler did not start: %s", slurp("scheduler.log"));
	/* /healthz answers as soon as HTTP is up; the "ready" line follows a moment later */
	bool curve_on = false;
	for (int i = 0; i < 50 && !curve_on; i++, usleep(100000))
		curve_on = strstr(slurp("scheduler.log"), "curve=on") != NULL;
	cr_expect(curve_on, "%s", slurp("scheduler.log"));

	char spec[512], url[128];
	snprintf(spec, sizeof spec, "{\"input\":\"%s/in\",\"output\":\"%s/textures\",\"quality\":\"fast\"}", dir, dir);
	snprintf(url, sizeof url, "%s/v1/jobs", base);
	json_t *job = NULL;
	cr_assert_eq(sim_http("POST", url, spec, NULL, &job, NULL, 0, NULL, 0), 202);
	char id[32];
	snprintf(id, sizeof id, "%s", json_string_value(json_object_get(job, "id")));
	json_int_t total = items(job, "total");
	cr_assert_gt(total, 0);
	json_decref(job);

	/* a worker that trusts another server key, and one that speaks no CURVE at all */
	const char *wrong_args[] = {"worker", "--connect", endpoint, "--devices", "cpu", "--curve-server-key",
				    impostor_pub, "--curve-secret", worker_key, NULL};
	const char *plain_args[] = {"worker", "--connect", endpoint, "--devices", "cpu", NULL};
	procs[1] = spawn("wrong.log", wrong_args);
	procs[2] = spawn("plain.log", plain_args);
	for (int t = 0; t < 30; t++) {  /* 3 s: a right worker is ready in well under one */
		cr_assert_eq(workers_on_metrics(base), 0, "a worker without the right key was admitted");
		sleep_ms(100);
	}
	job = job_view(base, id);
	cr_expect_eq(items(job, "done") + items(job, "failed"), 0, "the job moved without a trusted worker");
	json_decref(job);
	int status;
	cr_expect_eq(waitpid(procs[1], &status, WNOHANG), 0, "the refused worker keeps trying, it does not crash");
	stop(&procs[1]);
	stop(&procs[2]);

	const char *right_args[] = {"worker", "--connect", endpoint, "--devices", "cpu", "--curve-server-key",
				    sched_pub, "--curve-secret", worker_key, NULL};
	procs[1] = spawn("right.log", right_args);
	for (int t = 0; t < 300; t++) {
		job = job_view(base, id);
		const char *state_name = json_string_value(json_object_get(job, "state"));
		bool done = state_name && strcmp(state_name, "done") == 0;
		json_int_t ok = items(job, "done");
		json_decref(job);
		if (done) {
			cr_expect_eq(ok, total, "every item succeeded");
			break;
		}
		sleep_ms(100);
	}
	cr_assert_eq(workers_on_metrics(base), 1, "the worker with the right key is connected");
	char out[256];
	file_path(out, sizeof out, "textures/noise.dds");
	kiln_buf file;
	kiln_texture tex;
	kiln_buf_init(&file, 1 << 24);
	cr_assert_eq(kiln_buf_read_file(&file, out), KILN_OK, "the job did not finish: %s", slurp("right.log"));
	cr_expect_eq(kiln_container_read(file.data, file.len, &tex), KILN_OK);
	kiln_buf_free(&file);
}
