/* Unit tests of the parallel inflate of one stream (kernels/png/png_inflate_par.h): its
 * steps run here one after the other on the CPU (the driver of the fuzz target
 * tests/fuzz/fuzz_inflate_par.c), as the GPU runs them side by side, and the result (rc,
 * bytes, bytes consumed) must be kiln_inflate_raw's on the same stream, with mid entries at
 * several spacings and without: Kodak files' streams as libpng wrote them, zlib at every level and strategy, streams whose stored
 * blocks hold another stream (false candidates), outputs shorter and longer than the
 * stream, truncated and bit-flipped streams, and the fuzz target's kept inputs. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "kernels/png/png_dec.h"
#include "tests/unit/testutil.h"

#define KILN_FUZZ_INFLATE_PAR_NO_ENTRY
#include "tests/fuzz/fuzz_inflate_par.c"

/* Pieces are split past this many symbols here (the GPU's default is larger: these
 * streams are short). */
#define TARGET 4096

/* Inflates raw deflate data both ways, the parallel one with a mid entry every `spacing`
 * bits (0: none), pieces split past `target` symbols and slots of scale / 256 symbols per
 * stream bit and pad per entry (any difference aborts); the parallel run's figures. */
static par_result check_slots(const uint8_t *in, size_t len, uint64_t total, uint64_t spacing, uint64_t target,
			      uint32_t scale, uint32_t pad, const char *what)
{
	char name[160];
	snprintf(name, sizeof name, "%s, spacing %llu, target %llu, slots %u/256 + %u", what,
		 (unsigned long long)spacing, (unsigned long long)target, scale, pad);
	kiln_fuzz_par_case = name;
	return kiln_fuzz_par_compare(in, len, total, spacing, target, scale, pad);
}

/* The same with the GPU's slots. */
static par_result check_stream(const uint8_t *in, size_t len, uint64_t total, uint64_t spacing, const char *what)
{
	return check_slots(in, len, total, spacing, TARGET, KILN_INFL_SLOT_SCALE, KILN_INFL_SLOT_PAD, what);
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

/* Image-like bytes: rows of runs and noise, so that zlib finds both matches and literals. */
static uint8_t *make_data(size_t n)
{
	uint8_t *d = malloc(n);
	cr_assert(d);
	for (size_t i = 0; i < n; i++) {
		uint32_t r = rnd() % 8;
		d[i] = i >= 700 && r < 2 ? d[i - 700] : i > 0 && r < 3 ? d[i - 1] : (uint8_t)(rnd() & 0x3F);
	}
	return d;
}

/* Raw deflate (no zlib header) of d[0, n). */
static uint8_t *deflate_raw(const uint8_t *d, size_t n, int level, int strategy, size_t *len)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(deflateInit2(&z, level, Z_DEFLATED, -15, 8, strategy), Z_OK);
	size_t cap = deflateBound(&z, n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)d;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	*len = z.total_out;
	deflateEnd(&z);
	return out;
}

