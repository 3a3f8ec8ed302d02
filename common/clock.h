/* The monotonic clock (CLOCK_MONOTONIC), for timeouts, deadlines and durations. */
#ifndef KILN_CLOCK_H
#define KILN_CLOCK_H

#include <stdint.h>

uint64_t kiln_now_ns(void);  /* nanoseconds */
uint64_t kiln_now_ms(void);  /* milliseconds, truncated */
double kiln_now_s(void);     /* seconds */

#endif
