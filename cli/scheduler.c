/* kiln scheduler: the job scheduler in the foreground, until SIGINT or SIGTERM. */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "common/curve.h"
#include "common/log.h"
#include "scheduler/scheduler.h"

static const char usage_text[] =
	"usage: kiln scheduler --listen tcp://ADDR:PORT --http ADDR:PORT --state-dir DIR [OPTIONS]\n"
	"\n"
	"Accept jobs over REST, split them into shards and hand those to workers over ZeroMQ.\n"
	"Jobs and finished items are journaled in DIR; a restart resumes every unfinished job.\n"
	"\n"
	"options:\n"
	"  --listen tcp://ADDR:PORT  where workers connect (kiln worker --connect)\n"
	"  --http ADDR:PORT          the REST API (docs/API.md); port 0 picks a free one\n"
	"  --state-dir DIR           journal directory (created if missing)\n"
	"  --token-file F            require 'Authorization: Bearer TOKEN' (first line of F)\n"
	"                            on every route but /healthz\n"
	"  --curve-secret F          CURVE: encrypt and authenticate the worker connections with\n"
	"                            this secret key (Z85 text, from 'kiln keygen'); workers\n"
	"                            need the matching public key (--curve-server-key)\n"
	"  --insecure                allow --listen beyond loopback without --curve-secret\n"
	"  --heartbeat-ms N          heartbeat interval (default 1000); 4 missed = worker dead\n"
	"  --lease-ms N              shard lease, renewed by heartbeats (default 30000)\n"
	"  -h, --help                this text\n"
	"\n"
	"A --listen address other than 127.0.0.1, localhost, [::1], inproc:// or ipc:// needs\n"
	"--curve-secret (or --insecure): workers' traffic carries job contents and outputs.\n"
	"\n"
	"exit status: 0 after a clean stop (SIGINT/SIGTERM), 2 usage error, 3 could not start\n";

static kiln_scheduler *volatile running;  /* read by the signal handler */

static void on_signal(int sig)
{
	(void)sig;
	if (running)
		kiln_scheduler_stop(running);  /* a write() to a pipe: async-signal-safe */
}

enum { OPT_LISTEN = 256, OPT_HTTP, OPT_STATE, OPT_TOKEN, OPT_HB, OPT_LEASE, OPT_CURVE, OPT_INSECURE };

int cli_scheduler(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"http", required_argument, NULL, OPT_HTTP},
		{"state-dir", required_argument, NULL, OPT_STATE},
		{"token-file", required_argument, NULL, OPT_TOKEN},
		{"heartbeat-ms", required_argument, NULL, OPT_HB},
		{"lease-ms", required_argument, NULL, OPT_LEASE},
		{"curve-secret", required_argument, NULL, OPT_CURVE},
		{"insecure", no_argument, NULL, OPT_INSECURE},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	kiln_scheduler_config cfg = {0};
	const char *curve_file = NULL;
	bool insecure = false;
	char secret[KILN_CURVE_KEY_LEN + 1], msg[512];
	long v;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN: cfg.listen = optarg; break;
		case OPT_HTTP: cfg.http = optarg; break;
		case OPT_STATE: cfg.state_dir = optarg; break;
		case OPT_TOKEN: cfg.token_file = optarg; break;
		case OPT_CURVE: curve_file = optarg; break;
		case OPT_INSECURE: insecure = true; break;
		case OPT_HB:
			if (!cli_parse_long("scheduler", "--heartbeat-ms", optarg, 10, 600000, &v))
				return CLI_EXIT_USAGE;
			cfg.heartbeat_ms = (unsigned)v;
			break;
		case OPT_LEASE:
			if (!cli_parse_long("scheduler", "--lease-ms", optarg, 100, 86400000, &v))
				return CLI_EXIT_USAGE;
			cfg.lease_ms = (unsigned)v;
			break;
		case 'h': fputs(usage_text, stdout); return CLI_EXIT_OK;
		default: fprintf(stderr, "kiln scheduler: see 'kiln scheduler --help'\n"); return CLI_EXIT_USAGE;
		}
	}
	if (optind < argc || !cfg.listen || !cfg.http || !cfg.state_dir) {
		fprintf(stderr, "kiln scheduler: --listen, --http and --state-dir are required "
				"(see 'kiln scheduler --help')\n");
		return CLI_EXIT_USAGE;
	}
	if (!curve_file && !insecure && !kiln_endpoint_is_local(cfg.listen)) {
		fprintf(stderr, "kiln scheduler: --listen %s is reachable from the network: give --curve-secret F "
				"(make keys with 'kiln keygen'), or --insecure to accept plain text "
				"(see docs/SECURITY.md)\n", cfg.listen);
		return CLI_EXIT_USAGE;
	}
	if (!curve_file && !kiln_endpoint_is_local(cfg.listen))
		KILN_WARN("workers connect in plain text from the network (--insecure)", "listen=%s", cfg.listen);
	if (curve_file) {
		if (kiln_curve_key_load(curve_file, secret, msg, sizeof msg) != KILN_OK) {
			fprintf(stderr, "kiln scheduler: %s\n", msg);
			return CLI_EXIT_FATAL;
		}
		cfg.curve_secret_key = secret;
	}
	kiln_scheduler *s;
	kiln_status st = kiln_scheduler_create(&cfg, &s);
	explicit_bzero(secret, sizeof secret);  /* libzmq keeps its own copy */
	if (st != KILN_OK) {
		fprintf(stderr, "kiln scheduler: cannot start: %s\n", kiln_strerror(st));
		return CLI_EXIT_FATAL;
	}
	running = s;
	cli_stop_signals_catch(NULL, on_signal);
	kiln_scheduler_run(s);
	cli_stop_signals_restore(NULL);
	running = NULL;
	KILN_INFO("scheduler stopping", NULL);
	kiln_scheduler_destroy(s);
	return CLI_EXIT_OK;
}
