/* Atomic whole-file writes and mkdir -p.
 *
 * A reader of the target (another worker, a user, a re-run of the same job) sees either
 * the old file or the complete new one, never a prefix: the data goes to a temporary name
 * in the target's own directory (rename is only atomic within one file system), is
 * fsynced, renamed over the target, and the directory is fsynced so the rename itself
 * survives a crash. Any failure removes the temporary file.
 *
 * The directory fsyncs are grouped: many threads writing small files into one directory
 * (the worker's upload threads) would otherwise each pay a directory fsync, one after the
 * other on the file system's journal, and more threads made it slower. One fsync of a
 * directory makes every rename done in it before the fsync started durable, so writers of
 * one directory share them (see group_sync). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

/* ---- grouped directory fsyncs ------------------------------------------------------ */

/* A directory with writers waiting for its fsync. Writers of one directory share a slot,
 * found by the directory's path as the writers spell it (two spellings of one directory
 * only share less). The fsyncs of a slot are numbered (generations): fsync g starts only
 * after fsync g - 1 ended, so one fsync runs per directory at a time and the next one
 * covers every rename that the running one may have missed. */
typedef struct sync_slot {
	/* Under table_lock: */
	char *dir;         /* NULL: free; fixed while users > 0 */
	unsigned users;    /* writers between slot_acquire and slot_release */
	uint64_t last_use; /* table_clock at the last release, to reuse the least recent */
	/* Under lock: */
	pthread_mutex_t lock;
	pthread_cond_t cond;  /* broadcast when an fsync ends */
	uint64_t started;     /* the latest generation started (0: none) */
	uint64_t done;        /* the latest generation ended; started > done while one runs */
	/* Bit k: generation done - k failed, for the 64 latest generations; older failures are
	 * only known through last_failed (see group_sync). */
	uint64_t fail_bits;
	uint64_t last_failed;     /* the latest failed generation (0: none) */
	kiln_status fail_status;  /* and its status */
} sync_slot;

static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static sync_slot slots[KILN_FILEIO_SYNC_SLOTS];
static uint64_t table_clock;

static _Atomic(kiln_fileio_dir_sync_fn) dir_sync_fn;
static atomic_uint_least64_t stat_renames, stat_syncs, stat_fallbacks;

static void table_init(void)
{
	for (size_t i = 0; i < KILN_FILEIO_SYNC_SLOTS; i++) {
		pthread_mutex_init(&slots[i].lock, NULL);
		pthread_cond_init(&slots[i].cond, NULL);
	}
}

void kiln_fileio_set_dir_sync(kiln_fileio_dir_sync_fn fn)
{
	atomic_store(&dir_sync_fn, fn);
}

void kiln_fileio_get_stats(kiln_fileio_stats *out)
{
	out->renames = atomic_load(&stat_renames);
	out->dir_syncs = atomic_load(&stat_syncs);
	out->fallbacks = atomic_load(&stat_fallbacks);
}

static kiln_status sync_dir(const char *dir)
{
	kiln_fileio_dir_sync_fn fn = atomic_load(&dir_sync_fn);
	return fn ? fn(dir) : kiln_fsync_dir(dir);
}

/* dir's slot with one more user, or NULL when every slot has users of other directories
 * (or memory ran out): the caller then fsyncs alone. A free slot, else the one without
 * users that was used least recently, is taken over; its counters start again, as no
 * writer waits on them. */
static sync_slot *slot_acquire(const char *dir)
{
	pthread_once(&table_once, table_init);
	pthread_mutex_lock(&table_lock);
	sync_slot *found = NULL, *spare = NULL;
	for (size_t i = 0; i < KILN_FILEIO_SYNC_SLOTS; i++) {
		sync_slot *s = &slots[i];
		if (s->dir && strcmp(s->dir, dir) == 0) {
			found = s;
			break;
		}
		if (s->users == 0 && (!spare || (spare->dir && (!s->dir || s->last_use < spare->last_use))))
			spare = s;
	}
	if (!found && spare) {
		char *copy = kiln_strdup(dir);
		if (copy) {
			free(spare->dir);
			spare->dir = copy;
			spare->started = spare->done = 0;
			spare->fail_bits = spare->last_failed = 0;
			spare->fail_status = KILN_OK;
			found = spare;
		}
	}
	if (found)
		found->users++;
	pthread_mutex_unlock(&table_lock);
	return found;
}

static void slot_release(sync_slot *s)
{
	pthread_mutex_lock(&table_lock);
	s->users--;
	s->last_use = ++table_clock;
	pthread_mutex_unlock(&table_lock);
}

/* Makes a rename already done in s->dir durable. The fsync running now (if any) may have
 * started before the rename, so the writer needs the next generation: it waits for the
 * running one to end, then runs the next itself unless another waiter already did, which
 * covers every writer that arrived meanwhile. N writers of one directory share about two
 * fsyncs instead of making N. A failed fsync is reported to every writer it was meant to
 * cover; beyond the 64 latest generations (a writer that slept through that many) any
 * later failure of the directory counts too, which errs towards an error. */
static kiln_status group_sync(sync_slot *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t want = s->started + 1;
	atomic_fetch_add(&stat_renames, 1);
	while (s->done < want) {
		if (s->started != s->done) {
			pthread_cond_wait(&s->cond, &s->lock);
			continue;
		}
		/* None runs, and none started since our ticket but the one we waited for: the
		 * generation to start is ours (s->started == want - 1). */
		s->started = want;
		pthread_mutex_unlock(&s->lock);
		kiln_status st = sync_dir(s->dir);
		atomic_fetch_add(&stat_syncs, 1);
		pthread_mutex_lock(&s->lock);
		s->done = want;
		s->fail_bits = s->fail_bits << 1 | (st != KILN_OK);
		if (st != KILN_OK) {
			s->last_failed = want;
			s->fail_status = st;
		}
		pthread_cond_broadcast(&s->cond);
	}
	uint64_t age = s->done - want;
	bool failed = age < 64 ? (s->fail_bits >> age & 1) != 0 : s->last_failed >= want;
	kiln_status st = failed ? s->fail_status : KILN_OK;
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* Makes the rename just done in dir durable, sharing the fsync with other writers. */
static kiln_status sync_after_rename(const char *dir)
{
	sync_slot *s = slot_acquire(dir);
	if (!s) {
		atomic_fetch_add(&stat_fallbacks, 1);
		return sync_dir(dir);
	}
	kiln_status st = group_sync(s);
	slot_release(s);
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
	st = sync_after_rename(dir);
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
