/* A fixed thread pool with one operation: a blocking parallel-for over [0, n) in chunks.
 * The CPU backends of the codecs run their per-block functions through it. */
#ifndef KILN_POOL_H
#define KILN_POOL_H

#include <pthread.h>
#include <stddef.h>

#include "error.h"

typedef struct kiln_pool kiln_pool;

/* fn handles items [begin, end). It must not call kiln_pool_for on the same pool. */
typedef void (*kiln_pool_fn)(void *ctx, size_t begin, size_t end);

/* threads == 0 means one per CPU this process may use (kiln_cpu_count, common/host.h).
 * The calling thread also works during a for. */
kiln_status kiln_pool_create(unsigned threads, kiln_pool **out);
void kiln_pool_destroy(kiln_pool *pool);
unsigned kiln_pool_threads(const kiln_pool *pool);
/* Names the pool's threads "<name>/<i>" (cut to the 15 bytes Linux keeps), for top -H,
 * perf and debuggers. A NULL pool is left alone. */
void kiln_pool_set_name(kiln_pool *pool, const char *name);

/* Runs fn over [0, n) in chunks of `grain` items (0 picks one) and returns when all ran.
 * A NULL pool runs everything on the calling thread. Calls from several threads are
 * serialised. */
void kiln_pool_for(kiln_pool *pool, size_t n, size_t grain, kiln_pool_fn fn, void *ctx);

/* Names thread t "<name>/<index>" as kiln_pool_set_name does (a failure only loses the
 * name). */
void kiln_thread_name(pthread_t t, const char *name, unsigned index);

#endif
