/* The worker's devices: which ones `--devices` names, whether they work, and how READY
 * describes them to the scheduler. */
#ifndef KILN_WORKER_DEVICES_H
#define KILN_WORKER_DEVICES_H

#include <jansson.h>
#include <stddef.h>

#include "common/error.h"
#include "kernels/gpu.h"

/* Parses a --devices spec: "all" (every usable GPU, or the CPU when there is none), "cpu",
 * or GPU ordinals "0,1,...". Each GPU named must exist (KILN_ERR_NO_GPU); a malformed spec
 * or a repeated ordinal is KILN_ERR_INVALID_ARG. msg receives a one-line reason. */
kiln_status kiln_worker_devices_parse(const char *spec, kiln_device *out, size_t cap, size_t *count,
				      char *msg, size_t msg_cap);

/* Checks that each device can run batches now (each GPU can be made current and given a
 * stream): what `kiln worker --health` answers. */
kiln_status kiln_worker_devices_check(const kiln_device *devs, size_t count, char *msg, size_t msg_cap);

/* READY's "devices": one entry per GPU ({"id":"gpu:N","name","memory"}) and one for the
 * CPU ({"id":"cpu","threads":N}). NULL on allocation failure. */
json_t *kiln_worker_devices_json(const kiln_device *devs, size_t count, unsigned cpu_threads);

#endif
