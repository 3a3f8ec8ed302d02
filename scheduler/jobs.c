/* Jobs, items, shards and their journal records.
 *
 * Records (one JSON object per journal line; "job" is the job number):
 *   {"t":"job","job":N,"created":UNIX,"idem":KEY|null,"spec":{...}[,"error":MSG]}
 *   {"t":"items","job":N,"items":[[input,output],[input,null,error],...]}   (chunks)
 *   {"t":"planned","job":N}            the job's items are complete: only now it exists
 *   {"t":"result","job":N,"ok":[id,...],"err":[[id,attempts,error],...],
 *    "bytes_in":B,"bytes_out":B[,"psnr_sum":S,"psnr_n":N][,"pixels":P]}
 *      (psnr_sum: the sum of the reported PSNRs of ok items, in centi-dB, psnr_n how many;
 *      pixels: the sum of their reported pixel counts; each written only when not zero)
 *   {"t":"cancel","job":N}   {"t":"retry","job":N}
 * A live change builds its record, commits it (fsync), and then applies the record with
 * the same function replay uses, so what is in memory is always what replay would rebuild.
 * Compaction writes the same record types, describing each job's current state. */
#include "scheduler/jobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/storage.h"
#include "scheduler/journal.h"
#include "scheduler/planner.h"
#include "scheduler/spec.h"

#define RECORD_CHUNK 4096  /* items per "items"/"result" record written by compaction */

enum { IT_PENDING, IT_IN_FLIGHT, IT_DONE, IT_FAILED, IT_STATES };

typedef struct job_item {
	char *error;       /* last error of a failed item (runtime failures only) */
	uint8_t state;
	uint8_t attempts;
} job_item;

typedef struct shard {
	uint32_t first, count;
	uint64_t lease;    /* current lease number while leased */
	bool leased, queued;
} shard;

typedef struct job {
	uint32_t num;
	char id[16];
	kiln_job_spec spec;
	char *idem;
	int64_t created;
	char *error;       /* set: the job could not run at all */
	bool planned, cancelled, started;
	kiln_plan *plan;
	job_item *items;
	size_t nitems;
	shard *shards;
	size_t nshards;
	uint32_t *queue;   /* ring of shard indexes; each shard is in it at most once */
	size_t qhead, qlen;
	size_t count[IT_STATES];
	size_t shards_leased;
	uint64_t bytes_in, bytes_out;
	int64_t psnr_sum;           /* centi-dB, over the psnr_n ok items that reported one */
	uint64_t psnr_n;
	uint64_t pixels;            /* reported by workers for ok items (level 0, width x height) */
	double t_start, t_end;      /* monotonic: first dispatch in this process, last item */
	size_t ended_at_start;
	uint64_t pixels_at_start;
	char *options_text;         /* spec.options as compact JSON, for shard messages; lazy */
} job;

struct kiln_jobs {
	pthread_mutex_t lock;
	kiln_jobs_config cfg;
	kiln_journal *journal;
	job **jobs;        /* jobs[n - 1] is job n, or NULL for a number never completed */
	size_t njobs, cap;
	size_t first_active;  /* no job below this index has queued shards */
	uint64_t next_lease;
	uint64_t lease_base;  /* next_lease at open: leases below it were handed out by an earlier run */
	uint32_t *cancelled;
	size_t ncancelled, cancelled_cap;
	/* dispatch side, reused from call to call (under the lock): result records as text,
	 * and the outcomes of one batch of results until they are durable and applied */
	kiln_buf records;
	struct outcome *outcomes;
	size_t outcomes_cap;
	void (*wakeup)(void *ctx);
	void *wakeup_ctx;
};

static const char *const state_names[] = {"queued", "running", "done", "failed", "cancelled"};

const char *kiln_job_state_name(kiln_job_state state)
{
	return (unsigned)state < KILN_JOB_STATES_ ? state_names[state] : "unknown";
}

bool kiln_jobs_parse_id(const char *id, uint32_t *job_num, uint32_t *shard_idx)
{
	if (!id || id[0] != 'j')
		return false;
	unsigned long long v = 0, s = UINT32_MAX;
	const char *p = id + 1;
	if (*p < '1' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((v = v * 10 + (unsigned)(*p - '0')) > UINT32_MAX)
			return false;
	if (*p == '.') {
		if (p[1] != 's' || p[2] < '0' || p[2] > '9' || (p[2] == '0' && p[3] >= '0' && p[3] <= '9'))
			return false;
		for (s = 0, p += 2; *p >= '0' && *p <= '9'; p++)
			if ((s = s * 10 + (unsigned)(*p - '0')) >= UINT32_MAX)
				return false;
	}
	if (*p)
		return false;
	*job_num = (uint32_t)v;
	if (shard_idx)
		*shard_idx = (uint32_t)s;
	return !shard_idx ? s == UINT32_MAX : true;
}

void kiln_jobs_format_id(uint32_t job_num, uint32_t shard_idx, char *out, size_t cap)
{
	if (shard_idx == UINT32_MAX)
		snprintf(out, cap, "j%u", job_num);
	else
		snprintf(out, cap, "j%u.s%u", job_num, shard_idx);
}

/* ---- jobs in memory ---- */

static void job_free(job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nitems; i++)
		free(j->items ? j->items[i].error : NULL);
	free(j->items);
	free(j->shards);
	free(j->queue);
	kiln_plan_destroy(j->plan);
	kiln_job_spec_free(&j->spec);
	free(j->options_text);
	free(j->idem);
	free(j->error);
	free(j);
}

static job *find_job(kiln_jobs *js, uint32_t num)
{
	return num >= 1 && num <= js->njobs ? js->jobs[num - 1] : NULL;
}

static job *find_job_id(kiln_jobs *js, const char *id)
{
	uint32_t num;
	return kiln_jobs_parse_id(id, &num, NULL) ? find_job(js, num) : NULL;
}

/* Grows the table to hold job number num (new slots are NULL holes). */
static kiln_status reserve_number(kiln_jobs *js, uint32_t num)
{
	if (num > js->cap) {
		size_t cap = js->cap ? js->cap * 2 : 64;
		while (cap < num)
			cap *= 2;
		job **grown = kiln_realloc(js->jobs, cap * sizeof *grown);
		if (!grown)
			return KILN_ERR_NOMEM;
		js->jobs = grown;
		js->cap = cap;
	}
	while (js->njobs < num)
		js->jobs[js->njobs++] = NULL;
	return KILN_OK;
}

static kiln_status insert_job(kiln_jobs *js, job *j)
{
	kiln_status st = reserve_number(js, j->num);
	if (st != KILN_OK)
		return st;
	if (js->jobs[j->num - 1])
		return KILN_ERR_CORRUPT;  /* a journal that names one job twice */
	js->jobs[j->num - 1] = j;
	return KILN_OK;
}

static void set_item_state(job *j, job_item *it, uint8_t state)
{
	j->count[it->state]--;
	j->count[state]++;
	it->state = state;
	if (j->count[IT_PENDING] + j->count[IT_IN_FLIGHT] == 0 && j->t_end == 0)
		j->t_end = kiln_now_s();
}

