/* What kiln run shares with kiln worker: the checks a worker passes before it starts. */
#ifndef KILN_CLI_WORKER_H
#define KILN_CLI_WORKER_H

#include "worker/client.h"

/* Initialises cfg with the devices of a --devices spec ("all", "cpu", "0,1,...") after
 * checking that each can run now, and its host threads (--threads; 0: the CPUs the
 * process may use), and checks the storage settings from the environment. Messages name
 * cmd. Returns an exit code: 2 for a malformed spec, 3 for what cannot run. */
int cli_worker_config(const char *cmd, const char *devices, unsigned threads, kiln_client_config *cfg);

#endif
