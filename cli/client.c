/* The scheduler's REST clients: kiln submit, status, wait, cancel, failures and jobs,
 * and the pieces of them that kiln run shares (cli/client.h). Each is one or a few HTTP
 * requests through libcurl; the server is --server URL or $KILN_SERVER, the bearer token
 * the first line of --token-file or $KILN_TOKEN. */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"

#include "cli/cli.h"
#include "cli/util.h"
#include "cli/wait_poll.h"
#include "common/buf.h"
#include "scheduler/scheduler.h"

#define RESPONSE_MAX (64u << 20)
#define WAIT_LINE_S 5.0  /* plain progress lines, when not on a terminal */

typedef cli_client client;

enum { OPT_SERVER = 300, OPT_TOKEN_FILE, OPT_JSON, OPT_COMMON_END };

#define COMMON_LONGOPTS                                               \
	{"server", required_argument, NULL, OPT_SERVER},              \
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},      \
	{"json", no_argument, NULL, OPT_JSON},                        \
	{"help", no_argument, NULL, 'h'}

#define COMMON_HELP                                                                          \
	"  --server URL       the scheduler's REST address (default $KILN_SERVER)\n"            \
	"  --token-file F     bearer token: the first line of F (default $KILN_TOKEN)\n"        \
	"  --json             print the server's JSON\n"                                        \
	"  -h, --help         this text\n"

void cli_client_init(client *c, const char *cmd)
{
	memset(c, 0, sizeof *c);
	c->cmd = cmd;
	c->server = getenv("KILN_SERVER");
	const char *env = getenv("KILN_TOKEN");
	if (env)
		snprintf(c->token, sizeof c->token, "%s", env);
}

/* Handles the options every client command shares; -1 when opt is not one of them. */
static int common_option(client *c, int opt, const char *usage)
{
	switch (opt) {
	case OPT_SERVER: c->server = optarg; return CLI_EXIT_OK;
	case OPT_JSON: c->json = true; return CLI_EXIT_OK;
	case OPT_TOKEN_FILE:
		if (kiln_read_token_file(optarg, c->token, sizeof c->token) != KILN_OK) {
			fprintf(stderr, "kiln %s: cannot read a token from '%s'\n", c->cmd, optarg);
			return CLI_EXIT_USAGE;
		}
		return CLI_EXIT_OK;
	case 'h': fputs(usage, stdout); return -2;
	default: return -1;
	}
}

static int check_server(const client *c)
{
	if (c->server && c->server[0])
		return CLI_EXIT_OK;
	fprintf(stderr, "kiln %s: no scheduler: give --server URL or set KILN_SERVER\n", c->cmd);
	return CLI_EXIT_USAGE;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	return kiln_buf_append(ctx, data, size * n) == KILN_OK ? size * n : 0;
}

/* One request. On a completed exchange returns CLI_EXIT_OK with the HTTP status and the
 * JSON body (NULL if it was not JSON); a transport failure is reported here. */
static int api(const client *c, const char *method, const char *path, const char *body,
	       const char *idem, long *status, json_t **out)
{
	*out = NULL;
	*status = 0;
	char url[2048], auth[CLI_TOKEN_MAX + 32], key[256];
	size_t slen = strlen(c->server);
	while (slen && c->server[slen - 1] == '/')
		slen--;
	snprintf(url, sizeof url, "%.*s%s", (int)slen, c->server, path);
	kiln_buf resp;
	kiln_buf_init(&resp, RESPONSE_MAX);
	struct curl_slist *headers = NULL;
	int rc = CLI_EXIT_FATAL;
	CURL *h = curl_easy_init();
	if (!h)
		goto fail;
	headers = curl_slist_append(headers, "Accept: application/json");
	if (body)
		headers = curl_slist_append(headers, "Content-Type: application/json");
	if (c->token[0]) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token);
		headers = curl_slist_append(headers, auth);
		memset(auth, 0, sizeof auth);  /* curl keeps its own copy */
	}
	if (idem) {
		snprintf(key, sizeof key, "Idempotency-Key: %s", idem);
		headers = curl_slist_append(headers, key);
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	CURLcode cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		fprintf(stderr, "kiln %s: %s %s: %s\n", c->cmd, method, url, curl_easy_strerror(cc));
		goto fail;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	*out = json_loadb((const char *)resp.data, resp.len, 0, NULL);
	rc = CLI_EXIT_OK;
fail:
	curl_slist_free_all(headers);
	curl_easy_cleanup(h);
	kiln_buf_free(&resp);
	return rc;
}

