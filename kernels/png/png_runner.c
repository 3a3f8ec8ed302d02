/* Batches of PNG encodes on one device (see png_runner.h). */
#include "kernels/png/png_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

struct kiln_pngenc_runner {
	kiln_device device;
	kiln_pool *pool;
	/* CPU backend */
	void *temp;
	size_t temp_cap;
	/* GPU backend: staging of the samples and of the files, the sizes, on the device the
	 * samples, the files (at their bound) and the encoder's scratch */
	kiln_stream stream;
	uint8_t *h_in, *h_out, *d_in, *d_out;
	uint64_t *h_sizes, *d_sizes;
	void *d_temp;
	size_t h_in_cap, h_out_cap, d_in_cap, d_out_cap, h_sizes_cap, d_sizes_cap, d_temp_cap;
	char last_error[256];
};

/* One image of the batch that the encoder will see. */
typedef struct job {
	size_t index;       /* in the caller's batch */
	size_t bound;       /* the encoder's worst case for it */
	size_t row_bytes;   /* of its samples, packed (GPU) */
	size_t in_off, out_off; /* GPU: where its samples and its file sit in the staging */
} job;

kiln_status kiln_pngenc_runner_create(const kiln_device *device, kiln_pool *pool, kiln_pngenc_runner **out)
{
	*out = NULL;
	if (!device || device->kind == KILN_DEVICE_AUTO)
		return KILN_ERR_INVALID_ARG;
	kiln_pngenc_runner *r = kiln_calloc(1, sizeof *r);
	if (!r)
		return KILN_ERR_NOMEM;
	r->device = *device;
	r->pool = pool;
	*out = r;
	return KILN_OK;
}

static void gpu_release(kiln_pngenc_runner *r)
{
	kiln_gpu_stream_destroy(r->stream);
	kiln_gpu_host_free(r->h_in);
	kiln_gpu_host_free(r->h_out);
	kiln_gpu_host_free(r->h_sizes);
	kiln_gpu_free(r->d_in);
	kiln_gpu_free(r->d_out);
	kiln_gpu_free(r->d_sizes);
	kiln_gpu_free(r->d_temp);
}

/* Forgets the device buffers without freeing them: a reset has freed them already. */
static void gpu_forget(kiln_pngenc_runner *r)
{
	r->stream = NULL;
	r->h_in = r->h_out = r->d_in = r->d_out = NULL;
	r->h_sizes = r->d_sizes = NULL;
	r->d_temp = NULL;
	r->h_in_cap = r->h_out_cap = r->d_in_cap = r->d_out_cap = 0;
	r->h_sizes_cap = r->d_sizes_cap = r->d_temp_cap = 0;
}

void kiln_pngenc_runner_destroy(kiln_pngenc_runner *r)
{
	if (!r)
		return;
	if (r->device.kind == KILN_DEVICE_GPU && kiln_gpu_use(r->device.index) == KILN_OK)
		gpu_release(r);
	free(r->temp);
	free(r);
}

const char *kiln_pngenc_runner_last_error(const kiln_pngenc_runner *r)
{
	return r->last_error;
}

static size_t align256(size_t v)
{
	return (v + 255) & ~(size_t)255;
}

static kiln_status run_cpu(kiln_pngenc_runner *r, const kiln_pngenc_params *params,
			   const kiln_pngenc_image *images, const job *jobs, size_t n, kiln_buf *out,
			   kiln_status *status)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_pngenc_image *imgs = kiln_calloc(n, sizeof *imgs);
	uint8_t **dst = kiln_calloc(n, sizeof *dst);
	size_t *caps = kiln_calloc(n, sizeof *caps), *sizes = kiln_calloc(n, sizeof *sizes);
	size_t *start = kiln_calloc(n, sizeof *start);
	kiln_status *img_st = kiln_calloc(n, sizeof *img_st);
	size_t extended = 0; /* out[] grown for the first `extended` jobs */
	if (!imgs || !dst || !caps || !sizes || !start || !img_st)
		goto fail;
	for (size_t k = 0; k < n; k++, extended++) {
		size_t i = jobs[k].index;
		imgs[k] = images[i];
		start[k] = out[i].len;
		caps[k] = jobs[k].bound;
		img_st[k] = kiln_buf_extend(&out[i], jobs[k].bound, &dst[k]);
		if (img_st[k] != KILN_OK)
			imgs[k].pixels = NULL; /* refused by the encoder, takes no scratch */
	}
	size_t need = kiln_pngenc_cpu_temp_size(params, imgs, n, r->pool);
	if (need > r->temp_cap) {
		free(r->temp);
		r->temp_cap = 0;
		if (!(r->temp = kiln_malloc(need)))
			goto fail;
		r->temp_cap = need;
	}
	kiln_status *run_st = kiln_calloc(n, sizeof *run_st);
	if (!run_st)
		goto fail;
	st = kiln_pngenc_encode_cpu(params, imgs, dst, caps, sizes, n, run_st, r->temp, r->temp_cap, r->pool);
	for (size_t k = 0; k < n && st == KILN_OK; k++) {
		size_t i = jobs[k].index;
		if (img_st[k] == KILN_OK)
			img_st[k] = run_st[k];
		status[i] = img_st[k];
		out[i].len = start[k] + (img_st[k] == KILN_OK ? sizes[k] : 0);
	}
	free(run_st);
