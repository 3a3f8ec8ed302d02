/* CPUs and memory this process may use (host.h): the machine's, cut to the affinity mask
 * and to the cgroup limits of the process's group and its ancestors. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "host.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The CPUs a quota of `quota` microseconds a `period` allows, rounded up; 0: no limit (v1
 * writes -1). */
static unsigned cpus_of_quota(long long quota, long long period)
{
	if (quota <= 0 || period <= 0)
		return 0;
	long long cpus = (quota + period - 1) / period;
	return cpus > 0 && cpus <= 1 << 20 ? (unsigned)cpus : 0;
}

unsigned kiln_cpu_quota(const char *text)
{
	/* cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD" */
	long long quota, period;
	if (!text || sscanf(text, "%lld %lld", &quota, &period) != 2)
		return 0;
	return cpus_of_quota(quota, period);
}

uint64_t kiln_memory_limit_of(const char *text)
{
	/* v2 memory.max: "max" or bytes; v1 memory.limit_in_bytes: bytes, "no limit" being a
	 * page-rounded LLONG_MAX */
	unsigned long long bytes;
	char *end;
	if (!text || *text < '0' || *text > '9')
		return 0;
	bytes = strtoull(text, &end, 10);
	if (end == text || (*end && *end != '\n') || bytes == 0 || bytes >= 1ull << 60)
		return 0;
	return bytes;
}

/* Reads up to cap - 1 bytes of a small file into buf as a string; 0 when it cannot. */
static int read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0;
}

/* A limit read from a cgroup directory (its mount point and group path): the value, 0 for
 * none or unreadable. */
typedef uint64_t (*cgroup_reader)(const char *dir);

static uint64_t cpu_v2(const char *dir)
{
	char path[4200], text[128];
	snprintf(path, sizeof path, "%s/cpu.max", dir);
	return read_small(path, text, sizeof text) ? kiln_cpu_quota(text) : 0;
}

static uint64_t cpu_v1(const char *dir)
{
	char path[4200], quota[64], period[64];
	snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
	if (!read_small(path, quota, sizeof quota))
		return 0;
	snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
	if (!read_small(path, period, sizeof period))
		return 0;
	return cpus_of_quota(atoll(quota), atoll(period));
}

static uint64_t memory_v2(const char *dir)
{
	char path[4200], text[64];
	snprintf(path, sizeof path, "%s/memory.max", dir);
	return read_small(path, text, sizeof text) ? kiln_memory_limit_of(text) : 0;
}

static uint64_t memory_v1(const char *dir)
{
	char path[4200], text[64];
	snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
	return read_small(path, text, sizeof text) ? kiln_memory_limit_of(text) : 0;
}

/* Whether the comma-separated list of v1 controllers names `want`. */
static int names_controller(const char *list, const char *want)
{
	size_t n = strlen(want);
	for (const char *t = list; *t; t += strcspn(t, ","), t += *t == ',')
		if (strncmp(t, want, n) == 0 && (t[n] == ',' || t[n] == '\0'))
			return 1;
	return 0;
}

/* The tightest limit on this process's cgroup and its ancestors up to the mount's root:
 * v2 (the "0::/path" line of /proc/self/cgroup, under /sys/fs/cgroup) or v1 (the line of
 * controller v1_name, under each of v1_mounts). 0 when none. */
static uint64_t cgroup_limit(cgroup_reader v2, const char *v1_name, const char *const *v1_mounts, cgroup_reader v1)
{
	char groups[4096];
	if (!read_small("/proc/self/cgroup", groups, sizeof groups))
		return 0;
	uint64_t best = 0;
	char *save = NULL;
	for (char *line = strtok_r(groups, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrl = c1 + 1, *group = c2 + 1;
		int is_v2 = *ctrl == '\0';
		if (!is_v2 && !names_controller(ctrl, v1_name))
			continue;
		for (int m = 0; is_v2 ? m < 1 : v1_mounts[m] != NULL; m++) {
			char rel[4096];
			snprintf(rel, sizeof rel, "%s", group);
			for (;;) {
				char dir[4200];
				snprintf(dir, sizeof dir, "%s%s", is_v2 ? "/sys/fs/cgroup" : v1_mounts[m],
					 strcmp(rel, "/") ? rel : "");
				uint64_t v = is_v2 ? v2(dir) : v1(dir);
				if (v && (!best || v < best))
					best = v;
				char *slash = strrchr(rel, '/');
				if (!slash || strcmp(rel, "/") == 0)
					break;
				if (slash == rel)
					rel[1] = '\0'; /* "/a" -> "/" */
				else
					*slash = '\0';
			}
		}
	}
	return best;
}

unsigned kiln_cpu_count(void)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = online > 0 ? (unsigned)online : 1;
	/* the CPUs this process may run on (taskset, cpusets: Slurm's and Kubernetes' static
	 * CPU manager bind tasks this way) */
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		int allowed = CPU_COUNT(&set);
		if (allowed > 0 && (unsigned)allowed < n)
			n = (unsigned)allowed;
	}
	/* a CPU quota (a container's CPU limit): a worker that started a thread per host core
	 * there would be throttled in every period */
	static const char *const mounts[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", NULL};
	uint64_t quota = cgroup_limit(cpu_v2, "cpu", mounts, cpu_v1);
	if (quota && quota < n)
		n = (unsigned)quota;
	return n;
}

uint64_t kiln_memory_limit(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	static const char *const mounts[] = {"/sys/fs/cgroup/memory", NULL};
	uint64_t limit = cgroup_limit(memory_v2, "memory", mounts, memory_v1);
	if (limit && (!phys || limit < phys))
		return limit;
	return phys;
}
