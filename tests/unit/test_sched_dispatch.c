/* The dispatcher against simulated workers: real DEALER sockets on tcp://127.0.0.1 that
 * speak docs/PROTOCOL.md through common/proto.h. Credits, least-loaded placement, a
 * silent worker losing its shards to another, expired leases, late results ignored,
 * max_attempts leading to the failure list, and cancel reaching the workers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "proc_util.h"
#include "sched_sim.h"
#include "scheduler/dispatch.h"
#include "scheduler/jobs.h"

/* Waits for what must arrive: generous, since a loaded 2-core machine can be seconds late;
 * they return as soon as the message comes. */
#define WAIT_MS 10000
#define HEARTBEAT_MS 50
#define LEASE_MS 600

static char dir[128];
static kiln_jobs *jobs;
static kiln_dispatch *disp;

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "dispatch");
	kiln_jobs_config jc = {dir, 0, 0, LEASE_MS};
	cr_assert_eq(kiln_jobs_open(&jc, &jobs), KILN_OK);
	kiln_dispatch_config dc = {"tcp://127.0.0.1:*", HEARTBEAT_MS, LEASE_MS, 0, NULL, NULL};
	cr_assert_eq(kiln_dispatch_create(&dc, jobs, &disp), KILN_OK);
	cr_assert_eq(kiln_dispatch_start(disp), KILN_OK);
}

static void teardown(void)
{
	kiln_dispatch_destroy(disp);
	kiln_jobs_close(jobs);
	sim_rmdir(dir);
}

TestSuite(sched_dispatch, .init = setup, .fini = teardown, .timeout = 60);

/* Submits a job of n listed items; returns its id in out. */
static void submit(int n, int shard_size, int max_attempts, char *out, size_t cap)
{
	json_t *inputs = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(inputs, json_sprintf("s3://bkt/in/%03d.png", i));
	json_t *spec = json_pack("{s:o, s:s, s:i, s:i}", "input", inputs, "output", "s3://bkt/out/", "shard_size",
				 shard_size, "max_attempts", max_attempts);
	json_t *view;
	bool created;
	char err[256];
	cr_assert_eq(kiln_jobs_submit(jobs, spec, NULL, &view, &created, err, sizeof err), KILN_OK, "%s", err);
	snprintf(out, cap, "%s", json_string_value(json_object_get(view, "id")));
	json_decref(view);
	json_decref(spec);
}

/* A simulated worker called name with slots, given time to say ready, then a job of n
 * listed items (see submit) whose id goes into id. */
static sim_worker *worker_with_job(const char *name, unsigned slots, int n, int shard_size, int max_attempts,
				   char *id, size_t cap)
{
	sim_worker *w = sim_worker_new(kiln_dispatch_endpoint(disp), name, slots, NULL);
	sleep_ms(100);
	submit(n, shard_size, max_attempts, id, cap);
	return w;
}

static json_int_t items(const char *id, const char *name)
{
	json_t *view;
	cr_assert_eq(kiln_jobs_view(jobs, id, &view), KILN_OK);
	json_int_t v = json_integer_value(json_object_get(json_object_get(view, "items"), name));
	json_decref(view);
	return v;
}

static json_t *ids(json_t *const *shards, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		if (shards[i])
			json_array_append(a, json_object_get(shards[i], "shard"));
	return a;
}

/* Waits up to timeout_ms for a message of type want while heartbeating every 20 ms,
 * naming active (not consumed; NULL: nothing active). */
static json_t *await(sim_worker *w, kiln_msg_type want, int timeout_ms, const json_t *active)
{
	for (int waited = 0; waited < timeout_ms; waited += 20) {
		sim_heartbeat(w, active ? json_deep_copy(active) : NULL);
		json_t *m = sim_recv(w, want, 20);
		if (m)
			return m;
	}
	return NULL;
}

/* Receives up to max more shards into out[have...] in timeout_ms, heartbeating for all
 * of out[0..] held; returns how many arrived. */
static int take_shards(sim_worker *w, json_t **out, int have, int max, int timeout_ms)
{
	int n = 0;
	for (int waited = 0; waited < timeout_ms && n < max; waited += 20) {
		json_t *active = ids(out, have + n);
		json_t *m = await(w, KILN_MSG_SHARD, 20, active);
		json_decref(active);
		if (m)
			out[have + n++] = m;
	}
	return n;
}

static void free_all(json_t **msgs, int n)
{
	for (int i = 0; i < n; i++)
		json_decref(msgs[i]);
}

