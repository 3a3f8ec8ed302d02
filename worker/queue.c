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

/* Takes first (a queued link) and the links queued after it that match it, up to max, in
 * their order; links that do not match, and those before first, stay in place. Under the
 * queue's lock. */
static size_t take_locked(kiln_queue *q, kiln_qlink *first, kiln_qlink **out, size_t max, kiln_qmatch_fn match)
{
	size_t n = 0;
	kiln_qlink **at = &q->head, *kept = NULL; /* kept: the last link left in place */
	while (*at && n < max) {
		kiln_qlink *l = *at;
		if (n ? !match || match(first, l) : l == first) {
			out[n++] = l;
			*at = l->next;
			q->count--;
		} else {
			kept = l;
			at = &l->next;
		}
	}
	if (!*at) /* walked to the end: the tail is whatever was left last */
		q->tail = kept;
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
	size_t n = q->head ? take_locked(q, q->head, out, max, match) : 0;
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* The oldest link with max links of its kind (itself and those after it that match it)
 * queued; NULL when no kind has that many. A link after the first of its kind sees fewer
 * of them, so the first of a full kind is found first. */
static kiln_qlink *oldest_full_locked(const kiln_queue *q, size_t max, kiln_qmatch_fn match)
{
	size_t left = q->count; /* links from f on */
	for (kiln_qlink *f = q->head; f && left >= max; f = f->next, left--) {
		size_t n = 1;
		for (const kiln_qlink *l = f->next; l && n < max; l = l->next)
			n += !match || match(f, l);
		if (n == max)
			return f;
	}
	return NULL;
}

size_t kiln_queue_pop_full(kiln_queue *q, kiln_qlink **out, size_t max, kiln_qmatch_fn match)
{
	pthread_mutex_lock(&q->lock);
	kiln_qlink *first = oldest_full_locked(q, max, match);
	if (first && first != q->head) { /* a batch past the head, unless it waited enough */
		if (q->passed != q->head) {
			q->passed = q->head;
			q->passes = 0;
		}
		if (q->passes++ >= KILN_QUEUE_HEAD_PASSES)
			first = q->head;
	}
	if (!first && (q->closed || (q->cap && q->count >= q->cap)))
		first = q->head; /* nothing more can arrive: the oldest kind as it is */
	size_t n = first ? take_locked(q, first, out, max, match) : 0;
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

size_t kiln_queue_count(kiln_queue *q)
{
	pthread_mutex_lock(&q->lock);
	size_t n = q->count;
	pthread_mutex_unlock(&q->lock);
	return n;
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
