/* Checks of the deployment files (docker/, deploy/, docs/OPERATIONS.md) that need no
 * cluster, container engine or GPU. The static checks live in tests/tools/check_manifests.py
 * (YAML, Kustomize, Dockerfiles, units); each runs here as one test so that a failure names
 * its area. The deploy_health tests start the real binary the way the images and manifests
 * do (through docker/entrypoint.sh) and ask it what the probes and Prometheus ask.
 *
 * Needs python3 with PyYAML (python3-yaml). $KILN_BIN is the binary (default build/kiln);
 * the tests run from the repository root, as make test does. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_util.h"
#include "sched_sim.h"

/* ---- the static checks, through tests/tools/check_manifests.py ---- */

/* A python3 that imports yaml: $KILN_PYTHON, python3 on PATH, or Debian's own (a pyenv or
 * venv python3 first on PATH may lack python3-yaml's module). */
static const char *python(void)
{
	static const char *found;
	static const char *const candidates[] = {"python3", "/usr/bin/python3"};
	if (found)
		return found;
	const char *env = getenv("KILN_PYTHON");
	char cmd[512];
	for (int i = -1; i < 2; i++) {
		const char *py = i < 0 ? env : candidates[i];
		if (!py || !*py)
			continue;
		snprintf(cmd, sizeof cmd, "'%s' -c 'import yaml' >/dev/null 2>&1", py);
		if (system(cmd) == 0)
			return found = py;
	}
	return NULL;
}

static void run_check(const char *check)
{
	const char *py = python();
	cr_assert_not_null(py, "no python3 with PyYAML: install python3-yaml (tools/deps.sh)");
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "'%s' tests/tools/check_manifests.py --kiln '%s' %s 2>&1", py, kiln_bin(), check);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p, "popen: %s", strerror(errno));
	static char out[1 << 16];
	size_t n = fread(out, 1, sizeof out - 1, p);
	out[n] = '\0';
	int status = pclose(p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "check_manifests.py %s:\n%s", check, out);
}

TestSuite(deploy_manifests, .timeout = 60);

Test(deploy_manifests, every_file_parses_with_known_kinds)
{
	run_check("yaml");
}

Test(deploy_manifests, kustomizations_resolve_and_render)
{
	run_check("kustomize");
}

Test(deploy_manifests, workloads_have_gpus_probes_and_security)
{
	run_check("workloads");
}

Test(deploy_manifests, secrets_are_referenced_never_inlined)
{
	run_check("secrets");
}

Test(deploy_manifests, prometheus_scrapes_the_scheduler)
{
	run_check("prometheus");
}

TestSuite(deploy_images, .timeout = 60);

Test(deploy_images, dockerfiles_build_and_install_what_make_produces)
{
	run_check("docker");
}

TestSuite(deploy_commands, .timeout = 60);

/* Every kiln command line of the images, manifests, Slurm script, units and the operations
 * guide, against `$KILN_BIN SUBCOMMAND --help`. */
Test(deploy_commands, every_kiln_invocation_exists_in_the_binary)
{
	run_check("commands");
}

TestSuite(deploy_hosts, .timeout = 60);

Test(deploy_hosts, slurm_array_script)
{
	run_check("slurm");
}

Test(deploy_hosts, systemd_units)
{
	run_check("systemd");
}

TestSuite(deploy_docs, .timeout = 60);

Test(deploy_docs, operations_guide_covers_the_deployment)
{
	run_check("docs");
}

/* ---- health: the real binary, started as the deployment starts it ---- */

static char tmp[64];

static void make_tmp(void)
{
	sim_mkdtemp(tmp, sizeof tmp, "deploy");
}

static void remove_tmp(void)
{
	sim_rmdir(tmp);
}

#define free_port() ((int)sim_free_port())

/* The variables docker/entrypoint.sh reads, and KILN_WORKER_THREADS that kiln worker reads
 * itself: cleared in children, so that a developer's own environment does not leak into
 * what a test starts. */
static const char *const entry_vars[] = {
	"KILN_SCHEDULER", "KILN_DEVICES", "KILN_SLOTS", "KILN_WORKER_THREADS", "KILN_CURVE_SERVER_KEY_FILE",
	"KILN_CURVE_SECRET_FILE", "KILN_LISTEN", "KILN_HTTP", "KILN_STATE_DIR", "KILN_TOKEN_FILE",
	"AWS_ACCESS_KEY_ID_FILE", "AWS_SECRET_ACCESS_KEY_FILE", "AWS_SESSION_TOKEN_FILE", NULL,
};

