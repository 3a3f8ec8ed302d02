/* The fuzzed entry points, shared by the libFuzzer targets (tests/fuzz/fuzz_*.c, built by
 * `make fuzz` with clang, ASan and UBSan) and by the regression replay in `make test`
 * (tests/unit/test_fuzz_regress.c, built normally), so that a crashing input found by the
 * fuzzer is replayed through exactly the code that crashed.
 *
 * Each function takes arbitrary bytes, drives one parser the way kiln itself does, checks
 * the invariants its callers rely on (abort() on a violation, which both libFuzzer and
 * Criterion report as a crash), and returns the parser's kiln_status. */
#ifndef KILN_FUZZ_TARGETS_H
#define KILN_FUZZ_TARGETS_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/image.h"
#include "common/png_io.h"
#include "common/proto.h"
#include "kernels/astc/astc.h"
#include "kernels/astc/astc_block.h"
#include "kernels/astc/astc_enc.h"
#include "kernels/bc1/bc1.h"
#include "scheduler/spec.h"

/* Stops the fuzzer (or fails the test) on a broken invariant; a plain abort() keeps the
 * message next to the stack trace either prints. */
#define FUZZ_CHECK(cond)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, \
				__LINE__);                                                 \
			abort();                                                           \
		}                                                                          \
	} while (0)

/* PNG: kiln_png_decode on the bytes. The limits are kiln's defaults scaled down (4096 per
 * side, 4 Mpix) only so that one input cannot make the fuzzer allocate a gigabyte: the
 * limit check itself is the same code either way. A decoded image must be exactly what
 * the header said, with every row inside the allocation (ASan checks the writes). */
static inline kiln_status kiln_fuzz_png(const uint8_t *data, size_t size)
{
	kiln_image_limits limits = {.max_width = 4096, .max_height = 4096, .max_pixels = 4u << 20};
	kiln_image img;
	char err[256];
	kiln_status st = kiln_png_decode(data, size, &limits, &img, err, sizeof err);
	if (st == KILN_OK) {
		FUZZ_CHECK(img.pixels && img.width && img.height && img.stride >= 4 * (size_t)img.width);
		FUZZ_CHECK((uint64_t)img.width * img.height <= limits.max_pixels);
		uint32_t w = 0, h = 0;
		FUZZ_CHECK(kiln_png_probe(data, size, &w, &h) == KILN_OK);
		FUZZ_CHECK(w == img.width && h == img.height);
		/* touch the last byte: the allocation must cover every row */
		volatile uint8_t last = kiln_image_row(&img, img.height - 1)[4 * (size_t)img.width - 1];
		(void)last;
	} else {
		FUZZ_CHECK(img.pixels == NULL);
		FUZZ_CHECK(err[0] != '\0');
	}
	kiln_image_free(&img);
	return st;
}

/* Containers: what `kiln decode` does with a file: kiln_container_read, then every level
 * through its decoder (kiln_bc1_decode, kiln_astc_decode). Levels must lie inside the
 * input. */