/* An error status becomes a message and an exit code: 2 for what the user asked wrongly
 * (400, 401, 404, 409), 3 for the server's own trouble. */
static int check_status(const client *c, long status, const json_t *body)
{
	if (status >= 200 && status < 300)
		return CLI_EXIT_OK;
	const char *msg = json_string_value(json_object_get(body, "error"));
	fprintf(stderr, "kiln %s: the scheduler answered %ld: %s\n", c->cmd, status, msg ? msg : "(no message)");
	return status >= 400 && status < 500 ? CLI_EXIT_USAGE : CLI_EXIT_FATAL;
}

/* api + check_status: *out is the JSON of a 2xx answer. */
int cli_client_call(const client *c, const char *method, const char *path, const char *body,
		const char *idem, json_t **out)
{
	long status;
	int rc = api(c, method, path, body, idem, &status, out);
	if (rc == CLI_EXIT_OK && (rc = check_status(c, status, *out)) == CLI_EXIT_OK && !*out) {
		fprintf(stderr, "kiln %s: the scheduler's answer is not JSON\n", c->cmd);
		rc = CLI_EXIT_FATAL;
	}
	if (rc != CLI_EXIT_OK) {
		json_decref(*out);
		*out = NULL;
	}
	return rc;
}

void cli_print_json(const json_t *v)
{
	char *text = json_dumps(v, JSON_INDENT(2));
	if (text)
		puts(text);
	free(text);
}

size_t cli_job_items(const json_t *job, const char *name)
{
	return (size_t)json_integer_value(json_object_get(json_object_get(job, "items"), name));
}

void cli_print_job_line(FILE *f, const json_t *job)
{
	const json_t *eta = json_object_get(job, "eta_s");
	fprintf(f, "%s %s: %zu/%zu done, %zu failed, %zu pending, %.1f items/s", json_string_value(json_object_get(job, "id")),
	       json_string_value(json_object_get(job, "state")), cli_job_items(job, "done"), cli_job_items(job, "total"),
	       cli_job_items(job, "failed"), cli_job_items(job, "pending"), json_number_value(json_object_get(job, "rate")));
	if (json_is_number(eta))
		fprintf(f, ", ETA %.0fs", json_number_value(eta));
	const char *err = json_string_value(json_object_get(job, "error"));
	if (err)
		fprintf(f, " (%s)", err);
	fputc('\n', f);
}

static int job_path(const client *c, const char *id, const char *sub, char *out, size_t cap)
{
	/* ids are "j<number>": anything else would be spliced into the URL */
	if (strlen(id) > 20 || strspn(id, "j0123456789") != strlen(id)) {
		fprintf(stderr, "kiln %s: '%s' is not a job id (like j12)\n", c->cmd, id);
		return CLI_EXIT_USAGE;
	}
	snprintf(out, cap, "/v1/jobs/%s%s", id, sub);
	return CLI_EXIT_OK;
}

/* ---- wait ---- */

static bool job_ended(const char *state)
{
	return strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0;
}