/* Starts argv with env ("NAME=value" strings, NULL-terminated) added; stdout and stderr
 * go to tmp/log. */
static pid_t spawn(const char *log, char *const argv[], const char *const env[])
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", tmp, log);
	proc_spec spec = {.path = argv[0], .log = path, .out = PROC_STDOUT_LOG, .unset = entry_vars, .env = env};
	return proc_spawn(&spec, (const char *const *)argv);
}

#define wait_exit(pid, timeout_s) proc_wait_exit(pid, timeout_s)
#define alive(pid) proc_alive(pid)
#define slurp_log(log) proc_slurp(tmp, log, "(no log)")

typedef struct body {
	char data[1 << 16];
	size_t len;
} body;

static size_t collect(char *p, size_t size, size_t n, void *ctx)
{
	body *b = ctx;
	size_t take = size * n;
	if (take > sizeof b->data - 1 - b->len)
		take = sizeof b->data - 1 - b->len;
	memcpy(b->data + b->len, p, take);
	b->len += take;
	b->data[b->len] = '\0';
	return size * n;
}

/* GET http://127.0.0.1:port/path; the HTTP status, or -1 when nothing answered. */
static long http_get(int port, const char *path, const char *token, body *out)
{
	char url[128], auth[256];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	CURL *c = curl_easy_init();
	cr_assert_not_null(c);
	struct curl_slist *h = NULL;
	if (token) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
		h = curl_slist_append(NULL, auth);
	}
	out->len = 0;
	out->data[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	long code = -1;
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return code;
}

/* `kiln SUB --help` works: the subcommand exists in this build. */
static void require_subcommand(const char *sub, const char *issue)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "'%s' %s --help >/dev/null 2>&1", kiln_bin(), sub);
	cr_assert_eq(system(cmd), 0,
		     "`%s %s --help` fails: the deployment runs `kiln %s`, which this build lacks (%s)",
		     kiln_bin(), sub, sub, issue);
}

typedef struct scheduler {
	pid_t pid;
	int zmq_port, http_port;
	char listen[64], http[64];
} scheduler;

/* Starts `kiln scheduler` through the image's entrypoint, on loopback ports, and waits
 * until /healthz answers 200 (as the readiness probe does). token: NULL for none. */
static void start_scheduler(scheduler *s, const char *token)
{
	require_subcommand("scheduler", "issue 6");
	s->zmq_port = free_port();
	s->http_port = free_port();
	snprintf(s->listen, sizeof s->listen, "KILN_LISTEN=tcp://127.0.0.1:%d", s->zmq_port);
	snprintf(s->http, sizeof s->http, "KILN_HTTP=127.0.0.1:%d", s->http_port);
	static char state[128], tokenvar[128];
	snprintf(state, sizeof state, "KILN_STATE_DIR=%s/state", tmp);
	const char *env[5] = {s->listen, s->http, state, NULL, NULL};
	if (token) {
		char path[96];
		snprintf(path, sizeof path, "%s/token", tmp);
		FILE *f = fopen(path, "w");
		cr_assert_not_null(f);
		fprintf(f, "%s\n", token);
		fclose(f);
		snprintf(tokenvar, sizeof tokenvar, "KILN_TOKEN_FILE=%s", path);
		env[3] = tokenvar;
	}
	char *argv[] = {"sh", "docker/entrypoint.sh", (char *)kiln_bin(), "scheduler", NULL};
	s->pid = spawn("scheduler.log", argv, env);
	body b;
	double end = now_s() + 15;
	while (http_get(s->http_port, "/healthz", NULL, &b) != 200) {
		cr_assert(alive(s->pid), "the scheduler exited while starting:\n%s", slurp_log("scheduler.log"));
		cr_assert_lt(now_s(), end, "/healthz did not answer 200 within 15 s:\n%s", slurp_log("scheduler.log"));
		sleep_ms(100);
	}
}

static void stop_scheduler(scheduler *s)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, SIGTERM);
	int rc = wait_exit(s->pid, 15);
	s->pid = 0;
	cr_expect_eq(rc, 0, "the scheduler must exit 0 on SIGTERM (docker stop, pod deletion); got %d:\n%s", rc,
		     slurp_log("scheduler.log"));
}

