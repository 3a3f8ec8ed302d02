/* kiln worker: runs one worker node, connected to a scheduler (worker/client.h); with
 * --health, only checks that it could (for container probes). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/worker.h"

#include "cli/cli.h"
#include "cli/util.h"
#include "common/log.h"
#include "common/storage.h"
#include "worker/client.h"
#include "worker/devices.h"

static const char usage_text[] =
	"usage: kiln worker --connect tcp://HOST:PORT [OPTIONS]\n"
	"\n"
	"Run a worker: take shards from the scheduler, encode them on this node's devices,\n"
	"write the outputs to storage (file:// or s3://, credentials from the AWS_* variables)\n"
	"and report each item. SIGINT or SIGTERM finishes the shards in progress (a second one\n"
	"hands them back at once), says bye and exits 0.\n"
	"\n"
	"options:\n"
	"  --connect ENDPOINT            the scheduler's worker endpoint (required)\n"
	"  --devices all|cpu|0,1,...     devices to use (default all: every GPU, else the CPU)\n"
	"  --slots N                     shards held at once, 1..1024 (default 8 a GPU, 2 a CPU)\n"
	"  --threads N                   host threads for PNG decoding and for the CPU encoder,\n"
	"                                1..1024 (default the CPUs it may use; $KILN_WORKER_THREADS);\n"
	"                                with one worker per GPU on a host, give each\n"
	"                                cores / GPUs\n"
	"  --curve-server-key FILE       the scheduler's CURVE public key (Z85 text)\n"
	"  --curve-secret FILE           this worker's CURVE secret key (Z85 text)\n"
	CLI_PNG_DECODER_HELP
	"  --s3-attempts N               tries per S3 request, 1..100 (default 12;\n"
	"                                $KILN_S3_MAX_ATTEMPTS)\n"
	"  --s3-backoff-max-ms N         cap on one wait between tries, 100..600000\n"
	"                                (default 5000; $KILN_S3_BACKOFF_MAX_MS)\n"
	"  --health                      check that the worker can start, then exit (0: yes)\n"
	"  -h, --help                    this text\n"
	"\n"
	"exit status: 0 stopped cleanly or healthy, 2 usage error, 3 could not start\n";

typedef struct worker_args {
	const char *connect;
	const char *devices;
	long slots;
	long threads;             /* 0: default or environment */
	const char *server_key_file;
	const char *secret_key_file;
	bool health;
	long s3_attempts;         /* 0: default or environment */
	long s3_backoff_max_ms;
	kiln_png_decoder png_decoder;
} worker_args;

enum { OPT_CONNECT = 256, OPT_DEVICES, OPT_SLOTS, OPT_THREADS, OPT_SERVER_KEY, OPT_SECRET, OPT_HEALTH,
       OPT_S3_ATTEMPTS, OPT_S3_BACKOFF, OPT_PNG_DECODER };