static inline kiln_status kiln_fuzz_container(const uint8_t *data, size_t size)
{
	kiln_texture tex;
	kiln_status st = kiln_container_read(data, size, &tex);
	if (st != KILN_OK) {
		FUZZ_CHECK(tex.num_levels == 0);
		return st;
	}
	FUZZ_CHECK(tex.num_levels >= 1 && tex.num_levels <= KILN_MAX_LEVELS);
	for (uint32_t i = 0; i < tex.num_levels; i++) {
		const kiln_level *lv = &tex.levels[i];
		FUZZ_CHECK(lv->data >= data && lv->size <= size &&
			   (size_t)(lv->data - data) <= size - lv->size);
		FUZZ_CHECK(lv->size == kiln_texture_level_size(&tex, lv->width, lv->height));
		kiln_image img;
		kiln_status dst = kiln_image_alloc(&img, lv->width, lv->height, NULL);
		if (dst != KILN_OK)
			return dst;
		if (tex.format == KILN_TEXFMT_ASTC)
			dst = kiln_astc_decode(lv->data, lv->size, lv->width, lv->height, tex.block_w, tex.block_h,
					       tex.srgb, img.pixels, img.stride);
		else
			dst = kiln_bc1_decode(lv->data, lv->size, lv->width, lv->height,
					      tex.format == KILN_TEXFMT_BC1_RGBA, img.pixels, img.stride);
		kiln_image_free(&img);
		FUZZ_CHECK(dst == KILN_OK);  /* the reader promised the level's full block data */
	}
	/* What was read must write back (the reader accepts only what the writers produce,
	 * plus free fields); the rewritten file must read back to the same levels. */
	kiln_buf out;
	kiln_buf_init(&out, (size_t)1 << 30);
	int c = kiln_container_detect(data, size);
	kiln_status wst = kiln_container_write((kiln_container)c, &tex, &out);
	if (wst == KILN_OK) {
		kiln_texture again;
		FUZZ_CHECK(kiln_container_read(out.data, out.len, &again) == KILN_OK);
		FUZZ_CHECK(again.num_levels == tex.num_levels && again.format == tex.format);
		for (uint32_t i = 0; i < tex.num_levels; i++)
			FUZZ_CHECK(again.levels[i].size == tex.levels[i].size &&
				   memcmp(again.levels[i].data, tex.levels[i].data, tex.levels[i].size) == 0);
	}
	kiln_buf_free(&out);
	return st;
}

/* ASTC blocks: arbitrary 16-byte blocks through the decoder and back through the
 * encoder's packer. The first byte picks the footprint (byte % 14) and the colour space
 * (bit 7); the rest is up to 64 blocks, decoded one by one and as one row of a surface
 * one texel short of the blocks in each direction (kiln_astc_decode's edge blocks), which
 * must give the same texels. Each block as the decoder parses it (astc_unpack): an
 * illegal block decodes to the error colour; a legal one, packed again (astc_pack, what
 * the encoder writes) and parsed, must be the same block (kind, mode, partitions, seed,
 * endpoint modes and range, values, weights) and decode to the same texels. The one
 * exception is the packer's canonical form: the spec lets a block of equal endpoint modes
 * say so in the mixed-mode field, which the packer writes as the shared form with its
 * larger colour range (then only the kind must agree). */
