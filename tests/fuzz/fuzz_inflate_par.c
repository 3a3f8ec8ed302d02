/* libFuzzer target over the parallel inflate of one stream (kernels/png/png_inflate_par.h):
 * arbitrary bytes as raw deflate data (after 3 bytes that give the output limit), inflated
 * by the steps the GPU runs side by side, here one after the other, and by the serial
 * inflater (kiln_inflate_raw): the verdicts, and the bytes when there are any, must be the
 * same. Built and run by `make fuzz` (FUZZ_TARGETS inflate_par);
 * tests/unit/test_png_inflate_par.c uses the same driver and replays
 * tests/fuzz/corpus/inflate_par and tests/fuzz/regressions/inflate_par. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/png/png_inflate_par.h"
#include "tests/fuzz/fuzz_targets.h"

/* What the unit test is checking, printed with a broken invariant (empty when fuzzing). */
static const char *kiln_fuzz_par_case = "";

#define KILN_FUZZ_PAR_CHECK(cond)                                                          \
	do {                                                                               \
		if (!(cond))                                                               \
			fprintf(stderr, "inflate_par case: %s\n", kiln_fuzz_par_case);   \
		FUZZ_CHECK(cond);                                                          \
	} while (0)

typedef struct par_result {
	int rc;
	uint64_t out_len, used;
	uint32_t candidates, entries, segments;
	uint32_t placed;  /* pieces of the chain taken from their slots */
	uint32_t refined; /* entries kiln_infl_refine added */
	uint64_t longest; /* symbols of the chain's longest piece */
	int serial; /* the true decode gave up (KILN_INFL_GAVE_UP): inflated serially */
} par_result;

/* Step 4 as the GPU runs it for piece c of the chain (entered at probe s, at output offset
 * base): its symbols from its slot when they are all there (kiln_infl_placeable; *dec then
 * is the count's less the symbols before the probe), else decoded again from the probe;
 * into sym + base. Returns 1 when placed. Placed, the same symbols as that decode:
 * checked. */
static int kiln_fuzz_par_place(kiln_inflate_tables *t, const kiln_infl_block *blocks, const uint8_t *in,
			       size_t len, const kiln_infl_entry *e, uint32_t n, const kiln_infl_seg *seg,
			       const uint16_t *slot, uint32_t c, uint32_t s, uint64_t base, uint64_t total, uint16_t *sym,
			       kiln_infl_seg *dec)
{
	uint32_t before = kiln_infl_before(e, c, s);
	KILN_FUZZ_PAR_CHECK(seg[c].out_len >= before);
	kiln_infl_seg again;
	kiln_infl_piece(t, blocks, in, len, e, n, c, s, sym + base, SIZE_MAX, base, total, &again);
	/* the same hand-over and length as counted, unless the limit cut it short */
	if (again.rc == KILN_INFL_OK) {
		KILN_FUZZ_PAR_CHECK(again.stop == seg[c].stop && again.probe == seg[c].probe);
		KILN_FUZZ_PAR_CHECK(again.out_len == seg[c].out_len - before);
	}
	*dec = again;
	if (!kiln_infl_placeable(e, seg, c, s, base, total))
		return 0;
	uint64_t m = seg[c].out_len - before;
	uint16_t *placed = malloc(2 * m + 2);
	KILN_FUZZ_PAR_CHECK(placed);
	int early = 0;
	for (uint64_t x = 0; x < m; x++) {
		uint16_t v = kiln_infl_unslot(slot[before + x], before);
		if (v >= KILN_INFL_REF0)
			v = placed[v - KILN_INFL_REF0 - before];
		placed[x] = v;
		early |= kiln_infl_before_start(v, base);
	}
	if (early) { /* the decode failed there: the GPU decodes such a piece again */
		KILN_FUZZ_PAR_CHECK(again.rc == KILN_INFL_ERR_DISTANCE);
		free(placed);
		return 0;
	}
	KILN_FUZZ_PAR_CHECK(again.rc == KILN_INFL_OK);
	KILN_FUZZ_PAR_CHECK(memcmp(placed, sym + base, 2 * m) == 0);
	*dec = seg[c];
	dec->out_len = m;
	free(placed);
	return 1;
}

/* Steps 1b-6 of png_inflate_par.h on in[0, len) into out[0, total), one after the other,
 * from the sorted candidates cand[0, nc) (bit 0 first), with at most cap entries, a mid
 * entry every `spacing` bits (0: none), pieces split past `target` symbols (0: never) and
 * slots of scale / 256 symbols per stream bit and pad per entry, the slot area sized for
 * area_entries entries (0: those there are). */
