/* The GPU entry points of a build without nvcc: each reports KILN_ERR_NO_GPU, so callers
 * need no #ifdef and `--device auto` falls back to the CPU. New GPU entry points get their
 * stub here, next to the others. */
#ifndef KILN_HAVE_CUDA
#include "kernels/astc/astc.h"
#include "kernels/bc1/bc1.h"
#include "kernels/gpu.h"
#include "kernels/mip/mip.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_enc.h"
#include "kernels/texerr.h"

bool kiln_gpu_built(void) { return false; }
int kiln_gpu_count(void) { return 0; }
kiln_status kiln_gpu_describe(int index, char *name, size_t name_cap, size_t *total_mem) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_use(int index) { return KILN_ERR_NO_GPU; }
const char *kiln_gpu_last_error(void) { return "built without CUDA"; }
kiln_status kiln_gpu_malloc(void **ptr, size_t size) { *ptr = NULL; return KILN_ERR_NO_GPU; }
void kiln_gpu_free(void *ptr) { }
kiln_status kiln_gpu_host_alloc(void **ptr, size_t size) { *ptr = NULL; return KILN_ERR_NO_GPU; }
void kiln_gpu_host_free(void *ptr) { }
kiln_status kiln_gpu_h2d(void *dst, const void *src, size_t size, kiln_stream stream) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_d2h(void *dst, const void *src, size_t size, kiln_stream stream) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_memset(void *dst, int value, size_t size, kiln_stream stream) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_stream_create(kiln_stream *stream) { *stream = NULL; return KILN_ERR_NO_GPU; }
void kiln_gpu_stream_destroy(kiln_stream stream) { }
kiln_status kiln_gpu_stream_sync(kiln_stream stream) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_reset(void) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_event_create(kiln_event *ev) { *ev = NULL; return KILN_ERR_NO_GPU; }
void kiln_gpu_event_destroy(kiln_event ev) { }
kiln_status kiln_gpu_event_record(kiln_event ev, kiln_stream stream) { return KILN_ERR_NO_GPU; }
kiln_status kiln_gpu_event_elapsed(kiln_event start, kiln_event end, float *ms) { return KILN_ERR_NO_GPU; }

kiln_status kiln_bc1_encode_gpu(const kiln_bc1_params *params, const kiln_surface *src,
				uint8_t *const *dst, size_t count, kiln_status *status,
				void *d_temp, size_t temp_size, kiln_stream stream)
{
	return KILN_ERR_NO_GPU;
}

kiln_status kiln_astc_encode_gpu(const kiln_astc_params *params, const kiln_surface *src,
				 uint8_t *const *dst, size_t count, kiln_status *status,
				 void *d_temp, size_t temp_size, kiln_stream stream)
{
	return KILN_ERR_NO_GPU;
}

kiln_status kiln_astc_gpu_kernel_info(int *threads, int *regs, size_t *local_bytes, int *ctas_per_sm)
{
	return KILN_ERR_NO_GPU;
}

kiln_status kiln_mip_build_gpu(const kiln_mip_chain *chains, size_t nchains, void *d_temp,
			       size_t temp_size, kiln_stream stream)
{
	return KILN_ERR_NO_GPU;
}

size_t kiln_pngenc_gpu_temp_size(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				 size_t count)
{
	return 0;
}

kiln_status kiln_pngenc_encode_gpu(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				   uint8_t *const *dst, const size_t *dst_caps, uint64_t *d_out_sizes,
				   size_t count, kiln_status *status, void *d_temp, size_t temp_size,
				   kiln_stream stream)
{
	return KILN_ERR_NO_GPU;
}
size_t kiln_pngdec_temp_size(const kiln_pngdec_gpu_file *files, size_t count) { return 0; }

kiln_status kiln_pngdec_decode_gpu(const kiln_pngdec_gpu_file *files, size_t count,
				   kiln_status *status, void *d_temp, size_t temp_size,
				   kiln_stream stream)
{
	return KILN_ERR_NO_GPU;
}

kiln_status kiln_pngdec_gpu_status(const kiln_pngdec_gpu_file *files, size_t count,
				   kiln_status *status, void *d_temp, size_t temp_size)
{
	return KILN_ERR_NO_GPU;
}
size_t kiln_texerr_temp_size(size_t count) { return 0; }
kiln_status kiln_texerr_gpu(const kiln_texerr_job *jobs, size_t count, kiln_texerr *d_out, void *d_temp,
			    size_t temp_size, kiln_stream stream) { return KILN_ERR_NO_GPU; }
#endif
