/* kiln's own PNG decoder: PNG files -> RGBA8, on the CPU (serial, or strips over a pool)
 * and on the GPU (a batch of files per launch, RGBA8 surfaces left in device memory for
 * the texture encoders).
 *
 * The output is pixel-identical to common/png_io.h's kiln_png_decode (libpng with expand,
 * scale_16, gray_to_rgb, add alpha 0xff, interlace handling), has_alpha and srgb are set
 * the same way, and the files libpng refuses are refused (status + one-line message).
 * Files carrying a valid kiSt chunk (.dev/kist.md: strips with independent deflate data)
 * are inflated and de-filtered strip by strip in parallel; an inconsistent kiSt chunk is
 * ignored.
 *
 * Usage: kiln_pngdec_probe (parses and checks every chunk and CRC, checks the limits
 * before anything is allocated, and fills kiln_pngdec_info), then a decode into a buffer
 * the caller sized from the info. The GPU path trusts the probe's checks of the container
 * (the bytes on the device must be the probed bytes) and does the inflate, the Adler-32
 * check, the de-filtering and the conversion. */
#ifndef KILN_PNG_DEC_H
#define KILN_PNG_DEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/image.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/kiln_hd.h"
#include "kernels/png/png_defilter.h"
#include "kernels/png/png_inflate.h"

/* Everything needed to size buffers and to decode a probed file (plain data: it may be
 * copied to the device). */
typedef struct kiln_pngdec_info {
	uint32_t width, height;
	uint32_t has_alpha;  /* alpha channel or valid tRNS, as kiln_png_decode */
	uint32_t srgb;       /* as kiln_png_decode: 0 only for gAMA ~1.0 without sRGB/iCCP */
	uint32_t interlace;  /* 1: Adam7 */
	uint32_t gpu_ok;     /* 8-bit samples, not interlaced: the GPU path handles it */
	uint32_t strips;     /* kiSt strips (1 when the file has no usable kiSt chunk) */
	uint32_t rows_per_strip;
	uint32_t bpp;        /* bytes per complete pixel, at least 1 */
	uint64_t rowbytes;   /* bytes of one row of the whole image, without the filter byte */
	uint64_t filtered_size; /* inflated bytes the image needs (all passes, filter bytes) */
	uint64_t zlib_size;  /* bytes of the zlib stream (IDAT data concatenated) */
	uint64_t idat_offset; /* file offset of the first IDAT chunk (its length field) */
	uint64_t kist_offsets; /* file offset of the kiSt strip offset table (0: none) */
	uint32_t zlib_adler; /* the stream's trailer when it lies inside the IDATs */
	uint32_t idat_chunks;
	kiln_png_format format;
} kiln_pngdec_info;

/* Parses and validates a PNG held in memory: signature, every chunk's CRC (critical:
 * refused; ancillary: the chunk is ignored), IHDR (checked against limits, NULL =
 * defaults, before anything else is read), PLTE, tRNS, gAMA, sRGB, iCCP, kiSt, the IDAT
 * sequence and IEND. Allocates nothing. err receives a one-line reason on failure. */
kiln_status kiln_pngdec_probe(const uint8_t *data, size_t size, const kiln_image_limits *limits,
			      kiln_pngdec_info *info, char *err, size_t err_cap);

/* The IDAT data of a probed file as one contiguous zlib stream, its 2-byte header checked
 * (err says what is wrong with it): the chunk's own bytes when there is one IDAT, else a
 * copy in *owned, which the caller frees (NULL when no copy was made). */
kiln_status kiln_pngdec_zlib_stream(const uint8_t *data, const kiln_pngdec_info *info, const uint8_t **z,
				    uint8_t **owned, char *err, size_t err_cap);

/* Inflates the whole zlib stream z (from kiln_pngdec_zlib_stream) into filt
 * (info->filtered_size bytes plus 16 of slack for the inflater's word copies) on the calling
 * thread and checks its Adler-32. Compressed data after the image is ignored, as libpng
 * ignores it. */
