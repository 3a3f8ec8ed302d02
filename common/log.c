/* logfmt writer. One fprintf per line under a lock so that lines from pool threads never
 * interleave. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static kiln_log_level current_level = KILN_LOG_INFO;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void read_env_level(void)
{
	const char *env = getenv("KILN_LOG_LEVEL");
	int level = env ? kiln_log_level_parse(env) : -1;
	if (level >= 0)
		current_level = (kiln_log_level)level;
}

int kiln_log_level_parse(const char *name)
{
	static const char *const names[] = {"debug", "info", "warn", "error", "off"};
	for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
		if (strcasecmp(name, names[i]) == 0)
			return i;
	return -1;
}

void kiln_log_set_level(kiln_log_level level)
{
	pthread_once(&env_once, read_env_level);
	current_level = level;
}

kiln_log_level kiln_log_get_level(void)
{
	pthread_once(&env_once, read_env_level);
	return current_level;
}

const char *kiln_log_quote(const char *value, char *out, unsigned cap)
{
	unsigned n = 0;
	if (cap < 3) {
		if (cap)
			out[0] = '\0';
		return out;
	}
	out[n++] = '"';
	for (const char *p = value ? value : ""; *p && n + 3 < cap; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\') {
			out[n++] = '\\';
			out[n++] = (char)c;
		} else if (c == '\n') {
			out[n++] = '\\';
			out[n++] = 'n';
		} else if (c < 0x20) {
			out[n++] = '?';
		} else {
			out[n++] = (char)c;
		}
	}
	out[n++] = '"';
	out[n] = '\0';
	return out;
}

void kiln_log(kiln_log_level level, const char *msg, const char *kv_fmt, ...)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};
	if (level >= KILN_LOG_OFF || level < kiln_log_get_level())
		return;

	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);

	char quoted[512];
	char kv[1024] = "";
	if (kv_fmt) {
		va_list ap;
		va_start(ap, kv_fmt);
		vsnprintf(kv, sizeof kv, kv_fmt, ap);
		va_end(ap);
	}
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=%s%s%s\n",
		tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		ts.tv_nsec / 1000000, names[level], kiln_log_quote(msg, quoted, sizeof quoted),
		kv[0] ? " " : "", kv);
	pthread_mutex_unlock(&log_lock);
}
