/* PNG encoding of whole batches on one device, CPU or GPU: what texenc.h is for textures.
 *
 * kiln_pngenc_encode_cpu / _gpu (png_enc.h) leave every buffer to the caller; a runner
 * owns them (pinned staging, device samples, device output, the encoder's scratch), sized
 * by the largest batch seen and reused, so a stream of batches allocates only when one is
 * larger than any before. Images come in host memory in the encoder's sample layout and
 * leave as PNG files in host memory, byte-identical on both backends.
 *
 * On a GPU a batch goes up in one copy, is encoded by one sequence of kernels and comes
 * back image by image at its real size (the bound the encoder needs per image is about
 * the raw size, most of which a file does not use). A CUDA error poisons the context: the
 * batch fails with KILN_ERR_CUDA, every buffer is dropped and the device is reset, so the
 * next batch starts clean. A reset frees what other users of the device held in the same
 * context: they see their next CUDA call fail and recover the same way (texenc does).
 * One thread at a time may use a runner. */
#ifndef KILN_PNG_RUNNER_H
#define KILN_PNG_RUNNER_H

#include <stddef.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/pool.h"
#include "kernels/gpu.h"
#include "kernels/png/png_enc.h"

typedef struct kiln_pngenc_runner kiln_pngenc_runner;

/* device must be resolved (CPU or GPU N); pool (CPU backend, may be NULL: one thread) is
 * borrowed. Nothing is allocated on the device before the first batch. */
kiln_status kiln_pngenc_runner_create(const kiln_device *device, kiln_pool *pool, kiln_pngenc_runner **out);
void kiln_pngenc_runner_destroy(kiln_pngenc_runner *r); /* NULL accepted */

/* Encodes count images (pixels and chunks in host memory): image i's file is appended to
 * out[i] (within that buffer's cap) when status[i] is KILN_OK; nothing is appended for an
 * image that failed (its status says why: refused by kiln_pngenc_check, no room in
 * out[i]). Returns KILN_OK when the batch ran, or what stopped the whole batch (every
 * status then carries it): KILN_ERR_NOMEM, or KILN_ERR_CUDA with the runtime's message in
 * kiln_pngenc_runner_last_error (the device has been reset for the next batch). */
kiln_status kiln_pngenc_runner_encode(kiln_pngenc_runner *r, const kiln_pngenc_params *params,
				      const kiln_pngenc_image *images, size_t count, kiln_buf *out,
				      kiln_status *status);

/* Why the last batch failed as a whole ("" if it did not). */
const char *kiln_pngenc_runner_last_error(const kiln_pngenc_runner *r);

#endif
