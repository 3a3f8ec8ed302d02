/* kiln scheduler: the job scheduler in the foreground, until SIGINT or SIGTERM. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
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
	"  --heartbeat-ms N          heartbeat interval (default 1000); 4 missed = worker dead\n"
	"  --lease-ms N              shard lease, renewed by heartbeats (default 30000)\n"
	"  -h, --help                this text\n"
	"\n"
	"exit status: 0 after a clean stop (SIGINT/SIGTERM), 2 usage error, 3 could not start\n";

static kiln_scheduler *volatile running;  /* read by the signal handler */

static void on_signal(int sig)
{
	(void)sig;
	if (running)
		kiln_scheduler_stop(running);  /* a write() to a pipe: async-signal-safe */
}

enum { OPT_LISTEN = 256, OPT_HTTP, OPT_STATE, OPT_TOKEN, OPT_HB, OPT_LEASE };

int cli_scheduler(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"http", required_argument, NULL, OPT_HTTP},
		{"state-dir", required_argument, NULL, OPT_STATE},
		{"token-file", required_argument, NULL, OPT_TOKEN},
		{"heartbeat-ms", required_argument, NULL, OPT_HB},
		{"lease-ms", required_argument, NULL, OPT_LEASE},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	kiln_scheduler_config cfg = {0};
	long v;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN: cfg.listen = optarg; break;
		case OPT_HTTP: cfg.http = optarg; break;
		case OPT_STATE: cfg.state_dir = optarg; break;
		case OPT_TOKEN: cfg.token_file = optarg; break;
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
	kiln_scheduler *s;
	kiln_status st = kiln_scheduler_create(&cfg, &s);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln scheduler: cannot start: %s\n", kiln_strerror(st));
		return CLI_EXIT_FATAL;
	}
	running = s;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	kiln_scheduler_run(s);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	running = NULL;
	KILN_INFO("scheduler stopping", NULL);
	kiln_scheduler_destroy(s);
	return CLI_EXIT_OK;
}
