/* kiln-bench --only storage: durable small-file writes through kiln_storage_put (file
 * storage: temporary file, fsync, rename, directory fsync; common/fileio.c), as the
 * worker's upload threads make them. KILN_BENCH_STORAGE_FILES files (default 4,000; 1,000
 * with --quick) of 20 KB each, from 1, 4 and 8 threads into one directory and from 8
 * threads into a directory each, under KILN_BENCH_STORAGE_DIR (default /var/tmp: a real
 * disk, where the fsyncs cost what they cost; /dev/shm shows the rest). Files/s is the
 * median of the runs (3; 1 with --quick), each into fresh directories; every file's size is
 * checked after each run, and the files are removed outside the timing. The second column
 * is the directory fsyncs made per file (1.00 without the group commit). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/fileio.h"
#include "common/storage.h"

int bench_storage(const bench_opts *opts, bench_report *report);

#define FILE_BYTES (20 * 1024)
#define MAX_THREADS 8
#define PATH_CAP 512

typedef struct st_run {
	kiln_storage *storage;
	const char *root;  /* the run's directory */
	bool dir_per_thread;
	size_t files;
	const uint8_t *data;
	atomic_size_t next;
	atomic_int failed;
} st_run;

typedef struct st_thread {
	st_run *run;
	int index;
} st_thread;

static void file_path(char *out, const st_run *run, int thread, size_t i)
{
	if (run->dir_per_thread)
		snprintf(out, PATH_CAP, "%s/t%d/f%06zu.dds", run->root, thread, i);
	else
		snprintf(out, PATH_CAP, "%s/f%06zu.dds", run->root, i);
}

static void *put_thread(void *arg)
{
	st_thread *t = arg;
	st_run *run = t->run;
	char path[PATH_CAP], msg[256];
	for (;;) {
		size_t i = atomic_fetch_add(&run->next, 1);
		if (i >= run->files)
			break;
		file_path(path, run, t->index, i);
		if (kiln_storage_put(run->storage, path, run->data, FILE_BYTES, msg, sizeof msg) != KILN_OK) {
			if (atomic_fetch_add(&run->failed, 1) == 0)
				fprintf(stderr, "kiln-bench storage: put %s: %s\n", path, msg);
		}
	}
	return NULL;
}

/* Checks that every regular file under dir (one level of subdirectories) has FILE_BYTES
 * bytes, removes the tree and returns how many files were found (-1: a wrong size). */
static long check_and_remove(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	long count = 0;
	bool bad = false;
	char path[PATH_CAP];
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		struct stat sb;
		if (stat(path, &sb) != 0)
			continue;
		if (S_ISDIR(sb.st_mode) && depth == 0) {
			long n = check_and_remove(path, 1);
			bad |= n < 0;
			count += n > 0 ? n : 0;
		} else {
			bad |= sb.st_size != FILE_BYTES;
			count++;
			unlink(path);
		}
	}
	closedir(d);
	rmdir(dir);
	return bad ? -1 : count;
}

/* One timed run; files/s, or -1 on a failed put or a wrong file. */
static double one_run(kiln_storage *storage, const char *root, int threads, bool per_thread,
		      size_t files, const uint8_t *data)
{
	st_run run = {.storage = storage, .root = root, .dir_per_thread = per_thread, .files = files,
		      .data = data};
	atomic_init(&run.next, 0);
	atomic_init(&run.failed, 0);
	st_thread ts[MAX_THREADS];
	pthread_t tids[MAX_THREADS];
	/* The directories exist before timing, as an output prefix does after its first file. */
	char path[PATH_CAP];
	mkdir(root, 0777);
	for (int t = 0; per_thread && t < threads; t++) {
		snprintf(path, sizeof path, "%s/t%d", root, t);
		mkdir(path, 0777);
	}
	sync();
	double t0 = bench_now();
	int started = 0;
	for (; started < threads; started++) {
		ts[started] = (st_thread){.run = &run, .index = started};
		if (pthread_create(&tids[started], NULL, put_thread, &ts[started]) != 0)
			break;
	}
	for (int t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	double secs = bench_now() - t0;
	long found = check_and_remove(root, 0);
	if (started < threads || atomic_load(&run.failed) || found != (long)files)
		return -1;
	return (double)files / secs;
}

int bench_storage(const bench_opts *opts, bench_report *report)
{
	const char *base = getenv("KILN_BENCH_STORAGE_DIR");
	if (!base || !*base)
		base = "/var/tmp";
	size_t files = opts->quick ? 1000 : 4000;
	const char *fe = getenv("KILN_BENCH_STORAGE_FILES");
	if (fe && atol(fe) > 0)
		files = (size_t)atol(fe);
	int reps = opts->quick ? 1 : 3;

	char note[512];
	snprintf(note, sizeof note,
		 "%zu files of 20 KB a run through kiln_storage_put into %s (temporary file, fsync, "
		 "rename, directory fsync); files/s, median of %d run(s), fresh directories each run.",
		 files, base, reps);
	bench_section *sec = bench_section_add(report, "File storage: durable small writes", note);
	if (!sec)
		return 0;
	uint8_t *data = malloc(FILE_BYTES);
	kiln_storage *storage = NULL;
	char msg[256];
	int failed = 0;
	if (!data || kiln_storage_create(NULL, &storage, msg, sizeof msg) != KILN_OK) {
		bench_row_text(sec, "setup", "failed", NULL, NULL);
		free(data);
		return 1;
	}
	uint32_t s = 12345;
	for (size_t i = 0; i < FILE_BYTES; i++) {
		s = s * 1103515245u + 12345u;
		data[i] = (uint8_t)(s >> 16);
	}
	static const struct {
		int threads;
		bool per_thread;
	} cases[] = {{1, false}, {4, false}, {8, false}, {4, true}, {8, true}};
	char root[PATH_CAP / 2];
	snprintf(root, sizeof root, "%s/kiln-bench-storage.%ld", base, (long)getpid());
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		double rates[8];
		int n = 0;
		bool ok = true;
		kiln_fileio_stats before, after;
		kiln_fileio_get_stats(&before);
		for (int r = 0; r < reps && ok; r++) {
			double rate = one_run(storage, root, cases[c].threads, cases[c].per_thread, files, data);
			ok = rate > 0;
			rates[n++] = rate;
		}
		char what[160];
		snprintf(what, sizeof what, "%d thread(s), %s", cases[c].threads,
			 cases[c].per_thread ? "a directory each" : "one directory");
		if (!ok) {
			bench_row_text(sec, what, "FAILED", NULL, NULL);
			failed++;
			continue;
		}
		kiln_fileio_get_stats(&after);
		/* grouped directory fsyncs (and lone ones, when the table was full) per file */
		double syncs = (double)(after.dir_syncs - before.dir_syncs + after.fallbacks - before.fallbacks) /
			       (double)(files * (size_t)n);
		char cell[48], per[48];
		snprintf(cell, sizeof cell, "%.0f files/s", bench_median(rates, (size_t)n));
		snprintf(per, sizeof per, "%.2f dir fsyncs/file", syncs);
		bench_row_text(sec, what, cell, per, NULL);
	}
	kiln_storage_destroy(storage);
	free(data);
	return failed;
}
