/* See astcenc_shim.h. */
#include "bench/astcenc_shim.h"

/* the shared library exports C symbols: say so before the header declares them */
#define ASTCENC_DYNAMIC_LIBRARY 1
#include <astcenc.h>
#include <time.h>

static double thread_cpu_now()
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int astcenc_shim_encode(const uint8_t *rgba, uint32_t w, uint32_t h, uint32_t bw, uint32_t bh,
			astcenc_shim_preset preset, uint8_t *blocks, size_t size, double *cpu_seconds)
{
	float effort = preset == ASTCENC_SHIM_FAST ? ASTCENC_PRE_FAST
		       : (preset == ASTCENC_SHIM_MEDIUM ? ASTCENC_PRE_MEDIUM : ASTCENC_PRE_THOROUGH);
	astcenc_config cfg;
	astcenc_context *ctx = nullptr;
	if (astcenc_config_init(ASTCENC_PRF_LDR, bw, bh, 1, effort, 0, &cfg) != ASTCENC_SUCCESS ||
	    astcenc_context_alloc(&cfg, 1, &ctx) != ASTCENC_SUCCESS)
		return -1;
	void *slices[1] = {const_cast<uint8_t *>(rgba)};
	astcenc_image img;
	img.dim_x = w;
	img.dim_y = h;
	img.dim_z = 1;
	img.data_type = ASTCENC_TYPE_U8;
	img.data = slices;
	astcenc_swizzle swz = {ASTCENC_SWZ_R, ASTCENC_SWZ_G, ASTCENC_SWZ_B, ASTCENC_SWZ_A};
	double t0 = thread_cpu_now();
	astcenc_error e = astcenc_compress_image(ctx, &img, &swz, blocks, size, 0);
	*cpu_seconds = thread_cpu_now() - t0;
	astcenc_context_free(ctx);
	return e == ASTCENC_SUCCESS ? 0 : -1;
}
