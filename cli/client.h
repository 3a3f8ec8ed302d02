/* The scheduler's REST client as the CLI uses it: kiln submit, status, wait, cancel,
 * failures and jobs talk to a remote scheduler through it, and kiln run to the one it
 * embeds, so both submit and wait for jobs by the same code. */
#ifndef KILN_CLI_CLIENT_H
#define KILN_CLI_CLIENT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#define CLI_TOKEN_MAX 4096

typedef struct cli_client {
	const char *cmd;                          /* names the command in messages */
	const char *server;                       /* base URL: http://HOST:PORT */
	char token[CLI_TOKEN_MAX];                /* bearer token; "" for none */
	bool json;                                /* callers print JSON; no progress output */
	bool quiet;                               /* no progress output */
	const volatile sig_atomic_t *interrupted; /* NULL, or set by a signal: stop waiting */
} cli_client;

/* Server and token from $KILN_SERVER and $KILN_TOKEN (either may be unset). */
void cli_client_init(cli_client *c, const char *cmd);

/* One request; *out is the JSON body of a 2xx answer. Anything else is reported on stderr
 * and gives an exit code: 2 for what the user asked wrongly (4xx), 3 for the rest. */
int cli_client_call(const cli_client *c, const char *method, const char *path, const char *body,
		    const char *idem, json_t **out);

/* The codec and job options of a spec, shared by kiln submit and kiln run: getopt_long
 * entries with values from CLI_OPT_SPEC_FIRST, their help lines, and the handler that
 * puts one into spec (-1 when opt is not one of them, else an exit code). */
enum { CLI_OPT_SPEC_FIRST = 1000, CLI_OPT_FORMAT = CLI_OPT_SPEC_FIRST, CLI_OPT_QUALITY, CLI_OPT_CONTAINER,
       CLI_OPT_SRGB, CLI_OPT_LINEAR, CLI_OPT_MIPMAPS, CLI_OPT_ALPHA, CLI_OPT_BLOCK, CLI_OPT_SHARD,
       CLI_OPT_ATTEMPTS, CLI_OPT_SPEC_END };

#define CLI_SPEC_LONGOPTS                                               \
	{"format", required_argument, NULL, CLI_OPT_FORMAT},            \
	{"quality", required_argument, NULL, CLI_OPT_QUALITY},          \
	{"container", required_argument, NULL, CLI_OPT_CONTAINER},      \
	{"srgb", no_argument, NULL, CLI_OPT_SRGB},                      \
	{"linear", no_argument, NULL, CLI_OPT_LINEAR},                  \
	{"mipmaps", no_argument, NULL, CLI_OPT_MIPMAPS},                \
	{"alpha-cutoff", required_argument, NULL, CLI_OPT_ALPHA},       \
	{"block", required_argument, NULL, CLI_OPT_BLOCK},              \
	{"shard-size", required_argument, NULL, CLI_OPT_SHARD},         \
	{"max-attempts", required_argument, NULL, CLI_OPT_ATTEMPTS}

#define CLI_SPEC_HELP                                                                   \
	"  --format bc1|astc|png  texture format (default bc1)\n"                       \
	"  --quality fast|medium|high\n"                                                \
	"  --container dds|ktx2|astc|png\n"                                             \
	"  --srgb | --linear      colour space (default: as each PNG says)\n"           \
	"  --mipmaps              full mip chains\n"                                    \
	"  --alpha-cutoff N       0..255 (default 128)\n"                               \
	"  --block WxH            ASTC footprint (default 4x4)\n"                       \
	"  --shard-size N         items per shard, 1..1024 (default 32)\n"              \
	"  --max-attempts N       tries per item before it is failed, 1..100 (default 3)\n"

int cli_spec_option(const char *cmd, int opt, const char *arg, json_t *spec);

/* POSTs spec (idem: an Idempotency-Key or NULL); *job is the scheduler's answer, which
 * is checked to carry an id. Returns an exit code. */
int cli_submit_job(const cli_client *c, const json_t *spec, const char *idem, json_t **job);

/* Polls job id until it ends (waits from 25 ms growing to 500 ms: cli/wait_poll.h), with
 * a progress bar on a terminal and a line every few seconds otherwise (neither with
 * c->json or c->quiet). *final (may be NULL) receives
 * the ended job. Returns 0 done, 1 done with failed items, 3 failed, cancelled,
 * interrupted or unreachable, 2 for a malformed id. */
int cli_wait_job(const cli_client *c, const char *id, json_t **final);

/* GET the job's failure list ({"failures": [...], "total": N}) into *out. */
int cli_get_failures(const cli_client *c, const char *id, json_t **out);

/* Lines "INPUT: ERROR (attempts: N)", with prefix before each. */
void cli_print_failures(FILE *f, const json_t *failures, const char *prefix);
/* "j1 done: 3/4 done, 1 failed, ..." */
void cli_print_job_line(FILE *f, const json_t *job);
void cli_print_json(const json_t *v);
/* items.NAME of a job. */
size_t cli_job_items(const json_t *job, const char *name);

#endif
