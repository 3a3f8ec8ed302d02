/* The bounded blocking queues that join the worker pipeline's stages (worker/pipeline.c).
 * They are intrusive: a queued object embeds a kiln_qlink and moves between queues by
 * pointer, so queueing never allocates. Kept apart from the pipeline so that tests can
 * drive them with objects of their own. */
#ifndef KILN_WORKER_QUEUE_H
#define KILN_WORKER_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct kiln_qlink {
	struct kiln_qlink *next;
} kiln_qlink;

typedef struct kiln_queue {
	pthread_mutex_t lock;
	pthread_cond_t not_empty;
	pthread_cond_t not_full;
	kiln_qlink *head, *tail;
	size_t count;
	size_t cap;          /* 0: unbounded */
	bool closed;
	/* kiln_queue_pop_full: batches taken past the head while it was `passed` */
	const kiln_qlink *passed;
	unsigned passes;
} kiln_queue;

/* Batches kiln_queue_pop_full may take past the head (of other kinds, full) before it
 * takes the head's kind as it is: a kind that never fills (a small job beside a large one
 * of other options) still goes within this many batches. */
#define KILN_QUEUE_HEAD_PASSES 2

/* Whether next may join a batch that begins with first. */
typedef bool (*kiln_qmatch_fn)(const kiln_qlink *first, const kiln_qlink *next);

kiln_status kiln_queue_init(kiln_queue *q, size_t cap);
void kiln_queue_destroy(kiln_queue *q);

/* Blocks while the queue is full. false when it is closed (the link was not queued). */
bool kiln_queue_push(kiln_queue *q, kiln_qlink *link);

/* Takes at least one and at most max links, waiting for the first (the head); further
 * links are taken from anywhere in the queue, in their order, while they are already
 * queued and match(first, next) holds (NULL: any, which takes the head's run). Those that
 * do not match stay in place for a later batch, so batches of interleaved kinds are not
 * cut short. Returns 0 once the queue is closed and empty. */
size_t kiln_queue_pop(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match);

/* Like kiln_queue_pop without waiting, and only a batch that cannot grow any more: max
 * links of one kind, the oldest such kind first (the head's when it has max); or, when no
 * kind has max, the head's kind as it is once nothing more can arrive (the queue is at its
 * capacity, or closed), or once KILN_QUEUE_HEAD_PASSES batches have been taken past the
 * head. 0 otherwise. */
size_t kiln_queue_pop_full(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match);

/* The links queued now (a moment's figure: others may push or pop right after). */
size_t kiln_queue_count(kiln_queue *q);

/* Wakes every waiter; pushes fail from now on, pops drain what is left. */
void kiln_queue_close(kiln_queue *q);

/* Unlinks every queued link for which pred holds; returns them as a list (next-linked). */
kiln_qlink *kiln_queue_take_if(kiln_queue *q, bool (*pred)(const kiln_qlink *link));

#endif
