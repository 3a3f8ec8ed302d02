/* ZeroMQ CURVE keys as kiln keeps them: files of 40-character Z85 text (`kiln keygen`
 * writes them), loaded by the scheduler (its secret key) and by workers (the scheduler's
 * public key and their own secret key); and the rule for when CURVE is required. Here in
 * common/ because both scheduler/ and worker/ need it and may not include each other. */
#ifndef KILN_CURVE_H
#define KILN_CURVE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define KILN_CURVE_KEY_LEN 40  /* a 32-byte key in Z85 text */

/* Reads a CURVE key from a file of Z85 text (surrounding whitespace ignored) into key
 * (KILN_CURVE_KEY_LEN + 1 bytes). msg (may be NULL) receives a reason on failure. */
kiln_status kiln_curve_key_load(const char *path, char *key, char *msg, size_t msg_cap);

/* true when a ZeroMQ endpoint can only be reached from this host: inproc://, ipc://, or
 * tcp:// on 127.0.0.0/8, [::1] or localhost. Anything else (0.0.0.0, *, a host name, an
 * interface name) is reachable from the network, where kiln wants CURVE. */
bool kiln_endpoint_is_local(const char *endpoint);

#endif