static kiln_job_state job_state(const job *j)
{
	if (j->error)
		return KILN_JOB_FAILED;
	if (j->cancelled)
		return KILN_JOB_CANCELLED;
	if (j->count[IT_PENDING] + j->count[IT_IN_FLIGHT] == 0)
		return KILN_JOB_DONE;
	if (j->started || j->count[IT_DONE] > 0 || j->shards_leased > 0)
		return KILN_JOB_RUNNING;
	/* items failed at planning do not make a job running; runtime failures do */
	for (size_t i = 0; i < j->nitems; i++)
		if (j->items[i].attempts)
			return KILN_JOB_RUNNING;
	return KILN_JOB_QUEUED;
}

static bool shard_has_pending(const job *j, const shard *s)
{
	for (uint32_t i = 0; i < s->count; i++)
		if (j->items[s->first + i].state == IT_PENDING)
			return true;
	return false;
}

static void push_shard(kiln_jobs *js, job *j, uint32_t idx)
{
	shard *s = &j->shards[idx];
	if (s->queued || s->leased || j->cancelled || !shard_has_pending(j, s))
		return;
	j->queue[(j->qhead + j->qlen++) % j->nshards] = idx;
	s->queued = true;
	if (js->first_active > j->num - 1)
		js->first_active = j->num - 1;
}

static void queue_all(kiln_jobs *js, job *j)
{
	for (size_t i = 0; i < j->nshards; i++)
		push_shard(js, j, (uint32_t)i);
}

/* Builds items and shards from the plan; every item starts pending (or failed, when
 * planning refused its name). */
static kiln_status job_finish_plan(job *j)
{
	j->nitems = kiln_plan_count(j->plan);
	if (j->nitems > UINT32_MAX)
		return KILN_ERR_TOO_LARGE;
	j->nshards = (j->nitems + j->spec.shard_size - 1) / j->spec.shard_size;
	j->items = kiln_calloc(j->nitems ? j->nitems : 1, sizeof *j->items);
	j->shards = kiln_calloc(j->nshards ? j->nshards : 1, sizeof *j->shards);
	j->queue = kiln_calloc(j->nshards ? j->nshards : 1, sizeof *j->queue);
	if (!j->items || !j->shards || !j->queue)
		return KILN_ERR_NOMEM;
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	for (size_t i = 0; i < j->nitems; i++) {
		j->items[i].state = pi[i].error ? IT_FAILED : IT_PENDING;
		j->count[j->items[i].state]++;
	}
	for (size_t s = 0; s < j->nshards; s++) {
		j->shards[s].first = (uint32_t)(s * j->spec.shard_size);
		size_t left = j->nitems - j->shards[s].first;
		j->shards[s].count = (uint32_t)(left < j->spec.shard_size ? left : j->spec.shard_size);
	}
	if (j->nitems == 0 && !j->error)
		j->error = kiln_strdup("the input matched no files");
	j->planned = true;
	return KILN_OK;
}

/* ---- records: building and applying (shared by live changes and replay) ---- */

static json_t *record_new(const char *type, uint32_t num)
{
	return json_pack("{s:s, s:I}", "t", type, "job", (json_int_t)num);
}

typedef kiln_status (*put_fn)(void *target, const json_t *rec);

static kiln_status put_journal(void *target, const json_t *rec)
{
	return kiln_journal_append(target, rec);
}

static kiln_status put_sink(void *target, const json_t *rec)
{
	return kiln_journal_sink_put(target, rec);
}

/* Consumes rec (the reference is released even on failure). */
static kiln_status put_record(put_fn put, void *target, json_t *rec)
{
	kiln_status st = rec ? put(target, rec) : KILN_ERR_NOMEM;
	json_decref(rec);
	return st;
}

/* The job as submitted: header, item chunks and the "planned" marker. */
static kiln_status emit_job(const job *j, put_fn put, void *target)
{
	json_t *rec = record_new("job", j->num);
	if (!rec)
		return KILN_ERR_NOMEM;
	json_object_set_new(rec, "created", json_integer(j->created));
	json_object_set_new(rec, "idem", j->idem ? json_string(j->idem) : json_null());
	json_object_set(rec, "spec", j->spec.json);
	if (j->error)
		json_object_set_new(rec, "error", json_string(j->error));
	kiln_status st = put_record(put, target, rec);
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	size_t n = kiln_plan_count(j->plan);
	for (size_t first = 0; first < n && st == KILN_OK; first += RECORD_CHUNK) {
		rec = record_new("items", j->num);
		json_t *arr = json_array();
		if (!rec || !arr) {
			json_decref(rec);
			json_decref(arr);
			return KILN_ERR_NOMEM;
		}
		json_object_set_new(rec, "items", arr);
		for (size_t i = first; i < n && i < first + RECORD_CHUNK; i++)
			json_array_append_new(arr, pi[i].error ? json_pack("[s,n,s]", pi[i].input, pi[i].error)
							       : json_pack("[s,s]", pi[i].input, pi[i].output));
		st = put_record(put, target, rec);
	}
	if (st == KILN_OK && !j->error)
		st = put_record(put, target, record_new("planned", j->num));
	return st;
}

/* One item's outcome from a "result" record; live results and replay both apply records
 * through these, so what is in memory is what replay rebuilds. */
static void apply_ok(job *j, json_int_t id)
{
	if (id >= 0 && (size_t)id < j->nitems && j->items[id].state != IT_DONE) {
		free(j->items[id].error);
		j->items[id].error = NULL;
		set_item_state(j, &j->items[id], IT_DONE);
	}
}

static void apply_err(job *j, json_int_t id, json_int_t attempts, const char *msg)
{
	if (id < 0 || (size_t)id >= j->nitems || j->items[id].state == IT_DONE)
		return;
	job_item *it = &j->items[id];
	it->attempts = (uint8_t)(attempts > 255 ? 255 : attempts < 0 ? 0 : attempts);
	if (it->attempts >= j->spec.max_attempts) {
		free(it->error);
		it->error = kiln_strdup(msg ? msg : "failed");
		set_item_state(j, it, IT_FAILED);
	} else if (it->state != IT_IN_FLIGHT) {
		set_item_state(j, it, IT_PENDING);
	}
}

/* The totals of a record (each 0 when absent). */
typedef struct totals {
	uint64_t bytes_in, bytes_out;
	int64_t psnr_sum;
	uint64_t psnr_n, pixels;
} totals;

static void apply_totals(job *j, const totals *t)
{
	j->bytes_in += t->bytes_in;
	j->bytes_out += t->bytes_out;
	j->psnr_sum += t->psnr_sum;
	j->psnr_n += t->psnr_n;
	j->pixels += t->pixels;
}

static void apply_result(job *j, const json_t *rec)
{
	size_t i;
	const json_t *e;
	json_array_foreach(json_object_get(rec, "ok"), i, e)
		apply_ok(j, json_integer_value(e));
	json_array_foreach(json_object_get(rec, "err"), i, e)
		apply_err(j, json_integer_value(json_array_get(e, 0)), json_integer_value(json_array_get(e, 1)),
			  json_string_value(json_array_get(e, 2)));
	totals t = {(uint64_t)json_integer_value(json_object_get(rec, "bytes_in")),
		    (uint64_t)json_integer_value(json_object_get(rec, "bytes_out")),
		    (int64_t)json_integer_value(json_object_get(rec, "psnr_sum")),
		    (uint64_t)json_integer_value(json_object_get(rec, "psnr_n")),
		    (uint64_t)json_integer_value(json_object_get(rec, "pixels"))};
	apply_totals(j, &t);
}

