/* Thread pool: workers sleep on a condition variable, wake for a generation, take chunks
 * with an atomic counter and report completion; the caller helps with the chunks too. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "alloc.h"
#include "host.h"

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
