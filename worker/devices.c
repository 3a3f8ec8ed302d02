/* --devices parsing, the device health check, and the devices of READY. */
#include "worker/devices.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_status fail_msg(kiln_status st, char *msg, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static kiln_status fail_msg(kiln_status st, char *msg, size_t cap, const char *fmt, ...)
{
	if (msg && cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, cap, fmt, ap);
		va_end(ap);
	}
	return st;
}

kiln_status kiln_worker_devices_parse(const char *spec, kiln_device *out, size_t cap, size_t *count,
				      char *msg, size_t msg_cap)
{
	*count = 0;
	if (msg && msg_cap)
		msg[0] = '\0';
	if (cap == 0)
		return KILN_ERR_INVALID_ARG;
	int gpus = kiln_gpu_count();
	if (strcmp(spec, "cpu") == 0 || (strcmp(spec, "all") == 0 && gpus == 0)) {
		out[0] = (kiln_device){.kind = KILN_DEVICE_CPU, .index = 0};
		*count = 1;
		return KILN_OK;
	}
	if (strcmp(spec, "all") == 0) {
		for (int g = 0; g < gpus && (size_t)g < cap; g++)
			out[(*count)++] = (kiln_device){.kind = KILN_DEVICE_GPU, .index = g};
		return KILN_OK;
	}
	char list[256];
	if (strlen(spec) >= sizeof list)
		goto bad;
	strcpy(list, spec);
	char *rest = list, *tok;
	while ((tok = strsep(&rest, ",")) != NULL) {
		char *end;
		if (tok[0] < '0' || tok[0] > '9')
			goto bad; /* empty (",,", a trailing comma) or not a number */
		long n = strtol(tok, &end, 10);
		if (*end || n > 1023 || *count == cap)
			goto bad;
		for (size_t i = 0; i < *count; i++)
			if (out[i].index == (int)n)
				goto bad;
		out[(*count)++] = (kiln_device){.kind = KILN_DEVICE_GPU, .index = (int)n};
	}
	/* the whole spec is well formed: now whether the GPUs exist */
	for (size_t i = 0; i < *count; i++)
		if (out[i].index >= gpus) {
			int missing = out[i].index;
			*count = 0;
			return fail_msg(KILN_ERR_NO_GPU, msg, msg_cap, "no GPU %d (this machine has %d)", missing, gpus);
		}
	return KILN_OK;
bad:
	*count = 0;
	return fail_msg(KILN_ERR_INVALID_ARG, msg, msg_cap,
			"devices are 'all', 'cpu' or up to %zu distinct GPU numbers like '0,1', not '%.64s'", cap, spec);
}

kiln_status kiln_worker_devices_check(const kiln_device *devs, size_t count, char *msg, size_t msg_cap)
{
	for (size_t i = 0; i < count; i++) {
		if (devs[i].kind != KILN_DEVICE_GPU)
			continue;
		kiln_stream stream = NULL;
		kiln_status st = kiln_gpu_use(devs[i].index);
		if (st == KILN_OK)
			st = kiln_gpu_stream_create(&stream);
		if (st == KILN_OK)
			st = kiln_gpu_stream_sync(stream);
		kiln_gpu_stream_destroy(stream);
		if (st != KILN_OK)
			return fail_msg(st, msg, msg_cap, "gpu:%d is not usable: %s (%s)", devs[i].index,
					kiln_strerror(st), kiln_gpu_last_error());
	}
	return KILN_OK;
}

json_t *kiln_worker_devices_json(const kiln_device *devs, size_t count, unsigned cpu_threads)
{
	json_t *list = json_array();
	if (!list)
		return NULL;
	for (size_t i = 0; i < count; i++) {
		if (devs[i].kind != KILN_DEVICE_GPU)
			continue;
		char id[32], name[256] = "";
		size_t mem = 0;
		snprintf(id, sizeof id, "gpu:%d", devs[i].index);
		json_t *d = json_pack("{s:s}", "id", id);
		if (kiln_gpu_describe(devs[i].index, name, sizeof name, &mem) == KILN_OK && d) {
			json_object_set_new(d, "name", json_string(name));
			json_object_set_new(d, "memory", json_integer((json_int_t)mem));
		}
		if (!d || json_array_append_new(list, d) != 0)
			goto fail;
	}
	if (json_array_append_new(list, json_pack("{s:s, s:I}", "id", "cpu", "threads", (json_int_t)cpu_threads)) != 0)
		goto fail;
	return list;
fail:
	json_decref(list);
	return NULL;
}
