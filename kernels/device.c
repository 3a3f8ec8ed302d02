/* --device parsing and resolution, shared by every subcommand that runs a codec. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/codec.h"
#include "kernels/gpu.h"

kiln_status kiln_device_parse(const char *spec, kiln_device *out)
{
	out->index = 0;
	if (strcmp(spec, "auto") == 0) {
		out->kind = KILN_DEVICE_AUTO;
		return KILN_OK;
	}
	if (strcmp(spec, "cpu") == 0) {
		out->kind = KILN_DEVICE_CPU;
		return KILN_OK;
	}
	if (strncmp(spec, "gpu", 3) == 0) {
		out->kind = KILN_DEVICE_GPU;
		if (spec[3] == '\0')
			return KILN_OK;
		if (spec[3] != ':' || spec[4] < '0' || spec[4] > '9')
			return KILN_ERR_INVALID_ARG;
		char *end;
		long n = strtol(spec + 4, &end, 10);
		if (*end || n < 0 || n > 1023)
			return KILN_ERR_INVALID_ARG;
		out->index = (int)n;
		return KILN_OK;
	}
	return KILN_ERR_INVALID_ARG;
}

kiln_status kiln_device_resolve(const kiln_device *in, kiln_device *out)
{
	int gpus = in->kind == KILN_DEVICE_CPU ? 0 : kiln_gpu_count();
	*out = *in;
	switch (in->kind) {
	case KILN_DEVICE_CPU:
		return KILN_OK;
	case KILN_DEVICE_AUTO:
		out->kind = gpus > 0 ? KILN_DEVICE_GPU : KILN_DEVICE_CPU;
		out->index = 0;
		return KILN_OK;
	case KILN_DEVICE_GPU:
		return in->index < gpus ? KILN_OK : KILN_ERR_NO_GPU;
	}
	return KILN_ERR_INVALID_ARG;
}

int kiln_quality_parse(const char *name)
{
	static const char *const names[] = {"fast", "medium", "high"};
	for (int i = 0; i < 3; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

const char *kiln_quality_name(kiln_quality quality)
{
	static const char *const names[] = {"fast", "medium", "high"};
	return (unsigned)quality < 3 ? names[quality] : "?";
}

kiln_status kiln_gpu_grow(void **ptr, size_t *cap, size_t need, bool pinned)
{
	if (*cap >= need && *ptr)
		return KILN_OK;
	if (pinned)
		kiln_gpu_host_free(*ptr);
	else
		kiln_gpu_free(*ptr);
	*ptr = NULL;
	*cap = 0;
	/* A quarter more than asked: freeing device or pinned memory waits for the whole
	 * device, and batches whose sizes vary (a worker's PNG files) regrew at every new
	 * largest batch, stalling every batch in flight (docs/PERFORMANCE.md, worker). */
	size_t want = need <= SIZE_MAX - need / 4 ? need + need / 4 : need;
	kiln_status st = pinned ? kiln_gpu_host_alloc(ptr, want) : kiln_gpu_malloc(ptr, want);
	if (st != KILN_OK && want > need) {
		want = need;
		st = pinned ? kiln_gpu_host_alloc(ptr, want) : kiln_gpu_malloc(ptr, want);
	}
	if (st == KILN_OK)
		*cap = want;
	return st;
}