kiln_status kiln_pngdec_inflate(const kiln_pngdec_info *info, const uint8_t *z, uint8_t *filt, char *err,
				size_t cap);

/* Whether a zlib stream (z: its 2-byte header) declares the 32 KiB window (CINFO 7), the
 * only one kiln's inflaters settle alone: with a smaller one, zlib (which libpng drives)
 * refuses some distances past it that kiln's inflater does not model, so such streams take
 * the replay of kiln_pngdec_inflate on the CPU, strips or not (one rule for every path). */
KILN_HD int kiln_pngdec_full_window(const uint8_t *z)
{
	return (z[0] >> 4) == 7;
}

/* Where a whole zlib stream (z, zlib_size bytes with its 2-byte header; not kiSt strips)
 * stands after kiln's inflater ran over it into the image's filtered_size bytes (rc,
 * out_len and used as kiln_inflate_raw with strip 0 gives them, which the GPU's inflaters
 * reproduce; adler: the Adler-32 of the output, read only when that is the whole image):
 * - KILN_ERR_TRUNCATED or KILN_ERR_CORRUPT: the image is not all there (the stream ends,
 *   or its data is bad, before the last byte), which libpng refuses as well;
 * - KILN_OK: the clean stream that kiln_pngdec_inflate settles without zlib: a 32 KiB
 *   window (CINFO 7), a final block that ends with the image's last byte, its Adler-32
 *   after it and matching;
 * - KILN_ERR_UNSUPPORTED: the whole image came out but the stream ends otherwise (no
 *   final block, data past the image, no or a wrong Adler-32, a smaller window): only the
 *   replay of libpng's reads in kiln_pngdec_inflate, on the CPU, decides such a stream.
 * One rule for both backends: the GPU decoder sends the last kind to the CPU path. */
KILN_HD kiln_status kiln_pngdec_stream_verdict(int rc, uint64_t out_len, uint64_t used, uint32_t adler,
					       const uint8_t *z, uint64_t zlib_size, uint64_t filtered_size)
{
	if (out_len < filtered_size)
		return rc == KILN_INFL_OK || rc == KILN_INFL_OUTPUT_FULL || rc == KILN_INFL_ERR_TRUNCATED
			       ? KILN_ERR_TRUNCATED
			       : KILN_ERR_CORRUPT;
	if (rc == KILN_INFL_OK && kiln_pngdec_full_window(z) && zlib_size - 2 - used >= 4 &&
	    kiln_png_be32(z + 2 + used) == adler)
		return KILN_OK;
	return KILN_ERR_UNSUPPORTED;
}

/* Decodes into rgba (height rows of stride >= 4 * width bytes, caller-owned). Probes first
 * (info may be NULL; when given it receives the probe's result). Uses the kiSt strips on
 * the pool when the file has them (pool NULL: on the calling thread). Allocates only its
 * scratch: the filtered bytes (filtered_size), the zlib stream when the IDAT data is split
 * over several chunks, inflate tables. */
kiln_status kiln_pngdec_decode_cpu(const uint8_t *data, size_t size,
				   const kiln_image_limits *limits, uint8_t *rgba, size_t stride,
				   kiln_pngdec_info *info, char *err, size_t err_cap);
kiln_status kiln_pngdec_decode_cpu_pool(const uint8_t *data, size_t size,
					const kiln_image_limits *limits, uint8_t *rgba,
					size_t stride, kiln_pngdec_info *info, kiln_pool *pool,
					char *err, size_t err_cap);

/* Convenience: decodes into a newly allocated kiln_image (kiln_image_free releases it). */
kiln_status kiln_pngdec_decode_image(const uint8_t *data, size_t size,
				     const kiln_image_limits *limits, kiln_image *out,
				     kiln_pool *pool, char *err, size_t err_cap);

/* The same for a file already probed (info is kiln_pngdec_probe's result for these bytes):
 * the container is not parsed and checked again. */