/* The value of an unlabelled sample "name value" in a metrics page, or -1. */
static double metric(const char *page, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return atof(p + n + 1);
	return -1;
}

/* The command of a Dockerfile's shell-form HEALTHCHECK (continuation lines joined). */
static void healthcheck_cmd(const char *dockerfile, char *out, size_t cap)
{
	FILE *f = fopen(dockerfile, "r");
	cr_assert_not_null(f, "%s is missing", dockerfile);
	char line[512], joined[2048] = "";
	bool in = false;
	while (fgets(line, sizeof line, f)) {
		if (!in && strncmp(line, "HEALTHCHECK", 11) != 0)
			continue;
		in = true;
		size_t n = strcspn(line, "\n");
		line[n] = '\0';
		bool more = n > 0 && line[n - 1] == '\\';
		if (more)
			line[n - 1] = ' ';
		strncat(joined, line, sizeof joined - strlen(joined) - 1);
		if (!more)
			break;
	}
	fclose(f);
	const char *cmd = strstr(joined, " CMD ");
	cr_assert_not_null(cmd, "%s has no HEALTHCHECK ... CMD", dockerfile);
	cmd += 5;
	while (*cmd == ' ')
		cmd++;
	cr_assert_neq(*cmd, '[', "%s: expected a shell-form HEALTHCHECK", dockerfile);
	snprintf(out, cap, "%s", cmd);
}

TestSuite(deploy_health, .init = make_tmp, .fini = remove_tmp, .timeout = 90);

/* What Kubernetes (httpGet /healthz), Docker (HEALTHCHECK) and Prometheus (/metrics with
 * the REST token) ask the scheduler. */
Test(deploy_health, scheduler_answers_probes_and_metrics)
{
	scheduler s = {0};
	start_scheduler(&s, "deploy-test-token");
	body b;
	cr_expect_eq(http_get(s.http_port, "/healthz", NULL, &b), 200, "/healthz must need no token");
	cr_expect_eq(http_get(s.http_port, "/metrics", NULL, &b), 401, "/metrics without the token");
	cr_expect_eq(http_get(s.http_port, "/metrics", "wrong", &b), 401, "/metrics with a wrong token");
	cr_expect_eq(http_get(s.http_port, "/metrics", "deploy-test-token", &b), 200, "/metrics with the token");
	cr_expect(strstr(b.data, "# TYPE kiln_") != NULL, "Prometheus text expected, got:\n%.400s", b.data);

	/* the Docker HEALTHCHECK of the scheduler image, as written there (shell form) */
	char hc[512];
	healthcheck_cmd("docker/Dockerfile.scheduler", hc, sizeof hc);
	if (system("command -v curl >/dev/null 2>&1") != 0) {
		cr_log_warn("no curl binary here: the scheduler image's HEALTHCHECK (%s) was not run", hc);
	} else {
		char *argv[] = {"sh", "-c", hc, NULL};
		const char *env[] = {s.http, NULL};
		int rc = wait_exit(spawn("healthcheck.log", argv, env), 10);
		cr_expect_eq(rc, 0, "the HEALTHCHECK of docker/Dockerfile.scheduler (%s) fails against a live scheduler:\n%s",
			     hc, slurp_log("healthcheck.log"));
		char nobody[64];
		snprintf(nobody, sizeof nobody, "KILN_HTTP=127.0.0.1:%d", free_port());
		const char *env2[] = {nobody, NULL};
		rc = wait_exit(spawn("healthcheck.log", argv, env2), 10);
		cr_expect_neq(rc, 0, "the HEALTHCHECK must fail where no scheduler answers");
	}
	stop_scheduler(&s);
}

/* The worker probes of the manifests and the worker image: kiln-entrypoint kiln worker
 * --health passes with a usable configuration and fails with a broken one. */
