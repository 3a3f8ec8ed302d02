/* Unit tests of the grouped directory fsyncs of kiln_file_write_atomic (common/fileio.c):
 * many threads writing into one directory and into many directories all succeed with
 * every file's contents; writers that arrive while a directory's fsync runs share the next
 * one; a failed fsync (a test hook's error, or the directory moved away under waiting
 * writers) reaches every writer it was meant to cover and no other; a writer whose
 * directory finds the table full fsyncs alone. The hook (kiln_fileio_set_dir_sync) blocks
 * or fails chosen fsyncs so that the interleavings are forced, not hoped for. Criterion
 * runs each test in its own process, so the hook and the counters start afresh. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/fileio.h"

static char root[64];

static void make_root(void)
{
	strcpy(root, "/tmp/kiln-fileio-XXXXXX");
	cr_assert_not_null(mkdtemp(root));
}

static void remove_root(void)
{
	kiln_fileio_set_dir_sync(NULL);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(fileio, .init = make_root, .fini = remove_root, .timeout = 30);

/* ---- the hook: counts fsyncs, holds the first `block` of them until opened, fails some */

static pthread_mutex_t hk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hk_cond = PTHREAD_COND_INITIALIZER;
static int hk_calls;         /* fsyncs asked for so far */
static int hk_block;         /* calls 1..hk_block wait for hk_open */
static bool hk_open;
static int hk_fail_from;     /* calls from this one on fail with KILN_ERR_IO (0: none) */
static const char *hk_fail_dir;  /* fsyncs of a directory whose path contains this fail */

static kiln_status hook(const char *dir)
{
	pthread_mutex_lock(&hk_lock);
	int n = ++hk_calls;
	while (n <= hk_block && !hk_open)
		pthread_cond_wait(&hk_cond, &hk_lock);
	bool fail = (hk_fail_from && n >= hk_fail_from) || (hk_fail_dir && strstr(dir, hk_fail_dir));
	pthread_mutex_unlock(&hk_lock);
	return fail ? KILN_ERR_IO : kiln_fsync_dir(dir);
}

static void hook_open(void)
{
	pthread_mutex_lock(&hk_lock);
	hk_open = true;
	pthread_cond_broadcast(&hk_cond);
	pthread_mutex_unlock(&hk_lock);
}

static int hook_calls(void)
{
	pthread_mutex_lock(&hk_lock);
	int n = hk_calls;
	pthread_mutex_unlock(&hk_lock);
	return n;
}

static uint64_t renames(void)
{
	kiln_fileio_stats s;
	kiln_fileio_get_stats(&s);
	return s.renames;
}

/* Polls (1 ms) until *what() reaches at least want; fails the test after 10 s. */
static void wait_until(uint64_t (*what)(void), uint64_t want)
{
	for (int i = 0; i < 10000 && what() < want; i++)
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	cr_assert_geq(what(), want, "timed out waiting");
}

static uint64_t calls_u64(void)
{
	return (uint64_t)hook_calls();
}

/* ---- writers --------------------------------------------------------------------- */

typedef struct writer {
	char path[256];
	char data[96];
	kiln_status st;
	pthread_t tid;
} writer;

static void *write_one(void *arg)
{
	writer *w = arg;
	w->st = kiln_file_write_atomic(w->path, w->data, strlen(w->data));
	return NULL;
}

static void start(writer *w, const char *dir, const char *name)
{
	snprintf(w->path, sizeof w->path, "%s/%s", dir, name);
	snprintf(w->data, sizeof w->data, "contents of %s", name);
	w->st = KILN_ERR_CANCELLED;  /* until the writer ends */
	cr_assert_eq(pthread_create(&w->tid, NULL, write_one, w), 0);
}

/* The file at path holds exactly text. */
static void expect_file(const char *path, const char *text)
{
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	cr_assert_eq(kiln_buf_read_file(&b, path), KILN_OK, "%s missing", path);
	cr_assert_eq(b.len, strlen(text), "%s", path);
	cr_assert(memcmp(b.data, text, b.len) == 0, "%s", path);
	kiln_buf_free(&b);
}

/* Only the expected entries: no temporary file left in dir. */
static void expect_entries(const char *dir, size_t want)
{
	size_t n = 0;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "ls -A %s", dir);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p);
	char line[512];
	while (fgets(line, sizeof line, p)) {
		cr_expect(strstr(line, ".tmp.") == NULL, "temporary left: %s", line);
		n++;
	}
	pclose(p);
	cr_assert_eq(n, want, "%s", dir);
}

/* ---- many writers ---------------------------------------------------------------- */

#define THREADS 8
#define PER_THREAD 40