static void apply_cancel(kiln_jobs *js, job *j, bool announce)
{
	j->cancelled = true;
	for (size_t q = 0; q < j->qlen; q++)
		j->shards[j->queue[(j->qhead + q) % j->nshards]].queued = false;
	j->qlen = 0;
	if (!announce)
		return;
	if (js->ncancelled == js->cancelled_cap) {
		size_t cap = js->cancelled_cap ? js->cancelled_cap * 2 : 16;
		uint32_t *grown = kiln_realloc(js->cancelled, cap * sizeof *grown);
		if (!grown)
			return;  /* workers then learn of it from ignored results; nothing breaks */
		js->cancelled = grown;
		js->cancelled_cap = cap;
	}
	js->cancelled[js->ncancelled++] = j->num;
}

/* Items that failed at run time come back; those refused at planning would only fail
 * again the same way. */
static size_t apply_retry(kiln_jobs *js, job *j, bool requeue)
{
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	size_t n = 0;
	for (size_t i = 0; i < j->nitems; i++) {
		job_item *it = &j->items[i];
		if (it->state != IT_FAILED || pi[i].error)
			continue;
		free(it->error);
		it->error = NULL;
		it->attempts = 0;
		set_item_state(j, it, IT_PENDING);
		n++;
	}
	if (n) {
		j->t_end = 0;
		j->started = false;  /* rate and ETA restart with the next dispatch */
		if (requeue)
			queue_all(js, j);
	}
	return n;
}

/* ---- replay ---- */

static kiln_status replay_job(kiln_jobs *js, const json_t *rec, uint32_t num)
{
	char err[256];
	kiln_status st = KILN_ERR_NOMEM;
	job *j = kiln_calloc(1, sizeof *j);
	if (!j)
		return st;
	j->num = num;
	kiln_jobs_format_id(num, UINT32_MAX, j->id, sizeof j->id);
	j->created = json_integer_value(json_object_get(rec, "created"));
	const char *idem = json_string_value(json_object_get(rec, "idem"));
	const char *error = json_string_value(json_object_get(rec, "error"));
	if ((idem && !(j->idem = kiln_strdup(idem))) || (error && !(j->error = kiln_strdup(error))))
		goto fail;
	st = kiln_job_spec_parse(json_object_get(rec, "spec"), &j->spec, err, sizeof err);
	if (st != KILN_OK) {
		KILN_ERROR("journal: a job's spec no longer validates", "job=%u reason=\"%s\"", num, err);
		st = KILN_ERR_CORRUPT;
		goto fail;
	}
	st = kiln_plan_create(&j->plan);
	if (st != KILN_OK)
		goto fail;
	if (j->error && (st = job_finish_plan(j)) != KILN_OK)
		goto fail;
	st = insert_job(js, j);
	if (st == KILN_OK)
		return KILN_OK;
fail:
	job_free(j);
	return st;
}

static kiln_status replay_items(job *j, const json_t *rec)
{
	size_t i;
	const json_t *e;
	json_array_foreach(json_object_get(rec, "items"), i, e) {
		const char *in = json_string_value(json_array_get(e, 0));
		const char *out = json_string_value(json_array_get(e, 1));
		const char *error = json_string_value(json_array_get(e, 2));
		if (!in || (!out && !error))
			return KILN_ERR_CORRUPT;
		kiln_status st = kiln_plan_add(j->plan, in, out, error);
		if (st != KILN_OK)
			return st;
	}
	return KILN_OK;
}

static kiln_status replay_record(void *ctx, json_t *rec)
{
	kiln_jobs *js = ctx;
	const char *t = json_string_value(json_object_get(rec, "t"));
	json_int_t num = json_integer_value(json_object_get(rec, "job"));
	if (!t || num < 1 || num > UINT32_MAX)
		return KILN_ERR_CORRUPT;
	if (strcmp(t, "job") == 0)
		return replay_job(js, rec, (uint32_t)num);
	job *j = find_job(js, (uint32_t)num);
	if (!j) {
		KILN_WARN("journal: record for an unknown job, skipped", "job=%lld type=%s", (long long)num, t);
		return KILN_OK;
	}
	if (strcmp(t, "items") == 0)
		return j->planned ? KILN_ERR_CORRUPT : replay_items(j, rec);
	if (strcmp(t, "planned") == 0)
		return j->planned ? KILN_ERR_CORRUPT : job_finish_plan(j);
	if (!j->planned)
		return KILN_ERR_CORRUPT;
	if (strcmp(t, "result") == 0)
		apply_result(j, rec);
	else if (strcmp(t, "cancel") == 0)
		apply_cancel(js, j, false);
	else if (strcmp(t, "retry") == 0)
		apply_retry(js, j, false);
	else
		KILN_WARN("journal: unknown record type, skipped", "type=%.32s", t);
	return KILN_OK;
}

/* ---- compaction ---- */

/* One job's current state as records: what it was, then what has happened to it. */
static kiln_status dump_job(const job *j, kiln_journal_sink *sink)
{
	kiln_status st = emit_job(j, put_sink, sink);
	if (st != KILN_OK || j->error)
		return st;
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	for (size_t first = 0; first < j->nitems && st == KILN_OK; first += RECORD_CHUNK) {
		json_t *rec = record_new("result", j->num), *ok = json_array(), *err = json_array();
		if (rec && ok && err && first == 0) {
			json_object_set_new(rec, "bytes_in", json_integer((json_int_t)j->bytes_in));
			json_object_set_new(rec, "bytes_out", json_integer((json_int_t)j->bytes_out));
			if (j->psnr_n) {
				json_object_set_new(rec, "psnr_sum", json_integer((json_int_t)j->psnr_sum));
				json_object_set_new(rec, "psnr_n", json_integer((json_int_t)j->psnr_n));
			}
			if (j->pixels)
				json_object_set_new(rec, "pixels", json_integer((json_int_t)j->pixels));
		}
		json_object_set_new(rec, "ok", ok);
		json_object_set_new(rec, "err", err);
		for (size_t i = first; i < j->nitems && i < first + RECORD_CHUNK && ok && err; i++) {
			const job_item *it = &j->items[i];
			if (it->state == IT_DONE)
				json_array_append_new(ok, json_integer((json_int_t)i));
			else if (it->attempts && !pi[i].error)
				json_array_append_new(err, json_pack("[I,i,s]", (json_int_t)i, it->attempts,
								     it->error ? it->error : ""));
		}
		st = put_record(put_sink, sink, rec);
	}
	if (st == KILN_OK && j->cancelled)
		st = put_record(put_sink, sink, record_new("cancel", j->num));
	return st;
}

static kiln_status dump_all(void *ctx, kiln_journal_sink *sink)
{
	kiln_jobs *js = ctx;
	kiln_status st = KILN_OK;
	for (size_t n = 0; n < js->njobs && st == KILN_OK; n++)
		if (js->jobs[n] && (js->jobs[n]->planned || js->jobs[n]->error))
			st = dump_job(js->jobs[n], sink);
	return st;
}