Test(png_inflate_par, kodak_streams_as_libpng_wrote_them)
{
	static const char *names[] = {"kodim01.png", "kodim13.png", "kodim23.png"};
	uint64_t longest = 0, longest_whole = 0;
	for (int i = 0; i < 3; i++) {
		char path[512];
		test_data_path(path, sizeof path, "kodak", names[i]);
		kiln_buf f;
		kiln_buf_init(&f, (size_t)64 << 20);
		cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK, "%s", path);
		kiln_pngdec_info info;
		char err[256];
		cr_assert_eq(kiln_pngdec_probe(f.data, f.len, NULL, &info, err, sizeof err), KILN_OK, "%s", err);
		const uint8_t *z;
		uint8_t *owned = NULL;
		cr_assert_eq(kiln_pngdec_zlib_stream(f.data, &info, &z, &owned, err, sizeof err), KILN_OK);
		size_t len = info.zlib_size - 2;
		par_result r = check_stream(z + 2, len, info.filtered_size, 0, names[i]);
		cr_assert_eq(r.rc, KILN_INFL_OK);
		/* zlib ends a block every 16K symbols: a Kodak image is dozens of pieces */
		cr_assert_geq(r.segments, 8, "%s: %u pieces", names[i], r.segments);
		/* mid entries split the blocks: nearly every one is met by the true decode */
		static const uint64_t spacings[] = {16384, 2048};
		for (int k = 0; k < 2; k++) {
			r = check_stream(z + 2, len, info.filtered_size, spacings[k], names[i]);
			cr_assert_eq(r.rc, KILN_INFL_OK);
			uint64_t mids = r.entries - r.candidates;
			cr_assert(!r.serial);
			cr_assert_geq(r.segments, mids * 95 / 100, "%s, spacing %llu: %u pieces for %llu mid entries",
				      names[i], (unsigned long long)spacings[k], r.segments, (unsigned long long)mids);
			/* and nearly every piece comes from its slot (no second decode) */
			cr_assert_geq(r.placed, r.segments * 98 / 100, "%s, spacing %llu: %u of %u pieces placed",
				      names[i], (unsigned long long)spacings[k], r.placed, r.segments);
		}
		/* the GPU's spacing: pieces of a region that inflates well are split, and the
		 * longest ones (which a GPU pass waits for) get shorter; a piece whose next
		 * entry the true decode does not meet stays long */
		par_result whole = check_slots(z + 2, len, info.filtered_size, 32768, 0, KILN_INFL_SLOT_SCALE,
					       KILN_INFL_SLOT_PAD, names[i]);
		r = check_slots(z + 2, len, info.filtered_size, 32768, 2048, KILN_INFL_SLOT_SCALE, KILN_INFL_SLOT_PAD,
				names[i]);
		cr_assert_eq(r.rc, KILN_INFL_OK);
		cr_assert_gt(r.refined, 0, "%s", names[i]);
		cr_assert_leq(r.longest, whole.longest, "%s", names[i]);
		longest += r.longest;
		longest_whole += whole.longest;
		free(owned);
		kiln_buf_free(&f);
	}
	cr_assert_lt(longest, longest_whole, "longest pieces: %llu split, %llu unsplit", (unsigned long long)longest,
		     (unsigned long long)longest_whole);
}

Test(png_inflate_par, zlib_levels_and_strategies)
{
	static const int strategies[] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_RLE, Z_HUFFMAN_ONLY, Z_FIXED};
	size_t n = 200000;
	uint8_t *d = make_data(n);
	for (int level = 0; level <= 9; level++)
		for (int s = 0; s < 5; s++) {
			size_t len;
			uint8_t *z = deflate_raw(d, n, level, strategies[s], &len);
			char what[64];
			snprintf(what, sizeof what, "level %d strategy %d", level, strategies[s]);
			/* odd levels: slots too small for most pieces, which step 4 decodes again */
			int tiny = level % 2;
			par_result r = check_slots(z, len, n, (uint64_t)1024 << (level % 4), tiny ? 1024 : TARGET,
						   tiny ? 16 : KILN_INFL_SLOT_SCALE, tiny ? 8 : KILN_INFL_SLOT_PAD, what);
			cr_assert_eq(r.rc, KILN_INFL_OK, "%s", what);
			/* blocks are split (stored streams stay one piece); zlib's fixed-code blocks
			 * follow each other with headers that are no entries, and the true decode gives
			 * up (KILN_INFL_ROAM): inflated serially */
			if (level > 0 && strategies[s] != Z_FIXED)
				cr_assert(r.segments >= 2 && !r.serial, "%s: %u pieces, serial %d", what, r.segments, r.serial);
			if (level > 0 && strategies[s] == Z_FIXED)
				cr_assert(r.serial, "%s: %u pieces", what, r.segments);
			/* pieces placed from their slots: most, except with slots too small, and
			 * fewer with Z_RLE and Z_HUFFMAN_ONLY, where more mid entries are not met
			 * (a piece that runs on past them outgrows its slot) */
			unsigned most = strategies[s] == Z_RLE || strategies[s] == Z_HUFFMAN_ONLY ? 7 : 8;
			if (level > 0 && strategies[s] != Z_FIXED)
				cr_assert(tiny ? r.placed * 2 < r.segments : r.placed * 10 >= r.segments * most,
					  "%s: %u of %u pieces placed", what, r.placed, r.segments);
			free(z);
		}
	free(d);
}

