/* kiln_storage (see storage.h): parses each location, serves local files here, and hands
 * S3 objects to the S3 client (s3.c) in one batch so that they transfer concurrently.
 * Single-object calls are batches of one: every request takes the same path. */
#include "common/storage.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/s3.h"
#include "common/uri.h"

/* Deeper trees than this are taken for a symlink loop or a mistake. */
#define LIST_MAX_DEPTH 64

struct kiln_storage {
	kiln_s3 *s3;
};

/* One item of any batch, pointing at the caller's fields. */
struct request {
	kiln_s3_kind kind;
	const char *uri;
	kiln_buf *out;
	const void *data;
	size_t size;
	uint64_t *size_out;
	kiln_status *status;
	char *msg;
	size_t msg_cap;
};

void kiln_storage_config_init(kiln_storage_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->addressing = KILN_S3_ADDRESSING_AUTO;
	cfg->multipart_threshold = (size_t)8 << 20;
	cfg->part_size = (size_t)8 << 20;
	cfg->concurrency = 8;
	cfg->max_attempts = 5;
	cfg->backoff_base_ms = 100;
	cfg->backoff_max_ms = 20000;
	cfg->connect_timeout_ms = 10000;
	cfg->request_timeout_ms = 0;
	cfg->stall_timeout_s = 30;
	cfg->max_response_body = (size_t)8 << 20;
}

kiln_status kiln_storage_create(const kiln_storage_config *cfg, kiln_storage **out, char *msg,
				size_t msg_cap)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_storage_config defaults;
	kiln_storage *s = NULL;
	kiln_msgf(msg, msg_cap, "%s", "");
	if (!out)
		return KILN_ERR_INVALID_ARG;
	*out = NULL;
	if (!cfg) {
		kiln_storage_config_init(&defaults);
		cfg = &defaults;
	}
	s = kiln_calloc(1, sizeof *s);
	if (!s)
		goto fail;
	st = kiln_s3_create(cfg, &s->s3, msg, msg_cap);
	if (st != KILN_OK)
		goto fail;
	*out = s;
	return KILN_OK;
fail:
	kiln_storage_destroy(s);
	return st;
}

void kiln_storage_destroy(kiln_storage *st)
{
	if (!st)
		return;
	kiln_s3_destroy(st->s3);
	free(st);
}

void kiln_storage_get_stats(const kiln_storage *st, kiln_storage_stats *out)
{
	kiln_s3_stats(st->s3, out);
}

/* ---- local files ---- */

static const char *const op_names[] = {[KILN_S3_GET] = "get", [KILN_S3_PUT] = "put",
				       [KILN_S3_HEAD] = "stat"};

static kiln_status file_stat(const char *path, uint64_t *size)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return kiln_status_from_errno(errno);
	/* Only regular files are objects; a directory is at most a prefix. */
	if (!S_ISREG(sb.st_mode))
		return KILN_ERR_NOT_FOUND;
	if (size)
		*size = (uint64_t)sb.st_size;
	return KILN_OK;
}

static kiln_status file_put(const char *path, const void *data, size_t size)
{
	const char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		char dir[KILN_URI_PATH_MAX];
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = '\0';
		kiln_status st = kiln_mkdir_p(dir);
		if (st != KILN_OK)
			return st;
	}
	return kiln_file_write_atomic(path, data, size);
}

static void run_file(struct request *r, const char *path)
{
	kiln_status st;
	switch (r->kind) {
	case KILN_S3_GET:
		st = file_stat(path, NULL);
		if (st == KILN_OK)
			st = kiln_buf_read_file(r->out, path);
		break;
	case KILN_S3_PUT:
		st = file_put(path, r->data, r->size);
		break;
	default:
		st = file_stat(path, r->size_out);
		break;
	}
	*r->status = st;
	if (st != KILN_OK)
		kiln_msgf(r->msg, r->msg_cap, "file %s %s: %s", op_names[r->kind], path,
				 kiln_strerror(st));
}

/* ---- batches ---- */

/* Where one S3 item of a batch points, kept for the batch's lifetime. */
struct s3_name {
	char bucket[KILN_URI_BUCKET_MAX + 1];
	char key[KILN_URI_KEY_MAX + 1];
};

/* Runs every request: files here, S3 objects as one concurrent batch. Returns the first
 * failing request's status, or KILN_OK. */
