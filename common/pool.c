/* Thread pool: workers sleep on a condition variable, wake for a generation, take chunks
 * with an atomic counter and report completion; the caller helps with the chunks too. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"

struct kiln_pool {
	unsigned nthreads;  /* worker threads, not counting callers */
	pthread_t *threads;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_cond_t done;
	pthread_mutex_t serial; /* one kiln_pool_for at a time */
	unsigned long generation;
	int stopping;
	unsigned active;  /* workers still inside the current generation */

	/* the current for */
	kiln_pool_fn fn;
	void *ctx;
	size_t n, grain;
	atomic_size_t next;
};

unsigned kiln_cpu_quota(const char *text)
{
	/* cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD"; v1: the two files' numbers
	 * joined the same way by the caller ("-1 PERIOD": no limit) */
	long long quota, period;
	if (!text || sscanf(text, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0)
		return 0;
	long long cpus = (quota + period - 1) / period;
	return cpus > 0 && cpus <= 1 << 20 ? (unsigned)cpus : 0;
}

/* Reads up to cap - 1 bytes of a small file into buf as a string; 0 when it cannot. */
static int read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0;
}

/* The tightest CPU quota on this process's cgroup and its ancestors (v2: cpu.max; v1:
 * cpu.cfs_quota_us / cpu.cfs_period_us), 0 when none. A container limited to 4 CPUs on
 * a 64-core host sees 64 online CPUs; a worker that started 64 decode threads there
 * would be throttled by the kernel in every period. */
static unsigned cgroup_cpu_quota(void)
{
	char groups[4096], path[4096 + 64], text[128];
	if (!read_small("/proc/self/cgroup", groups, sizeof groups))
		return 0;
	unsigned best = 0;
	for (char *line = strtok(groups, "\n"); line; line = strtok(NULL, "\n")) {
		/* "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1) */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrl = c1 + 1, *cg = c2 + 1;
		int v2 = *ctrl == '\0';
		int v1 = 0;
		for (const char *t = ctrl; !v2 && *t && !v1; t += strcspn(t, ","), t += *t == ',')
			v1 = strncmp(t, "cpu", 3) == 0 && (t[3] == ',' || t[3] == '\0');
		if (!v2 && !v1)
			continue;
		char dir[4096];
		snprintf(dir, sizeof dir, "%s", cg);
		/* from the process's group up to the root of the mount */
		for (;;) {
			unsigned q = 0;
			if (v2) {
				snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(dir, "/") ? dir : "");
				if (read_small(path, text, sizeof text))
					q = kiln_cpu_quota(text);
			} else {
				static const char *const mounts[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
				for (size_t m = 0; m < 2 && !q; m++) {
					char qt[64], pt[64];
					snprintf(path, sizeof path, "%s%s/cpu.cfs_quota_us", mounts[m], strcmp(dir, "/") ? dir : "");
					if (!read_small(path, qt, sizeof qt))
						continue;
					snprintf(path, sizeof path, "%s%s/cpu.cfs_period_us", mounts[m], strcmp(dir, "/") ? dir : "");
					if (!read_small(path, pt, sizeof pt))
						continue;
					snprintf(text, sizeof text, "%lld %lld", atoll(qt), atoll(pt));
					q = kiln_cpu_quota(text);
				}
			}
			if (q && (!best || q < best))
				best = q;
			char *slash = strrchr(dir, '/');
			if (!slash || slash == dir) {
				if (strcmp(dir, "/") == 0 || !slash)
					break;
				dir[1] = '\0';
			} else {
				*slash = '\0';
			}
		}
	}
	return best;
}

unsigned kiln_cpu_count(void)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = online > 0 ? (unsigned)online : 1;
	/* the CPUs this process may run on (taskset, cpusets: Slurm's and Kubernetes' static
	 * CPU manager bind tasks this way) */
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		int allowed = CPU_COUNT(&set);
		if (allowed > 0 && (unsigned)allowed < n)
			n = (unsigned)allowed;
	}
	unsigned quota = cgroup_cpu_quota();
	if (quota && quota < n)
		n = quota;
	return n;
}