static par_result kiln_fuzz_par_steps(const uint8_t *in, size_t len, uint8_t *out, uint64_t total,
				      const uint64_t *cand, uint32_t nc, uint32_t cap, uint64_t spacing,
				      uint64_t target, uint32_t scale, uint32_t pad, uint32_t area_entries)
{
	par_result r = {0};
	kiln_inflate_tables *t = malloc(sizeof *t);
	kiln_infl_entry *e = malloc(sizeof *e * cap), *refined = malloc(sizeof *e * cap);
	KILN_FUZZ_PAR_CHECK(t && e && refined);
	uint32_t n = kiln_infl_entries(cand, nc, len, spacing, e, cap);
	KILN_FUZZ_PAR_CHECK(n >= nc && n <= cap && e[0].bit == 0 && e[0].src == 0);
	for (uint32_t i = 1; i < n; i++)
		KILN_FUZZ_PAR_CHECK(e[i].bit > e[i - 1].bit && e[i].src <= i);
	/* the tables of every other header entry's block built once, as a GPU batch builds
	 * them while its pool lasts (pd_par_blocks; the pieces of the others build their own):
	 * both ways run */
	kiln_infl_block *blocks = malloc(sizeof *blocks * n);
	KILN_FUZZ_PAR_CHECK(blocks);
	uint32_t headers = 0, nb = 0;
	for (uint32_t i = 0; i < n; i++)
		if (e[i].src == i && (headers++ & 1u) == 0) {
			kiln_infl_block_build(&blocks[nb], in, len, e[i].bit);
			e[i].block = nb++;
		}
	for (uint32_t i = 0; i < n; i++)
		kiln_infl_probe(t, blocks, in, len, e, n, i);
	uint32_t *skip = calloc(cap, sizeof *skip);
	KILN_FUZZ_PAR_CHECK(skip);
	uint32_t before_refine = n;
	n = kiln_infl_refine(e, n, cap, len, target, skip, refined);
	kiln_infl_entry *swap = e;
	e = refined;
	refined = swap;
	KILN_FUZZ_PAR_CHECK(n >= before_refine && n <= cap && e[0].bit == 0 && e[0].src == 0);
	for (uint32_t i = 0; i < n; i++) {
		KILN_FUZZ_PAR_CHECK(i == 0 || (e[i].bit > e[i - 1].bit && e[i].src <= i));
		KILN_FUZZ_PAR_CHECK(e[e[i].src].src == e[i].src); /* a header entry */
		if (e[i].probes == KILN_INFL_UNPROBED)
			kiln_infl_probe(t, blocks, in, len, e, n, i);
	}
	r.refined = n - before_refine;
	kiln_infl_seg *seg = calloc(n, sizeof *seg), *dec = calloc(n, sizeof *dec);
	uint32_t *order = calloc(n, sizeof *order);
	uint64_t *base = calloc(n, sizeof *base);
	uint16_t *sym = malloc(2 * (size_t)total + 2);
	size_t area_len = (size_t)kiln_infl_slot_area(len, total, area_entries ? area_entries : n, scale, pad);
	uint16_t *area = malloc(2 * area_len + 2);
	KILN_FUZZ_PAR_CHECK(seg && dec && order && base && sym && area);
	kiln_infl_slots(e, n, len, scale, pad, area_len);
	for (uint32_t i = 0; i < n; i++) {
		KILN_FUZZ_PAR_CHECK(e[i].slot + e[i].slot_cap <= area_len);
		KILN_FUZZ_PAR_CHECK(i == 0 || e[i].slot == e[i - 1].slot + e[i - 1].slot_cap);
		kiln_infl_piece(t, blocks, in, len, e, n, i, 0, area + e[i].slot, e[i].slot_cap, KILN_INFL_BASE_UNKNOWN,
				total, &seg[i]);
	}
	uint32_t k = kiln_infl_chain(seg, e, n, total, order, base, skip);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t c = order[i];
		r.placed += kiln_fuzz_par_place(t, blocks, in, len, e, n, seg, area + e[c].slot, c, skip[c], base[c],
						total, sym, &dec[c]);
		if (dec[c].out_len > r.longest)
			r.longest = dec[c].out_len;
	}
	r.rc = kiln_infl_verdict(dec, order, k, &r.out_len, &r.used);
	if (r.rc == KILN_INFL_GAVE_UP) { /* the GPU's fallback (png_dec_cuda.cu, pd_finish) */
		size_t ol = 0, used = 0;
		int fin = 0;
		r.rc = kiln_inflate_raw(t, in, len, out, total, &ol, &used, 0, &fin);
		r.out_len = ol;
		r.used = used;
		r.serial = 1;
		k = 0;
	}
	for (uint32_t i = 0; i < k; i++) {
		uint32_t c = order[i];
		uint64_t end = base[c] + dec[c].out_len;
		if (end > r.out_len)
			end = r.out_len;
		for (uint64_t p = base[c]; p < end; p++)
			out[p] = kiln_infl_resolve(sym[p], out, base[c]);
	}
	r.candidates = nc;
	r.entries = n;
	r.segments = k;
	free(t);
	free(blocks);
	free(e);
	free(refined);
	free(seg);
	free(dec);
	free(order);
	free(skip);
	free(base);
	free(sym);
	free(area);
	return r;
}