static kiln_status run_requests(kiln_storage *st, struct request *reqs, size_t count)
{
	kiln_status result = KILN_ERR_NOMEM;
	kiln_s3_op *ops = kiln_calloc(count, sizeof *ops);
	size_t *op_req = kiln_calloc(count, sizeof *op_req);
	struct s3_name *names = kiln_calloc(count, sizeof *names);
	kiln_uri *u = kiln_malloc(sizeof *u);
	size_t n_ops = 0;

	for (size_t i = 0; i < count; i++) {
		kiln_msgf(reqs[i].msg, reqs[i].msg_cap, "%s", "");
		*reqs[i].status = KILN_ERR_NOMEM;
		if (reqs[i].out)
			kiln_buf_reset(reqs[i].out);
	}
	if (!ops || !op_req || !names || !u)
		goto fail;

	for (size_t i = 0; i < count; i++) {
		struct request *r = &reqs[i];
		kiln_status ps = KILN_ERR_INVALID_ARG;
		if (!r->uri || (r->kind == KILN_S3_GET && !r->out) ||
		    (r->kind == KILN_S3_PUT && !r->data && r->size) ||
		    (ps = kiln_uri_parse(r->uri, u)) != KILN_OK || (u->scheme == KILN_URI_S3 && !u->path[0])) {
			*r->status = ps != KILN_OK ? ps : KILN_ERR_INVALID_ARG;
			kiln_msgf(r->msg, r->msg_cap, "storage %s: invalid location or arguments: %s",
				op_names[r->kind], r->uri ? r->uri : "(null)");
			continue;
		}
		if (u->scheme == KILN_URI_FILE) {
			run_file(r, u->path);
			continue;
		}
		kiln_s3_op *op = &ops[n_ops];
		strcpy(names[n_ops].bucket, u->bucket);
		strcpy(names[n_ops].key, u->path);
		op->kind = r->kind;
		op->bucket = names[n_ops].bucket;
		op->key = names[n_ops].key;
		op->out = r->out;
		op->data = r->data;
		op->size = r->size;
		op_req[n_ops++] = i;
	}
	if (n_ops) {
		kiln_status rs = kiln_s3_run(st->s3, ops, n_ops);
		for (size_t k = 0; k < n_ops; k++) {
			struct request *r = &reqs[op_req[k]];
			*r->status = rs != KILN_OK ? rs : ops[k].status;
			if (r->size_out)
				*r->size_out = ops[k].size_out;
			if (*r->status != KILN_OK)
				kiln_msgf(r->msg, r->msg_cap, "%s", rs != KILN_OK ? kiln_strerror(rs) : ops[k].msg);
		}
	}
	result = KILN_OK;
	for (size_t i = 0; i < count && result == KILN_OK; i++)
		result = *reqs[i].status;
fail:
	free(u);
	free(names);
	free(op_req);
	free(ops);
	return result;
}

/* Fills *r from item i of a get_many or put_many array. */
typedef void (*fill_request_fn)(struct request *r, void *items, size_t i);

static kiln_status run_items(kiln_storage *st, void *items, size_t count, fill_request_fn fill)
{
	kiln_status result = KILN_ERR_NOMEM;
	if (!st || (!items && count))
		return KILN_ERR_INVALID_ARG;
	struct request *reqs = kiln_calloc(count, sizeof *reqs);
	if (!reqs && count)
		goto fail;
	for (size_t i = 0; i < count; i++)
		fill(&reqs[i], items, i);
	result = run_requests(st, reqs, count);
fail:
	free(reqs);
	return result;
}

static void fill_get(struct request *r, void *items, size_t i)
{
	kiln_storage_get_item *it = (kiln_storage_get_item *)items + i;
	*r = (struct request){.kind = KILN_S3_GET, .uri = it->uri, .out = it->out,
			      .status = &it->status, .msg = it->msg, .msg_cap = sizeof it->msg};
}

static void fill_put(struct request *r, void *items, size_t i)
{
	kiln_storage_put_item *it = (kiln_storage_put_item *)items + i;
	*r = (struct request){.kind = KILN_S3_PUT, .uri = it->uri, .data = it->data,
			      .size = it->size, .status = &it->status, .msg = it->msg,
			      .msg_cap = sizeof it->msg};
}

kiln_status kiln_storage_get_many(kiln_storage *st, kiln_storage_get_item *items, size_t count)
{
	return run_items(st, items, count, fill_get);
}

kiln_status kiln_storage_put_many(kiln_storage *st, kiln_storage_put_item *items, size_t count)
{
	return run_items(st, items, count, fill_put);
}

