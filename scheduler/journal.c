/* Append-only JSON-lines journal with fsync, torn-tail recovery and compaction by
 * rename; see journal.h for the crash-safety argument. */
#include "scheduler/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/fileio.h"
#include "common/log.h"

struct kiln_journal_sink {
	int fd;
	uint64_t size;  /* bytes of complete records */
};

struct kiln_journal {
	char *dir;
	char *path;
	char *tmp_path;
	int lock_fd;
	kiln_journal_sink out;
	uint64_t base_threshold;
	uint64_t threshold;
};

static char *join(const char *dir, const char *name)
{
	size_t n;
	if (!kiln_size_add(strlen(dir), strlen(name) + 2, &n))
		return NULL;
	char *p = kiln_malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* One write() per record where the kernel allows it; a partial write is finished in a
 * loop, and a failure cuts the file back to the last complete record so that the next
 * append cannot glue itself onto half a line. */
static kiln_status sink_put_text(kiln_journal_sink *s, const char *text, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(s->fd, text + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			kiln_status st = n < 0 ? kiln_status_from_errno(errno) : KILN_ERR_IO;
			if (ftruncate(s->fd, (off_t)s->size) != 0)
				KILN_ERROR("journal: cannot cut off a failed append", "errno=%d", errno);
			return st;
		}
		done += (size_t)n;
	}
	s->size += len;
	return KILN_OK;
}

kiln_status kiln_journal_sink_put(kiln_journal_sink *sink, const json_t *record)
{
	if (!sink || !json_is_object(record))
		return KILN_ERR_INVALID_ARG;
	/* JSON_COMPACT never emits a newline, so "\n" delimits records unambiguously */
	char *text = json_dumps(record, JSON_COMPACT);
	if (!text)
		return KILN_ERR_NOMEM;
	size_t len = strlen(text);
	kiln_status st = KILN_ERR_TOO_LARGE;
	char *line = NULL;
	if (len + 1 > KILN_JOURNAL_MAX_LINE)
		goto fail;
	st = KILN_ERR_NOMEM;
	line = realloc(text, len + 2);
	if (!line)
		goto fail;
	text = NULL;
	line[len] = '\n';
	line[len + 1] = '\0';
	st = sink_put_text(sink, line, len + 1);
fail:
	free(text);
	free(line);
	return st;
}