fail:
	for (size_t k = 0; k < extended && st != KILN_OK; k++)
		out[jobs[k].index].len = start[k];
	free(imgs);
	free(dst);
	free(caps);
	free(sizes);
	free(start);
	free(img_st);
	return st;
}

/* Records a failed GPU step; a CUDA error also resets the device. */
static kiln_status gpu_fail(kiln_pngenc_runner *r, kiln_status st, const char *step)
{
	snprintf(r->last_error, sizeof r->last_error, "%s: %s%s%s", step, kiln_strerror(st),
		 st == KILN_ERR_CUDA ? ": " : "", st == KILN_ERR_CUDA ? kiln_gpu_last_error() : "");
	if (st == KILN_ERR_CUDA) {
		gpu_forget(r);
		kiln_gpu_reset();
	}
	return st;
}

static kiln_status run_gpu(kiln_pngenc_runner *r, const kiln_pngenc_params *params,
			   const kiln_pngenc_image *images, job *jobs, size_t n, kiln_buf *out,
			   kiln_status *status)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_pngenc_image *dimgs = kiln_calloc(n, sizeof *dimgs);
	uint8_t **dst = kiln_calloc(n, sizeof *dst);
	size_t *caps = kiln_calloc(n, sizeof *caps);
	kiln_status *run_st = kiln_calloc(n, sizeof *run_st);
	if (!dimgs || !dst || !caps || !run_st) {
		gpu_fail(r, st, "plan");
		goto fail;
	}
	size_t in_total = 0, out_total = 0;
	for (size_t k = 0; k < n; k++) {
		job *j = &jobs[k];
		j->in_off = in_total;
		j->out_off = out_total;
		in_total += align256(j->row_bytes * images[j->index].height);
		out_total += align256(j->bound);
	}
	if ((st = kiln_gpu_use(r->device.index)) != KILN_OK) {
		gpu_fail(r, st, "select device");
		goto fail;
	}
	if (!r->stream && (st = kiln_gpu_stream_create(&r->stream)) != KILN_OK) {
		gpu_fail(r, st, "create stream");
		goto fail;
	}
	/* the scratch is sized with the device images, whose pixels are set below */
	for (size_t k = 0; k < n; k++) {
		const kiln_pngenc_image *src = &images[jobs[k].index];
		dimgs[k] = *src;
		dimgs[k].stride = jobs[k].row_bytes;
	}
	if ((st = kiln_gpu_grow((void **)&r->d_in, &r->d_in_cap, in_total ? in_total : 1, false)) ||
	    (st = kiln_gpu_grow((void **)&r->d_out, &r->d_out_cap, out_total ? out_total : 1, false)) ||
	    (st = kiln_gpu_grow((void **)&r->h_in, &r->h_in_cap, in_total ? in_total : 1, true)) ||
	    (st = kiln_gpu_grow((void **)&r->h_out, &r->h_out_cap, out_total ? out_total : 1, true)) ||
	    (st = kiln_gpu_grow((void **)&r->d_sizes, &r->d_sizes_cap, n * sizeof(uint64_t), false)) ||
	    (st = kiln_gpu_grow((void **)&r->h_sizes, &r->h_sizes_cap, n * sizeof(uint64_t), true))) {
		gpu_fail(r, st, "allocate buffers");
		goto fail;
	}
	for (size_t k = 0; k < n; k++) {
		dimgs[k].pixels = r->d_in + jobs[k].in_off;
		dst[k] = r->d_out + jobs[k].out_off;
		caps[k] = jobs[k].bound;
	}
	size_t temp = kiln_pngenc_gpu_temp_size(params, dimgs, n);
	if ((st = kiln_gpu_grow(&r->d_temp, &r->d_temp_cap, temp ? temp : 1, false)) != KILN_OK) {
		gpu_fail(r, st, "allocate buffers");
		goto fail;
	}
	/* samples packed row after row into the staging, as the device images say */
	for (size_t k = 0; k < n; k++) {
		const kiln_pngenc_image *src = &images[jobs[k].index];
		uint8_t *to = r->h_in + jobs[k].in_off;
		for (uint32_t y = 0; y < src->height; y++)
			memcpy(to + (size_t)y * jobs[k].row_bytes, src->pixels + (size_t)y * src->stride,
			       jobs[k].row_bytes);
	}
	if ((st = kiln_gpu_h2d(r->d_in, r->h_in, in_total, r->stream)) != KILN_OK) {
		gpu_fail(r, st, "upload");
		goto fail;
	}
	st = kiln_pngenc_encode_gpu(params, dimgs, dst, caps, r->d_sizes, n, run_st, r->d_temp, r->d_temp_cap,
				    r->stream);
	if (st == KILN_OK)
		st = kiln_gpu_d2h(r->h_sizes, r->d_sizes, n * sizeof(uint64_t), r->stream);
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(r->stream);
	if (st != KILN_OK) {
		gpu_fail(r, st, "encode");
		goto fail;
	}
	/* each file comes back at its own size */
	for (size_t k = 0; k < n && st == KILN_OK; k++)
		if (run_st[k] == KILN_OK)
			st = kiln_gpu_d2h(r->h_out + jobs[k].out_off, dst[k], r->h_sizes[k], r->stream);
	if (st == KILN_OK)
		st = kiln_gpu_stream_sync(r->stream);
	if (st != KILN_OK) {
		gpu_fail(r, st, "download");
		goto fail;
	}
	for (size_t k = 0; k < n; k++) {
		size_t i = jobs[k].index;
		status[i] = run_st[k];
		if (run_st[k] == KILN_OK)
			status[i] = kiln_buf_append(&out[i], r->h_out + jobs[k].out_off, r->h_sizes[k]);
	}