/* Called with the lock held after a commit. A failed compaction leaves the journal as it
 * was (still correct, only longer), so it is logged, not returned. */
static void maybe_compact(kiln_jobs *js)
{
	if (!kiln_journal_wants_compaction(js->journal))
		return;
	kiln_status st = kiln_journal_compact(js->journal, dump_all, js);
	if (st != KILN_OK)
		KILN_ERROR("journal compaction failed; the journal keeps growing", "error=\"%s\"",
			   kiln_strerror(st));
}

/* Commits rec (consumed). Callers apply the record and only then call maybe_compact:
 * compaction dumps memory, which must already hold what the record says. */
static kiln_status commit(kiln_jobs *js, json_t *rec)
{
	kiln_status st = put_record(put_journal, js->journal, rec);
	if (st == KILN_OK)
		st = kiln_journal_sync(js->journal);
	if (st != KILN_OK)
		KILN_ERROR("journal write failed", "error=\"%s\"", kiln_strerror(st));
	return st;
}

/* ---- open / close ---- */

kiln_status kiln_jobs_open(const kiln_jobs_config *cfg, kiln_jobs **out)
{
	*out = NULL;
	if (!cfg || !cfg->state_dir)
		return KILN_ERR_INVALID_ARG;
	kiln_jobs *js = kiln_calloc(1, sizeof *js);
	if (!js)
		return KILN_ERR_NOMEM;
	pthread_mutex_init(&js->lock, NULL);
	kiln_buf_init(&js->records, KILN_JOURNAL_MAX_LINE);
	js->cfg = *cfg;
	js->cfg.state_dir = NULL;  /* not kept: the caller's string */
	if (!js->cfg.lease_ms)
		js->cfg.lease_ms = 30000;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	/* microseconds since the epoch: later than any lease an earlier run can have handed
	 * out, as long as it dispatched fewer than a million shards a second */
	js->next_lease = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
	js->lease_base = js->next_lease;
	bool dropped = false;
	kiln_status st = kiln_journal_open(cfg->state_dir, cfg->compact_bytes, &js->journal);
	if (st != KILN_OK)
		goto fail;
	st = kiln_journal_replay(js->journal, replay_record, js);
	if (st != KILN_OK)
		goto fail;
	for (size_t n = 0; n < js->njobs; n++) {
		job *j = js->jobs[n];
		if (j && !j->planned) {
			/* its submit never finished, so it was never acknowledged */
			job_free(j);
			js->jobs[n] = NULL;
			dropped = true;
		} else if (j) {
			queue_all(js, j);
		}
	}
	/* rewriting without the unfinished job keeps its half from meeting a reused number */
	if (dropped && (st = kiln_journal_compact(js->journal, dump_all, js)) != KILN_OK)
		goto fail;
	*out = js;
	return KILN_OK;
fail:
	kiln_jobs_close(js);
	return st;
}

void kiln_jobs_close(kiln_jobs *js)
{
	if (!js)
		return;
	for (size_t n = 0; n < js->njobs; n++)
		job_free(js->jobs[n]);
	free(js->jobs);
	free(js->cancelled);
	kiln_buf_free(&js->records);
	free(js->outcomes);
	kiln_journal_close(js->journal);
	pthread_mutex_destroy(&js->lock);
	free(js);
}

void kiln_jobs_set_wakeup(kiln_jobs *js, void (*fn)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&js->lock);
	js->wakeup = fn;
	js->wakeup_ctx = ctx;
	pthread_mutex_unlock(&js->lock);
}

static void unlock_and_wake(kiln_jobs *js, bool wake)
{
	void (*fn)(void *) = js->wakeup;
	void *ctx = js->wakeup_ctx;
	pthread_mutex_unlock(&js->lock);
	if (wake && fn)
		fn(ctx);
}

/* ---- views ---- */

static json_t *job_view(const job *j, bool with_spec)
{
	kiln_job_state state = job_state(j);
	size_t open = j->count[IT_PENDING] + j->count[IT_IN_FLIGHT];
	size_t ended = j->count[IT_DONE] + j->count[IT_FAILED];
	double rate = 0, mpix_rate = 0;
	if (j->started) {
		double elapsed = (j->t_end ? j->t_end : kiln_now_s()) - j->t_start;
		if (elapsed > 0) {
			rate = (double)(ended - j->ended_at_start) / elapsed;
			mpix_rate = (double)(j->pixels - j->pixels_at_start) / 1e6 / elapsed;
		}
	}
	char created[32];
	time_t t = (time_t)j->created;
	struct tm tm;
	strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	json_t *v = json_pack("{s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I}, s:f, s:I, s:I}",
			      "id", j->id, "state", kiln_job_state_name(state), "created", created,
			      "items", "total", (json_int_t)j->nitems, "done", (json_int_t)j->count[IT_DONE],
			      "failed", (json_int_t)j->count[IT_FAILED], "pending", (json_int_t)open,
			      "in_flight", (json_int_t)j->count[IT_IN_FLIGHT],
			      "shards", "total", (json_int_t)j->nshards, "in_flight", (json_int_t)j->shards_leased,
			      "rate", rate, "bytes_in", (json_int_t)j->bytes_in, "bytes_out", (json_int_t)j->bytes_out);
	if (!v)
		return NULL;
	if (state == KILN_JOB_DONE)
		json_object_set_new(v, "eta_s", json_real(0));
	else if (rate > 0 && state == KILN_JOB_RUNNING)
		json_object_set_new(v, "eta_s", json_real((double)open / rate));
	else
		json_object_set_new(v, "eta_s", json_null());
	/* quality and throughput, from what workers reported for ok items (PSNR only with
	 * measure_psnr; pixels only from workers that report them) */
	json_object_set_new(v, "psnr_mean_db",
			    j->psnr_n ? json_real((double)j->psnr_sum / (double)j->psnr_n / 100.0) : json_null());
	json_object_set_new(v, "mpix", json_real((double)j->pixels / 1e6));
	json_object_set_new(v, "mpix_per_s", json_real(mpix_rate));
	if (j->error)
		json_object_set_new(v, "error", json_string(j->error));
	if (with_spec)
		json_object_set(v, "spec", j->spec.json);
	return v;
}

kiln_status kiln_jobs_view(kiln_jobs *js, const char *id, json_t **view)
{
	pthread_mutex_lock(&js->lock);
	job *j = find_job_id(js, id);
	*view = j ? job_view(j, true) : NULL;
	pthread_mutex_unlock(&js->lock);
	return !j ? KILN_ERR_NOT_FOUND : *view ? KILN_OK : KILN_ERR_NOMEM;
}

json_t *kiln_jobs_list(kiln_jobs *js)
{
	json_t *arr = json_array();
	if (!arr)
		return NULL;
	pthread_mutex_lock(&js->lock);
	for (size_t n = 0; n < js->njobs; n++)
		if (js->jobs[n])
			json_array_append_new(arr, job_view(js->jobs[n], false));
	pthread_mutex_unlock(&js->lock);
	return json_pack("{s:o}", "jobs", arr);
}

