/* The texture encoder front end: RGBA8 images in, compressed textures (with their mip
 * chains) out, on the CPU backend or one GPU. It owns the device and pinned buffers, sized
 * by the largest batch seen and reused, so a stream of batches allocates only when a
 * batch is larger than any before. Batches can be kept in flight (submit, then collect)
 * so that transfers and kernels of consecutive batches overlap on the GPU. The CLI and
 * the worker both encode through it. */
#ifndef KILN_TEXENC_H
#define KILN_TEXENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/image.h"
#include "common/pool.h"
#include "common/texture.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"
#include "kernels/png/png_dec.h"
#include "kernels/texerr.h"

typedef enum kiln_colorspace {
	KILN_COLORSPACE_AUTO,    /* as the image says (kiln_image.srgb) */
	KILN_COLORSPACE_SRGB,
	KILN_COLORSPACE_LINEAR,
} kiln_colorspace;

typedef struct kiln_texenc_opts {
	kiln_texfmt format;       /* KILN_TEXFMT_BC1_RGB (RGBA is chosen per image with alpha)
				   * or KILN_TEXFMT_ASTC */
	kiln_quality quality;
	int alpha_cutoff;         /* BC1 punch-through threshold; 0 disables */
	uint32_t block_w, block_h; /* ASTC footprint, one of the 14 2D ones (default 4x4) */
	bool mipmaps;             /* full chain down to 1x1 */
	kiln_colorspace colorspace;
	/* level 0's error against the pixels it was encoded from, measured where both are
	 * (on the GPU for a GPU batch: kernels/texerr.h), for kiln_texenc_collect_measured */
	bool measure;
} kiln_texenc_opts;

void kiln_texenc_opts_default(kiln_texenc_opts *opts);

/* Whether a format has a GPU backend. One without runs only on the CPU: a texenc on a GPU
 * fails each of its batches with KILN_ERR_UNSUPPORTED, so callers that choose the device
 * (`--device auto`, the worker) pick the CPU for it. */
bool kiln_texenc_gpu_supported(kiln_texfmt format);

typedef struct kiln_texenc kiln_texenc;

/* device must be resolved (CPU or GPU N). pool is used by the CPU backend (may be NULL:
 * one thread) and is borrowed, not owned. */
kiln_status kiln_texenc_create(const kiln_device *device, const kiln_texenc_opts *opts,
			       kiln_pool *pool, kiln_texenc **out);
void kiln_texenc_destroy(kiln_texenc *enc); /* NULL accepted */

/* Changes the options for the following batches; buffers are kept. */
kiln_status kiln_texenc_set_opts(kiln_texenc *enc, const kiln_texenc_opts *opts);

/* Why the last batch failed as a whole ("" if it did not): for a CUDA error, the runtime's
 * message from before the device was reset. */
const char *kiln_texenc_last_error(const kiln_texenc *enc);

/* Nanoseconds the caller's collects have spent waiting for the device to finish batches
 * (0 on the CPU backend): what of an encode thread's time is the GPU's, not the host's. */
uint64_t kiln_texenc_device_wait_ns(const kiln_texenc *enc);

/* Encodes count images. out[i] receives a texture whose levels are malloc'ed (release with
 * kiln_texture_free_levels); status[i] says whether image i was encoded. Returns KILN_OK
 * when the batch ran (some images may still have failed), or the error that stopped the
 * whole batch (e.g. KILN_ERR_CUDA: every status then carries it and the device has been
 * reset for the next batch). The same as kiln_texenc_submit + kiln_texenc_collect, so it
 * needs a free batch slot (fails with KILN_ERR_INVALID_ARG when every slot is in flight). */
kiln_status kiln_texenc_encode(kiln_texenc *enc, const kiln_image *images, size_t count,
			       kiln_texture *out, kiln_status *status);

/* ---- asynchronous batches ----
 *
 * On a GPU each batch slot has its own stream, pinned staging and device buffers (each
 * grown to the largest batch that slot has seen), so a caller that submits batch k+1
 * before collecting batch k gets the upload of k+1 overlapping the kernels of k and the
 * download of k-1:
 *
 *     submit(b0); submit(b1); loop { collect(oldest); submit(next); }
 *
 * submit plans the batch, copies the images into the slot's pinned buffer and queues the
 * upload, mip and codec launches and the download, then returns: the images may be freed
 * as soon as it returns. collect waits for that batch and hands out its textures.
 * On the CPU, submit encodes the whole batch before it returns and collect only hands the
 * result out, so nothing is gained by having more than one batch in flight there.
 *
 * A CUDA error (at submit or collect) poisons the context: every batch in flight fails
 * with KILN_ERR_CUDA and the runtime's message (kiln_texenc_last_error after its collect),
 * the device is reset and every buffer dropped; the next submit starts clean.
 * One thread at a time may use an encoder. */

