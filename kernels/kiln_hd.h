/* The single-source rule: per-block codec logic lives in headers of plain C that gcc and
 * nvcc both compile. KILN_HD marks such functions __host__ __device__ under nvcc. Both
 * compilers are told not to contract floating point (-ffp-contract=off, -fmad=false), and
 * such code calls no libm function (whose results differ between glibc and CUDA): that
 * is what makes CPU and GPU output byte-identical. */
#ifndef KILN_HD_H
#define KILN_HD_H

#include <stdint.h>

#ifdef __CUDACC__
#define KILN_HD __host__ __device__ __forceinline__
#define KILN_HD_CONST __device__ __constant__
#else
#define KILN_HD static inline
#define KILN_HD_CONST static const
#endif

/* A struct member's alignment, in both languages the single-source headers compile as. */
#ifdef __cplusplus
#define KILN_ALIGN16 alignas(16)
#else
#define KILN_ALIGN16 _Alignas(16)
#endif

/* Put before a loop whose trip count is only known at run time to keep nvcc from
 * unrolling it. Where the threads of a warp run a long search along different paths (the
 * ASTC encoder), the code they run at once outgrows the instruction cache and fetching
 * it becomes the limit; rolled loops keep that code small. */
#ifdef __CUDACC__
#define KILN_ROLLED _Pragma("unroll 1")
#else
#define KILN_ROLLED
#endif

/* One image (or one mip level) as the codecs read it: RGBA8 rows of `stride` bytes. The
 * pointer is host memory for CPU backends and device memory for GPU backends. */
typedef struct kiln_surface {
	const uint8_t *rgba;
	uint32_t width;
	uint32_t height;
	uint32_t stride;     /* bytes per row */
	uint32_t has_alpha;  /* nonzero: the alpha channel carries information */
} kiln_surface;

/* Texel (x, y) clamped to the surface: blocks that overhang the edge repeat the last row
 * and column, which is how partial blocks are padded everywhere in kiln. */
KILN_HD const uint8_t *kiln_surface_texel(const kiln_surface *s, uint32_t x, uint32_t y)
{
	uint32_t cx = x < s->width ? x : s->width - 1;
	uint32_t cy = y < s->height ? y : s->height - 1;
	return s->rgba + (uint64_t)cy * s->stride + (uint64_t)cx * 4;
}

#endif