static inline kiln_status kiln_fuzz_astc(const uint8_t *data, size_t size)
{
	if (size < 1 + 16)
		return KILN_ERR_TRUNCATED;
	const uint8_t *footprint = kiln_astc_footprints[data[0] % KILN_ASTC_FOOTPRINTS];
	int bw = footprint[0], bh = footprint[1], srgb = data[0] >> 7;
	size_t nblocks = (size - 1) / 16 > 64 ? 64 : (size - 1) / 16;
	const uint8_t *blocks = data + 1;
	int n = bw * bh;
	uint8_t texels[ASTC_MAX_TEXELS * 4], again_texels[ASTC_MAX_TEXELS * 4];
	uint32_t width = (uint32_t)(nblocks * (size_t)bw) - 1, height = (uint32_t)bh - 1;
	size_t stride = 4 * (size_t)width;
	uint8_t *surface = (uint8_t *)malloc(stride * height);
	if (!surface)
		return KILN_ERR_NOMEM;
	FUZZ_CHECK(kiln_astc_decode(blocks, nblocks * 16, width, height, (uint32_t)bw, (uint32_t)bh, srgb, surface,
				    stride) == KILN_OK);
	FUZZ_CHECK(kiln_astc_decode(blocks, nblocks * 16 - 1, width, height, (uint32_t)bw, (uint32_t)bh, srgb,
				    surface, stride) == KILN_ERR_TRUNCATED);
	for (size_t b = 0; b < nblocks; b++) {
		const uint8_t *blk = blocks + 16 * b;
		astc_symbolic s, again;
		astc_unpack(blk, bw, bh, &s);
		astc_decode_symbolic(&s, bw, bh, srgb, texels);
		for (int y = 0; y < bh - 1; y++) {
			uint32_t cols = b + 1 < nblocks ? (uint32_t)bw : (uint32_t)bw - 1;
			FUZZ_CHECK(memcmp(surface + y * stride + b * 4 * (size_t)bw, texels + 4 * bw * y, 4 * cols) == 0);
		}
		if (s.kind == ASTC_KIND_ERROR) {
			for (int i = 0; i < n; i++)
				FUZZ_CHECK(texels[4 * i] == 255 && texels[4 * i + 1] == 0 && texels[4 * i + 2] == 255 &&
					   texels[4 * i + 3] == 255);
			continue;
		}
		uint8_t packed[16];
		astc_pack(&s, packed);
		astc_unpack(packed, bw, bh, &again);
		FUZZ_CHECK(again.kind == s.kind);
		int nv = 0, same_cems = 1;
		for (int p = 0; s.kind == ASTC_KIND_NORMAL && p < s.partitions; p++) {
			nv += astc_cem_values(s.cem[p]);
			same_cems &= s.cem[p] == s.cem[0];
		}
		int mixed_field = s.kind == ASTC_KIND_NORMAL && s.partitions > 1 && (astc_bits_get(blk, 23, 2, 128) != 0);
		if (mixed_field && same_cems)
			continue;
		if (s.kind == ASTC_KIND_VOID) {
			FUZZ_CHECK(memcmp(again.void_color, s.void_color, sizeof s.void_color) == 0);
		} else {
			int nw = s.mode.grid_w * s.mode.grid_h;
			FUZZ_CHECK(again.block_mode == s.block_mode && again.partitions == s.partitions &&
				   again.crange == s.crange && again.mode.dual == s.mode.dual);
			FUZZ_CHECK(s.partitions == 1 || again.seed == s.seed);
			FUZZ_CHECK(!s.mode.dual || again.ccs == s.ccs);
			FUZZ_CHECK(memcmp(again.cem, s.cem, s.partitions) == 0);
			FUZZ_CHECK(memcmp(again.colors, s.colors, (size_t)nv) == 0);
			FUZZ_CHECK(memcmp(again.weights, s.weights, (size_t)nw * (s.mode.dual ? 2 : 1)) == 0);
		}
		astc_decode_symbolic(&again, bw, bh, srgb, again_texels);
		FUZZ_CHECK(memcmp(again_texels, texels, 4 * (size_t)n) == 0);
	}
	free(surface);
	return KILN_OK;
}

/* ASTC encoder: one block of arbitrary texels through every stage the preset wants, as
 * astc_encode_block runs them, keeping the error each stage reports. The first byte picks
 * the footprint (byte % 14), the second the preset (bits 0-1, 3: fast), sRGB (bit 2) and
 * an opaque image (bit 3: alpha 255, as from a PNG without alpha); the rest are the
 * texels, repeated to fill the block. The block written must be legal, and the error
 * the encoder reports must be the exact squared error of what the decoder makes of it:
 * every choice of the search compares such errors. */
static inline kiln_status kiln_fuzz_astc_encode(const uint8_t *data, size_t size)
{
	if (size < 3)
		return KILN_ERR_TRUNCATED;
	int fp = data[0] % KILN_ASTC_FOOTPRINTS, quality = data[1] & 3, srgb = data[1] >> 2 & 1, opaque = data[1] >> 3 & 1;
	if (quality == 3)
		quality = KILN_QUALITY_FAST;
	astc_enc_block blk;
	blk.bw = kiln_astc_footprints[fp][0];
	blk.bh = kiln_astc_footprints[fp][1];
	const astc_enc_ctx *ctx = astc_enc_context(fp);
	const uint8_t *px = data + 2;
	size_t npx = size - 2;
	blk.n = blk.bw * blk.bh;
	blk.srgb = srgb;
	blk.opaque = 1;
	for (int i = 0; i < blk.n; i++) {
		for (int c = 0; c < 4; c++)
			blk.px[i][c] = c == 3 && opaque ? 255 : px[(4 * (size_t)i + (size_t)c) % npx];
		blk.opaque &= blk.px[i][3] == 255;
	}
	astc_enc_effort ef;
	astc_enc_effort_of(quality, ctx->bw * ctx->bh, &ef);
	uint8_t out[16];
	uint32_t err = 0, resid[4];
	astc_encode_stage(ctx, &blk, &ef, ASTC_ENC_STAGE_ONE, -1, NULL, out, &err, resid);
	for (int stage = ASTC_ENC_STAGE_ONE + 1; stage < ASTC_ENC_STAGES; stage++)
		if (astc_enc_stage_wanted(&ef, stage, blk.n, err, resid))
			astc_encode_later(ctx, &blk, &ef, stage, NULL, out, &err, resid);
	astc_symbolic s;
	astc_unpack(out, blk.bw, blk.bh, &s);
	FUZZ_CHECK(s.kind != ASTC_KIND_ERROR);
	uint8_t texels[ASTC_MAX_TEXELS * 4];
	astc_decode_symbolic(&s, blk.bw, blk.bh, srgb, texels);
	uint32_t exact = 0;
	for (int i = 0; i < blk.n; i++)
		for (int c = 0; c < 4; c++) {
			int d = (int)texels[4 * i + c] - (int)blk.px[i][c];
			exact += (uint32_t)(d * d);
		}
	FUZZ_CHECK(err == exact);
	/* astc_encode_block writes the same block */
	uint8_t whole[16];
	astc_encode_block(ctx, &blk, quality, whole);
	FUZZ_CHECK(memcmp(whole, out, 16) == 0);
	return KILN_OK;
}

