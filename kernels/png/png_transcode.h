/* PNG -> PNG with kiln's own codec (`kiln encode --format png`): a file is checked by the
 * decoder's probe (limits, every CRC, structure), its image data inflated and de-filtered
 * with the decoder's shared functions (png_inflate.h, png_defilter.h) and written again by
 * kiln's encoder (png_enc.h) in its parallel-decodable layout.
 *
 * By default the image keeps its colour type and bit depth: the raw samples go through
 * unchanged (Adam7 input is de-interlaced, the output is never interlaced), with the
 * chunks that make it the same image (PLTE, tRNS, sBIT, bKGD, hIST) and the ancillary
 * information a PNG editor preserves: gAMA, cHRM, sRGB, iCCP, cICP, mDCv, cLLI, pHYs, sCAL,
 * sPLT, tEXt, zTXt, iTXt, tIME, eXIf, and unknown safe-to-copy chunks that stay in the same
 * place relative to the critical chunks (between PLTE, or IHDR, and IDAT). Dropped: IHDR,
 * IDAT, IEND (written anew), kiSt (the encoder writes its own), unknown unsafe-to-copy
 * chunks (the PNG rule once the image data is rewritten), ancillary chunks with a CRC
 * error and misplaced or repeated ones that readers ignore (so the output reads as the
 * input did).
 *
 * rgba8: 8-bit RGBA (RGB when the image has no alpha) from the RGBA8 decode instead; the
 * chunks tied to the old sample format (PLTE, tRNS, sBIT, bKGD, hIST) are dropped, and an
 * iCCP of a grayscale image too (a gray profile does not describe RGB samples). */
#ifndef KILN_PNG_TRANSCODE_H
#define KILN_PNG_TRANSCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/image.h"
#include "common/pool.h"
#include "kernels/codec.h"
#include "kernels/png/png_dec.h"
#include "kernels/png/png_enc.h"
#include "kernels/png/png_file.h"
#include "kernels/png/png_runner.h"

typedef struct kiln_png_transcode_opts {
	kiln_quality quality;             /* deflate effort (default medium) */
	int rgba8;                        /* nonzero: 8-bit RGBA/RGB, see above */
	kiln_png_decoder decoder;         /* rgba8: the decoder giving the RGBA8 pixels */
	const kiln_image_limits *limits;  /* NULL: defaults */
} kiln_png_transcode_opts;

void kiln_png_transcode_opts_default(kiln_png_transcode_opts *opts);

/* What was written. */
typedef struct kiln_png_transcode_info {
	uint32_t width, height;
	uint8_t color_type, bit_depth;      /* of the output */
	uint8_t interlaced;                 /* the input was Adam7 */
	uint32_t chunks_kept, chunks_dropped; /* ancillary chunks (PLTE counts as kept) */
	uint64_t bytes;                     /* size of the new file */
} kiln_png_transcode_info;

/* The two halves of a transcode, for callers that encode many files in batches on a
 * device (the worker): a file read into the encoder's input, then encoded with others. */
typedef struct kiln_png_source {
	kiln_pngenc_image image;       /* samples and chunks; the chunks point into the file */
	kiln_png_transcode_info info;  /* bytes: set by kiln_png_source_encode */
	/* owned */
	uint8_t *filt, *raw;
	kiln_image rgba;
	kiln_png_chunk *chunks;
} kiln_png_source;

/* Host memory kiln_png_source_read holds for a probed file (what a caller budgets). */
size_t kiln_png_source_memory(const kiln_pngdec_info *probed, bool rgba8);

/* Checks and decodes the file data[0, size) into src; data must outlive src (the chunks
 * are not copied). probed: kiln_pngdec_probe's result for data under opts->limits, or
 * NULL to probe here. Errors as kiln_png_transcode's; src holds nothing on failure. */
kiln_status kiln_png_source_read(const uint8_t *data, size_t size, const kiln_pngdec_info *probed,
				 const kiln_png_transcode_opts *opts, kiln_pool *pool, kiln_png_source *src,
				 char *err, size_t err_cap);
void kiln_png_source_free(kiln_png_source *src); /* zeroed or read sources */

/* Encodes count sources at opts->quality on runner's device: file i is appended to
 * out[i] when status[i] is KILN_OK (and srcs[i]->info.bytes set). Returns what stopped the
 * whole batch, as kiln_pngenc_runner_encode, with its reason in err. */
kiln_status kiln_png_source_encode(kiln_pngenc_runner *runner, const kiln_png_transcode_opts *opts,
				   kiln_png_source *const *srcs, size_t count, kiln_buf *out, kiln_status *status,
				   char *err, size_t err_cap);

/* Transcodes the PNG file data[0, size) and appends the new file to out (nothing is
 * appended on failure). pool (may be NULL) runs the encoder's strips; it must not be a
 * pool whose kiln_pool_for is running this call. info may be NULL. err receives a
 * one-line reason on failure: the probe's (CORRUPT, TRUNCATED, TOO_LARGE for the limits),
 * the image data's (CORRUPT, TRUNCATED) or the encoder's. */
kiln_status kiln_png_transcode(const uint8_t *data, size_t size, const kiln_png_transcode_opts *opts,
			       kiln_pool *pool, kiln_buf *out, kiln_png_transcode_info *info,
			       char *err, size_t err_cap);

/* The same from the file in_path to out_path (written atomically: a temporary name in the
 * same directory, then rename). The input is read whole, capped at 1 GiB. */
kiln_status kiln_png_transcode_path(const char *in_path, const char *out_path,
				    const kiln_png_transcode_opts *opts, kiln_pool *pool,
				    kiln_png_transcode_info *info, char *err, size_t err_cap);

#endif
