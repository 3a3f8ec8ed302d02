/* libsquish behind a C interface, so that the benchmarks stay C: the only C++ in bench/
 * is squish_shim.cpp. libsquish is linked into the bench binary alone. */
#ifndef KILN_BENCH_SQUISH_SHIM_H
#define KILN_BENCH_SQUISH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* squish's colour fits, fastest to best. */
typedef enum squish_shim_fit {
	SQUISH_SHIM_RANGE,
	SQUISH_SHIM_CLUSTER,
	SQUISH_SHIM_ITERATIVE_CLUSTER,
} squish_shim_fit;

const char *squish_shim_fit_name(squish_shim_fit fit);

/* DXT1-encodes block rows [by0, by1) of a w x h RGBA8 image (rows of `stride` bytes) into
 * `blocks`, which holds the whole image's blocks in row-major order (8 bytes each), with
 * the uniform error metric {1, 1, 1}. Blocks over the edge are masked, as
 * squish::CompressImage does. One block at a time through squish::CompressMasked: the
 * Debian build of CompressImage may spread itself over OpenMP threads, and the benchmark
 * controls threads itself. */
void squish_shim_encode_rows(const uint8_t *rgba, uint32_t w, uint32_t h, size_t stride,
			     uint32_t by0, uint32_t by1, uint8_t *blocks, squish_shim_fit fit);

#ifdef __cplusplus
}
#endif

#endif
