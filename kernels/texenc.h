/* The texture encoder front end: RGBA8 images in, compressed textures (with their mip
 * chains) out, on the CPU backend or one GPU. It owns the device and pinned buffers, sized
 * by the largest batch seen and reused, so a stream of batches allocates only when a
 * batch is larger than any before. The CLI and the worker both encode through it. */
#ifndef KILN_TEXENC_H
#define KILN_TEXENC_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "common/image.h"
#include "common/pool.h"
#include "common/texture.h"
#include "kernels/codec.h"
#include "kernels/gpu.h"

typedef enum kiln_colorspace {
	KILN_COLORSPACE_AUTO,    /* as the image says (kiln_image.srgb) */
	KILN_COLORSPACE_SRGB,
	KILN_COLORSPACE_LINEAR,
} kiln_colorspace;

typedef struct kiln_texenc_opts {
	kiln_texfmt format;       /* KILN_TEXFMT_BC1_RGB (RGBA is chosen per image with alpha) */
	kiln_quality quality;
	int alpha_cutoff;         /* BC1 punch-through threshold; 0 disables */
	bool mipmaps;             /* full chain down to 1x1 */
	kiln_colorspace colorspace;
} kiln_texenc_opts;

void kiln_texenc_opts_default(kiln_texenc_opts *opts);

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

/* Encodes count images. out[i] receives a texture whose levels are malloc'ed (release with
 * kiln_texture_free_levels); status[i] says whether image i was encoded. Returns KILN_OK
 * when the batch ran (some images may still have failed), or the error that stopped the
 * whole batch (e.g. KILN_ERR_CUDA: every status then carries it and the device has been
 * reset for the next batch). */
kiln_status kiln_texenc_encode(kiln_texenc *enc, const kiln_image *images, size_t count,
			       kiln_texture *out, kiln_status *status);

#endif