kiln_status kiln_jobs_failures(kiln_jobs *js, const char *id, size_t offset, size_t limit, json_t **out)
{
	*out = NULL;
	json_t *arr = json_array();
	if (!arr)
		return KILN_ERR_NOMEM;
	pthread_mutex_lock(&js->lock);
	job *j = find_job_id(js, id);
	if (!j) {
		pthread_mutex_unlock(&js->lock);
		json_decref(arr);
		return KILN_ERR_NOT_FOUND;
	}
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	size_t seen = 0;
	for (size_t i = 0; i < j->nitems; i++) {
		const job_item *it = &j->items[i];
		if (it->state != IT_FAILED)
			continue;
		if (seen++ < offset || json_array_size(arr) >= limit)
			continue;
		json_array_append_new(arr, json_pack("{s:s, s:s, s:i}", "input", pi[i].input, "error",
						     pi[i].error ? pi[i].error : it->error ? it->error : "failed",
						     "attempts", it->attempts));
	}
	pthread_mutex_unlock(&js->lock);
	*out = json_pack("{s:o, s:I, s:I, s:I}", "failures", arr, "total", (json_int_t)seen,
			 "offset", (json_int_t)offset, "limit", (json_int_t)limit);
	return *out ? KILN_OK : KILN_ERR_NOMEM;
}

void kiln_jobs_get_stats(kiln_jobs *js, kiln_jobs_stats *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&js->lock);
	for (size_t n = 0; n < js->njobs; n++) {
		const job *j = js->jobs[n];
		if (!j)
			continue;
		out->jobs[job_state(j)]++;
		out->items_pending += j->count[IT_PENDING];
		out->items_in_flight += j->count[IT_IN_FLIGHT];
		out->items_done += j->count[IT_DONE];
		out->items_failed += j->count[IT_FAILED];
		out->shards_in_flight += j->shards_leased;
		out->bytes_in += j->bytes_in;
		out->bytes_out += j->bytes_out;
	}
	out->journal_bytes = kiln_journal_size(js->journal);
	pthread_mutex_unlock(&js->lock);
}

/* ---- REST-side changes ---- */

static job *find_idem(kiln_jobs *js, const char *key)
{
	for (size_t n = 0; key && n < js->njobs; n++)
		if (js->jobs[n] && js->jobs[n]->idem && strcmp(js->jobs[n]->idem, key) == 0)
			return js->jobs[n];
	return NULL;
}

/* Expands the spec's input (no lock held: listings can be slow). A listing failure is the
 * job's error, not the call's. */
static kiln_status plan_job(kiln_jobs *js, job *j)
{
	char msg[512];
	kiln_storage *storage = NULL;
	kiln_status st = kiln_plan_create(&j->plan);
	if (st != KILN_OK)
		return st;
	if (j->spec.input_kind != KILN_INPUT_LIST) {
		st = kiln_storage_create(NULL, &storage, msg, sizeof msg);
		if (st != KILN_OK)
			goto failed;
	}
	st = kiln_plan_build(j->plan, &j->spec, storage, js->cfg.max_items, msg, sizeof msg);
	kiln_storage_destroy(storage);
	if (st == KILN_OK || st == KILN_ERR_NOMEM)
		return st;
failed:
	/* the items listed before the failure are not kept: a failed job has none */
	kiln_plan_destroy(j->plan);
	j->plan = NULL;
	if ((st = kiln_plan_create(&j->plan)) != KILN_OK)
		return st;
	j->error = kiln_strdup(msg[0] ? msg : "the input could not be listed");
	return j->error ? KILN_OK : KILN_ERR_NOMEM;
}

kiln_status kiln_jobs_submit(kiln_jobs *js, const json_t *spec, const char *idem_key, json_t **view,
			     bool *created, char *err, size_t err_cap)
{
	*view = NULL;
	*created = false;
	if (idem_key && (!idem_key[0] || strlen(idem_key) > KILN_IDEMPOTENCY_KEY_MAX)) {
		snprintf(err, err_cap, "Idempotency-Key must be 1 to %d characters", KILN_IDEMPOTENCY_KEY_MAX);
		return KILN_ERR_INVALID_ARG;
	}
	pthread_mutex_lock(&js->lock);
	job *existing = find_idem(js, idem_key);
	if (existing)
		*view = job_view(existing, true);
	pthread_mutex_unlock(&js->lock);
	if (existing)
		return *view ? KILN_OK : KILN_ERR_NOMEM;

	kiln_status st = KILN_ERR_NOMEM;
	job *j = kiln_calloc(1, sizeof *j);
	if (!j)
		return st;
	j->created = (int64_t)time(NULL);
	if (idem_key && !(j->idem = kiln_strdup(idem_key)))
		goto fail;
	st = kiln_job_spec_parse(spec, &j->spec, err, err_cap);
	if (st != KILN_OK)
		goto fail;
	st = plan_job(js, j);
	if (st != KILN_OK)
		goto fail;
	st = job_finish_plan(j);
	if (st != KILN_OK)
		goto fail;

	pthread_mutex_lock(&js->lock);
	/* two requests with one key may have planned at once: the first to get here wins */
	existing = find_idem(js, idem_key);
	if (existing) {
		*view = job_view(existing, true);
		pthread_mutex_unlock(&js->lock);
		job_free(j);
		return *view ? KILN_OK : KILN_ERR_NOMEM;
	}
	j->num = (uint32_t)js->njobs + 1;
	kiln_jobs_format_id(j->num, UINT32_MAX, j->id, sizeof j->id);
	uint64_t journal_before = kiln_journal_size(js->journal);
	st = emit_job(j, put_journal, js->journal);
	if (st == KILN_OK)
		st = kiln_journal_sync(js->journal);
	if (st == KILN_OK) {
		/* a new job is all live state: compacting because of it would copy it whole,
		 * under the lock, for nothing (at a million items, seconds of stalled dispatch) */
		kiln_journal_note_live(js->journal, kiln_journal_size(js->journal) - journal_before);
		st = insert_job(js, j);
	} else {
		/* the number stays used: half of this job may be in the journal */
		(void)reserve_number(js, j->num);
		snprintf(err, err_cap, "could not journal the job: %s", kiln_strerror(st));
	}
	if (st != KILN_OK) {
		pthread_mutex_unlock(&js->lock);
		goto fail;
	}
	queue_all(js, j);
	maybe_compact(js);
	*view = job_view(j, true);
	*created = true;
	KILN_INFO("job accepted", "job=%s items=%zu shards=%zu state=%s", j->id, j->nitems, j->nshards,
		  kiln_job_state_name(job_state(j)));
	unlock_and_wake(js, true);
	return *view ? KILN_OK : KILN_ERR_NOMEM;
fail:
	job_free(j);
	return st;
}

kiln_status kiln_jobs_cancel(kiln_jobs *js, const char *id, json_t **view)
{
	*view = NULL;
	pthread_mutex_lock(&js->lock);
	job *j = find_job_id(js, id);
	kiln_status st = j ? KILN_OK : KILN_ERR_NOT_FOUND;
	kiln_job_state state = j ? job_state(j) : KILN_JOB_FAILED;
	bool changed = j && (state == KILN_JOB_QUEUED || state == KILN_JOB_RUNNING);
	if (changed && (st = commit(js, record_new("cancel", j->num))) == KILN_OK) {
		apply_cancel(js, j, true);
		maybe_compact(js);
		KILN_INFO("job cancelled", "job=%s", j->id);
	}
	if (st == KILN_OK && !(*view = job_view(j, true)))
		st = KILN_ERR_NOMEM;
	unlock_and_wake(js, changed && st == KILN_OK);
	return st;
}

