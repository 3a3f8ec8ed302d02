/* Subcommands of the kiln binary and the exit codes they share. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "common/version.h"

/* Exit codes: 0 all done; 1 some inputs failed (the rest were written); 2 usage error;
 * 3 nothing could run (device, I/O setup). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_PARTIAL = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_FATAL = 3 };

int cli_encode(int argc, char **argv);
int cli_decode(int argc, char **argv);
int cli_samples(int argc, char **argv);
int cli_devices(int argc, char **argv);
int cli_scheduler(int argc, char **argv);
int cli_submit(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_wait(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_failures(int argc, char **argv);
int cli_jobs(int argc, char **argv);
int cli_worker(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_keygen(int argc, char **argv);

#endif
