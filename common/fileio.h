/* Whole-file writes that readers never see half-done: data goes to a temporary name in
 * the target's directory, is fsynced, and is renamed over the target. */
#ifndef KILN_FILEIO_H
#define KILN_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* When it returns KILN_OK the new contents and the rename are durable (the file and its
 * directory fsynced). Safe from many threads at once: writers into one directory share
 * its fsyncs (a group commit, see fileio.c); a writer is told KILN_OK only when an fsync
 * of the directory that started after its rename succeeded. On an error the target may
 * already hold the new contents, but they are not known to be durable. */
kiln_status kiln_file_write_atomic(const char *path, const void *data, size_t size);

/* Makes a rename in dir durable: fsyncs the directory. File systems that cannot fsync a
 * directory say EINVAL (or ENOTSUP); that is no failure, and KILN_OK. */
kiln_status kiln_fsync_dir(const char *dir);

/* Directories whose fsyncs kiln_file_write_atomic groups at one time; a writer into yet
 * another directory while all of these have writers in flight fsyncs it alone. */
#define KILN_FILEIO_SYNC_SLOTS 32

/* Process-wide counters since start, for benches and tests. */
typedef struct kiln_fileio_stats {
	uint64_t renames;    /* renames that then waited for a grouped directory fsync */
	uint64_t dir_syncs;  /* grouped directory fsyncs run (each covers one or more renames) */
	uint64_t fallbacks;  /* renames whose directory had no slot: an fsync of their own */
} kiln_fileio_stats;
void kiln_fileio_get_stats(kiln_fileio_stats *out);

/* Tests only: kiln_file_write_atomic syncs directories with fn instead of kiln_fsync_dir
 * (NULL restores it), so that a test can block or fail an fsync at a chosen moment. */
typedef kiln_status (*kiln_fileio_dir_sync_fn)(const char *dir);
void kiln_fileio_set_dir_sync(kiln_fileio_dir_sync_fn fn);

/* Creates a directory and its parents (mode 0777 & umask); existing ones are fine. */
kiln_status kiln_mkdir_p(const char *path);

#endif