kiln_status kiln_jobs_retry_failed(kiln_jobs *js, const char *id, json_t **view)
{
	*view = NULL;
	pthread_mutex_lock(&js->lock);
	job *j = find_job_id(js, id);
	kiln_status st = j ? KILN_OK : KILN_ERR_NOT_FOUND;
	if (j && (j->cancelled || j->error))
		st = KILN_ERR_UNSUPPORTED;
	bool any = false;
	if (st == KILN_OK) {
		const kiln_plan_item *pi = kiln_plan_items(j->plan);
		for (size_t i = 0; i < j->nitems && !any; i++)
			any = j->items[i].state == IT_FAILED && !pi[i].error;
	}
	if (any && (st = commit(js, record_new("retry", j->num))) == KILN_OK) {
		KILN_INFO("retrying failed items", "job=%s items=%zu", j->id, apply_retry(js, j, true));
		maybe_compact(js);
	}
	if (st == KILN_OK && !(*view = job_view(j, true)))
		st = KILN_ERR_NOMEM;
	unlock_and_wake(js, any && st == KILN_OK);
	return st;
}

/* ---- dispatch side ---- */

static bool codec_ok(const json_t *codecs, const char *format)
{
	if (!codecs)
		return true;
	size_t i;
	const json_t *c;
	json_array_foreach(codecs, i, c)
		if (json_is_string(c) && strcmp(json_string_value(c), format) == 0)
			return true;
	return false;
}

/* The `shard` message, written as text into out (what json_dumps would make of the
 * message object, without building one: that and its dump were a third of the
 * dispatcher's CPU per shard). The scheduler wrote it from validated state, so it is not
 * parsed back to be validated. KILN_ERR_TOO_LARGE over the frame cap, KILN_ERR_CORRUPT
 * for a name that is not UTF-8. Called with the lock held. */
static kiln_status shard_text(const kiln_jobs *js, job *j, uint32_t idx, kiln_buf *out)
{
	const shard *s = &j->shards[idx];
	const kiln_plan_item *pi = kiln_plan_items(j->plan);
	if (!j->options_text && !(j->options_text = json_dumps(j->spec.options, JSON_COMPACT)))
		return KILN_ERR_NOMEM;
	char head[160];
	int n = snprintf(head, sizeof head, "{\"v\":%d,\"type\":\"shard\",\"job\":\"%s\",\"shard\":\"j%u.s%u\","
					    "\"lease\":%llu,\"lease_ms\":%u,\"options\":",
			 KILN_PROTO_VERSION, j->id, j->num, idx, (unsigned long long)s->lease, js->cfg.lease_ms);
	kiln_buf_reset(out);
	kiln_status st = n > 0 && (size_t)n < sizeof head ? kiln_buf_append(out, head, (size_t)n) : KILN_ERR_NOMEM;
	if (st == KILN_OK)
		st = kiln_json_put_raw(out, j->options_text);
	if (st == KILN_OK)
		st = kiln_json_put_raw(out, ",\"items\":[");
	bool first = true;
	for (uint32_t i = s->first; i < s->first + s->count && st == KILN_OK; i++) {
		if (j->items[i].state != IT_IN_FLIGHT)
			continue;
		st = kiln_json_put_raw(out, first ? "{\"id\":" : ",{\"id\":");
		first = false;
		if (st == KILN_OK)
			st = kiln_json_put_uint(out, i);
		if (st == KILN_OK)
			st = kiln_json_put_raw(out, ",\"input\":");
		if (st == KILN_OK)
			st = kiln_json_put_string(out, pi[i].input, strlen(pi[i].input));
		if (st == KILN_OK)
			st = kiln_json_put_raw(out, ",\"output\":");
		if (st == KILN_OK)
			st = kiln_json_put_string(out, pi[i].output, strlen(pi[i].output));
		if (st == KILN_OK)
			st = kiln_buf_append(out, "}", 1);
	}
	if (st == KILN_OK)
		st = kiln_json_put_raw(out, "]}");
	return st;
}

kiln_status kiln_jobs_next_shard_text(kiln_jobs *js, const json_t *codecs, kiln_lease *lease, kiln_buf *out)
{
	kiln_status st = KILN_ERR_NOT_FOUND;
	pthread_mutex_lock(&js->lock);
	for (size_t n = js->first_active; n < js->njobs && st == KILN_ERR_NOT_FOUND; n++) {
		job *j = js->jobs[n];
		if (!j || j->qlen == 0 || j->cancelled) {
			if (n == js->first_active)
				js->first_active++;
			continue;
		}
		if (!codec_ok(codecs, j->spec.format))
			continue;
		while (j->qlen && st == KILN_ERR_NOT_FOUND) {
			uint32_t idx = j->queue[j->qhead];
			j->qhead = (j->qhead + 1) % j->nshards;
			j->qlen--;
			shard *s = &j->shards[idx];
			s->queued = false;
			if (!shard_has_pending(j, s))
				continue;
			for (uint32_t i = s->first; i < s->first + s->count; i++)
				if (j->items[i].state == IT_PENDING)
					set_item_state(j, &j->items[i], IT_IN_FLIGHT);
			s->leased = true;
			s->lease = ++js->next_lease;
			j->shards_leased++;
			if (!j->started) {
				j->started = true;
				j->t_start = kiln_now_s();
				j->ended_at_start = j->count[IT_DONE] + j->count[IT_FAILED];
				j->pixels_at_start = j->pixels;
			}
			*lease = (kiln_lease){j->num, idx, s->lease};
			st = shard_text(js, j, idx, out);
		}
	}
	pthread_mutex_unlock(&js->lock);
	if (st != KILN_OK && st != KILN_ERR_NOT_FOUND) {
		/* the shard was leased but cannot be sent: the lease ends as a lost one would,
		 * an attempt for its items, so a shard that can never be sent ends as failed */
		kiln_jobs_release(js, lease,
				  st == KILN_ERR_TOO_LARGE ? "shard message over the 1 MiB frame cap (lower shard_size)"
				  : st == KILN_ERR_CORRUPT ? "an input or output name is not valid UTF-8"
							   : "out of memory building the shard");
	}
	return st;
}

kiln_status kiln_jobs_next_shard(kiln_jobs *js, const json_t *codecs, kiln_lease *lease, json_t **msg)
{
	*msg = NULL;
	kiln_buf text;
	kiln_buf_init(&text, KILN_PROTO_MAX_FRAME);
	kiln_status st = kiln_jobs_next_shard_text(js, codecs, lease, &text);
	if (st == KILN_OK && !(*msg = json_loadb((const char *)text.data, text.len, 0, NULL)))
		st = KILN_ERR_NOMEM;
	kiln_buf_free(&text);
	return st;
}

/* The lease is over: items still in flight go back to pending; the shard is queued again
 * if anything in it is left to do. */
static void end_lease(kiln_jobs *js, job *j, uint32_t idx)
{
	shard *s = &j->shards[idx];
	for (uint32_t i = s->first; i < s->first + s->count; i++)
		if (j->items[i].state == IT_IN_FLIGHT)
			set_item_state(j, &j->items[i], IT_PENDING);
	s->leased = false;
	j->shards_leased--;
	push_shard(js, j, idx);
}