/* A batch of one; its result is the request's own status. */
static kiln_status run_one(kiln_storage *st, struct request r)
{
	kiln_status status = KILN_ERR_INVALID_ARG;
	if (!st)
		return KILN_ERR_INVALID_ARG;
	r.status = &status;
	return run_requests(st, &r, 1);
}

kiln_status kiln_storage_get(kiln_storage *st, const char *uri, kiln_buf *out, char *msg,
			     size_t msg_cap)
{
	return run_one(st, (struct request){.kind = KILN_S3_GET, .uri = uri, .out = out, .msg = msg,
					    .msg_cap = msg_cap});
}

kiln_status kiln_storage_put(kiln_storage *st, const char *uri, const void *data, size_t size,
			     char *msg, size_t msg_cap)
{
	return run_one(st, (struct request){.kind = KILN_S3_PUT, .uri = uri, .data = data,
					    .size = size, .msg = msg, .msg_cap = msg_cap});
}

kiln_status kiln_storage_stat(kiln_storage *st, const char *uri, uint64_t *size, char *msg,
			      size_t msg_cap)
{
	uint64_t ignored;
	return run_one(st, (struct request){.kind = KILN_S3_HEAD, .uri = uri,
					    .size_out = size ? size : &ignored, .msg = msg,
					    .msg_cap = msg_cap});
}

kiln_status kiln_storage_exists(kiln_storage *st, const char *uri, bool *exists, char *msg,
				size_t msg_cap)
{
	if (!exists)
		return KILN_ERR_INVALID_ARG;
	kiln_status s = kiln_storage_stat(st, uri, NULL, msg, msg_cap);
	*exists = s == KILN_OK;
	if (s == KILN_ERR_NOT_FOUND) {
		kiln_msgf(msg, msg_cap, "%s", "");
		return KILN_OK;
	}
	return s;
}

/* ---- local listing ---- */

struct walk {
	char path[KILN_URI_PATH_MAX];  /* the directory being read, ending in '/' (or "") */
	size_t prefix_len;             /* entry names start after this many bytes */
	const char *glob;
	kiln_storage_list_fn fn;
	void *ctx;
	kiln_uri check;
};

struct dir_entry {
	char *name;
	bool is_dir;
	uint64_t size;
	char sort_key[];  /* name, plus '/' for directories */
};

/* Sorting "a" as "a/" makes a depth-first walk come out in byte order of full paths, as
 * S3 lists: "a.png" < "a/b.png" because '.' < '/'. */
static int compare_entries(const void *a, const void *b)
{
	return strcmp((*(struct dir_entry *const *)a)->sort_key,
		      (*(struct dir_entry *const *)b)->sort_key);
}

static kiln_status walk_dir(struct walk *w, size_t dir_len, const char *name_prefix, int depth);

static kiln_status emit_file(struct walk *w, const struct dir_entry *e)
{
	if (w->glob && fnmatch(w->glob, e->name, 0) != 0)
		return KILN_OK;
	if (kiln_uri_parse(w->path, &w->check) != KILN_OK) {
		char q[256];
		KILN_WARN("storage listing: skipping a name kiln cannot address", "path=%s",
			  kiln_log_quote(w->path, q, sizeof q));
		return KILN_OK;
	}
	kiln_storage_entry entry = {w->path, w->path + w->prefix_len, e->size};
	return w->fn(w->ctx, &entry);
}

/* Reads w->path[0..dir_len) (one directory), keeping names that start with name_prefix,
 * and visits them in order. */