fail:
	free(dimgs);
	free(dst);
	free(caps);
	free(run_st);
	return st;
}

kiln_status kiln_pngenc_runner_encode(kiln_pngenc_runner *r, const kiln_pngenc_params *params,
				      const kiln_pngenc_image *images, size_t count, kiln_buf *out,
				      kiln_status *status)
{
	if (!r || !params || (count && (!images || !out || !status)))
		return KILN_ERR_INVALID_ARG;
	r->last_error[0] = '\0';
	if (count == 0)
		return KILN_OK;
	job *jobs = kiln_calloc(count, sizeof *jobs);
	if (!jobs) {
		for (size_t i = 0; i < count; i++)
			status[i] = KILN_ERR_NOMEM;
		snprintf(r->last_error, sizeof r->last_error, "plan: %s", kiln_strerror(KILN_ERR_NOMEM));
		return KILN_ERR_NOMEM;
	}
	/* images the encoder refuses fail here, alone */
	size_t n = 0;
	for (size_t i = 0; i < count; i++) {
		status[i] = kiln_pngenc_check(params, &images[i]);
		if (status[i] != KILN_OK)
			continue;
		jobs[n].index = i;
		jobs[n].bound = kiln_pngenc_bound(params, &images[i]);
		jobs[n].row_bytes = kiln_pngenc_source_row_bytes(&images[i]);
		n++;
	}
	kiln_status st = KILN_OK;
	if (n)
		st = r->device.kind == KILN_DEVICE_GPU ? run_gpu(r, params, images, jobs, n, out, status)
						       : run_cpu(r, params, images, jobs, n, out, status);
	if (st != KILN_OK) {
		if (!r->last_error[0])
			snprintf(r->last_error, sizeof r->last_error, "%s", kiln_strerror(st));
		for (size_t i = 0; i < count; i++)
			status[i] = st;
	}
	free(jobs);
	return st;
}
