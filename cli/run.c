/* kiln run: the embedded default. The scheduler and one worker in this process, joined by
 * an inproc:// socket on one ZeroMQ context, with file:// (or s3://) storage; the job goes
 * in through the scheduler's REST API on a loopback port, by the same client code as
 * kiln submit and kiln wait, so what runs here is what runs on a cluster. The REST port
 * stays open while the job runs, so `kiln status` can look in from another shell. */
#define _GNU_SOURCE  /* nftw */
#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/util.h"
#include "cli/worker.h"
#include "common/log.h"
#include "common/sigv4.h"
#include "kernels/gpu.h"
#include "scheduler/scheduler.h"
#include "worker/client.h"

#define ENDPOINT "inproc://kiln-run"  /* names are per context: this one is ours alone */
#define TOKEN_BYTES 24

static const char usage_text[] =
	"usage: kiln run --input URI --output URI [OPTIONS]\n"
	"\n"
	"Convert a folder (or a file:// or s3:// prefix, optionally with a glob) in one process:\n"
	"a scheduler and a worker run here, no setup and no GPU needed. Outputs keep their\n"
	"inputs' relative paths with the container's extension. A progress bar (plain lines\n"
	"when not on a terminal) shows the job; a summary and the failed inputs with\n"
	"their reasons end it. Local paths may be relative.\n"
	"\n"
	"options:\n"
	"  --input URI            input location (repeatable)\n"
	"  --output URI           output prefix (a directory is created as needed)\n"
	CLI_SPEC_HELP
	"  --device auto|cpu|gpu|gpu:N   where to encode (default auto: every GPU, else the CPU)\n"
	"  --devices all|cpu|0,1,...     several GPUs, as kiln worker takes them\n"
	CLI_PNG_DECODER_HELP
	"  --threads N            host threads for PNG decoding and the CPU encoder, 1..1024\n"
	"                         (default the CPUs this process may use)\n"
	"  --state-dir DIR        keep the journal in DIR: the same command again resumes the\n"
	"                         job after an interruption (default: a temporary directory,\n"
	"                         removed at the end)\n"
	"  --json                 print the ended job as JSON, with its \"failures\"\n"
	"  -q, --quiet            no progress output\n"
	"  -h, --help             this text\n"
	"\n"
	"While it runs, the REST API listens on 127.0.0.1 (the port is printed) with a bearer\n"
	"token in STATE_DIR/token: kiln status --server URL --token-file STATE_DIR/token JOB.\n"
	"\n"
	"exit status: 0 every input written, 1 some inputs failed (the rest were written),\n"
	"2 usage error, 3 nothing could run (no device, an input that cannot be listed or\n"
	"matches nothing, interrupted)\n"
	"\n"
	"example:\n"
	"  kiln run --input textures/ --output baked/ --quality high --mipmaps\n";

typedef struct run_args {
	json_t *spec;
	json_t *inputs;
	const char *devices;
	const char *state_dir;
	kiln_png_decoder png_decoder;
	long threads; /* 0: the CPUs this process may use */
	bool json, quiet;
} run_args;

enum { OPT_INPUT = 256, OPT_OUTPUT, OPT_DEVICE, OPT_DEVICES, OPT_STATE, OPT_JSON, OPT_PNG_DECODER, OPT_THREADS };

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* A local path as the scheduler wants it: absolute, without "." or ".." segments (which
 * a spec refuses). URIs (anything with "://") pass as they are. An existing path is
 * resolved through its symlinks; one that does not exist yet (an output directory, a
 * glob) is made absolute from the working directory and cleaned up by its text. */
