/* libastcenc behind a C interface (astcenc.h is C++), like squish_shim.h for libsquish. */
#ifndef KILN_BENCH_ASTCENC_SHIM_H
#define KILN_BENCH_ASTCENC_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* astcenc's presets, as kiln's quality levels pair with them. */
typedef enum astcenc_shim_preset {
	ASTCENC_SHIM_FAST,
	ASTCENC_SHIM_MEDIUM,
	ASTCENC_SHIM_THOROUGH,
} astcenc_shim_preset;

/* Encodes a tightly packed w x h RGBA8 image (linear LDR, channel weights 1) with a
 * bw x bh footprint on the calling thread into `blocks` (16 bytes per block, row-major).
 * *cpu_seconds gets the CPU time of the compression call alone. 0 on success. */
int astcenc_shim_encode(const uint8_t *rgba, uint32_t w, uint32_t h, uint32_t bw, uint32_t bh,
			astcenc_shim_preset preset, uint8_t *blocks, size_t size, double *cpu_seconds);

#ifdef __cplusplus
}
#endif

#endif