#define KILN_TEXENC_MAX_INFLIGHT 3  /* batch slots: submitted and not yet collected */

/* How many batches a caller should keep in flight: 1 on the CPU, KILN_TEXENC_MAX_INFLIGHT
 * on a GPU. */
unsigned kiln_texenc_depth(const kiln_texenc *enc);

/* Queues count images (under the current options) and gives the batch a ticket. Returns
 * KILN_OK whenever the batch got a slot: whatever goes wrong after that (bad images, a
 * CUDA error) is reported by kiln_texenc_collect. Fails, with no ticket, when every slot
 * is in flight (KILN_ERR_INVALID_ARG) or host memory runs out (KILN_ERR_NOMEM). */
kiln_status kiln_texenc_submit(kiln_texenc *enc, const kiln_image *images, size_t count,
			       uint64_t *ticket);

/* One image given as a PNG file that has not been decoded: its bytes (host memory, read
 * only during the call) and kiln_pngdec_probe's result for them (limits already checked). */
typedef struct kiln_texenc_png {
	const uint8_t *data;
	size_t size;
	kiln_pngdec_info info;
} kiln_texenc_png;

#define KILN_TEXENC_MAX_PNG_BATCH 64

/* Whether a GPU decodes a probed file faster than the host would, for callers that choose
 * which files to hand to kiln_texenc_submit_png on a GPU: the GPU decoder takes it, and it
 * is an ordinary file (one stream: inflated in parallel, kernels/png/png_inflate_par.h;
 * 8 GB/s with 3 batches of 32 Kodak files in flight on an H100, where 16 cores do about
 * 1.2, and 2048x2048 files as well) or has the strips that make it fast there (about 20 GB/s);
 * a file with a few strips inflates with a warp per strip (docs/PERFORMANCE.md). */
#define KILN_TEXENC_GPU_DECODE_MIN_STRIPS 8
bool kiln_texenc_png_gpu_decodes(const kiln_pngdec_info *info);

/* kiln_texenc_submit for PNG files (at most KILN_TEXENC_MAX_PNG_BATCH): on a GPU the files
 * travel compressed and are decoded there (kernels/png/png_dec.h) straight into the
 * batch's pixels, so decoded pixels never cross the bus and no CPU decodes them. Files the
 * GPU decoder does not take (info.gpu_ok 0: 16-bit, Adam7), and every file on the CPU
 * backend, are decoded on the host by kiln's decoder first, on the encoder's pool; a file
 * whose zlib stream the GPU decoder leaves to the CPU path (it ends irregularly, which only
 * libpng's rules decide: kiln_pngdec_stream_verdict) is decoded and encoded on the host at
 * collect, with the same bytes as the GPU would give. A file that does not decode fails its
 * image only (its status at collect). */
kiln_status kiln_texenc_submit_png(kiln_texenc *enc, const kiln_texenc_png *files, size_t count,
				   uint64_t *ticket);

/* Waits for a submitted batch (tickets may be collected in any order) and fills out[i] and
 * status[i] for each of its count images, as kiln_texenc_encode does, with the same
 * return value; kiln_texenc_last_error then explains a whole-batch failure. The slot is
 * free again afterwards. KILN_ERR_INVALID_ARG (and nothing written) for a ticket that is
 * not in flight. */
kiln_status kiln_texenc_collect(kiln_texenc *enc, uint64_t ticket, kiln_texture *out,
				kiln_status *status);

/* kiln_texenc_collect, and for a batch submitted with opts.measure, err[i] (count entries)
 * level 0's error of image i against its pixels (zero for an image not encoded, and
 * without opts.measure). err may be NULL. */
kiln_status kiln_texenc_collect_measured(kiln_texenc *enc, uint64_t ticket, kiln_texture *out,
					 kiln_status *status, kiln_texerr *err);

/* Batches submitted and not yet collected. */
unsigned kiln_texenc_inflight(const kiln_texenc *enc);

#endif