/* The job and shard a message names, if its lease is the current one. */
static job *current_lease(kiln_jobs *js, const char *job_id, const char *shard_id, uint64_t lease,
			  uint32_t *idx)
{
	uint32_t num;
	if (!kiln_jobs_parse_id(shard_id, &num, idx) || *idx == UINT32_MAX)
		return NULL;
	job *j = find_job(js, num);
	if (!j || !j->planned || (job_id && strcmp(job_id, j->id) != 0) || *idx >= j->nshards)
		return NULL;
	const shard *s = &j->shards[*idx];
	return s->leased && s->lease == lease ? j : NULL;
}

/* A result for a lease that an earlier run of the scheduler handed out: a worker held it
 * across the restart (PROTOCOL.md, `held`) and delivers it now. No lease of this run can
 * match it, so it used to be ignored as stale and its items, whose outputs were already
 * written, were all done again (tests/unit/test_faults.c: 32 of 200 outputs rewritten after
 * a kill -9 of the scheduler). Its items that have not ended are taken instead: ok items
 * whether or not the shard has been leased again meanwhile, failed ones only while nobody
 * holds the shard (a current holder will report those). The current lease, if any, is left
 * alone. Results of this run's expired leases stay ignored. */
static job *earlier_run_lease(kiln_jobs *js, const char *job_id, const char *shard_id, uint64_t lease,
			      uint32_t *idx)
{
	uint32_t num;
	if (lease >= js->lease_base || !kiln_jobs_parse_id(shard_id, &num, idx) || *idx == UINT32_MAX)
		return NULL;
	job *j = find_job(js, num);
	if (!j || !j->planned || (job_id && strcmp(job_id, j->id) != 0) || *idx >= j->nshards)
		return NULL;
	return j;
}

/* What one `result` of a batch changes, kept until the batch is durable: its job and
 * shard, and its item outcomes (js->outcomes[first .. first + count)). */
typedef struct outcome {
	json_int_t id;
	json_int_t attempts;  /* 0: ok; else the attempt count the failure brings it to */
	const char *msg;      /* the failure's reason, in the result message (alive until applied) */
} outcome;

typedef struct batch_entry {
	job *j;               /* NULL: stale, foreign, or a repeat within the batch */
	uint32_t idx;
	bool earlier;
	size_t first, count;
	totals t;
} batch_entry;

static kiln_status outcome_push(kiln_jobs *js, size_t *used, outcome o)
{
	if (*used == js->outcomes_cap) {
		size_t cap = js->outcomes_cap ? js->outcomes_cap * 2 : 1024;
		outcome *grown = kiln_realloc(js->outcomes, cap * sizeof *grown);
		if (!grown)
			return KILN_ERR_NOMEM;
		js->outcomes = grown;
		js->outcomes_cap = cap;
	}
	js->outcomes[(*used)++] = o;
	return KILN_OK;
}

/* The fields of one result item the scheduler reads, found in one pass over its keys
 * (the message was validated: types are right, "id" and "status" are there). */
typedef struct item_view {
	json_int_t id, bytes, bytes_in, psnr, pixels;
	bool has_psnr, ok;
	const char *error;
} item_view;

static void view_item(const json_t *e, item_view *v)
{
	*v = (item_view){.id = -1};
	for (void *it = json_object_iter((json_t *)e); it; it = json_object_iter_next((json_t *)e, it)) {
		const char *k = json_object_iter_key(it);
		const json_t *val = json_object_iter_value(it);
		switch (k[0]) {
		case 'i': v->id = json_integer_value(val); break;  /* "id" */
		case 's': v->ok = strcmp(json_string_value(val), "ok") == 0; break;  /* "status" */
		case 'e': v->error = json_string_value(val); break;  /* "error" */
		case 'b':
			if (k[5] == '\0')
				v->bytes = json_integer_value(val);
			else
				v->bytes_in = json_integer_value(val);
			break;
		case 'p':
			if (k[1] == 's') {
				v->psnr = json_integer_value(val);
				v->has_psnr = true;
			} else {
				v->pixels = json_integer_value(val);
			}
			break;
		default: break;
		}
	}
	if (!v->ok && !v->error) {
		const char *status = json_string_value(json_object_get(e, "status"));
		v->error = status ? status : "failed";
	}
}

/* The outcomes of one `result` whose lease is current, or from an earlier run (see above),
 * into js->outcomes from *used on, and its "result" record appended as a line of text to
 * js->records (nothing when it names nothing that needs recording, e.g. only items dropped
 * by our own cancel). Called with the lock held. */
static kiln_status result_outcomes(kiln_jobs *js, batch_entry *b, const json_t *result, size_t *used)
{
	const job *j = b->j;
	const shard *s = &j->shards[b->idx];
	uint8_t seen[KILN_SPEC_MAX_SHARD];
	memset(seen, 0, s->count);
	b->first = *used;
	size_t i;
	const json_t *e;
	json_array_foreach(json_object_get(result, "items"), i, e) {
		item_view v;
		view_item(e, &v);
		/* an id outside the shard, repeated, or not in flight would corrupt counts */
		if (v.id < s->first || v.id >= (json_int_t)s->first + s->count || seen[v.id - s->first])
			continue;
		uint8_t state = j->items[v.id].state;
		if (b->earlier ? !(state == IT_PENDING || (v.ok && state == IT_IN_FLIGHT)) : state != IT_IN_FLIGHT)
			continue;
		seen[v.id - s->first] = 1;
		kiln_status st;
		if (v.ok) {
			b->t.bytes_out += (uint64_t)v.bytes;
			b->t.bytes_in += (uint64_t)v.bytes_in;
			b->t.pixels += (uint64_t)v.pixels;
			if (v.has_psnr) {
				b->t.psnr_sum += v.psnr;
				b->t.psnr_n++;
			}
			st = outcome_push(js, used, (outcome){v.id, 0, NULL});
		} else {
			/* items dropped because of our own cancel are not their fault */
			if (j->cancelled && strcmp(v.error, "cancelled") == 0)
				continue;
			st = outcome_push(js, used, (outcome){v.id, j->items[v.id].attempts + 1, v.error});
		}
		if (st != KILN_OK)
			return st;
	}
	b->count = *used - b->first;
	if (b->count == 0)
		return KILN_OK;
	/* the record, as text: {"t":"result","job":N,"ok":[..],"err":[[id,attempts,msg],..],...} */
	kiln_buf *r = &js->records;
	size_t start = r->len;
	char num[48];
	snprintf(num, sizeof num, "{\"t\":\"result\",\"job\":%u,\"ok\":[", j->num);
	kiln_status st = kiln_json_put_raw(r, num);
	bool first = true;
	for (size_t k = b->first; k < *used && st == KILN_OK; k++) {
		if (js->outcomes[k].attempts)
			continue;
		if (!first)
			st = kiln_buf_append(r, ",", 1);
		first = false;
		if (st == KILN_OK)
			st = kiln_json_put_int(r, js->outcomes[k].id);
	}
	if (st == KILN_OK)
		st = kiln_json_put_raw(r, "],\"err\":[");
	first = true;
	for (size_t k = b->first; k < *used && st == KILN_OK; k++) {
		const outcome *o = &js->outcomes[k];
		if (!o->attempts)
			continue;
		st = kiln_json_put_raw(r, first ? "[" : ",[");
		first = false;
		if (st == KILN_OK)
			st = kiln_json_put_int(r, o->id);
		if (st == KILN_OK)
			st = kiln_buf_append(r, ",", 1);
		if (st == KILN_OK)
			st = kiln_json_put_int(r, o->attempts);
		if (st == KILN_OK)
			st = kiln_buf_append(r, ",", 1);
		if (st == KILN_OK)
			st = kiln_json_put_string(r, o->msg, strlen(o->msg));
		if (st == KILN_OK)
			st = kiln_buf_append(r, "]", 1);
	}
	if (st == KILN_OK)
		st = kiln_json_put_raw(r, "],\"bytes_in\":");
	if (st == KILN_OK)
		st = kiln_json_put_uint(r, b->t.bytes_in);
	if (st == KILN_OK)
		st = kiln_json_put_raw(r, ",\"bytes_out\":");
	if (st == KILN_OK)
		st = kiln_json_put_uint(r, b->t.bytes_out);
	if (st == KILN_OK && b->t.psnr_n) {
		st = kiln_json_put_raw(r, ",\"psnr_sum\":");
		if (st == KILN_OK)
			st = kiln_json_put_int(r, b->t.psnr_sum);
		if (st == KILN_OK)
			st = kiln_json_put_raw(r, ",\"psnr_n\":");
		if (st == KILN_OK)
			st = kiln_json_put_uint(r, b->t.psnr_n);
	}
	if (st == KILN_OK && b->t.pixels) {
		st = kiln_json_put_raw(r, ",\"pixels\":");
		if (st == KILN_OK)
			st = kiln_json_put_uint(r, b->t.pixels);
	}
	if (st == KILN_OK)
		st = kiln_buf_append(r, "}\n", 2);
	if (st != KILN_OK)
		r->len = start;
	return st;
}

