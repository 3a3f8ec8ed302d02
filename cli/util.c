/* Helpers shared by the subcommands. */
#include "cli/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

bool cli_parse_long(const char *cmd, const char *opt, const char *arg, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max) {
		fprintf(stderr, "kiln %s: %s wants a whole number from %ld to %ld, not '%s'\n",
			cmd, opt, min, max, arg);
		return false;
	}
	*out = v;
	return true;
}

bool cli_parse_png_decoder(const char *cmd, const char *arg, kiln_png_decoder *out)
{
	if (kiln_png_decoder_parse(arg, out) != KILN_OK) {
		fprintf(stderr, "kiln %s: --png-decoder is kiln or libpng, not '%s'\n", cmd, arg);
		return false;
	}
	return true;
}

bool cli_parse_device(const char *cmd, const char *arg, kiln_device *out)
{
	if (kiln_device_parse(arg, out) != KILN_OK) {
		fprintf(stderr, "kiln %s: --device is auto, cpu, gpu or gpu:N, not '%s'\n", cmd, arg);
		return false;
	}
	return true;
}

bool cli_output_name(const char *dir, const char *input, const char *ext, char *out, size_t cap)
{
	const char *base = strrchr(input, '/');
	base = base ? base + 1 : input;
	const char *dot = strrchr(base, '.');
	int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
	int n = snprintf(out, cap, "%s%s%.*s.%s", dir, dir[0] && dir[strlen(dir) - 1] != '/' ? "/" : "",
			 stem, base, ext);
	return n > 0 && (size_t)n < cap;
}

bool cli_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool cli_write_private(const char *cmd, const char *path, const char *text, unsigned mode, bool replace)
{
	int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (replace ? O_TRUNC : O_EXCL);
	int fd = open(path, flags, (mode_t)mode);
	if (fd < 0) {
		fprintf(stderr, "kiln %s: cannot create %s: %s\n", cmd, path, strerror(errno));
		return false;
	}
	size_t len = strlen(text);
	/* a replaced file keeps its old mode through O_TRUNC: set it before the secret is in */
	bool ok = fchmod(fd, (mode_t)mode) == 0 && write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1 &&
		  fsync(fd) == 0;
	if (!ok)
		fprintf(stderr, "kiln %s: cannot write %s: %s\n", cmd, path, strerror(errno));
	if (close(fd) != 0)
		ok = false;
	return ok;
}

double cli_now(void)
{
	return kiln_now_s();
}

void cli_progress_start(cli_progress *p, size_t total, bool quiet)
{
	p->enabled = !quiet && isatty(STDERR_FILENO);
	p->total = total;
	p->start = cli_now();
	p->last_draw = 0;
}

static void draw_line(cli_progress *p, size_t done, size_t failed, double rate, double eta)
{
	const int width = 30;
	int filled = p->total ? (int)((double)done / (double)p->total * width) : width;
	char bar[64];
	for (int i = 0; i < width; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %zu/%zu done, %zu failed, %.1f img/s, ETA %.0fs ", bar, done,
		p->total, failed, rate, eta);
	fflush(stderr);
	p->last_draw = cli_now();
}

static void draw(cli_progress *p, size_t done, size_t failed)
{
	double elapsed = cli_now() - p->start;
	double rate = elapsed > 0 ? (double)done / elapsed : 0;
	double eta = rate > 0 ? (double)(p->total - done) / rate : 0;
	draw_line(p, done, failed, rate, eta);
}

void cli_progress_update(cli_progress *p, size_t done, size_t failed)
{
	/* ten redraws a second at most: a terminal is slow */
	if (p->enabled && (cli_now() - p->last_draw > 0.1 || done == p->total))
		draw(p, done, failed);
}

void cli_progress_show(cli_progress *p, size_t total, size_t done, size_t failed, double rate, double eta)
{
	p->total = total;
	if (p->enabled)
		draw_line(p, done, failed, rate, eta);
}

void cli_progress_finish(cli_progress *p)
{
	if (p->enabled)
		fputc('\n', stderr);
}

void cli_stop_signals_catch(cli_stop_signals *saved, void (*handler)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, saved ? &saved->old_int : NULL);
	sigaction(SIGTERM, &sa, saved ? &saved->old_term : NULL);
}

void cli_stop_signals_restore(const cli_stop_signals *saved)
{
	if (!saved) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		return;
	}
	sigaction(SIGINT, &saved->old_int, NULL);
	sigaction(SIGTERM, &saved->old_term, NULL);
}