typedef struct batch {
	int index;
	int ndirs;  /* the thread's files go round this many directories */
	int failures;
} batch;

static void batch_path(char *out, size_t cap, int ndirs, int thread, int i)
{
	if (ndirs == 1)
		snprintf(out, cap, "%s/t%d-%03d.bin", root, thread, i);
	else
		snprintf(out, cap, "%s/d%02d/t%d-%03d.bin", root, (thread * PER_THREAD + i) % ndirs, thread, i);
}

static void batch_data(char *out, size_t cap, int thread, int i)
{
	/* different lengths and bytes for every file */
	int n = snprintf(out, cap, "thread %d file %d:", thread, i);
	for (int k = 0; k < (thread * 7 + i) % 40 && n + 1 < (int)cap; k++)
		out[n++] = (char)('a' + (thread + i + k) % 26);
	out[n] = '\0';
}

static void *write_batch(void *arg)
{
	batch *b = arg;
	char path[256], data[96];
	for (int i = 0; i < PER_THREAD; i++) {
		batch_path(path, sizeof path, b->ndirs, b->index, i);
		batch_data(data, sizeof data, b->index, i);
		if (kiln_file_write_atomic(path, data, strlen(data)) != KILN_OK)
			b->failures++;
	}
	return NULL;
}

static void run_batches(int ndirs)
{
	char path[256], data[96];
	for (int d = 0; ndirs > 1 && d < ndirs; d++) {
		snprintf(path, sizeof path, "%s/d%02d", root, d);
		cr_assert_eq(mkdir(path, 0777), 0);
	}
	kiln_fileio_stats s0, s1;
	kiln_fileio_get_stats(&s0);
	batch b[THREADS];
	pthread_t tid[THREADS];
	for (int t = 0; t < THREADS; t++) {
		b[t] = (batch){.index = t, .ndirs = ndirs};
		cr_assert_eq(pthread_create(&tid[t], NULL, write_batch, &b[t]), 0);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(tid[t], NULL);
		cr_expect_eq(b[t].failures, 0, "thread %d", t);
	}
	kiln_fileio_get_stats(&s1);
	for (int t = 0; t < THREADS; t++) {
		for (int i = 0; i < PER_THREAD; i++) {
			batch_path(path, sizeof path, ndirs, t, i);
			batch_data(data, sizeof data, t, i);
			expect_file(path, data);
		}
	}
	if (ndirs == 1)
		expect_entries(root, THREADS * PER_THREAD);
	/* every rename went through a slot (8 writers never fill the table), and no more
	 * directory fsyncs ran than renames */
	cr_expect_eq(s1.renames - s0.renames, THREADS * PER_THREAD);
	cr_expect_eq(s1.fallbacks - s0.fallbacks, 0);
	cr_expect_leq(s1.dir_syncs - s0.dir_syncs, s1.renames - s0.renames);
	cr_expect_geq(s1.dir_syncs - s0.dir_syncs, 1);
}

Test(fileio, many_threads_into_one_directory)
{
	run_batches(1);
}

/* 40 directories, more than the table's slots: slots are taken over as they empty. */
Test(fileio, many_threads_into_many_directories)
{
	cr_assert_gt(40, KILN_FILEIO_SYNC_SLOTS);
	run_batches(40);
}

/* ---- sharing and errors, forced with the hook -------------------------------------- */

#define WAITERS 6

/* Writer a runs dir's first fsync, held by the hook; WAITERS writers rename meanwhile and
 * wait. Returns with the fsync still held (release_all opens it). */
static void hold_first_fsync(const char *dir, writer *a, writer *w)
{
	hk_block = 1;
	kiln_fileio_set_dir_sync(hook);
	uint64_t r0 = renames();
	start(a, dir, "first");
	wait_until(calls_u64, 1);
	for (int i = 0; i < WAITERS; i++) {
		char name[32];
		snprintf(name, sizeof name, "waiter%d", i);
		start(&w[i], dir, name);
	}
	/* every waiter renamed and took its ticket while the first fsync is held */
	wait_until(renames, r0 + 1 + WAITERS);
	cr_expect_eq(hook_calls(), 1);
}

/* Opens the hook and joins the writers of hold_first_fsync. */
static void release_all(writer *a, writer *w)
{
	hook_open();
	pthread_join(a->tid, NULL);
	for (int i = 0; i < WAITERS; i++)
		pthread_join(w[i].tid, NULL);
}

static void held_first_fsync(writer *a, writer *w)
{
	hold_first_fsync(root, a, w);
	release_all(a, w);
}