Test(sched_dispatch, credits_are_respected_and_the_least_loaded_goes_first)
{
	char id[16];
	sim_worker *w = worker_with_job("w-credits", 2, 20, 2, 3, id, sizeof id);
	json_t *got[10] = {0};
	cr_assert_eq(take_shards(w, got, 0, 2, WAIT_MS), 2);
	cr_expect_eq(take_shards(w, got, 2, 8, 400), 0, "a worker with 2 slots holds 2 shards, never more");
	cr_assert_not_null(got[0]);
	cr_expect_eq(json_array_size(json_object_get(got[0], "items")), 2);
	cr_expect_eq(json_integer_value(json_object_get(got[0], "lease_ms")), LEASE_MS);
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(got[0], "options"), "format")), "bc1");
	cr_expect_eq(items(id, "in_flight"), 4);
	/* a result returns a slot: exactly one more shard follows */
	sim_result(w, got[0], NULL);
	json_t *held = ids(got + 1, 1);
	json_t *ack = await(w, KILN_MSG_ACK, WAIT_MS, held);
	json_decref(held);
	cr_assert_not_null(ack, "no ack");
	cr_expect_str_eq(json_string_value(json_object_get(ack, "shard")), json_string_value(json_object_get(got[0], "shard")));
	json_decref(ack);
	cr_expect_eq(items(id, "done"), 2, "journaled before the ack");
	cr_expect_eq(take_shards(w, got, 2, 1, WAIT_MS), 1);
	cr_expect_eq(take_shards(w, got, 3, 7, 300), 0);

	/* a second, idle worker gets the next shards before the busy one */
	sim_worker *w2 = sim_worker_new(kiln_dispatch_endpoint(disp), "w-idle", 4, NULL);
	json_t *got2[8] = {0};
	cr_expect_eq(take_shards(w2, got2, 0, 4, WAIT_MS), 4);
	free_all(got, 10);
	free_all(got2, 8);
	sim_worker_free(w);
	sim_worker_free(w2);
}

Test(sched_dispatch, a_silent_worker_loses_its_shards_and_its_late_result_is_ignored)
{
	char id[16];
	sim_worker *w1 = worker_with_job("w-silent", 2, 4, 2, 3, id, sizeof id);
	json_t *got[2] = {0};
	cr_assert_eq(take_shards(w1, got, 0, 2, WAIT_MS), 2);
	/* w1 now says nothing; w2 arrives and heartbeats */
	sim_worker *w2 = sim_worker_new(kiln_dispatch_endpoint(disp), "w-healthy", 2, NULL);
	json_t *again[2] = {0};
	cr_assert_eq(take_shards(w2, again, 0, 2, 4000), 2, "the dead worker's shards were not re-queued");
	for (int i = 0; i < 2; i++) {
		cr_expect_gt(json_integer_value(json_object_get(again[i], "lease")),
			     json_integer_value(json_object_get(got[i], "lease")), "a new lease number");
	}
	/* w1 comes back with results from its old leases: acknowledged, ignored */
	sim_result(w1, got[0], NULL);
	json_t *ack = sim_recv(w1, KILN_MSG_ACK, WAIT_MS);
	cr_assert_not_null(ack, "a late result is still acknowledged");
	json_decref(ack);
	cr_expect_eq(items(id, "done"), 0, "the late result was counted");
	cr_expect_eq(items(id, "in_flight"), 4);
	for (int i = 0; i < 2; i++)
		sim_result(w2, again[i], NULL);
	for (int i = 0; i < 2; i++) {
		ack = await(w2, KILN_MSG_ACK, WAIT_MS, NULL);
		cr_assert_not_null(ack);
		json_decref(ack);
	}
	cr_expect_eq(items(id, "done"), 4);
	free_all(got, 2);
	free_all(again, 2);
	sim_worker_free(w1);
	sim_worker_free(w2);
}

Test(sched_dispatch, an_expired_lease_is_handed_out_again)
{
	char id[16];
	sim_worker *w = worker_with_job("w-forgetful", 1, 2, 2, 3, id, sizeof id);
	json_t *first = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
	cr_assert_not_null(first);
	uint64_t t0 = kiln_now_ms();
	/* heartbeats that do not name the shard do not renew its lease: the shard comes again,
	 * not well before the lease's end (the wait itself is generous: a loaded 2-core machine
	 * once took longer than 3 leases to send it) */
	json_t *second = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
	cr_assert_not_null(second, "the lease did not expire");
	cr_expect_geq(kiln_now_ms() - t0, LEASE_MS / 2, "the shard came again long before its lease ended");
	cr_expect_str_eq(json_string_value(json_object_get(second, "shard")), json_string_value(json_object_get(first, "shard")));
	cr_expect_gt(json_integer_value(json_object_get(second, "lease")), json_integer_value(json_object_get(first, "lease")));
	sim_result(w, first, NULL);  /* old lease */
	json_t *ack = await(w, KILN_MSG_ACK, WAIT_MS, NULL);
	cr_assert_not_null(ack);
	json_decref(ack);
	cr_expect_eq(items(id, "done"), 0);
	/* while named in heartbeats the lease holds past lease_ms */
	json_t *active = json_pack("[O]", json_object_get(second, "shard"));
	json_t *third = await(w, KILN_MSG_SHARD, 2 * LEASE_MS, active);
	cr_expect_null(third, "a renewed lease expired");
	json_decref(active);
	sim_result(w, second, NULL);
	ack = await(w, KILN_MSG_ACK, WAIT_MS, NULL);
	cr_assert_not_null(ack);
	json_decref(ack);
	cr_expect_eq(items(id, "done"), 2);
	json_decref(first);
	json_decref(second);
	sim_worker_free(w);
}

