/* Atomic whole-file writes and mkdir -p.
 *
 * A reader of the target (another worker, a user, a re-run of the same job) sees either
 * the old file or the complete new one, never a prefix: the data goes to a temporary name
 * in the target's own directory (rename is only atomic within one file system), is
 * fsynced, renamed over the target, and the directory is fsynced so the rename itself
 * survives a crash. Any failure removes the temporary file. */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"

/* Makes temporary names unique between threads of one process; the pid separates
 * processes, O_EXCL catches whatever is left (a stale file from a crashed run). */
static atomic_uint tmp_counter;

/* Tries this many temporary names before giving up on EEXIST. */
#define TMP_ATTEMPTS 16
/* Bytes of the target's base name kept in its temporary name (see kiln_file_write_atomic). */
#define TMP_BASE_MAX 200

static kiln_status write_all(int fd, const uint8_t *p, size_t size)
{
	while (size > 0) {
		ssize_t n = write(fd, p, size);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return kiln_status_from_errno(errno);
		}
		p += n;
		size -= (size_t)n;
	}
	return KILN_OK;
}

kiln_status kiln_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return kiln_status_from_errno(errno);
	kiln_status st = KILN_OK;
	if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
		st = kiln_status_from_errno(errno);
	close(fd);
	return st;
}

kiln_status kiln_file_write_atomic(const char *path, const void *data, size_t size)
{
	if (!path || !path[0] || (!data && size))
		return KILN_ERR_INVALID_ARG;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	if (!base[0])
		return KILN_ERR_INVALID_ARG;  /* "dir/" names no file */

	kiln_status st = KILN_ERR_NOMEM;
	int fd = -1;
	bool created = false;
	char *dir = NULL, *tmp = NULL;
	/* "a/b/x" lives in "a/b", "/x" in "/", "x" in "." */
	size_t dir_len = slash ? (size_t)(slash - path) : 0;
	dir = kiln_malloc(dir_len + 2);
	if (!dir)
		goto fail;
	if (dir_len > 0) {
		memcpy(dir, path, dir_len);
		dir[dir_len] = '\0';
	} else {
		memcpy(dir, slash ? "/" : ".", 2);
	}
	/* "<dir>/.<base>.tmp.<pid>.<counter>": hidden, and easy to spot and clean up. */
	size_t tmp_cap = strlen(dir) + strlen(base) + 64;
	tmp = kiln_malloc(tmp_cap);
	if (!tmp)
		goto fail;

	const char *sep = dir[strlen(dir) - 1] == '/' ? "" : "/";
	/* The temporary name adds up to 27 bytes to the base name: a valid name of more than
	 * NAME_MAX - 27 bytes (a 250-byte one, found by tests/unit/test_hostile.c) would make
	 * it ENAMETOOLONG. Only the first TMP_BASE_MAX bytes of the base go into it; pid and
	 * counter keep it unique. */
	int base_len = strlen(base) > TMP_BASE_MAX ? TMP_BASE_MAX : (int)strlen(base);
	for (int attempt = 0; attempt < TMP_ATTEMPTS; attempt++) {
		snprintf(tmp, tmp_cap, "%s%s.%.*s.tmp.%ld.%u", dir, sep, base_len, base, (long)getpid(),
			 atomic_fetch_add(&tmp_counter, 1u));
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	created = true;

	st = write_all(fd, data, size);
	if (st != KILN_OK)
		goto fail;
	/* The data must be on disk before the name points at it, or a crash could leave
	 * the target empty. */
	if (fsync(fd) != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	int rc = close(fd);
	fd = -1;
	if (rc != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	if (rename(tmp, path) != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	created = false;  /* the temporary name is gone now */
	st = kiln_fsync_dir(dir);
fail:
	if (fd >= 0)
		close(fd);
	if (created)
		unlink(tmp);
	free(tmp);
	free(dir);
	return st;
}

/* mkdir that accepts an existing directory (and nothing else) at path. */
static kiln_status mkdir_one(const char *path)
{
	if (mkdir(path, 0777) == 0)
		return KILN_OK;
	int err = errno;
	struct stat sb;
	if (err == EEXIST || err == EACCES || err == EROFS) {
		/* Someone else may have made it (or it is a read-only ancestor we only pass
		 * through): fine if it is a directory. */
		if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
			return KILN_OK;
		if (err == EEXIST)
			return KILN_ERR_INVALID_ARG;  /* a file is in the way */
	}
	return kiln_status_from_errno(err);
}

kiln_status kiln_mkdir_p(const char *path)
{
	if (!path || !path[0])
		return KILN_ERR_INVALID_ARG;
	char *copy = kiln_strdup(path);
	if (!copy)
		return KILN_ERR_NOMEM;
	kiln_status st = KILN_OK;
	/* Create each prefix ending before a '/', then the whole path; repeated and trailing
	 * slashes give empty or repeated prefixes, which are skipped or already exist. */
	for (char *p = copy + 1; *p; p++) {
		if (*p != '/' || p[-1] == '/')
			continue;
		*p = '\0';
		st = mkdir_one(copy);
		*p = '/';
		if (st != KILN_OK)
			goto fail;
	}
	st = mkdir_one(copy);
fail:
	free(copy);
	return st;
}