static int parse_args(int argc, char **argv, worker_args *a)
{
	static const struct option longopts[] = {
		{"connect", required_argument, NULL, OPT_CONNECT},
		{"devices", required_argument, NULL, OPT_DEVICES},
		{"slots", required_argument, NULL, OPT_SLOTS},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"curve-server-key", required_argument, NULL, OPT_SERVER_KEY},
		{"curve-secret", required_argument, NULL, OPT_SECRET},
		{"health", no_argument, NULL, OPT_HEALTH},
		{"s3-attempts", required_argument, NULL, OPT_S3_ATTEMPTS},
		{"s3-backoff-max-ms", required_argument, NULL, OPT_S3_BACKOFF},
		{"png-decoder", required_argument, NULL, OPT_PNG_DECODER},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	memset(a, 0, sizeof *a);
	a->devices = "all";
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_CONNECT: a->connect = optarg; break;
		case OPT_DEVICES: a->devices = optarg; break;
		case OPT_SLOTS:
			if (!cli_parse_long("worker", "--slots", optarg, 1, 1024, &a->slots))
				return CLI_EXIT_USAGE;
			break;
		case OPT_THREADS:
			if (!cli_parse_long("worker", "--threads", optarg, 1, 1024, &a->threads))
				return CLI_EXIT_USAGE;
			break;
		case OPT_SERVER_KEY: a->server_key_file = optarg; break;
		case OPT_SECRET: a->secret_key_file = optarg; break;
		case OPT_HEALTH: a->health = true; break;
		case OPT_S3_ATTEMPTS:
			if (!cli_parse_long("worker", "--s3-attempts", optarg, 1, 100, &a->s3_attempts))
				return CLI_EXIT_USAGE;
			break;
		case OPT_S3_BACKOFF:
			if (!cli_parse_long("worker", "--s3-backoff-max-ms", optarg, 100, 600000, &a->s3_backoff_max_ms))
				return CLI_EXIT_USAGE;
			break;
		case OPT_PNG_DECODER:
			if (!cli_parse_png_decoder("worker", optarg, &a->png_decoder))
				return CLI_EXIT_USAGE;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return -1;
		default:
			fprintf(stderr, "kiln worker: see 'kiln worker --help'\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kiln worker: unexpected argument '%s'\n", argv[optind]);
		return CLI_EXIT_USAGE;
	}
	if (!a->connect && !a->health) {
		fprintf(stderr, "kiln worker: give the scheduler with --connect tcp://HOST:PORT\n");
		return CLI_EXIT_USAGE;
	}
	if (!a->server_key_file != !a->secret_key_file) {
		fprintf(stderr, "kiln worker: CURVE needs both --curve-server-key and --curve-secret\n");
		return CLI_EXIT_USAGE;
	}
	return CLI_EXIT_OK;
}

static kiln_client *volatile running;  /* read by the signal handler */

static void on_signal(int sig)
{
	if (running)
		kiln_client_stop(running);
}

/* The worker's storage settings (kept for the pipeline's lifetime, which is the process's).
 * common/storage's defaults (5 tries, waits from 100 ms doubling) give up after about
 * 1.5 s, and the scheduler's item attempts follow at once, so an S3 endpoint that is down
 * for ten seconds (a restart, a failover, a burst of 503 SlowDown) used to fail whole
 * shards for good. A worker has nothing better to do than wait: 12 tries with waits capped
 * at 5 s ride out 15 to 40 s; heartbeats keep the shard's lease meanwhile.
 * docs/RELIABILITY.md has the measurements. */
#define WORKER_S3_ATTEMPTS 12
#define WORKER_S3_BACKOFF_MAX_MS 5000
static kiln_storage_config worker_storage;

/* $name as a number in [min, max]; false (and a message) when set but not one. */
static bool env_long(const char *cmd, const char *name, long min, long max, long *out)
{
	const char *v = getenv(name);
	if (!v || !v[0])
		return true;
	return cli_parse_long(cmd, name, v, min, max, out);
}

int cli_worker_config(const char *cmd, const char *devices, unsigned threads, kiln_client_config *cfg)
{
	char msg[512];
	kiln_client_config_init(cfg);
	kiln_pipeline_config *pc = &cfg->pipeline;
	pc->decode_threads = threads;
	pc->cpu_threads = threads;
	kiln_storage_config_init(&worker_storage);
	long attempts = WORKER_S3_ATTEMPTS, backoff_max = WORKER_S3_BACKOFF_MAX_MS;
	if (!env_long(cmd, "KILN_S3_MAX_ATTEMPTS", 1, 100, &attempts) ||
	    !env_long(cmd, "KILN_S3_BACKOFF_MAX_MS", 100, 600000, &backoff_max))
		return CLI_EXIT_USAGE;
	worker_storage.max_attempts = (unsigned)attempts;
	worker_storage.backoff_max_ms = (unsigned)backoff_max;
	pc->storage_config = &worker_storage;
	kiln_status st = kiln_worker_devices_parse(devices, pc->devices, KILN_PIPELINE_MAX_DEVICES,
						   &pc->ndevices, msg, sizeof msg);
	if (st == KILN_ERR_INVALID_ARG) {
		fprintf(stderr, "kiln %s: --devices: %s\n", cmd, msg);
		return CLI_EXIT_USAGE;
	}
	if (st == KILN_OK)
		st = kiln_worker_devices_check(pc->devices, pc->ndevices, msg, sizeof msg);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln %s: %s\n", cmd, msg);
		return CLI_EXIT_FATAL;
	}
	kiln_storage *storage = NULL;
	st = kiln_storage_create(&worker_storage, &storage, msg, sizeof msg);
	kiln_storage_destroy(storage);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln %s: storage settings: %s\n", cmd, msg);
		return CLI_EXIT_FATAL;
	}
	return CLI_EXIT_OK;
}

