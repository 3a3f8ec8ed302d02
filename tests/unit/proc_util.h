/* Helpers for the tests that run the kiln binary ($KILN_BIN, else build/kiln): running it
 * with shell-fragment arguments and output captured in files, starting it in the
 * background with a log, stopping it, waiting for a scheduler's /healthz, reading logs. */
#ifndef KILN_TEST_PROC_UTIL_H
#define KILN_TEST_PROC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

/* The binary under test: $KILN_BIN (make test sets it), else build/kiln. */
const char *kiln_bin(void);
/* kiln_bin() made absolute into out (PATH_MAX bytes), so that it runs from any directory;
 * asserts that it exists. */
void kiln_bin_abs(char *out);

void sleep_ms(int ms);
double now_s(void);   /* CLOCK_MONOTONIC, in seconds */

/* Writes the sample images (kiln samples) into dir/in with bin (NULL: kiln_bin()). */
void kiln_samples(const char *bin, const char *dir);
/* Writes dir/in/zz-broken.png: a PNG signature and then no PNG (fails in decoding). */
void kiln_broken_sample(const char *dir);

/* Runs bin (NULL: kiln_bin()) with args (a printf-style shell fragment) in cwd (NULL: here),
 * stdout to dir/out_name and stderr to dir/err_name. Asserts that it exited normally;
 * returns its exit status. */
int proc_kiln(const char *bin, const char *cwd, const char *dir, const char *out_name, const char *err_name,
	      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* The text of dir/name (its first 64 KiB) in a static buffer; a missing file is an
 * assertion failure when missing is NULL, else the text is missing. */
char *proc_slurp(const char *dir, const char *name, const char *missing);

typedef enum proc_stdout {
	PROC_STDOUT_NULL,     /* /dev/null */
	PROC_STDOUT_LOG,      /* the log, with stderr */
	PROC_STDOUT_INHERIT,  /* the test's own */
} proc_stdout;

typedef struct proc_spec {
	const char *path;          /* NULL: kiln_bin(); without a slash, looked up on PATH */
	const char *log;           /* stderr is appended to this file; NULL: the test's own */
	proc_stdout out;
	bool die_with_parent;      /* PR_SET_PDEATHSIG: never outlive a test that crashed */
	rlim_t fsize;              /* > 0: RLIMIT_FSIZE, with SIGXFSZ ignored (writes fail with EFBIG) */
	const char *const *unset;  /* NULL-terminated variables removed from its environment */
	const char *const *env;    /* NULL-terminated "NAME=value" added to it */
} proc_spec;

/* Starts spec->path with argv (argv[0] included, NULL-terminated) in the background. */
pid_t proc_spawn(const proc_spec *spec, const char *const *argv);
/* Sends sig to *pid (if > 0), reaps it and sets *pid to -1. */
void proc_kill(pid_t *pid, int sig);
/* pid > 0 and has not exited. */
bool proc_alive(pid_t pid);
/* Exit status of pid (128 + signal when killed) within timeout_s, or -1: it is then killed. */
int proc_wait_exit(pid_t pid, double timeout_s);

/* GET base/healthz until it answers 200: true, or false after 100 tries 50 ms apart. */
bool proc_wait_healthy(const char *base);

#endif