Test(deploy_health, worker_probe_passes_and_fails)
{
	require_subcommand("worker", "issue 5");
	char *argv[] = {"sh", "docker/entrypoint.sh", (char *)kiln_bin(), "worker", "--health", NULL};
	const char *good[] = {"KILN_SCHEDULER=tcp://127.0.0.1:1", "KILN_DEVICES=all", NULL};
	int rc = wait_exit(spawn("probe.log", argv, good), 30);
	cr_expect_eq(rc, 0, "the worker probe fails on a good configuration (%d):\n%s", rc, slurp_log("probe.log"));
	const char *no_gpu[] = {"KILN_SCHEDULER=tcp://127.0.0.1:1", "KILN_DEVICES=99", NULL};
	rc = wait_exit(spawn("probe.log", argv, no_gpu), 30);
	cr_expect(rc > 0, "the worker probe passes with a GPU that does not exist (%d)", rc);
	const char *no_key[] = {"KILN_SCHEDULER=tcp://127.0.0.1:1", "KILN_CURVE_SERVER_KEY_FILE=/nonexistent/k",
				"KILN_CURVE_SECRET_FILE=/nonexistent/k", NULL};
	rc = wait_exit(spawn("probe.log", argv, no_key), 30);
	cr_expect(rc > 0, "the worker probe passes with unreadable CURVE keys (%d)", rc);
}

/* A worker started as the image starts it registers with its slots, and on SIGTERM (a
 * rolling update, scancel, systemctl stop) says bye and exits 0. */
Test(deploy_health, worker_registers_and_drains_on_sigterm)
{
	require_subcommand("worker", "issue 5");
	scheduler s = {0};
	start_scheduler(&s, NULL);
	char connect[64];
	snprintf(connect, sizeof connect, "KILN_SCHEDULER=tcp://127.0.0.1:%d", s.zmq_port);
	const char *env[] = {connect, "KILN_DEVICES=cpu", "KILN_SLOTS=3", NULL};
	char *argv[] = {"sh", "docker/entrypoint.sh", (char *)kiln_bin(), "worker", NULL};
	pid_t w = spawn("worker.log", argv, env);
	body b;
	double end = now_s() + 15;
	double workers = -1, slots = -1;
	while (now_s() < end && alive(w)) {
		if (http_get(s.http_port, "/metrics", NULL, &b) == 200) {
			workers = metric(b.data, "kiln_workers");
			slots = metric(b.data, "kiln_worker_slots");
			if (workers == 1)
				break;
		}
		sleep_ms(100);
	}
	cr_expect_eq(workers, 1, "the worker did not register within 15 s:\n%s", slurp_log("worker.log"));
	cr_expect_eq(slots, 3, "KILN_SLOTS=3 should give 3 slots, the scheduler sees %g", slots);
	kill(w, SIGTERM);
	int rc = wait_exit(w, 45);
	cr_expect_eq(rc, 0, "the worker must exit 0 within its drain time on SIGTERM; got %d:\n%s", rc,
		     slurp_log("worker.log"));
	end = now_s() + 5;
	while (now_s() < end && http_get(s.http_port, "/metrics", NULL, &b) == 200 &&
	       metric(b.data, "kiln_workers") != 0)
		sleep_ms(100);
	cr_expect_eq(metric(b.data, "kiln_workers"), 0, "the scheduler still counts the stopped worker (no bye?)");
	stop_scheduler(&s);
}

/* Every metric docs/OPERATIONS.md tells operators to watch is on the metrics page. */
Test(deploy_health, metrics_named_in_the_operations_guide_exist)
{
	FILE *f = fopen("docs/OPERATIONS.md", "r");
	cr_assert_not_null(f, "docs/OPERATIONS.md is missing");
	static char doc[1 << 17];
	size_t n = fread(doc, 1, sizeof doc - 1, f);
	doc[n] = '\0';
	fclose(f);
	scheduler s = {0};
	start_scheduler(&s, NULL);
	body b;
	cr_assert_eq(http_get(s.http_port, "/metrics", NULL, &b), 200);
	int named = 0;
	for (const char *p = doc; (p = strstr(p, "kiln_")) != NULL;) {
		if (p > doc && (p[-1] == '_' || p[-1] == '-' || p[-1] == '/' || p[-1] == '.' ||
				(p[-1] >= 'a' && p[-1] <= 'z'))) {
			p += 5;
			continue;
		}
		size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
		char name[128], line_start[132], type_line[140];
		snprintf(name, sizeof name, "%.*s", (int)(len < 120 ? len : 120), p);
		snprintf(line_start, sizeof line_start, "\n%s", name);
		snprintf(type_line, sizeof type_line, "# TYPE %s ", name);
		cr_expect(strstr(b.data, type_line) || strstr(b.data, line_start),
			  "docs/OPERATIONS.md names metric %s, which /metrics does not serve", name);
		named++;
		p += len;
	}
	cr_expect_gt(named, 5, "docs/OPERATIONS.md should name the metrics to watch");
	stop_scheduler(&s);
}