static void run_chunks(kiln_pool *pool)
{
	for (;;) {
		size_t begin = atomic_fetch_add(&pool->next, pool->grain);
		if (begin >= pool->n)
			return;
		size_t end = begin + pool->grain < pool->n ? begin + pool->grain : pool->n;
		pool->fn(pool->ctx, begin, end);
	}
}

static void *worker_main(void *arg)
{
	kiln_pool *pool = arg;
	unsigned long seen = 0;
	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (!pool->stopping && pool->generation == seen)
			pthread_cond_wait(&pool->wake, &pool->lock);
		if (pool->stopping)
			break;
		seen = pool->generation;
		pthread_mutex_unlock(&pool->lock);
		run_chunks(pool);
		pthread_mutex_lock(&pool->lock);
		if (--pool->active == 0)
			pthread_cond_signal(&pool->done);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

kiln_status kiln_pool_create(unsigned threads, kiln_pool **out)
{
	*out = NULL;
	if (threads == 0)
		threads = kiln_cpu_count();
	kiln_pool *pool = kiln_calloc(1, sizeof *pool);
	if (!pool)
		return KILN_ERR_NOMEM;
	/* the caller of kiln_pool_for is one of the `threads` workers */
	pool->nthreads = threads - 1;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_mutex_init(&pool->serial, NULL);
	pthread_cond_init(&pool->wake, NULL);
	pthread_cond_init(&pool->done, NULL);
	pool->threads = kiln_calloc(pool->nthreads ? pool->nthreads : 1, sizeof(pthread_t));
	if (!pool->threads)
		goto fail;
	for (unsigned i = 0; i < pool->nthreads; i++) {
		if (pthread_create(&pool->threads[i], NULL, worker_main, pool) != 0) {
			pool->nthreads = i;
			goto fail;
		}
	}
	*out = pool;
	return KILN_OK;
fail:
	kiln_pool_destroy(pool);
	return KILN_ERR_NOMEM;
}

void kiln_pool_destroy(kiln_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->stopping = 1;
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);
	for (unsigned i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i], NULL);
	free(pool->threads);
	pthread_mutex_destroy(&pool->lock);
	pthread_mutex_destroy(&pool->serial);
	pthread_cond_destroy(&pool->wake);
	pthread_cond_destroy(&pool->done);
	free(pool);
}

unsigned kiln_pool_threads(const kiln_pool *pool)
{
	return pool ? pool->nthreads + 1 : 1;
}

void kiln_thread_name(pthread_t t, const char *name, unsigned index)
{
	char full[16]; /* Linux keeps 15 bytes and the NUL */
	snprintf(full, sizeof full, "%s/%u", name, index);
	pthread_setname_np(t, full);
}

void kiln_pool_set_name(kiln_pool *pool, const char *name)
{
	if (!pool)
		return;
	for (unsigned i = 0; i < pool->nthreads; i++)
		kiln_thread_name(pool->threads[i], name, i);
}

void kiln_pool_for(kiln_pool *pool, size_t n, size_t grain, kiln_pool_fn fn, void *ctx)
{
	if (n == 0)
		return;
	unsigned total = kiln_pool_threads(pool);
	if (grain == 0) {
		/* about 8 chunks a thread balances uneven blocks without much counter traffic */
		grain = n / ((size_t)total * 8);
		if (grain == 0)
			grain = 1;
	}
	if (!pool || pool->nthreads == 0 || n <= grain) {
		fn(ctx, 0, n);
		return;
	}
	pthread_mutex_lock(&pool->serial);
	pthread_mutex_lock(&pool->lock);
	pool->fn = fn;
	pool->ctx = ctx;
	pool->n = n;
	pool->grain = grain;
	atomic_store(&pool->next, 0);
	pool->active = pool->nthreads;
	pool->generation++;
	pthread_cond_broadcast(&pool->wake);
	pthread_mutex_unlock(&pool->lock);

	run_chunks(pool);

	pthread_mutex_lock(&pool->lock);
	while (pool->active)
		pthread_cond_wait(&pool->done, &pool->lock);
	pthread_mutex_unlock(&pool->lock);
	pthread_mutex_unlock(&pool->serial);
}