/* Protocol: kiln_proto_parse as the scheduler and the worker call it on every frame. A
 * message it accepts must serialise (kiln_proto_encode) and parse again to the same type. */
static inline kiln_status kiln_fuzz_proto(const uint8_t *data, size_t size)
{
	json_t *msg;
	kiln_msg_type type;
	char err[256];
	kiln_status st = kiln_proto_parse(data, size, &msg, &type, err, sizeof err);
	if (st != KILN_OK) {
		FUZZ_CHECK(msg == NULL && type == KILN_MSG_INVALID);
		return st;
	}
	FUZZ_CHECK(msg && type != KILN_MSG_INVALID);
	kiln_buf out;
	kiln_buf_init(&out, 2 * (size_t)KILN_PROTO_MAX_FRAME);
	if (kiln_proto_encode(msg, &out) == KILN_OK) {
		json_t *again;
		kiln_msg_type type2;
		FUZZ_CHECK(kiln_proto_parse(out.data, out.len, &again, &type2, err, sizeof err) == KILN_OK);
		FUZZ_CHECK(type2 == type && json_equal(msg, again));
		json_decref(again);
	}
	kiln_buf_free(&out);
	json_decref(msg);
	return st;
}

/* Job spec: the body of POST /v1/jobs, decoded as scheduler/http.c does, then
 * kiln_job_spec_parse. An accepted spec's normalised JSON is what the journal stores and
 * replays through the same parser, so it must be accepted again, to the same JSON. */
static inline kiln_status kiln_fuzz_spec(const uint8_t *data, size_t size)
{
	json_error_t jerr;
	json_t *in = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
	if (!in)
		return KILN_ERR_CORRUPT;
	kiln_job_spec spec;
	char err[256];
	kiln_status st = kiln_job_spec_parse(in, &spec, err, sizeof err);
	if (st == KILN_OK) {
		FUZZ_CHECK(spec.json && spec.output && spec.format && spec.container && spec.ext);
		FUZZ_CHECK(spec.shard_size >= 1 && spec.shard_size <= KILN_SPEC_MAX_SHARD);
		FUZZ_CHECK(spec.max_attempts >= 1 && spec.max_attempts <= KILN_SPEC_MAX_ATTEMPTS);
		FUZZ_CHECK(spec.input_kind == KILN_INPUT_LIST ? spec.list != NULL : spec.location != NULL);
		kiln_job_spec again;
		FUZZ_CHECK(kiln_job_spec_parse(spec.json, &again, err, sizeof err) == KILN_OK);
		FUZZ_CHECK(json_equal(spec.json, again.json));
		kiln_job_spec_free(&again);
	} else {
		FUZZ_CHECK(st == KILN_ERR_INVALID_ARG || st == KILN_ERR_NOMEM);
		FUZZ_CHECK(spec.json == NULL);
	}
	kiln_job_spec_free(&spec);
	json_decref(in);
	return st;
}

#endif
