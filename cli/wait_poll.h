/* How often kiln wait, kiln submit --wait and kiln run ask the scheduler whether a job has
 * ended (cli_wait_job). Header-only, so that the unit tests, which do not link cli/, test
 * this very function. */
#ifndef KILN_CLI_WAIT_POLL_H
#define KILN_CLI_WAIT_POLL_H

/* A fixed 500 ms between polls made a job of 0.3 s report after 0.5 s, and every short
 * job's time (kiln run's too) came out in half-seconds. The waits start at 25 ms and grow
 * by half each poll to 500 ms: a job is seen ended at most one wait late, and the polls
 * come at 0, 25, 62, 117, 199, 322, 506, 782, 1196 ms, then every 500 ms as before (the
 * scheduler's load of before, for a long job). By half, not double: doubling (polls at 0, 25,
 * 75, 175, 375, 775 ms) saw a job that ended at 0.38 s only at 0.775 s, later than the
 * fixed 500 ms did. */
#define CLI_WAIT_POLL_FIRST_MS 25u
#define CLI_WAIT_POLL_MAX_MS 500u

/* The wait after a poll, given the wait before it (0 before the first wait): 25, 37, 55,
 * 82, 123, 184, 276, 414, then 500 ms on. */
static inline unsigned cli_wait_poll_next_ms(unsigned prev_ms)
{
	if (prev_ms < CLI_WAIT_POLL_FIRST_MS)
		return CLI_WAIT_POLL_FIRST_MS;
	if (prev_ms >= CLI_WAIT_POLL_MAX_MS / 3 * 2)
		return CLI_WAIT_POLL_MAX_MS;
	return prev_ms + prev_ms / 2;
}

#endif