/* Steps 1-6 with every block header found as a candidate (kiln_fuzz_par_steps). */
static par_result kiln_fuzz_par_inflate(const uint8_t *in, size_t len, uint8_t *out, uint64_t total,
					uint64_t spacing, uint64_t target, uint32_t scale, uint32_t pad)
{
	uint64_t *cand = malloc(sizeof *cand * (8 * len + 1));
	KILN_FUZZ_PAR_CHECK(cand);
	uint32_t nc = 0;
	cand[nc++] = 0;
	for (uint64_t bit = 1; bit < 8 * (uint64_t)len; bit++)
		if (kiln_infl_block_start(in, len, bit))
			cand[nc++] = bit;
	uint32_t cap = nc + (spacing ? (uint32_t)(8 * (uint64_t)len / spacing) : 0) + 1;
	cap += cap; /* room for kiln_infl_refine */
	par_result r = kiln_fuzz_par_steps(in, len, out, total, cand, nc, cap, spacing, target, scale, pad, 0);
	free(cand);
	return r;
}

/* Inflates in[0, len) with the output limit total both ways (the parallel one with a mid
 * entry every `spacing` bits, pieces split past `target` symbols, and slots of scale / 256
 * symbols per bit and pad per entry);
 * aborts on any difference. Returns the parallel run's figures. */
static par_result kiln_fuzz_par_compare(const uint8_t *in, size_t len, uint64_t total, uint64_t spacing,
					uint64_t target, uint32_t scale, uint32_t pad)
{
	kiln_inflate_tables *t = malloc(sizeof *t);
	uint8_t *a = malloc(total + 16), *b = malloc(total + 16);
	KILN_FUZZ_PAR_CHECK(t && a && b);
	size_t out_len = 0, used = 0;
	int fin = 0;
	int rc = kiln_inflate_raw(t, in, len, a, total, &out_len, &used, 0, &fin);
	par_result r = kiln_fuzz_par_inflate(in, len, b, total, spacing, target, scale, pad);
	KILN_FUZZ_PAR_CHECK(r.rc == rc);
	if (rc == KILN_INFL_OK) {
		KILN_FUZZ_PAR_CHECK(r.out_len == out_len);
		KILN_FUZZ_PAR_CHECK(r.used == used);
	}
	if (rc == KILN_INFL_OK || rc == KILN_INFL_OUTPUT_FULL)
		KILN_FUZZ_PAR_CHECK(memcmp(a, b, rc == KILN_INFL_OK ? out_len : total) == 0);
	free(t);
	free(a);
	free(b);
	return r;
}

/* data: a 3-byte output limit (little endian, at most 1 MiB; the top 3 bits choose the
 * mid entries' spacing, none or 64 to 4096 bits, and bit 20 slots as the GPU's or so small
 * that most pieces are decoded again and pieces split past 4096 or 1024 symbols), then the
 * stream. */
static inline kiln_status kiln_fuzz_inflate_par(const uint8_t *data, size_t size)
{
	if (size < 3)
		return KILN_ERR_TRUNCATED;
	uint64_t total = ((uint64_t)data[0] | (uint64_t)data[1] << 8 | (uint64_t)data[2] << 16) % (1u << 20) + 1;
	uint32_t pick = data[2] >> 5;
	int tiny = (data[2] >> 4) & 1;
	par_result r = kiln_fuzz_par_compare(data + 3, size - 3, total, pick ? 32u << pick : 0, tiny ? 1024 : 4096,
					     tiny ? 16 : KILN_INFL_SLOT_SCALE, tiny ? 8 : KILN_INFL_SLOT_PAD);
	return r.rc == KILN_INFL_OK || r.rc == KILN_INFL_OUTPUT_FULL ? KILN_OK : KILN_ERR_CORRUPT;
}

#ifndef KILN_FUZZ_INFLATE_PAR_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kiln_fuzz_inflate_par(data, size);
	return 0;
}
#endif