int cli_wait_job(const client *c, const char *id, json_t **final)
{
	if (final)
		*final = NULL;
	char path[64];
	int rc = job_path(c, id, "", path, sizeof path);
	if (rc != CLI_EXIT_OK)
		return rc;
	bool quiet = c->json || c->quiet;
	cli_progress bar;
	cli_progress_start(&bar, 0, quiet);
	double last_line = 0;
	unsigned wait_ms = 0;
	json_t *job = NULL;
	for (;;) {
		if (c->interrupted && *c->interrupted) {
			cli_progress_finish(&bar);
			fprintf(stderr, "kiln %s: interrupted\n", c->cmd);
			rc = CLI_EXIT_FATAL;
			break;
		}
		rc = cli_client_call(c, "GET", path, NULL, NULL, &job);
		if (rc != CLI_EXIT_OK)
			break;
		const char *state = json_string_value(json_object_get(job, "state"));
		const json_t *eta = json_object_get(job, "eta_s");
		bool ended = !state || job_ended(state);
		cli_progress_show(&bar, cli_job_items(job, "total"), cli_job_items(job, "done"), cli_job_items(job, "failed"),
				  json_number_value(json_object_get(job, "rate")), json_is_number(eta) ? json_number_value(eta) : 0);
		if (ended) {
			cli_progress_finish(&bar);
			if (!state || strcmp(state, "done") != 0)
				rc = CLI_EXIT_FATAL;
			else
				rc = cli_job_items(job, "failed") ? CLI_EXIT_PARTIAL : CLI_EXIT_OK;
			if (final) {
				*final = job;
				job = NULL;
			}
			break;
		}
		/* the final line is the caller's: here only the ones along the way */
		if (!bar.enabled && !quiet && cli_now() - last_line >= WAIT_LINE_S) {
			cli_print_job_line(stdout, job);
			fflush(stdout);
			last_line = cli_now();
		}
		json_decref(job);
		job = NULL;
		wait_ms = cli_wait_poll_next_ms(wait_ms);
		struct timespec ts = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	json_decref(job);
	return rc;
}

/* kiln wait's ending, also for kiln submit --wait: the final line, or the job as JSON. */
static int wait_and_print(const client *c, const char *id)
{
	json_t *job;
	int rc = cli_wait_job(c, id, &job);
	if (job && c->json)
		cli_print_json(job);
	else if (job)
		cli_print_job_line(stdout, job);
	json_decref(job);
	return rc;
}

int cli_get_failures(const client *c, const char *id, json_t **out)
{
	char path[96];
	*out = NULL;
	int rc = job_path(c, id, "/failures?limit=100000", path, sizeof path);
	return rc != CLI_EXIT_OK ? rc : cli_client_call(c, "GET", path, NULL, NULL, out);
}

void cli_print_failures(FILE *f, const json_t *res, const char *prefix)
{
	size_t i;
	const json_t *item;
	const json_t *list = json_object_get(res, "failures");
	json_array_foreach(list, i, item)
		fprintf(f, "%s%s: %s (attempts: %lld)\n", prefix, json_string_value(json_object_get(item, "input")),
			json_string_value(json_object_get(item, "error")),
			(long long)json_integer_value(json_object_get(item, "attempts")));
	size_t total = (size_t)json_integer_value(json_object_get(res, "total"));
	if (total > json_array_size(list))
		fprintf(f, "%s... and %zu more\n", prefix, total - json_array_size(list));
}

int cli_spec_option(const char *cmd, int opt, const char *arg, json_t *spec)
{
	long v;
	switch (opt) {
	case CLI_OPT_FORMAT: json_object_set_new(spec, "format", json_string(arg)); break;
	case CLI_OPT_QUALITY: json_object_set_new(spec, "quality", json_string(arg)); break;
	case CLI_OPT_CONTAINER: json_object_set_new(spec, "container", json_string(arg)); break;
	case CLI_OPT_SRGB: json_object_set_new(spec, "colorspace", json_string("srgb")); break;
	case CLI_OPT_LINEAR: json_object_set_new(spec, "colorspace", json_string("linear")); break;
	case CLI_OPT_MIPMAPS: json_object_set_new(spec, "mipmaps", json_true()); break;
	case CLI_OPT_BLOCK: json_object_set_new(spec, "block", json_string(arg)); break;
	case CLI_OPT_ALPHA:
		if (!cli_parse_long(cmd, "--alpha-cutoff", arg, 0, 255, &v))
			return CLI_EXIT_USAGE;
		json_object_set_new(spec, "alpha_cutoff", json_integer(v));
		break;
	case CLI_OPT_SHARD:
		if (!cli_parse_long(cmd, "--shard-size", arg, 1, 1024, &v))
			return CLI_EXIT_USAGE;
		json_object_set_new(spec, "shard_size", json_integer(v));
		break;
	case CLI_OPT_ATTEMPTS:
		if (!cli_parse_long(cmd, "--max-attempts", arg, 1, 100, &v))
			return CLI_EXIT_USAGE;
		json_object_set_new(spec, "max_attempts", json_integer(v));
		break;
	default: return -1;
	}
	return CLI_EXIT_OK;
}

int cli_submit_job(const client *c, const json_t *spec, const char *idem, json_t **job)
{
	*job = NULL;
	char *body = json_dumps(spec, JSON_COMPACT);
	if (!body) {
		fprintf(stderr, "kiln %s: out of memory\n", c->cmd);
		return CLI_EXIT_FATAL;
	}
	int rc = cli_client_call(c, "POST", "/v1/jobs", body, idem, job);
	free(body);
	if (rc == CLI_EXIT_OK && !json_string_value(json_object_get(*job, "id"))) {
		fprintf(stderr, "kiln %s: the scheduler's answer has no job id\n", c->cmd);
		json_decref(*job);
		*job = NULL;
		rc = CLI_EXIT_FATAL;
	}
	return rc;
}

/* ---- commands ---- */

static const char submit_usage[] =
	"usage: kiln submit --input URI --output URI [OPTIONS]\n"
	"\n"
	"Submit a job to the scheduler and print its id. --input is a directory, a file:// or\n"
	"s3:// prefix with an optional glob in its last part (s3://b/in/img*.png); give it more\n"
	"than once for a list of URIs, or use --manifest for a file of URIs (one per line).\n"
	"\n"
	"options:\n"
	"  --input URI            input location (repeatable)\n"
	"  --manifest URI         a file or object listing the inputs\n"
	"  --output URI           output prefix; outputs keep their inputs' relative paths\n"
	CLI_SPEC_HELP
	"  --idempotency-key K    submitting again with K returns the same job\n"
	"  --wait                 then wait for the job as 'kiln wait' does\n"
	COMMON_HELP
	"\n"
	"exit status: 0 submitted (with --wait: done, no failures), 1 some items failed,\n"
	"2 usage error or request refused, 3 could not reach the scheduler\n";

enum { OPT_INPUT = OPT_COMMON_END, OPT_MANIFEST, OPT_OUTPUT, OPT_IDEM, OPT_WAIT };

int cli_submit(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"input", required_argument, NULL, OPT_INPUT},
		{"manifest", required_argument, NULL, OPT_MANIFEST},
		{"output", required_argument, NULL, OPT_OUTPUT},
		CLI_SPEC_LONGOPTS,
		{"idempotency-key", required_argument, NULL, OPT_IDEM},
		{"wait", no_argument, NULL, OPT_WAIT},
		COMMON_LONGOPTS,
		{0, 0, 0, 0},
	};
	client c;
	cli_client_init(&c, "submit");
	json_t *spec = json_object(), *inputs = json_array(), *job = NULL;
	const char *manifest = NULL, *idem = NULL;
	bool wait = false;
	int rc = CLI_EXIT_FATAL, opt;
	if (!spec || !inputs)
		goto fail;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		rc = common_option(&c, opt, submit_usage);
		if (rc == -2) {
			rc = CLI_EXIT_OK;
			goto fail;
		}
		if (rc < 0)
			rc = cli_spec_option(c.cmd, opt, optarg, spec);
		if (rc >= 0) {
			if (rc != CLI_EXIT_OK)
				goto fail;
			continue;
		}
		rc = CLI_EXIT_USAGE;
		switch (opt) {
		case OPT_INPUT: json_array_append_new(inputs, json_string(optarg)); break;
		case OPT_MANIFEST: manifest = optarg; break;
		case OPT_OUTPUT: json_object_set_new(spec, "output", json_string(optarg)); break;
		case OPT_IDEM: idem = optarg; break;
		case OPT_WAIT: wait = true; break;
		default: fprintf(stderr, "kiln submit: see 'kiln submit --help'\n"); goto fail;
		}
	}
	rc = CLI_EXIT_USAGE;
	size_t ninputs = json_array_size(inputs);
	if (optind < argc || !json_object_get(spec, "output") || (ninputs == 0) == !manifest) {
		fprintf(stderr, "kiln submit: give --output and either --input (repeatable) or --manifest "
				"(see 'kiln submit --help')\n");
		goto fail;
	}
	if ((rc = check_server(&c)) != CLI_EXIT_OK)
		goto fail;
	if (manifest)
		json_object_set_new(spec, "input", json_pack("{s:s}", "manifest", manifest));
	else
		json_object_set(spec, "input", ninputs == 1 ? json_array_get(inputs, 0) : inputs);
	rc = cli_submit_job(&c, spec, idem, &job);
	if (rc != CLI_EXIT_OK)
		goto fail;
	const char *id = json_string_value(json_object_get(job, "id"));
	if (c.json && !wait)
		cli_print_json(job);
	else
		printf("%s\n", id);
	fflush(stdout);
	if (wait)
		rc = wait_and_print(&c, id);