/* Everything the worker needs before it can talk to a scheduler: devices, keys, storage
 * settings. Shared by --health and the real start, so the probe checks what starts. */
static int prepare(const worker_args *a, kiln_client_config *cfg, char *server_key, char *secret_key)
{
	/* By default the decode stage and the CPU backend's pool each take the CPUs the worker
	 * may use (common/host.h), which is right for one worker a host; with one worker per
	 * GPU (one container per GPU, Slurm tasks, kiln-worker@N) each would start a thread
	 * per core and they oversubscribe the CPU (docs/PERFORMANCE.md, Scaling over GPUs).
	 * 0 keeps that default. */
	long threads = a->threads;
	if (!threads && !env_long("worker", "KILN_WORKER_THREADS", 1, 1024, &threads))
		return CLI_EXIT_USAGE;
	int rc = cli_worker_config("worker", a->devices, (unsigned)threads, cfg);
	if (rc != CLI_EXIT_OK)
		return rc;
	cfg->endpoint = a->connect;
	cfg->slots = (unsigned)a->slots;
	cfg->pipeline.png_decoder = a->png_decoder;
	if (a->s3_attempts)
		worker_storage.max_attempts = (unsigned)a->s3_attempts;
	if (a->s3_backoff_max_ms)
		worker_storage.backoff_max_ms = (unsigned)a->s3_backoff_max_ms;
	if (a->server_key_file) {
		char msg[512];
		if (kiln_curve_key_load(a->server_key_file, server_key, msg, sizeof msg) != KILN_OK ||
		    kiln_curve_key_load(a->secret_key_file, secret_key, msg, sizeof msg) != KILN_OK) {
			fprintf(stderr, "kiln worker: %s\n", msg);
			return CLI_EXIT_FATAL;
		}
		cfg->curve_server_key = server_key;
		cfg->curve_secret_key = secret_key;
	}
	return CLI_EXIT_OK;
}

int cli_worker(int argc, char **argv)
{
	worker_args a;
	int rc = parse_args(argc, argv, &a);
	if (rc != CLI_EXIT_OK)
		return rc < 0 ? CLI_EXIT_OK : rc;
	kiln_client_config cfg;
	char server_key[KILN_CURVE_KEY_LEN + 1], secret_key[KILN_CURVE_KEY_LEN + 1];
	kiln_client *client = NULL;
	rc = prepare(&a, &cfg, server_key, secret_key);
	if (rc != CLI_EXIT_OK || a.health) {
		if (rc == CLI_EXIT_OK)
			printf("ok: the worker can start (%zu device%s)\n", cfg.pipeline.ndevices,
			       cfg.pipeline.ndevices == 1 ? "" : "s");
		goto fail;
	}
	char msg[512];
	if (kiln_client_create(&cfg, &client, msg, sizeof msg) != KILN_OK) {
		fprintf(stderr, "kiln worker: %s\n", msg);
		rc = CLI_EXIT_FATAL;
		goto fail;
	}
	running = client;
	cli_stop_signals_catch(NULL, on_signal);
	rc = kiln_client_run(client) == KILN_OK ? CLI_EXIT_OK : CLI_EXIT_FATAL;
	cli_stop_signals_restore(NULL);
	running = NULL;
fail:
	kiln_client_destroy(client);
	explicit_bzero(secret_key, sizeof secret_key);
	return rc;
}