static kiln_status walk_dir(struct walk *w, size_t dir_len, const char *name_prefix, int depth)
{
	kiln_status st = KILN_ERR_TOO_LARGE;
	DIR *d = NULL;
	struct dir_entry **list = NULL;
	size_t n = 0, cap = 0;
	if (depth > LIST_MAX_DEPTH)
		return KILN_ERR_TOO_LARGE;
	w->path[dir_len] = '\0';
	d = opendir(dir_len ? w->path : ".");
	if (!d) {
		st = kiln_status_from_errno(errno);
		goto fail;
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			st = errno ? kiln_status_from_errno(errno) : KILN_OK;
			if (st != KILN_OK)
				goto fail;
			break;
		}
		size_t len = strlen(de->d_name);
		if (de->d_name[0] == '.' || strncmp(de->d_name, name_prefix, strlen(name_prefix)) != 0)
			continue;
		st = KILN_ERR_TOO_LARGE;
		if (dir_len + len + 2 >= sizeof w->path)
			goto fail;
		memcpy(w->path + dir_len, de->d_name, len + 1);
		/* lstat first: a symlink to a directory is not followed (it could loop); one
		 * to a file is listed like the file. */
		struct stat sb;
		if (lstat(w->path, &sb) != 0)
			continue;  /* gone since readdir */
		bool is_dir = S_ISDIR(sb.st_mode);
		if (S_ISLNK(sb.st_mode) && (stat(w->path, &sb) != 0 || !S_ISREG(sb.st_mode)))
			continue;
		if (!is_dir && !S_ISREG(sb.st_mode))
			continue;
		st = KILN_ERR_NOMEM;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct dir_entry **grown = kiln_realloc(list, ncap * sizeof *list);
			if (!grown)
				goto fail;
			list = grown;
			cap = ncap;
		}
		struct dir_entry *e = kiln_malloc(sizeof *e + len + 2);
		if (!e)
			goto fail;
		memcpy(e->sort_key, de->d_name, len + 1);
		if (is_dir)
			memcpy(e->sort_key + len, "/", 2);
		e->name = e->sort_key;
		e->is_dir = is_dir;
		e->size = (uint64_t)sb.st_size;
		list[n++] = e;
	}
	closedir(d);
	d = NULL;
	/* qsort's array must not be NULL even for 0 elements: a listing that kept no entry
	 * (kiln run --input on a missing folder) was undefined behaviour, found by UBSan in
	 * make test-asan. Sort only what needs sorting. */
	if (n > 1)
		qsort(list, n, sizeof *list, compare_entries);
	st = KILN_OK;
	for (size_t i = 0; i < n && st == KILN_OK; i++) {
		struct dir_entry *e = list[i];
		size_t len = strlen(e->sort_key);
		memcpy(w->path + dir_len, e->sort_key, len + 1);
		if (e->is_dir) {
			st = walk_dir(w, dir_len + len, "", depth + 1);
		} else {
			st = emit_file(w, e);
		}
	}
fail:
	if (d)
		closedir(d);
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return st;
}

static kiln_status file_list(const kiln_uri *u, const char *glob, kiln_storage_list_fn fn,
			     void *ctx)
{
	kiln_status st = KILN_ERR_NOMEM;
	struct walk *w = kiln_calloc(1, sizeof *w);
	if (!w)
		return KILN_ERR_NOMEM;
	w->glob = glob;
	w->fn = fn;
	w->ctx = ctx;
	size_t len = strlen(u->path);
	memcpy(w->path, u->path, len + 1);
	/* A prefix that names a directory lists that directory. */
	struct stat sb;
	st = KILN_ERR_TOO_LARGE;
	if (w->path[len - 1] != '/' && stat(w->path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		if (len + 2 >= sizeof w->path)
			goto fail;
		w->path[len++] = '/';
		w->path[len] = '\0';
	}
	w->prefix_len = len;
	/* Read the directory part; the rest filters its first level, as an S3 prefix would. */
	const char *slash = strrchr(w->path, '/');
	size_t dir_len = slash ? (size_t)(slash - w->path) + 1 : 0;
	char name_prefix[KILN_URI_PATH_MAX];
	memcpy(name_prefix, w->path + dir_len, len - dir_len + 1);
	st = walk_dir(w, dir_len, name_prefix, 0);
fail:
	free(w);
	return st;
}

kiln_status kiln_storage_list(kiln_storage *st, const char *prefix, const char *glob,
			      kiln_storage_list_fn fn, void *ctx, char *msg, size_t msg_cap)
{
	kiln_status s = KILN_ERR_NOMEM;
	kiln_msgf(msg, msg_cap, "%s", "");
	if (!st || !fn)
		return KILN_ERR_INVALID_ARG;
	kiln_uri *u = kiln_malloc(sizeof *u);
	if (!u)
		goto fail;
	s = kiln_uri_parse(prefix, u);
	if (s != KILN_OK) {
		kiln_msgf(msg, msg_cap, "storage list: invalid location: %s", prefix ? prefix : "(null)");
		goto fail;
	}
	if (u->scheme == KILN_URI_S3) {
		s = kiln_s3_list(st->s3, u, glob, fn, ctx, msg, msg_cap);
	} else {
		s = file_list(u, glob, fn, ctx);
		if (s != KILN_OK && msg && !msg[0])
			kiln_msgf(msg, msg_cap, "file list %s: %s", u->path, kiln_strerror(s));
	}
fail:
	free(u);
	return s;
}