kiln_status kiln_journal_open(const char *dir, uint64_t compact_bytes, kiln_journal **out)
{
	*out = NULL;
	if (!dir || !dir[0])
		return KILN_ERR_INVALID_ARG;
	kiln_status st = kiln_mkdir_p(dir);
	if (st != KILN_OK)
		return st;
	char *lock_path = NULL;
	kiln_journal *j = kiln_calloc(1, sizeof *j);
	if (!j)
		return KILN_ERR_NOMEM;
	j->lock_fd = -1;
	j->out.fd = -1;
	st = KILN_ERR_NOMEM;
	j->dir = kiln_strdup(dir);
	j->path = join(dir, KILN_JOURNAL_FILE);
	j->tmp_path = join(dir, KILN_JOURNAL_FILE ".tmp");
	lock_path = join(dir, "lock");
	if (!j->dir || !j->path || !j->tmp_path || !lock_path)
		goto fail;
	j->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (j->lock_fd < 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	if (flock(j->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		st = errno == EWOULDBLOCK ? KILN_ERR_PERMISSION : kiln_status_from_errno(errno);
		KILN_ERROR("journal: state directory is in use by another scheduler", "dir=%s", dir);
		goto fail;
	}
	/* a compaction interrupted before its rename left this; the journal is intact */
	unlink(j->tmp_path);
	j->out.fd = open(j->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (j->out.fd < 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	struct stat sb;
	if (fstat(j->out.fd, &sb) != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	j->out.size = (uint64_t)sb.st_size;
	j->base_threshold = compact_bytes ? compact_bytes : KILN_JOURNAL_DEFAULT_COMPACT;
	j->threshold = j->base_threshold;
	free(lock_path);
	*out = j;
	return KILN_OK;
fail:
	free(lock_path);
	kiln_journal_close(j);
	return st;
}

void kiln_journal_close(kiln_journal *j)
{
	if (!j)
		return;
	if (j->out.fd >= 0)
		close(j->out.fd);
	if (j->lock_fd >= 0)
		close(j->lock_fd);  /* releases the flock */
	free(j->dir);
	free(j->path);
	free(j->tmp_path);
	free(j);
}

kiln_status kiln_journal_replay(kiln_journal *j, kiln_journal_replay_fn fn, void *ctx)
{
	if (!j || !fn)
		return KILN_ERR_INVALID_ARG;
	FILE *f = fopen(j->path, "rb");
	if (!f)
		return kiln_status_from_errno(errno);
	kiln_status st = KILN_OK;
	char *line = NULL;
	size_t line_cap = 0;
	uint64_t offset = 0, records = 0;
	for (;;) {
		ssize_t n = getline(&line, &line_cap, f);
		if (n < 0)
			break;
		json_t *rec = NULL;
		bool complete = n > 0 && line[n - 1] == '\n' && (size_t)n <= KILN_JOURNAL_MAX_LINE;
		if (complete) {
			json_error_t jerr;
			rec = json_loadb(line, (size_t)n - 1, JSON_REJECT_DUPLICATES, &jerr);
			if (rec && !json_is_object(rec)) {
				json_decref(rec);
				rec = NULL;
			}
		}
		if (!rec) {
			/* Only the last line may be torn: anything after it means real damage. */
			int next = fgetc(f);
			if (next != EOF) {
				KILN_ERROR("journal: damaged record before the end; refusing to guess",
					   "path=%s offset=%llu", j->path, (unsigned long long)offset);
				st = KILN_ERR_CORRUPT;
				goto fail;
			}
			KILN_WARN("journal: dropping an incomplete last record (a crash while writing)",
				  "path=%s offset=%llu bytes=%zd", j->path, (unsigned long long)offset, n);
			if (ftruncate(j->out.fd, (off_t)offset) != 0 || fsync(j->out.fd) != 0) {
				st = kiln_status_from_errno(errno);
				goto fail;
			}
			j->out.size = offset;
			break;
		}
		st = fn(ctx, rec);
		json_decref(rec);
		if (st != KILN_OK)
			goto fail;
		offset += (uint64_t)n;
		records++;
	}
	if (ferror(f))
		st = KILN_ERR_IO;
	else
		KILN_DEBUG("journal replayed", "records=%llu bytes=%llu", (unsigned long long)records,
			   (unsigned long long)offset);
fail:
	free(line);
	fclose(f);
	return st;
}

kiln_status kiln_journal_append(kiln_journal *j, const json_t *record)
{
	return j ? kiln_journal_sink_put(&j->out, record) : KILN_ERR_INVALID_ARG;
}

kiln_status kiln_journal_append_text(kiln_journal *j, const char *text, size_t len)
{
	if (!j || !text || len == 0 || text[len - 1] != '\n')
		return KILN_ERR_INVALID_ARG;
	return sink_put_text(&j->out, text, len);
}

kiln_status kiln_journal_sync(kiln_journal *j)
{
	if (!j)
		return KILN_ERR_INVALID_ARG;
	/* fdatasync suffices: the size change it flushes is what makes appends readable */
	return fdatasync(j->out.fd) == 0 ? KILN_OK : kiln_status_from_errno(errno);
}

kiln_status kiln_journal_commit(kiln_journal *j, const json_t *record)
{
	kiln_status st = kiln_journal_append(j, record);
	return st == KILN_OK ? kiln_journal_sync(j) : st;
}

uint64_t kiln_journal_size(const kiln_journal *j)
{
	return j ? j->out.size : 0;
}

bool kiln_journal_wants_compaction(const kiln_journal *j)
{
	return j && j->out.size > j->threshold;
}

void kiln_journal_note_live(kiln_journal *j, uint64_t bytes)
{
	/* after a compaction the threshold is twice the live size: keep that ratio */
	if (j && bytes <= UINT64_MAX / 2 && j->threshold <= UINT64_MAX - 2 * bytes)
		j->threshold += 2 * bytes;
}

kiln_status kiln_journal_compact(kiln_journal *j, kiln_journal_dump_fn fn, void *ctx)
{
	if (!j || !fn)
		return KILN_ERR_INVALID_ARG;
	kiln_journal_sink tmp = {-1, 0};
	kiln_status st;
	tmp.fd = open(j->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (tmp.fd < 0)
		return kiln_status_from_errno(errno);
	st = fn(ctx, &tmp);
	if (st != KILN_OK)
		goto fail;
	if (fsync(tmp.fd) != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	if (rename(j->tmp_path, j->path) != 0) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	/* From here the new file is the journal; the directory sync makes the rename survive
	 * a power cut. If it fails the old journal may come back, which is still complete. */
	st = kiln_fsync_dir(j->dir);
	if (st != KILN_OK)
		KILN_WARN("journal: directory sync after compaction failed", "dir=%s", j->dir);
	uint64_t before = j->out.size;
	close(j->out.fd);
	j->out = tmp;
	j->threshold = j->base_threshold > 2 * tmp.size ? j->base_threshold : 2 * tmp.size;
	KILN_INFO("journal compacted", "before=%llu after=%llu", (unsigned long long)before,
		  (unsigned long long)tmp.size);
	return KILN_OK;
fail:
	close(tmp.fd);
	unlink(j->tmp_path);
	return st;
}
