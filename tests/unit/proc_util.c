/* Running the kiln binary from the tests; see proc_util.h. */
#define _GNU_SOURCE
#include "proc_util.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sched_sim.h"
#include "testutil.h"

const char *kiln_bin(void)
{
	return test_kiln_bin();
}

void kiln_bin_abs(char *out)
{
	cr_assert_not_null(realpath(kiln_bin(), out), "no kiln binary");
}

void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void kiln_samples(const char *bin, const char *dir)
{
	char cmd[2 * PATH_MAX + 64];
	snprintf(cmd, sizeof cmd, "'%s' samples -o %s/in >/dev/null", bin ? bin : kiln_bin(), dir);
	cr_assert_eq(system(cmd), 0, "kiln samples failed");
}

void kiln_broken_sample(const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/in/zz-broken.png", dir);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f, "%s", path);
	fputs("\x89PNG\r\n\x1a\n not really", f);
	fclose(f);
}

int proc_kiln(const char *bin, const char *cwd, const char *dir, const char *out_name, const char *err_name,
	      const char *fmt, ...)
{
	char args[8192], cmd[2 * PATH_MAX + 9000];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "%s%s%s'%s' %s >%s/%s 2>%s/%s", cwd ? "cd " : "", cwd ? cwd : "",
		 cwd ? " && " : "", bin ? bin : kiln_bin(), args, dir, out_name, dir, err_name);
	int status = system(cmd);
	cr_assert(WIFEXITED(status), "kiln did not exit normally (signal %d): %s", WTERMSIG(status), cmd);
	return WEXITSTATUS(status);
}

char *proc_slurp(const char *dir, const char *name, const char *missing)
{
	static char text[1 << 16];
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f && missing) {
		snprintf(text, sizeof text, "%s", missing);
		return text;
	}
	cr_assert_not_null(f, "%s", path);
	size_t n = fread(text, 1, sizeof text - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

pid_t proc_spawn(const proc_spec *spec, const char *const *argv)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid)
		return pid;
	if (spec->die_with_parent)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (size_t i = 0; spec->unset && spec->unset[i]; i++)
		unsetenv(spec->unset[i]);
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		putenv((char *)spec->env[i]);
	int log = spec->log ? open(spec->log, O_WRONLY | O_CREAT | O_APPEND, 0644) : 2;
	int out = spec->out == PROC_STDOUT_NULL ? open("/dev/null", O_WRONLY) : spec->out == PROC_STDOUT_LOG ? log : 1;
	if (log < 0 || out < 0)
		_exit(127);
	dup2(log, 2);
	dup2(out, 1);
	if (out > 2 && out != log)
		close(out);
	if (log > 2)
		close(log);
	if (spec->fsize) {
		struct rlimit rl = {spec->fsize, spec->fsize};
		signal(SIGXFSZ, SIG_IGN);  /* an ignored disposition survives exec */
		setrlimit(RLIMIT_FSIZE, &rl);
	}
	execvp(spec->path ? spec->path : kiln_bin(), (char *const *)argv);
	_exit(127);
}

void proc_kill(pid_t *pid, int sig)
{
	if (*pid > 0) {
		kill(*pid, sig);
		waitpid(*pid, NULL, 0);
		*pid = -1;
	}
}

bool proc_alive(pid_t pid)
{
	return pid > 0 && waitpid(pid, NULL, WNOHANG) == 0;
}

int proc_wait_exit(pid_t pid, double timeout_s)
{
	double end = now_s() + timeout_s;
	int status;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		sleep_ms(20);
	}
}

bool proc_wait_healthy(const char *base)
{
	char url[256];
	snprintf(url, sizeof url, "%s/healthz", base);
	for (int i = 0; i < 100; i++) {
		if (sim_http("GET", url, NULL, NULL, NULL, NULL, 0, NULL, 0) == 200)
			return true;
		sleep_ms(50);
	}
	return false;
}