/* A stream of stored blocks that carry another deflate stream: its block headers are
 * candidates inside stored data, which no segment of the chain may start at. */
Test(png_inflate_par, false_candidates_in_stored_data)
{
	size_t n = 150000, inner_len, len;
	uint8_t *d = make_data(n);
	uint8_t *inner = deflate_raw(d, n, 6, Z_DEFAULT_STRATEGY, &inner_len);
	uint8_t *z = deflate_raw(inner, inner_len, 0, Z_DEFAULT_STRATEGY, &len);
	for (uint64_t spacing = 0; spacing <= 4096; spacing += 1024) {
		par_result r = check_stream(z, len, inner_len, spacing, "stored inner stream");
		cr_assert_eq(r.rc, KILN_INFL_OK);
		cr_assert_gt(r.candidates, 2, "the inner stream's headers are candidates");
		cr_assert_eq(r.segments, 1, "no piece starts inside stored data");
	}
	free(d);
	free(inner);
	free(z);
}

Test(png_inflate_par, output_limits)
{
	size_t n = 120000, len;
	uint8_t *d = make_data(n);
	uint8_t *z = deflate_raw(d, n, 6, Z_DEFAULT_STRATEGY, &len);
	/* the image ends inside the stream (the rest is ignored), at a block end, or after it */
	static const uint64_t totals[] = {1, 1000, 65536, 119999, 120000, 120001, 200000};
	for (int i = 0; i < 7; i++) {
		char what[64];
		snprintf(what, sizeof what, "limit %llu", (unsigned long long)totals[i]);
		check_stream(z, len, totals[i], 0, what);
		check_stream(z, len, totals[i], 512, what);
		check_slots(z, len, totals[i], 512, 1024, 16, 8, what);
	}
	free(d);
	free(z);
}

Test(png_inflate_par, truncated_and_bitflipped)
{
	size_t n = 90000, len;
	uint8_t *d = make_data(n);
	uint8_t *z = deflate_raw(d, n, 6, Z_DEFAULT_STRATEGY, &len);
	uint8_t *copy = malloc(len);
	for (size_t cut = 0; cut < len; cut += 1 + cut / 8) {
		char what[64];
		snprintf(what, sizeof what, "cut at %zu of %zu", cut, len);
		par_result r = check_stream(z, cut, n, cut % 2 ? 256 : 0, what);
		cr_assert_neq(r.rc, KILN_INFL_OK, "%s", what);
	}
	unsigned errors = 0;
	for (int i = 0; i < 300; i++) {
		memcpy(copy, z, len);
		size_t at = rnd() % len;
		copy[at] ^= (uint8_t)(1u << (rnd() % 8));
		char what[64];
		snprintf(what, sizeof what, "flip at byte %zu", at);
		errors += check_slots(copy, len, n, (uint64_t)(i % 3) * 512, i % 2 ? 1024 : TARGET,
				      i % 2 ? 16 : KILN_INFL_SLOT_SCALE, i % 2 ? 8 : KILN_INFL_SLOT_PAD, what)
				  .rc != KILN_INFL_OK;
	}
	cr_expect_gt(errors, 0);
	free(copy);
	free(d);
	free(z);
}

