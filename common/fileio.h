/* Whole-file writes that readers never see half-done: data goes to a temporary name in
 * the target's directory, is fsynced, and is renamed over the target. */
#ifndef KILN_FILEIO_H
#define KILN_FILEIO_H

#include <stddef.h>

#include "common/error.h"

kiln_status kiln_file_write_atomic(const char *path, const void *data, size_t size);

/* Makes a rename in dir durable: fsyncs the directory. File systems that cannot fsync a
 * directory say EINVAL (or ENOTSUP); that is no failure, and KILN_OK. */
kiln_status kiln_fsync_dir(const char *dir);

/* Creates a directory and its parents (mode 0777 & umask); existing ones are fine. */
kiln_status kiln_mkdir_p(const char *path);

#endif
