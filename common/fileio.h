/* Whole-file writes that readers never see half-done: data goes to a temporary name in
 * the target's directory, is fsynced, and is renamed over the target. */
#ifndef KILN_FILEIO_H
#define KILN_FILEIO_H

#include <stddef.h>

#include "common/error.h"

kiln_status kiln_file_write_atomic(const char *path, const void *data, size_t size);

/* Creates a directory and its parents (mode 0777 & umask); existing ones are fine. */
kiln_status kiln_mkdir_p(const char *path);

#endif