/* The GPU's scan tests kiln_infl_block_start only where kiln_infl_header_shape passes:
 * every header the full test accepts must pass the cheap one (zlib streams of noise at
 * several levels, every bit offset), and the cheap one must drop most. Where the cheap
 * one passes, the full test must say what the decoder's own header reader does
 * (BTYPE 2 and kiln_infl_dynamic accepting, the stream not overrun). */
Test(png_inflate_par, header_shape_is_a_necessary_condition)
{
	size_t n = 60000;
	uint8_t *d = make_data(n);
	kiln_inflate_tables *t = malloc(sizeof *t);
	uint64_t offsets = 0, shaped = 0, headers = 0;
	uint16_t kraft3[512];
	kiln_infl_kraft3_init(kraft3);
	for (int level = 1; level <= 9; level += 4) {
		size_t len;
		uint8_t *z = deflate_raw(d, n, level, Z_DEFAULT_STRATEGY, &len);
		for (uint64_t bit = 0; bit < 8 * (uint64_t)len; bit++) {
			uint8_t win[17] = {0};
			for (size_t i = 0; i < 17 && bit / 8 + i < len; i++)
				win[i] = z[bit / 8 + i];
			uint64_t lo = 0, mid = 0;
			for (int i = 7; i >= 0; i--) {
				lo = lo << 8 | win[i];
				mid = mid << 8 | win[8 + i];
			}
			uint32_t k = (uint32_t)(bit & 7);
			uint64_t w0 = k ? lo >> k | mid << (64 - k) : lo;
			uint64_t w1 = k ? mid >> k | (uint64_t)win[16] << (64 - k) : mid;
			int shape = kiln_infl_header_shape(w0, w1, kraft3);
			int full = kiln_infl_block_start(z, len, bit);
			cr_assert(shape || !full, "level %d bit %llu: a header the cheap test drops", level,
				  (unsigned long long)bit);
			if (shape) {
				kiln_bits b;
				kiln_bits_init_at(&b, z, len, bit);
				int ref = ((b.buf >> 1) & 3u) == 2u;
				kiln_bits_drop(&b, 3);
				ref = ref && kiln_infl_dynamic(t, &b) == KILN_INFL_OK && kiln_bits_ok(&b);
				cr_assert_eq(full, ref, "level %d bit %llu: the full test says %d, the decoder %d", level,
					     (unsigned long long)bit, full, ref);
			}
			offsets++;
			shaped += shape;
			headers += full;
		}
		free(z);
	}
	cr_assert_gt(headers, 3);
	cr_assert_lt(shaped * 20, offsets, "%llu of %llu offsets pass the cheap test", (unsigned long long)shaped,
		     (unsigned long long)offsets);
	free(t);
	free(d);
}

/* The fuzz target's seeds and the inputs that once failed it, through the same driver. */
Test(png_inflate_par, fuzz_corpus_and_regressions)
{
	static const char *dirs[] = {"tests/fuzz/corpus/inflate_par", "tests/fuzz/regressions/inflate_par"};
	unsigned n = 0;
	for (int k = 0; k < 2; k++) {
		DIR *d = opendir(dirs[k]);
		if (!d)
			continue;
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[1024];
			snprintf(path, sizeof path, "%s/%s", dirs[k], e->d_name);
			kiln_buf f;
			kiln_buf_init(&f, (size_t)16 << 20);
			cr_assert_eq(kiln_buf_read_file(&f, path), KILN_OK, "%s", path);
			static const uint8_t none[1];
			kiln_status st = kiln_fuzz_inflate_par(f.len ? f.data : none, f.len);
			cr_expect(st == KILN_OK || st == KILN_ERR_CORRUPT || st == KILN_ERR_TRUNCATED, "%s", path);
			kiln_buf_free(&f);
			n++;
		}
		closedir(d);
	}
	cr_expect_geq(n, 8, "the seed corpus is in the repository");
}
