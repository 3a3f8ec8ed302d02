/* The one kiln binary: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{"encode", cli_encode, "encode PNG images to BC1 textures (DDS, KTX 2.0)"},
	{"decode", cli_decode, "decode a kiln texture (DDS, KTX 2.0) back to PNG"},
	{"samples", cli_samples, "write generated sample PNG images into a directory"},
	{"devices", cli_devices, "list the compute devices kiln can use"},
	{"scheduler", cli_scheduler, "run the job scheduler: REST API, journal, dispatch to workers"},
	{"submit", cli_submit, "submit a job to a scheduler and print its id"},
	{"status", cli_status, "show a job's state and progress"},
	{"wait", cli_wait, "wait for a job to end, with a progress bar"},
	{"cancel", cli_cancel, "cancel a job"},
	{"failures", cli_failures, "list a job's failed items and why"},
	{"jobs", cli_jobs, "list a scheduler's jobs"},
	{"worker", cli_worker, "run a worker node: take shards from a scheduler and encode them"},
	{"run", cli_run, "convert a folder in one process: scheduler and worker embedded, no setup"},
	{"keygen", cli_keygen, "make a CURVE key pair for the scheduler or a worker"},
};

static void usage(FILE *out)
{
	fprintf(out, "usage: kiln COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nRun 'kiln COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("kiln %s\n", KILN_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "kiln: unknown command '%s' (see kiln --help)\n", argv[1]);
	return CLI_EXIT_USAGE;
}