static bool local_uri(const char *arg, char *out, size_t cap)
{
	if (strstr(arg, "://")) {
		int n = snprintf(out, cap, "%s", arg);
		return n >= 0 && (size_t)n < cap;
	}
	char joined[PATH_MAX * 2], real[PATH_MAX];
	if (realpath(arg, real)) {
		int n = snprintf(out, cap, "%s%s", real, arg[strlen(arg) - 1] == '/' && strcmp(real, "/") ? "/" : "");
		return n >= 0 && (size_t)n < cap;
	}
	char cwd[PATH_MAX] = "";
	if (arg[0] != '/' && !getcwd(cwd, sizeof cwd))
		return false;
	int n = snprintf(joined, sizeof joined, "%s/%s", cwd, arg);
	if (n < 0 || (size_t)n >= sizeof joined || cap < 2)
		return false;
	/* out is built segment by segment; ".." removes the last one written */
	size_t len = 0;
	char *save, *seg;
	for (seg = strtok_r(joined, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		if (strcmp(seg, ".") == 0)
			continue;
		if (strcmp(seg, "..") == 0) {
			while (len > 0 && out[--len] != '/')
				;
			continue;
		}
		size_t sl = strlen(seg);
		if (len + 1 + sl + 2 > cap)
			return false;
		out[len++] = '/';
		memcpy(out + len, seg, sl);
		len += sl;
	}
	if (len == 0 || arg[strlen(arg) - 1] == '/')
		out[len++] = '/';
	out[len] = '\0';
	return true;
}

/* --device (kiln encode's words) as a --devices spec (kiln worker's); false (with a
 * message) when arg is not one. */
static bool device_spec(const char *arg, char *out, size_t cap)
{
	kiln_device dev;
	if (!cli_parse_device("run", arg, &dev))
		return false;
	if (dev.kind == KILN_DEVICE_AUTO)
		snprintf(out, cap, "all");
	else if (dev.kind == KILN_DEVICE_CPU)
		snprintf(out, cap, "cpu");
	else
		snprintf(out, cap, "%d", dev.index);
	return true;
}

/* Fills a; returns an exit code, or -1 after --help. */
static int parse_args(int argc, char **argv, run_args *a, char *devices_buf, size_t devices_cap)
{
	static const struct option longopts[] = {
		{"input", required_argument, NULL, OPT_INPUT},
		{"output", required_argument, NULL, OPT_OUTPUT},
		CLI_SPEC_LONGOPTS,
		{"device", required_argument, NULL, OPT_DEVICE},
		{"devices", required_argument, NULL, OPT_DEVICES},
		{"state-dir", required_argument, NULL, OPT_STATE},
		{"json", no_argument, NULL, OPT_JSON},
		{"png-decoder", required_argument, NULL, OPT_PNG_DECODER},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	char path[PATH_MAX];
	int opt, rc;
	a->devices = "all";
	optind = 1;
	while ((opt = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		rc = cli_spec_option("run", opt, optarg, a->spec);
		if (rc >= 0) {
			if (rc != CLI_EXIT_OK)
				return rc;
			continue;
		}
		switch (opt) {
		case OPT_INPUT:
		case OPT_OUTPUT:
			if (!local_uri(optarg, path, sizeof path)) {
				fprintf(stderr, "kiln run: cannot make '%s' an absolute path\n", optarg);
				return CLI_EXIT_USAGE;
			}
			if (opt == OPT_INPUT)
				json_array_append_new(a->inputs, json_string(path));
			else
				json_object_set_new(a->spec, "output", json_string(path));
			break;
		case OPT_DEVICE:
			if (!device_spec(optarg, devices_buf, devices_cap))
				return CLI_EXIT_USAGE;
			a->devices = devices_buf;
			break;
		case OPT_DEVICES: a->devices = optarg; break;
		case OPT_STATE: a->state_dir = optarg; break;
		case OPT_JSON: a->json = true; break;
		case OPT_PNG_DECODER:
			if (!cli_parse_png_decoder("run", optarg, &a->png_decoder))
				return CLI_EXIT_USAGE;
			break;
		case OPT_THREADS:
			if (!cli_parse_long("run", "--threads", optarg, 1, 1024, &a->threads))
				return CLI_EXIT_USAGE;
			break;
		case 'q': a->quiet = true; break;
		case 'h': fputs(usage_text, stdout); return -1;
		default: fprintf(stderr, "kiln run: see 'kiln run --help'\n"); return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc || !json_array_size(a->inputs) || !json_object_get(a->spec, "output")) {
		fprintf(stderr, "kiln run: give --input and --output (see 'kiln run --help')\n");
		return CLI_EXIT_USAGE;
	}
	size_t n = json_array_size(a->inputs);
	json_object_set(a->spec, "input", n == 1 ? json_array_get(a->inputs, 0) : a->inputs);
	/* the summary reports the outputs' mean PSNR: the worker measures it when asked */
	json_object_set_new(a->spec, "measure_psnr", json_true());
	return CLI_EXIT_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)type, (void)ftw;
	if (remove(path) != 0)
		KILN_WARN("cannot remove a temporary file", "path=%s errno=%d", path, errno);
	return 0;
}

/* A random bearer token in dir/token (0600): the REST port is on loopback, but other
 * users of this host must not be able to hand this process jobs that read and write
 * files with its rights. */
static bool make_token(const char *dir, char *token, size_t cap, char *path, size_t path_cap)
{
	unsigned char raw[TOKEN_BYTES];
	if (cap < 2 * TOKEN_BYTES + 1 || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		fprintf(stderr, "kiln run: cannot make a token: %s\n", strerror(errno));
		return false;
	}
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	explicit_bzero(raw, sizeof raw);
	int n = snprintf(path, path_cap, "%s/token", dir);
	return n > 0 && (size_t)n < path_cap && cli_write_private("run", path, token, 0600, true);
}

static void *worker_main(void *arg)
{
	/* without its worker the job would never move: stop waiting for it */
	if (kiln_client_run(arg) != KILN_OK) {
		KILN_ERROR("the embedded worker stopped with an error", NULL);
		interrupted = 1;
	}
	return NULL;
}

/* The idempotency key of a spec: the same command on the same --state-dir finds the job
 * it started before (resumed from the journal) instead of starting it again. */
static void spec_key(const json_t *spec, char *out, size_t cap)
{
	char *text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	char hex[KILN_SHA256_HEX_LEN + 1] = "";
	if (text)
		kiln_sha256_hex(text, strlen(text), hex);
	snprintf(out, cap, "kiln-run-%s", hex);
	free(text);
}

static void print_bytes(FILE *f, double bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	fprintf(f, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

/* The end of a run on stdout: the job line and a summary, the failures; or the JSON. */
static void report(const run_args *a, const json_t *job, json_t *failures, double seconds)
{
	if (a->json) {
		json_t *out = json_deep_copy(job);
		json_t *list = json_object_get(failures, "failures");  /* NULL when nothing failed */
		if (out)
			json_object_set_new(out, "failures", list ? json_incref(list) : json_array());
		cli_print_json(out);
		json_decref(out);
		return;
	}
	cli_print_job_line(stdout, job);
	const char *state = json_string_value(json_object_get(job, "state"));
	if (state && strcmp(state, "done") == 0) {
		size_t total = cli_job_items(job, "total"), failed = cli_job_items(job, "failed");
		printf("kiln run: %zu of %zu images written to %s (", total - failed, total,
		       json_string_value(json_object_get(a->spec, "output")));
		print_bytes(stdout, json_number_value(json_object_get(job, "bytes_in")));
		printf(" in, ");
		print_bytes(stdout, json_number_value(json_object_get(job, "bytes_out")));
		printf(" out) in %.1f s\n", seconds);
		/* throughput in pixels encoded (level 0) and the quality of the textures */
		const json_t *psnr = json_object_get(job, "psnr_mean_db");
		printf("kiln run: %.1f Mpix, %.1f Mpix/s", json_number_value(json_object_get(job, "mpix")),
		       json_number_value(json_object_get(job, "mpix_per_s")));
		if (json_is_number(psnr))
			printf(", mean PSNR %.2f dB\n", json_number_value(psnr));
		else
			printf(", mean PSNR n/a\n");
	} else {
		const char *err = json_string_value(json_object_get(job, "error"));
		printf("kiln run: the job could not run: %s\n", err ? err : state ? state : "unknown");
	}
	if (failures && json_array_size(json_object_get(failures, "failures"))) {
		printf("failed:\n");
		cli_print_failures(stdout, failures, "  ");
	}
}

int cli_run(int argc, char **argv)
{
	run_args a = {.spec = json_object(), .inputs = json_array()};
	char devices_buf[32], state_buf[PATH_MAX] = "", token_path[PATH_MAX + 16], url[64], idem[128];
	kiln_client_config wcfg;
	kiln_scheduler *sched = NULL;
	kiln_client *worker = NULL;
	void *ctx = NULL;
	pthread_t thread;
	bool thread_started = false;
	json_t *job = NULL, *final = NULL, *failures = NULL;
	cli_stop_signals old_signals;
	bool signals_set = false;
	cli_client c;
	cli_client_init(&c, "run");
	int rc = CLI_EXIT_FATAL;
	if (!a.spec || !a.inputs)
		goto fail;
	rc = parse_args(argc, argv, &a, devices_buf, sizeof devices_buf);
	if (rc != CLI_EXIT_OK) {
		rc = rc < 0 ? CLI_EXIT_OK : rc;
		goto fail;
	}
	/* from here a signal ends the run through the clean-up below, which removes the
	 * temporary state directory */
	cli_stop_signals_catch(&old_signals, on_signal);
	signals_set = true;
	/* the embedded scheduler's and worker's log lines would bury the progress, and each
	 * failed item is in the summary already */
	if (!getenv("KILN_LOG_LEVEL"))
		kiln_log_set_level(KILN_LOG_ERROR);
	if ((rc = cli_worker_config("run", a.devices, (unsigned)a.threads, &wcfg)) != CLI_EXIT_OK)
		goto fail;
	wcfg.pipeline.png_decoder = a.png_decoder;
	rc = CLI_EXIT_FATAL;
	/* libcurl's global set-up is not thread-safe: done here before any thread starts */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "kiln run: cannot initialise libcurl\n");
		goto fail;
	}
	if (a.state_dir) {
		snprintf(state_buf, sizeof state_buf, "%s", a.state_dir);
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(state_buf, sizeof state_buf, "%s/kiln-run-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
		if (!mkdtemp(state_buf)) {
			fprintf(stderr, "kiln run: cannot make a temporary directory %s: %s\n", state_buf, strerror(errno));
			state_buf[0] = '\0';
			goto fail;
		}
	}
	if (a.state_dir && !cli_is_dir(a.state_dir) && mkdir(a.state_dir, 0700) != 0) {
		fprintf(stderr, "kiln run: cannot make --state-dir %s: %s\n", a.state_dir, strerror(errno));
		goto fail;
	}
	if (!make_token(state_buf, c.token, sizeof c.token, token_path, sizeof token_path))
		goto fail;
	ctx = zmq_ctx_new();
	if (!ctx) {
		fprintf(stderr, "kiln run: cannot create a ZeroMQ context\n");
		goto fail;
	}
	kiln_scheduler_config scfg = {.listen = ENDPOINT, .http = "127.0.0.1:0", .state_dir = state_buf,
				      .token_file = token_path, .zmq_context = ctx};
	kiln_status st = kiln_scheduler_create(&scfg, &sched);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln run: cannot start the scheduler: %s\n", kiln_strerror(st));
		goto fail;
	}
	char msg[512];
	wcfg.endpoint = kiln_scheduler_endpoint(sched);
	wcfg.worker_id = "kiln-run";
	wcfg.zmq_context = ctx;
	if (kiln_client_create(&wcfg, &worker, msg, sizeof msg) != KILN_OK) {
		fprintf(stderr, "kiln run: cannot start the worker: %s\n", msg);
		goto fail;
	}
	if (pthread_create(&thread, NULL, worker_main, worker) != 0) {
		fprintf(stderr, "kiln run: cannot start the worker thread\n");
		goto fail;
	}
	thread_started = true;

	snprintf(url, sizeof url, "http://127.0.0.1:%u", kiln_scheduler_http_port(sched));
	c.server = url;
	c.json = a.json;
	c.quiet = a.quiet;
	c.interrupted = &interrupted;
	spec_key(a.spec, idem, sizeof idem);
	double start = cli_now();
	if ((rc = cli_submit_job(&c, a.spec, idem, &job)) != CLI_EXIT_OK) {
		rc = rc == CLI_EXIT_USAGE ? CLI_EXIT_USAGE : CLI_EXIT_FATAL;  /* 400: a bad option value */
		goto fail;
	}
	const char *id = json_string_value(json_object_get(job, "id"));
	if (!a.quiet && !a.json)
		fprintf(stderr, "kiln run: job %s, %zu images; REST API on %s (token in %s)\n", id,
			cli_job_items(job, "total"), url, token_path);
	rc = cli_wait_job(&c, id, &final);
	if (final) {
		/* the failure list is read even when the job could not run: planning may have refused names */
		if (cli_job_items(final, "failed") && cli_get_failures(&c, id, &failures) != CLI_EXIT_OK)
			rc = CLI_EXIT_FATAL;
		report(&a, final, failures, cli_now() - start);
	}
fail:
	if (worker) {
		/* twice: the job has ended (or we were interrupted), so nothing is worth draining;
		 * shards handed back stay pending in the journal for a resumed run */
		kiln_client_stop(worker);
		kiln_client_stop(worker);
	}
	if (thread_started)
		pthread_join(thread, NULL);
	kiln_client_destroy(worker);
	kiln_scheduler_destroy(sched);
	if (ctx)
		zmq_ctx_term(ctx);
	if (signals_set)
		cli_stop_signals_restore(&old_signals);
	if (!a.state_dir && state_buf[0])
		nftw(state_buf, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	explicit_bzero(c.token, sizeof c.token);
	json_decref(failures);
	json_decref(final);
	json_decref(job);
	json_decref(a.inputs);
	json_decref(a.spec);
	return rc;
}
