/* Temporary: the subcommands until they land. */
#include <stdio.h>
#include "cli/cli.h"
int cli_encode(int argc, char **argv) { fprintf(stderr, "kiln encode: not built yet\n"); return CLI_EXIT_FATAL; }
int cli_decode(int argc, char **argv) { fprintf(stderr, "kiln decode: not built yet\n"); return CLI_EXIT_FATAL; }
int cli_samples(int argc, char **argv) { fprintf(stderr, "kiln samples: not built yet\n"); return CLI_EXIT_FATAL; }
int cli_devices(int argc, char **argv) { fprintf(stderr, "kiln devices: not built yet\n"); return CLI_EXIT_FATAL; }
