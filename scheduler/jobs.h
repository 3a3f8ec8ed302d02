/* The scheduler's durable state: jobs, their items and shards, the queue of shards ready
 * to dispatch, and the journal that makes all of it survive a restart.
 *
 * One mutex guards everything here, journal appends included, so the journal's order is
 * the order in which state changed. Both the REST threads (submit, cancel, retry) and the
 * dispatch thread (next shard, results, lost leases) call in; neither holds the lock
 * across network I/O. Planning a job (listing a directory or bucket) runs outside the
 * lock, so a slow listing never stalls dispatch.
 *
 * Item states: pending -> in flight (its shard is leased to a worker) -> done, or back to
 * pending after an error or a lost lease (each counts as an attempt), or failed once it
 * has used max_attempts attempts (or at planning, for an unusable name).
 * Job states: queued (nothing sent yet), running, done (every item ended, some may have
 * failed), failed (could not run at all: the input could not be listed, or matched
 * nothing), cancelled. */
#ifndef KILN_SCHED_JOBS_H
#define KILN_SCHED_JOBS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

typedef struct kiln_jobs kiln_jobs;

typedef struct kiln_jobs_config {
	const char *state_dir;
	uint64_t compact_bytes;  /* journal size that triggers compaction; 0: the default */
	size_t max_items;        /* per job; 0: KILN_PLAN_DEFAULT_MAX_ITEMS */
	unsigned lease_ms;       /* copied into shard messages */
} kiln_jobs_config;

/* Opens the journal in cfg->state_dir and replays it: every job comes back with its
 * finished items finished and everything else pending. */
kiln_status kiln_jobs_open(const kiln_jobs_config *cfg, kiln_jobs **out);
void kiln_jobs_close(kiln_jobs *jobs);

/* Called (outside the lock) whenever there may be new work or a cancel to announce. */
void kiln_jobs_set_wakeup(kiln_jobs *jobs, void (*fn)(void *ctx), void *ctx);

/* --- REST side. Views are new JSON references the caller releases. --- */

/* Validates spec, plans it and journals the job before returning. An Idempotency-Key
 * already seen returns that job (*created false) without planning again.
 * KILN_ERR_INVALID_ARG: the spec is bad (err says why, for a 400). A job whose input cannot
 * be listed is still created, in state failed, with the reason. */
#define KILN_IDEMPOTENCY_KEY_MAX 200
kiln_status kiln_jobs_submit(kiln_jobs *jobs, const json_t *spec, const char *idem_key,
			     json_t **view, bool *created, char *err, size_t err_cap);
/* KILN_ERR_NOT_FOUND for an unknown id. */
kiln_status kiln_jobs_view(kiln_jobs *jobs, const char *id, json_t **view);
/* {"jobs": [view without spec, ...]}, oldest first. */
json_t *kiln_jobs_list(kiln_jobs *jobs);
/* {"failures": [{"input","error","attempts"}], "total": N, "offset", "limit"} */
kiln_status kiln_jobs_failures(kiln_jobs *jobs, const char *id, size_t offset, size_t limit,
			       json_t **out);
/* Stops dispatching the job and asks workers to drop its items; its finished items stay.
 * Cancelling a job that has ended changes nothing (KILN_OK, the view says its state). */
kiln_status kiln_jobs_cancel(kiln_jobs *jobs, const char *id, json_t **view);
/* Makes the failed items pending again with fresh attempts. KILN_ERR_UNSUPPORTED for a
 * cancelled or failed job. */
kiln_status kiln_jobs_retry_failed(kiln_jobs *jobs, const char *id, json_t **view);

typedef enum kiln_job_state {
	KILN_JOB_QUEUED,
	KILN_JOB_RUNNING,
	KILN_JOB_DONE,
	KILN_JOB_FAILED,
	KILN_JOB_CANCELLED,
	KILN_JOB_STATES_
} kiln_job_state;

const char *kiln_job_state_name(kiln_job_state state);

typedef struct kiln_jobs_stats {
	uint64_t jobs[KILN_JOB_STATES_];
	uint64_t items_pending, items_in_flight, items_done, items_failed;
	uint64_t shards_in_flight;
	uint64_t bytes_in, bytes_out;
	uint64_t journal_bytes;
} kiln_jobs_stats;

void kiln_jobs_get_stats(kiln_jobs *jobs, kiln_jobs_stats *out);

/* --- Dispatch side. --- */

/* A shard handed out: job number, shard index and the lease number the result must quote.
 * Lease numbers grow across restarts, so a result from an earlier run never matches. */
typedef struct kiln_lease {
	uint32_t job;
	uint32_t shard;
	uint64_t lease;
} kiln_lease;

/* Takes the oldest job's next queued shard whose format is in codecs (a JSON array of
 * strings; NULL accepts any), marks its pending items in flight and writes the `shard`
 * message, a complete frame, into out (replacing its contents; out's cap should be
 * KILN_PROTO_MAX_FRAME). KILN_ERR_NOT_FOUND when nothing is ready. When the message cannot
 * be made (KILN_ERR_TOO_LARGE over out's cap, KILN_ERR_CORRUPT for a name that is not
 * UTF-8, KILN_ERR_NOMEM) the lease has already been released as a lost one, with the
 * reason as the items' error. */
kiln_status kiln_jobs_next_shard_text(kiln_jobs *jobs, const json_t *codecs, kiln_lease *lease,
				      kiln_buf *out);
/* The same, with the message parsed into *msg (for tests and tools). */
kiln_status kiln_jobs_next_shard(kiln_jobs *jobs, const json_t *codecs, kiln_lease *lease,
				 json_t **msg);

/* Applies a validated `result` message. When its lease is the shard's current one the
 * outcome is journaled and fsynced before this returns (*applied true, *lease_out the
 * lease it closed); otherwise nothing changes (*applied false): a late or foreign result,
 * which the caller acknowledges and ignores. */
kiln_status kiln_jobs_complete(kiln_jobs *jobs, const json_t *result, bool *applied,
			       kiln_lease *lease_out);
/* The same for n results at once, with one fsync for all (group commit): applied[i] and
 * leases[i] as above for results[i]. On a journal failure none is applied. */
kiln_status kiln_jobs_complete_many(kiln_jobs *jobs, const json_t *const *results, size_t n,
				    bool *applied, kiln_lease *leases);

/* The lease ended without a result (expired, worker dead or gone): the shard's unfinished
 * items count one attempt (reason is their error if it was their last) and are queued
 * again. A lease that is no longer current is ignored. */
kiln_status kiln_jobs_release(kiln_jobs *jobs, const kiln_lease *lease, const char *reason);

/* Job numbers cancelled since the last call, for the dispatcher to announce to workers;
 * returns how many were written (at most cap). */
size_t kiln_jobs_take_cancelled(kiln_jobs *jobs, uint32_t *out, size_t cap);

/* "j12" -> 12, "j12.s3" -> 12 and 3; false when malformed. */
bool kiln_jobs_parse_id(const char *id, uint32_t *job, uint32_t *shard);
/* The id string of a job number or a shard ("j12", "j12.s3"); shard UINT32_MAX: the job. */
void kiln_jobs_format_id(uint32_t job, uint32_t shard, char *out, size_t cap);

#endif
