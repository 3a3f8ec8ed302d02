/* Structured logging: one logfmt line per event on stderr
 *   ts=2026-11-22T10:00:00.123Z level=info msg="encoded" file=a.png
 * so that operators can grep and log shippers can parse without a schema. */
#ifndef KILN_LOG_H
#define KILN_LOG_H

typedef enum kiln_log_level {
	KILN_LOG_DEBUG,
	KILN_LOG_INFO,
	KILN_LOG_WARN,
	KILN_LOG_ERROR,
	KILN_LOG_OFF,
} kiln_log_level;

/* Lines below this level are dropped. Default KILN_LOG_INFO, or $KILN_LOG_LEVEL. */
void kiln_log_set_level(kiln_log_level level);
kiln_log_level kiln_log_get_level(void);
/* Parses "debug", "info", "warn", "error", "off"; returns -1 for anything else. */
int kiln_log_level_parse(const char *name);

/* msg is quoted and escaped; kv_fmt (may be NULL) is printf-formatted and appended as is,
 * so it should hold key=value pairs. Use kiln_log_quote for values that may hold spaces. */
void kiln_log(kiln_log_level level, const char *msg, const char *kv_fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Writes value into out (of size cap) quoted and escaped for logfmt; truncates safely. */
const char *kiln_log_quote(const char *value, char *out, unsigned cap);

#define KILN_DEBUG(...) kiln_log(KILN_LOG_DEBUG, __VA_ARGS__)
#define KILN_INFO(...) kiln_log(KILN_LOG_INFO, __VA_ARGS__)
#define KILN_WARN(...) kiln_log(KILN_LOG_WARN, __VA_ARGS__)
#define KILN_ERROR(...) kiln_log(KILN_LOG_ERROR, __VA_ARGS__)

#endif