kiln_status kiln_jobs_complete_many(kiln_jobs *js, const json_t *const *results, size_t n, bool *applied,
				    kiln_lease *leases)
{
	kiln_status st = KILN_OK;
	for (size_t r = 0; r < n; r++)
		applied[r] = false;
	if (n == 0)
		return KILN_OK;
	batch_entry *batch = kiln_calloc(n, sizeof *batch);
	if (!batch)
		return KILN_ERR_NOMEM;
	size_t used = 0;
	pthread_mutex_lock(&js->lock);
	kiln_buf_reset(&js->records);
	for (size_t r = 0; r < n && st == KILN_OK; r++) {
		const json_t *res = results[r];
		batch_entry *b = &batch[r];
		uint64_t lease = (uint64_t)json_integer_value(json_object_get(res, "lease"));
		const char *job_id = json_string_value(json_object_get(res, "job"));
		const char *shard_id = json_string_value(json_object_get(res, "shard"));
		job *j = current_lease(js, job_id, shard_id, lease, &b->idx);
		if (!j && (j = earlier_run_lease(js, job_id, shard_id, lease, &b->idx)))
			b->earlier = true;
		/* a worker that re-sends a result may put both copies in one batch: the first
		 * one closes the lease, so the second is late */
		for (size_t k = 0; j && k < r; k++)
			if (batch[k].j == j && batch[k].idx == b->idx)
				j = NULL;
		if (!j)
			continue;  /* stale or foreign: acknowledged and ignored */
		b->j = j;
		leases[r] = (kiln_lease){j->num, b->idx, lease};
		st = result_outcomes(js, b, res, &used);
	}
	/* The batch's records in one write and one fsync (group commit): at thousands of
	 * shards a second, one per result would be the dispatcher's whole budget. Still
	 * durable before any of them is applied, answered or acknowledged. */
	if (st == KILN_OK && js->records.len) {
		st = kiln_journal_append_text(js->journal, (const char *)js->records.data, js->records.len);
		if (st == KILN_OK)
			st = kiln_journal_sync(js->journal);
	}
	if (st != KILN_OK) {
		KILN_ERROR("journal write failed", "error=\"%s\"", kiln_strerror(st));
	} else {
		for (size_t r = 0; r < n; r++) {
			batch_entry *b = &batch[r];
			if (!b->j)
				continue;
			for (size_t k = b->first; k < b->first + b->count; k++) {
				const outcome *o = &js->outcomes[k];
				if (o->attempts)
					apply_err(b->j, o->id, o->attempts, o->msg);
				else
					apply_ok(b->j, o->id);
			}
			if (b->count)
				apply_totals(b->j, &b->t);
			if (!b->earlier)
				end_lease(js, b->j, b->idx);
			applied[r] = true;
		}
		maybe_compact(js);
	}
	/* a rare huge batch (long error messages) does not pin its memory for ever */
	if (js->records.cap > (4u << 20))
		kiln_buf_free(&js->records);
	pthread_mutex_unlock(&js->lock);
	free(batch);
	return st;
}

kiln_status kiln_jobs_complete(kiln_jobs *js, const json_t *result, bool *applied, kiln_lease *lease_out)
{
	return kiln_jobs_complete_many(js, &result, 1, applied, lease_out);
}

kiln_status kiln_jobs_release(kiln_jobs *js, const kiln_lease *lease, const char *reason)
{
	char sid[32];
	kiln_jobs_format_id(lease->job, lease->shard, sid, sizeof sid);
	kiln_status st = KILN_OK;
	json_t *rec = NULL;
	pthread_mutex_lock(&js->lock);
	uint32_t idx;
	job *j = current_lease(js, NULL, sid, lease->lease, &idx);
	if (!j)
		goto done;
	const shard *s = &j->shards[idx];
	/* a lost lease is an attempt: an input that kills workers must not be retried forever;
	 * after a cancel nothing more is counted */
	if (!j->cancelled) {
		json_t *err = json_array();
		rec = record_new("result", j->num);
		if (!rec || !err) {
			json_decref(err);
			st = KILN_ERR_NOMEM;
			goto done;
		}
		json_object_set_new(rec, "err", err);
		for (uint32_t i = s->first; i < s->first + s->count; i++)
			if (j->items[i].state == IT_IN_FLIGHT)
				json_array_append_new(err, json_pack("[I,i,s]", (json_int_t)i,
								     j->items[i].attempts + 1, reason));
		json_incref(rec);
		st = commit(js, rec);
		if (st != KILN_OK)
			goto done;
		apply_result(j, rec);
	}
	end_lease(js, j, idx);
	maybe_compact(js);
	KILN_INFO("lease lost; shard queued again", "shard=%s reason=\"%s\"", sid, reason);
done:
	pthread_mutex_unlock(&js->lock);
	json_decref(rec);
	return st;
}

size_t kiln_jobs_take_cancelled(kiln_jobs *js, uint32_t *out, size_t cap)
{
	pthread_mutex_lock(&js->lock);
	size_t n = js->ncancelled < cap ? js->ncancelled : cap;
	if (n) {
		memcpy(out, js->cancelled, n * sizeof *out);
		memmove(js->cancelled, js->cancelled + n, (js->ncancelled - n) * sizeof *out);
		js->ncancelled -= n;
	}
	pthread_mutex_unlock(&js->lock);
	return n;
}
