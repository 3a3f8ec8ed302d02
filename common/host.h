/* What this process may use of its host: CPUs and memory, as the kernel limits them for it
 * (affinity masks, cgroup quotas of containers and batch systems), not as the machine has
 * them. A worker sizes its threads and its memory budget by these. */
#ifndef KILN_HOST_H
#define KILN_HOST_H

#include <stdint.h>

/* The CPUs this process can use, at least 1: online CPUs, cut to its affinity mask
 * (taskset, cpusets) and to its cgroup's CPU quota rounded up (a container's CPU limit). */
unsigned kiln_cpu_count(void);

/* The CPUs a cgroup quota text allows, rounded up: "QUOTA PERIOD" in microseconds as in
 * cgroup v2's cpu.max ("max PERIOD", a negative or malformed quota: 0, no limit). */
unsigned kiln_cpu_quota(const char *text);

/* The memory this process may use, in bytes: physical memory, cut to its cgroup's limit
 * (v2 memory.max, v1 memory.limit_in_bytes) on its group and every ancestor; 0 when
 * neither is known. */
uint64_t kiln_memory_limit(void);

/* A cgroup memory limit text in bytes ("max", a value past 2^60 as v1 writes "no limit",
 * or a malformed one: 0, no limit). */
uint64_t kiln_memory_limit_of(const char *text);

#endif