Test(fileio, writers_arriving_during_an_fsync_share_the_next_one)
{
	writer a, w[WAITERS];
	held_first_fsync(&a, w);
	cr_expect_eq(a.st, KILN_OK);
	for (int i = 0; i < WAITERS; i++) {
		cr_expect_eq(w[i].st, KILN_OK, "waiter %d", i);
		expect_file(w[i].path, w[i].data);
	}
	/* the held one, then one for all the waiters */
	cr_expect_eq(hook_calls(), 2);
}

Test(fileio, a_failed_fsync_reaches_every_writer_it_covers)
{
	hk_fail_from = 2;
	writer a, w[WAITERS];
	held_first_fsync(&a, w);
	/* the first fsync succeeded and covered only the first writer */
	cr_expect_eq(a.st, KILN_OK);
	for (int i = 0; i < WAITERS; i++)
		cr_expect_eq(w[i].st, KILN_ERR_IO, "waiter %d told %d", i, w[i].st);
	cr_expect_eq(hook_calls(), 2);

	/* The error is not kept: a later writer whose fsync succeeds is told so. */
	hk_fail_from = 0;
	writer later;
	start(&later, root, "later");
	pthread_join(later.tid, NULL);
	cr_expect_eq(later.st, KILN_OK);
	expect_file(later.path, later.data);
}

/* The real kiln_fsync_dir behind the hold: the directory is renamed away while its first
 * fsync is held, so it and the next fail to open it, and every writer hears of it. */
Test(fileio, directory_moved_away_under_waiting_writers)
{
	char dir[128], moved[128];
	snprintf(dir, sizeof dir, "%s/out", root);
	snprintf(moved, sizeof moved, "%s/moved", root);
	cr_assert_eq(mkdir(dir, 0777), 0);
	writer a, w[WAITERS];
	hold_first_fsync(dir, &a, w);
	cr_assert_eq(rename(dir, moved), 0);
	release_all(&a, w);
	cr_expect_eq(a.st, KILN_ERR_NOT_FOUND);
	for (int i = 0; i < WAITERS; i++) {
		cr_expect_eq(w[i].st, KILN_ERR_NOT_FOUND, "waiter %d told %d", i, w[i].st);
		/* renamed, just not known durable */
		char path[256];
		snprintf(path, sizeof path, "%s/waiter%d", moved, i);
		expect_file(path, w[i].data);
	}
}

/* Every slot held by a writer of its own directory (their fsyncs held by the hook): one
 * more directory does not wait for a slot but fsyncs alone, and its error is its own. */
Test(fileio, full_table_falls_back_to_an_fsync_of_its_own)
{
	enum { N = KILN_FILEIO_SYNC_SLOTS };
	static writer w[N];
	hk_block = N;
	hk_fail_dir = "/lone-bad";
	kiln_fileio_set_dir_sync(hook);
	kiln_fileio_stats s0, s1;
	kiln_fileio_get_stats(&s0);
	for (int i = 0; i < N; i++) {
		char dir[128];
		snprintf(dir, sizeof dir, "%s/d%02d", root, i);
		cr_assert_eq(mkdir(dir, 0777), 0);
		start(&w[i], dir, "f");
	}
	wait_until(calls_u64, N);

	char dir[128];
	snprintf(dir, sizeof dir, "%s/lone", root);
	cr_assert_eq(mkdir(dir, 0777), 0);
	writer lone, bad;
	start(&lone, dir, "f");
	pthread_join(lone.tid, NULL);  /* while all N are still held */
	cr_expect_eq(lone.st, KILN_OK);
	expect_file(lone.path, lone.data);

	snprintf(dir, sizeof dir, "%s/lone-bad", root);
	cr_assert_eq(mkdir(dir, 0777), 0);
	start(&bad, dir, "f");
	pthread_join(bad.tid, NULL);
	cr_expect_eq(bad.st, KILN_ERR_IO);
	kiln_fileio_get_stats(&s1);
	cr_expect_eq(s1.fallbacks - s0.fallbacks, 2);
	cr_expect_eq(hook_calls(), N + 2);

	hook_open();
	for (int i = 0; i < N; i++) {
		pthread_join(w[i].tid, NULL);
		cr_expect_eq(w[i].st, KILN_OK, "writer %d", i);
		expect_file(w[i].path, w[i].data);
	}
	/* the table has room again */
	writer again;
	start(&again, dir, "g");
	pthread_join(again.tid, NULL);
	cr_expect_eq(again.st, KILN_ERR_IO);  /* still the failing directory, through a slot */
	kiln_fileio_get_stats(&s1);
	cr_expect_eq(s1.fallbacks - s0.fallbacks, 2);
}