Test(sched_dispatch, items_failing_max_attempts_times_are_listed)
{
	char id[16];
	sim_worker *w = worker_with_job("w-unlucky", 2, 3, 3, 2, id, sizeof id);
	for (int attempt = 0; attempt < 2; attempt++) {
		json_t *shard = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
		cr_assert_not_null(shard, "attempt %d was not dispatched", attempt + 1);
		sim_result(w, shard, "corrupt data: IHDR: CRC error");
		json_t *ack = await(w, KILN_MSG_ACK, WAIT_MS, NULL);
		cr_assert_not_null(ack);
		json_decref(ack);
		json_decref(shard);
	}
	cr_expect_null(await(w, KILN_MSG_SHARD, 300, NULL), "a third attempt was made");
	cr_expect_eq(items(id, "failed"), 3);
	json_t *view, *fails;
	cr_assert_eq(kiln_jobs_view(jobs, id, &view), KILN_OK);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "done");
	json_decref(view);
	cr_assert_eq(kiln_jobs_failures(jobs, id, 0, 100, &fails), KILN_OK);
	json_t *f = json_array_get(json_object_get(fails, "failures"), 0);
	cr_expect_eq(json_array_size(json_object_get(fails, "failures")), 3);
	cr_expect_str_eq(json_string_value(json_object_get(f, "error")), "corrupt data: IHDR: CRC error");
	cr_expect_eq(json_integer_value(json_object_get(f, "attempts")), 2);
	json_decref(fails);

	/* retry-failed makes them pending and dispatches them again */
	cr_assert_eq(kiln_jobs_retry_failed(jobs, id, &view), KILN_OK);
	json_decref(view);
	json_t *shard = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
	cr_assert_not_null(shard);
	sim_result(w, shard, NULL);
	json_decref(await(w, KILN_MSG_ACK, WAIT_MS, NULL));
	cr_expect_eq(items(id, "done"), 3);
	cr_expect_eq(items(id, "failed"), 0);
	json_decref(shard);
	sim_worker_free(w);
}

Test(sched_dispatch, cancel_tells_the_workers_and_stops_dispatch)
{
	char id[16];
	sim_worker *w = worker_with_job("w-cancel", 1, 6, 2, 3, id, sizeof id);
	json_t *shard = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
	cr_assert_not_null(shard);
	json_t *view;
	cr_assert_eq(kiln_jobs_cancel(jobs, id, &view), KILN_OK);
	cr_expect_str_eq(json_string_value(json_object_get(view, "state")), "cancelled");
	json_decref(view);
	json_t *active = json_pack("[O]", json_object_get(shard, "shard"));
	json_t *cancel = await(w, KILN_MSG_CANCEL, WAIT_MS, active);
	json_decref(active);
	cr_assert_not_null(cancel, "no cancel reached the worker");
	cr_expect_str_eq(json_string_value(json_object_get(cancel, "job")), id);
	json_decref(cancel);
	/* the worker reports its items cancelled; they are not failures */
	sim_result(w, shard, "cancelled");
	json_decref(await(w, KILN_MSG_ACK, WAIT_MS, NULL));
	cr_expect_null(await(w, KILN_MSG_SHARD, 300, NULL), "a cancelled job was dispatched");
	cr_expect_eq(items(id, "failed"), 0);
	cr_expect_eq(items(id, "in_flight"), 0);
	json_decref(shard);
	sim_worker_free(w);
}

Test(sched_dispatch, other_versions_and_garbage_do_not_hurt)
{
	char id[16];
	sim_worker *w = worker_with_job("w-odd", 1, 2, 2, 3, id, sizeof id);
	json_t *shard = await(w, KILN_MSG_SHARD, WAIT_MS, NULL);
	cr_assert_not_null(shard);
	/* a result naming items outside its shard, twice, or unknown shards changes nothing */
	json_t *bogus = json_pack("{s:i, s:s, s:s, s:s, s:I, s:[{s:i, s:s}, {s:i, s:s}]}", "v", 1, "type", "result",
				  "job", id, "shard", "j999.s0", "lease", (json_int_t)1, "items", "id", 0, "status",
				  "ok", "id", 0, "status", "ok");
	sim_send(w, bogus);
	json_decref(await(w, KILN_MSG_ACK, WAIT_MS, NULL));
	cr_expect_eq(items(id, "done"), 0);
	sim_result(w, shard, NULL);
	json_decref(await(w, KILN_MSG_ACK, WAIT_MS, NULL));
	cr_expect_eq(items(id, "done"), 2);
	json_decref(shard);
	sim_worker_free(w);
}
