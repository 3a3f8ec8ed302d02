/* kiln's PNG encoder: raw samples of any PNG colour type and bit depth -> a complete PNG
 * file, on the CPU or the GPU, byte-identical between the two (docs/PNG.md).
 *
 * The API follows kernels/bc1/bc1.h: the caller sizes every buffer up front
 * (kiln_pngenc_bound per image, kiln_pngenc_*_temp_size per batch), the encoders never
 * allocate, and each image gets its own status. By default the file uses kiln's
 * parallel-decodable layout (the kiSt chunk: row strips, each an independent deflate run
 * inside one zlib stream), which every PNG reader reads as an ordinary PNG.
 *
 * Pixels are given in PNG's own sample layout: rows of ceil(width * channels * depth / 8)
 * bytes, samples below 8 bits packed from the most significant bit, 16-bit samples big
 * endian (what libpng's png_read_image returns without transforms). The padding bits of
 * a row's last byte are written as given. One shortcut for the common case: from_rgba8
 * reads RGBA8 rows (a kiln_surface) and writes them as RGBA8, or RGB8 dropping alpha. */
#ifndef KILN_PNG_ENC_H
#define KILN_PNG_ENC_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/pool.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"

#define KILN_PNG_COLOR_GRAY 0
#define KILN_PNG_COLOR_RGB 2
#define KILN_PNG_COLOR_PALETTE 3
#define KILN_PNG_COLOR_GRAY_ALPHA 4
#define KILN_PNG_COLOR_RGBA 6

/* A chunk copied verbatim into the file (PLTE, tRNS, gAMA, cHRM, sRGB, iCCP, sBIT, bKGD,
 * pHYs, tEXt, zTXt, iTXt, ...). The encoder writes them in a valid order whatever the
 * order given: colour-space chunks (cHRM, gAMA, iCCP, sBIT, sRGB, cICP, mDCv, cLLI) first,
 * then PLTE, then all others in the order given, all before the image data. IHDR, IDAT,
 * IEND are refused; a kiSt chunk (from a file kiln wrote) is dropped: the encoder writes
 * its own. Data is host memory for both backends. */
typedef struct kiln_png_chunk {
	char type[4];
	const uint8_t *data;
	uint32_t length;
} kiln_png_chunk;

typedef struct kiln_pngenc_image {
	const uint8_t *pixels;  /* host memory (CPU backend) or device memory (GPU backend) */
	uint32_t width, height;
	size_t stride;          /* bytes from one row to the next */
	uint8_t color_type;     /* KILN_PNG_COLOR_* */
	uint8_t bit_depth;      /* 1, 2, 4, 8, 16 as PNG allows for the colour type */
	uint8_t from_rgba8;     /* pixels are RGBA8 rows; color_type RGBA (6) or RGB (2), depth 8 */
	const kiln_png_chunk *chunks;  /* may be NULL; palette images need a PLTE here */
	size_t chunk_count;
} kiln_pngenc_image;

/* RGBA8 when s->has_alpha, else RGB8 (alpha dropped), from a kiln_surface; no chunks. */
void kiln_pngenc_image_from_surface(const kiln_surface *s, kiln_pngenc_image *img);

#define KILN_PNGENC_FILTER_ADAPTIVE (-1)

typedef struct kiln_pngenc_params {
	kiln_quality quality;     /* fast | medium | high: deflate effort (default medium) */
	uint32_t rows_per_strip;  /* 0: automatic (about 16 / 20 / 64 KiB of filtered bytes a
	                             strip at fast / medium / high) */
	int single_strip;         /* nonzero: one strip, no kiSt chunk */
	int filter;               /* KILN_PNGENC_FILTER_ADAPTIVE (default: libpng's heuristic) or
	                             a filter type 0..4 for every row (the first row of a strip
	                             then uses None or Sub) */
} kiln_pngenc_params;

void kiln_pngenc_params_default(kiln_pngenc_params *params);

/* Bytes of one row of img's pixels as given (4 x width for from_rgba8), 0 when the colour
 * type / depth pair is invalid: what a caller moving the pixels copies per row. */
size_t kiln_pngenc_source_row_bytes(const kiln_pngenc_image *img);

/* KILN_OK when the image and params are acceptable (sizes, colour type / depth pair,
 * chunks), else why not (INVALID_ARG, TOO_LARGE). */
kiln_status kiln_pngenc_check(const kiln_pngenc_params *params, const kiln_pngenc_image *img);

/* The rows per strip the encoder uses for img (0 when the image is invalid). */
uint32_t kiln_pngenc_rows_per_strip(const kiln_pngenc_params *params, const kiln_pngenc_image *img);

/* Largest file the encoder can write for img (every block stored), 0 when invalid.
 * dst_caps[i] must be at least this. */
size_t kiln_pngenc_bound(const kiln_pngenc_params *params, const kiln_pngenc_image *img);

/* Host scratch kiln_pngenc_encode_cpu needs for this batch on this pool (NULL: one
 * thread). Invalid images count for nothing. */
size_t kiln_pngenc_cpu_temp_size(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				 size_t count, const kiln_pool *pool);

/* Encodes count images (host memory) into dst[i] (dst_caps[i] >= kiln_pngenc_bound bytes),
 * the file's size into out_sizes[i]. status[i] is KILN_OK or why image i was refused; its
 * out_sizes[i] is then 0. temp: temp_size >= kiln_pngenc_cpu_temp_size bytes of host
 * memory. Returns KILN_OK when the batch ran (even if some images failed), INVALID_ARG
 * for bad arguments to the call itself. pool may be NULL (calling thread only). */
kiln_status kiln_pngenc_encode_cpu(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				   uint8_t *const *dst, const size_t *dst_caps, size_t *out_sizes,
				   size_t count, kiln_status *status, void *temp, size_t temp_size,
				   kiln_pool *pool);

/* Device scratch kiln_pngenc_encode_gpu needs for this batch. */
size_t kiln_pngenc_gpu_temp_size(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				 size_t count);

/* The same on the current GPU: images[i].pixels and dst[i] are device pointers,
 * d_out_sizes a device array of count uint64_t that receives the file sizes (0 for a
 * refused image); images, chunk data, dst, dst_caps and status are host memory. A few
 * kernels in sequence on `stream`; d_temp is device memory of kiln_pngenc_gpu_temp_size
 * bytes. Returns once the work is queued (passthrough chunks are copied from host memory
 * before it returns): synchronise the stream before reading dst or d_out_sizes. Launch
 * errors return KILN_ERR_CUDA. The output bytes equal kiln_pngenc_encode_cpu's. */
kiln_status kiln_pngenc_encode_gpu(const kiln_pngenc_params *params, const kiln_pngenc_image *images,
				   uint8_t *const *dst, const size_t *dst_caps, uint64_t *d_out_sizes,
				   size_t count, kiln_status *status, void *d_temp, size_t temp_size,
				   kiln_stream stream);

#endif
