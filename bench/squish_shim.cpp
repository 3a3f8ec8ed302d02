// The C face of libsquish for the benchmarks (see squish_shim.h).
#include "bench/squish_shim.h"

#include <squish.h>
#include <string.h>

static int fit_flags(squish_shim_fit fit)
{
	switch (fit) {
	case SQUISH_SHIM_RANGE:
		return squish::kDxt1 | squish::kColourRangeFit;
	case SQUISH_SHIM_CLUSTER:
		return squish::kDxt1 | squish::kColourClusterFit;
	case SQUISH_SHIM_ITERATIVE_CLUSTER:
		break;
	}
	return squish::kDxt1 | squish::kColourIterativeClusterFit;
}

extern "C" const char *squish_shim_fit_name(squish_shim_fit fit)
{
	switch (fit) {
	case SQUISH_SHIM_RANGE:
		return "range fit";
	case SQUISH_SHIM_CLUSTER:
		return "cluster fit";
	case SQUISH_SHIM_ITERATIVE_CLUSTER:
		break;
	}
	return "iterative cluster fit";
}

// Gathers the 4x4 block at (bx, by); texels outside the image are left out of the mask.
static int gather(const uint8_t *rgba, uint32_t w, uint32_t h, size_t stride, uint32_t bx,
		  uint32_t by, uint8_t texels[64])
{
	int mask = 0;
	memset(texels, 0, 64);
	for (uint32_t y = 0; y < 4; y++) {
		for (uint32_t x = 0; x < 4; x++) {
			uint32_t px = bx * 4 + x, py = by * 4 + y;
			if (px < w && py < h) {
				memcpy(texels + 4 * (4 * y + x), rgba + (size_t)py * stride + (size_t)px * 4, 4);
				mask |= 1 << (4 * y + x);
			}
		}
	}
	return mask;
}

extern "C" void squish_shim_encode_rows(const uint8_t *rgba, uint32_t w, uint32_t h, size_t stride,
					uint32_t by0, uint32_t by1, uint8_t *blocks, squish_shim_fit fit)
{
	float metric[3] = { 1.0f, 1.0f, 1.0f };
	int flags = fit_flags(fit);
	uint32_t bw = (w + 3) / 4;
	uint8_t texels[64];
	for (uint32_t by = by0; by < by1; by++) {
		for (uint32_t bx = 0; bx < bw; bx++) {
			int mask = gather(rgba, w, h, stride, bx, by, texels);
			squish::CompressMasked(texels, mask, blocks + ((size_t)by * bw + bx) * 8, flags, metric);
		}
	}
}
