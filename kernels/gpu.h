/* The GPU runtime as host C sees it: device discovery and selection, memory, streams.
 * Host code (cli, worker, bench, tests) includes this instead of cuda_runtime.h, so it
 * builds with gcc alone; without nvcc every function reports KILN_ERR_NO_GPU. */
#ifndef KILN_GPU_H
#define KILN_GPU_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

/* Same type as cudaStream_t. NULL is the per-device default stream. */
typedef struct CUstream_st *kiln_stream;

/* Which backend to run on, as chosen by --device auto|cpu|gpu|gpu:N. */
typedef enum kiln_device_kind { KILN_DEVICE_AUTO, KILN_DEVICE_CPU, KILN_DEVICE_GPU } kiln_device_kind;
typedef struct kiln_device {
	kiln_device_kind kind;
	int index;  /* GPU ordinal for KILN_DEVICE_GPU */
} kiln_device;

/* Parses "auto", "cpu", "gpu" (= gpu:0) or "gpu:N". */
kiln_status kiln_device_parse(const char *spec, kiln_device *out);
/* Resolves AUTO to GPU 0 when a GPU is usable, else CPU; checks that a GPU asked for
 * exists (KILN_ERR_NO_GPU otherwise). */
kiln_status kiln_device_resolve(const kiln_device *in, kiln_device *out);

/* true when this build contains the CUDA backend. */
bool kiln_gpu_built(void);
/* Usable GPUs (0 without a driver, a device, or the CUDA backend). */
int kiln_gpu_count(void);
/* Name and memory of GPU `index`. */
kiln_status kiln_gpu_describe(int index, char *name, size_t name_cap, size_t *total_mem);
/* Makes GPU `index` current for the calling thread. */
kiln_status kiln_gpu_use(int index);
/* The text of the last CUDA error seen by this thread ("" if none). */
const char *kiln_gpu_last_error(void);

kiln_status kiln_gpu_malloc(void **ptr, size_t size);
void kiln_gpu_free(void *ptr);                  /* NULL accepted */
kiln_status kiln_gpu_host_alloc(void **ptr, size_t size); /* pinned host memory */
void kiln_gpu_host_free(void *ptr);             /* NULL accepted */
kiln_status kiln_gpu_h2d(void *dst, const void *src, size_t size, kiln_stream stream);
kiln_status kiln_gpu_d2h(void *dst, const void *src, size_t size, kiln_stream stream);
kiln_status kiln_gpu_memset(void *dst, int value, size_t size, kiln_stream stream);
/* Grows a device (pinned: pinned host) buffer that *cap bytes at *ptr hold to at least
 * need bytes (a quarter more where that fits, so that slowly growing needs seldom
 * reallocate); the contents are not kept. Buffers that batches reuse grow through this. */
kiln_status kiln_gpu_grow(void **ptr, size_t *cap, size_t need, bool pinned);
kiln_status kiln_gpu_stream_create(kiln_stream *stream);
void kiln_gpu_stream_destroy(kiln_stream stream); /* NULL accepted */
kiln_status kiln_gpu_stream_sync(kiln_stream stream);
/* Resets the current device after a sticky error, so the next batch can run. */
kiln_status kiln_gpu_reset(void);

/* Events for timing device work (bench, tests). */
typedef struct CUevent_st *kiln_event;
kiln_status kiln_gpu_event_create(kiln_event *ev);
void kiln_gpu_event_destroy(kiln_event ev);
kiln_status kiln_gpu_event_record(kiln_event ev, kiln_stream stream);
/* Milliseconds between two recorded events (waits for `end`). */
kiln_status kiln_gpu_event_elapsed(kiln_event start, kiln_event end, float *ms);

#endif