fail:
	json_decref(job);
	json_decref(inputs);
	json_decref(spec);
	return rc;
}

/* The shape shared by status, wait, cancel and failures: options, then one JOB. */
static int parse_job_command(client *c, int argc, char **argv, const char *usage, const char **id)
{
	static const struct option longopts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
	int opt, rc;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		rc = common_option(c, opt, usage);
		if (rc == -2)
			return -1;
		if (rc < 0) {
			fprintf(stderr, "kiln %s: see 'kiln %s --help'\n", c->cmd, c->cmd);
			return CLI_EXIT_USAGE;
		}
		if (rc != CLI_EXIT_OK)
			return rc;
	}
	if (argc - optind != 1) {
		fprintf(stderr, "kiln %s: give one job id (see 'kiln %s --help')\n", c->cmd, c->cmd);
		return CLI_EXIT_USAGE;
	}
	*id = argv[optind];
	return check_server(c);
}

#define JOB_USAGE(cmd, what) "usage: kiln " cmd " [OPTIONS] JOB\n\n" what "\n\noptions:\n" COMMON_HELP

/* status and cancel: one request on the job, its answer printed as a line or as JSON. */
static int job_request(int argc, char **argv, const char *cmd, const char *method, const char *usage)
{
	client c;
	const char *id;
	char path[64];
	json_t *job;
	cli_client_init(&c, cmd);
	int rc = parse_job_command(&c, argc, argv, usage, &id);
	if (rc != CLI_EXIT_OK)
		return rc < 0 ? CLI_EXIT_OK : rc;
	if ((rc = job_path(&c, id, "", path, sizeof path)) != CLI_EXIT_OK ||
	    (rc = cli_client_call(&c, method, path, NULL, NULL, &job)) != CLI_EXIT_OK)
		return rc;
	if (c.json)
		cli_print_json(job);
	else
		cli_print_job_line(stdout, job);
	json_decref(job);
	return CLI_EXIT_OK;
}