kiln_status kiln_pngdec_decode_probed_image(const uint8_t *data, const kiln_pngdec_info *info,
					   const kiln_image_limits *limits, kiln_image *out,
					   kiln_pool *pool, char *err, size_t err_cap);

/* ---- GPU ------------------------------------------------------------------------------ */

/* One file of a GPU batch: its bytes and destination in device memory, its probe. */
typedef struct kiln_pngdec_gpu_file {
	const uint8_t *data;   /* device: the whole file as probed */
	size_t size;
	kiln_pngdec_info info; /* kiln_pngdec_probe's result for these bytes */
	uint8_t *rgba;         /* device: height rows of `stride` bytes */
	uint32_t stride;
} kiln_pngdec_gpu_file;

/* Device scratch bytes for a batch (the files' infos decide: zlib copy, filtered bytes,
 * per-strip state). */
size_t kiln_pngdec_temp_size(const kiln_pngdec_gpu_file *files, size_t count);

/* Decodes count files on the current GPU, on `stream` (a few kernels in sequence), and
 * returns once the work is queued. files and status are host arrays. Files whose info says
 * !gpu_ok get KILN_ERR_UNSUPPORTED at once (decode them with the CPU path); what the
 * device finds (bad deflate data, a stream only the CPU path decides) comes from
 * kiln_pngdec_gpu_status after the stream is synchronised. Never allocates; one bad file
 * never fails the batch. */
kiln_status kiln_pngdec_decode_gpu(const kiln_pngdec_gpu_file *files, size_t count,
				   kiln_status *status, void *d_temp, size_t temp_size,
				   kiln_stream stream);

/* After the stream of a kiln_pngdec_decode_gpu call has been synchronised: the per-file
 * results of the device work merged into status[] (entries already failed stay as they
 * are): KILN_OK (the pixels are in the file's rgba), KILN_ERR_CORRUPT (bad deflate data,
 * zlib header or filter type) or KILN_ERR_TRUNCATED (the image is not all there), or
 * KILN_ERR_UNSUPPORTED, as for a file refused at once: decode the file with the CPU path
 * (kiln_pngdec_decode_probed_image), whose verdict and pixels stand. The device settles
 * only the streams kiln_pngdec_stream_verdict calls clean (and valid kiSt strips with a
 * 32 KiB window, as the CPU path): a stream that gives the whole image but ends otherwise
 * is decided as libpng decides it, which only the CPU path replays; its rgba is left
 * unwritten. files/count/d_temp/temp_size must be those of the call. */
kiln_status kiln_pngdec_gpu_status(const kiln_pngdec_gpu_file *files, size_t count,
				   kiln_status *status, void *d_temp, size_t temp_size);

/* Measurement hooks for kiln-bench (KILN_BENCH_PNGDEC_PHASES), in CUDA builds only: flags
 * switch parts of the GPU inflater off for A/B runs (1: window walk, 8: copy rounds, 16:
 * the staged de-filter, 128: the 64-bit window, 512: early input loads, 1024: literal
 * pairs; 2048 switches nothing off but runs the inflater's build that reads these flags,
 * to compare with the one that does not; 16384: files without kiSt strips inflated by one
 * warp instead of in parallel as kernels/png/png_inflate_par.h describes; bits 16-20, when
 * not 0, log2 of the bits between its mid entries, at least 4096; bits 21-22 log2 of the
 * lanes of a warp that run pieces, at most 2; bits 23-26 log2 of the symbols past which a
 * piece is split; bit 27 the pass kernel with 128 registers instead of 64), 4 counts
 * clocks (kiln_pngdec_gpu_prof reads and clears them), 2 times the four kernels of the
 * following calls (kiln_pngdec_gpu_phase_ms: the last call's). Not for production use:
 * flags are global to the process. */
void kiln_pngdec_gpu_debug(unsigned flags);
int kiln_pngdec_gpu_phase_ms(float ms[4]);
int kiln_pngdec_gpu_prof(unsigned long long v[12]);

#endif
