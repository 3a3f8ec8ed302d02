/* The worker pipeline's queues: a singly linked list under one mutex, two conditions. */
#include "worker/queue.h"

#include <string.h>

kiln_status kiln_queue_init(kiln_queue *q, size_t cap)
{
	memset(q, 0, sizeof *q);
	q->cap = cap;
	if (pthread_mutex_init(&q->lock, NULL) != 0)
		return KILN_ERR_NOMEM;
	pthread_cond_init(&q->not_empty, NULL);
	pthread_cond_init(&q->not_full, NULL);
	return KILN_OK;
}

void kiln_queue_destroy(kiln_queue *q)
{
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->not_empty);
	pthread_cond_destroy(&q->not_full);
}

bool kiln_queue_push(kiln_queue *q, kiln_qlink *link)
{
	pthread_mutex_lock(&q->lock);
	while (q->cap && q->count >= q->cap && !q->closed)
		pthread_cond_wait(&q->not_full, &q->lock);
	bool ok = !q->closed;
	if (ok) {
		link->next = NULL;
		if (q->tail)
			q->tail->next = link;
		else
			q->head = link;
		q->tail = link;
		q->count++;
		pthread_cond_signal(&q->not_empty);
	}
	pthread_mutex_unlock(&q->lock);
	return ok;
}

/* The taking part of kiln_queue_pop, under the queue's lock. */
static size_t take_locked(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match)
{
	size_t n = 0;
	while (q->head && n < max && (n == 0 || !match || match(out[0], q->head))) {
		out[n++] = q->head;
		q->head = q->head->next;
		q->count--;
	}
	if (!q->head)
		q->tail = NULL;
	if (n)
		pthread_cond_broadcast(&q->not_full);
	if (q->head) /* what we left is for another consumer */
		pthread_cond_signal(&q->not_empty);
	return n;
}

size_t kiln_queue_pop(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match)
{
	pthread_mutex_lock(&q->lock);
	while (!q->head && !q->closed)
		pthread_cond_wait(&q->not_empty, &q->lock);
	size_t n = take_locked(q, out, max, match);
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t kiln_queue_pop_full(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match)
{
	pthread_mutex_lock(&q->lock);
	size_t run = 0;
	const kiln_qlink *it = q->head;
	while (it && run < max && (run == 0 || !match || match(q->head, it))) {
		run++;
		it = it->next;
	}
	size_t n = run && (run == max || it || q->closed) ? take_locked(q, out, max, match) : 0;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void kiln_queue_close(kiln_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = true;
	pthread_cond_broadcast(&q->not_empty);
	pthread_cond_broadcast(&q->not_full);
	pthread_mutex_unlock(&q->lock);
}

kiln_qlink *kiln_queue_take_if(kiln_queue *q, bool (*pred)(const kiln_qlink *link))
{
	kiln_qlink *taken = NULL, **tail = &taken;
	pthread_mutex_lock(&q->lock);
	kiln_qlink **link = &q->head;
	q->tail = NULL;
	while (*link) {
		kiln_qlink *it = *link;
		if (pred(it)) {
			*link = it->next;
			it->next = NULL;
			*tail = it;
			tail = &it->next;
			q->count--;
		} else {
			q->tail = it;
			link = &it->next;
		}
	}
	pthread_cond_broadcast(&q->not_full);
	pthread_mutex_unlock(&q->lock);
	return taken;
}