int cli_status(int argc, char **argv)
{
	return job_request(argc, argv, "status", "GET", JOB_USAGE("status", "Show a job's state and progress."));
}

int cli_wait(int argc, char **argv)
{
	client c;
	const char *id;
	cli_client_init(&c, "wait");
	int rc = parse_job_command(&c, argc, argv,
				   JOB_USAGE("wait", "Wait for a job to end, with a progress bar on a terminal.\n"
						     "exit status: 0 done, 1 done with failed items, 3 cancelled or failed"),
				   &id);
	if (rc != CLI_EXIT_OK)
		return rc < 0 ? CLI_EXIT_OK : rc;
	return wait_and_print(&c, id);
}

int cli_cancel(int argc, char **argv)
{
	return job_request(argc, argv, "cancel", "DELETE", JOB_USAGE("cancel", "Cancel a job; finished items stay."));
}

int cli_failures(int argc, char **argv)
{
	client c;
	const char *id;
	json_t *res;
	cli_client_init(&c, "failures");
	int rc = parse_job_command(&c, argc, argv, JOB_USAGE("failures", "List a job's failed items and why."), &id);
	if (rc != CLI_EXIT_OK)
		return rc < 0 ? CLI_EXIT_OK : rc;
	if ((rc = cli_get_failures(&c, id, &res)) != CLI_EXIT_OK)
		return rc;
	if (c.json)
		cli_print_json(res);
	else
		cli_print_failures(stdout, res, "");
	json_decref(res);
	return CLI_EXIT_OK;
}

int cli_jobs(int argc, char **argv)
{
	static const char usage[] = "usage: kiln jobs [OPTIONS]\n\nList the scheduler's jobs.\n\noptions:\n" COMMON_HELP;
	static const struct option longopts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
	client c;
	cli_client_init(&c, "jobs");
	int opt, rc;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		rc = common_option(&c, opt, usage);
		if (rc == -2)
			return CLI_EXIT_OK;
		if (rc < 0) {
			fprintf(stderr, "kiln jobs: see 'kiln jobs --help'\n");
			return CLI_EXIT_USAGE;
		}
		if (rc != CLI_EXIT_OK)
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, "kiln jobs: takes no arguments\n");
		return CLI_EXIT_USAGE;
	}
	json_t *res;
	if ((rc = check_server(&c)) != CLI_EXIT_OK || (rc = cli_client_call(&c, "GET", "/v1/jobs", NULL, NULL, &res)) != CLI_EXIT_OK)
		return rc;
	if (c.json) {
		cli_print_json(res);
	} else {
		size_t i;
		const json_t *job;
		json_array_foreach(json_object_get(res, "jobs"), i, job)
			cli_print_job_line(stdout, job);
	}
	json_decref(res);
	return CLI_EXIT_OK;
}
