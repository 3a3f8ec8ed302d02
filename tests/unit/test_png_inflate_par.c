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
#include "common/png_io.h"
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
			/* the 96 bits from the offset, written out here rather than through the scan's
			 * window */
			uint8_t win[13] = {0};
			for (size_t i = 0; i < 13 && bit / 8 + i < len; i++)
				win[i] = z[bit / 8 + i];
			uint32_t k = (uint32_t)(bit & 7), w[3];
			for (int j = 0; j < 3; j++) {
				uint64_t v = 0;
				for (int i = 4; i >= 0; i--)
					v = v << 8 | win[4 * j + i];
				w[j] = (uint32_t)(v >> k);
			}
			int shape = kiln_infl_header_shape(w[0], w[1], w[2], kraft3);
			/* the scan's form: the window of the offset's byte, its fields test first */
			kiln_infl_window win_at = kiln_infl_window_at(z, len, bit / 8);
			cr_assert_eq(kiln_infl_window_shape(&win_at, k, kraft3), shape, "level %d bit %llu", level,
				     (unsigned long long)bit);
			cr_assert(!shape || ((kiln_infl_window_fields(&win_at) >> k) & 1u),
				  "level %d bit %llu: a shape the fields test drops", level, (unsigned long long)bit);
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

/* ---- the GPU's run of one stream, its caps included ---------------------------------- */

/* The steps as png_dec_cuda.cu's pd_par_* kernels run them, with their parameters from
 * png_inflate_par.h: candidates where the cheap header test passes and then the full one
 * (pd_par_scan, pd_par_verify), at most kiln_infl_cand_cap of them (cand_cap, when not 0,
 * another cap), the ones kept past it in the order of xorshift picks (the GPU's atomics
 * keep those that come first); past the cap no mid entries (kiln_infl_cand_overflow);
 * entries up to kiln_infl_ent_cap, mid entries every KILN_INFL_PAR_SPACING bits, pieces
 * split past KILN_INFL_PAR_TARGET symbols, the slot area sized for the entry cap at
 * scale / 256 and pad; the serial inflate only when the verdict is KILN_INFL_GAVE_UP
 * (pd_finish). The result (rc, bytes, bytes consumed) must be kiln_inflate_raw's. */
typedef struct gpu_run {
	par_result r;
	uint32_t found;    /* candidates found, bit 0 included */
	uint32_t cand_cap; /* the cap they were kept under */
	int overflow;      /* kiln_infl_cand_overflow */
} gpu_run;

static gpu_run gpu_like(const uint8_t *in, size_t len, uint64_t total, uint32_t cand_cap, uint32_t scale, uint32_t pad)
{
	gpu_run g = {0};
	par_result *r = &g.r;
	kiln_inflate_tables *t = malloc(sizeof *t);
	uint16_t kraft3[512];
	kiln_infl_kraft3_init(kraft3);
	size_t found_cap = 1024;
	uint64_t *found = malloc(sizeof *found * found_cap);
	cr_assert(t && found);
	uint32_t nf = 0;
	found[nf++] = 0;
	/* the scan's windows: 96 bits from each offset of a byte (pd_par_scan) */
	for (size_t byte = 0; byte < len; byte++) {
		kiln_infl_window w = kiln_infl_window_at(in, len, byte);
		uint32_t fields = kiln_infl_window_fields(&w);
		for (uint32_t k = byte == 0 ? 1 : 0; k < 8; k++) {
			uint64_t bit = 8 * (uint64_t)byte + k;
			if (!((fields >> k) & 1u) || !kiln_infl_window_shape(&w, k, kraft3) ||
			    !kiln_infl_block_start(in, len, bit))
				continue;
			if (nf == found_cap) {
				found_cap *= 2;
				found = realloc(found, sizeof *found * found_cap);
				cr_assert(found);
			}
			found[nf++] = bit;
		}
	}
	g.found = nf;
	g.cand_cap = cand_cap ? cand_cap : kiln_infl_cand_cap(len, total);
	g.overflow = kiln_infl_cand_overflow(nf, g.cand_cap);
	uint32_t nc = nf;
	if (g.overflow) { /* some of them: a shuffle of all but bit 0, the first kept, sorted */
		uint32_t s = 777;
		for (uint32_t i = nf - 1; i > 1; i--) {
			uint32_t j = 1 + test_xorshift32(&s) % i;
			uint64_t v = found[i];
			found[i] = found[j];
			found[j] = v;
		}
		nc = g.cand_cap;
		for (uint32_t i = 2; i < nc; i++)
			for (uint32_t j = i; j > 1 && found[j - 1] > found[j]; j--) {
				uint64_t v = found[j];
				found[j] = found[j - 1];
				found[j - 1] = v;
			}
	}
	uint32_t cap = kiln_infl_ent_cap(len, total);
	uint8_t *out = malloc(total + 16);
	cr_assert(out);
	*r = kiln_fuzz_par_steps(in, len, out, total, found, nc, cap, g.overflow ? 0 : KILN_INFL_PAR_SPACING,
				 g.overflow ? 0 : KILN_INFL_PAR_TARGET, scale, pad, cap);
	cr_assert_lt(r->entries - r->refined, cap, "the entries fit their cap");
	/* the serial inflater's verdict and bytes */
	uint8_t *ref = malloc(total + 16);
	cr_assert(ref);
	size_t ref_len = 0, ref_used = 0;
	int fin = 0;
	int rc = kiln_inflate_raw(t, in, len, ref, total, &ref_len, &ref_used, 0, &fin);
	cr_assert_eq(r->rc, rc);
	cr_assert_eq(r->out_len, ref_len);
	cr_assert_eq(r->used, ref_used);
	cr_assert(memcmp(out, ref, ref_len) == 0, "the bytes are kiln_inflate_raw's");
	free(ref);
	free(t);
	free(found);
	free(out);
	cr_log_info("gpu_like: %zu bytes -> %llu, cap %u: %u candidates found, %u kept, %u entries (%u refined), %u pieces, "
		    "%u placed, longest %llu, serial %d",
		    len, (unsigned long long)total, g.cand_cap, g.found, r->candidates, r->entries, r->refined,
		    r->segments, r->placed, (unsigned long long)r->longest, r->serial);
	return g;
}

/* A 2048x2048 mosaic of 512x512 crops of the Kodak images (kiln-bench's 2K inputs,
 * bench_worker.c), as libpng writes it with its defaults (zlib level 6, adaptive
 * filters); its zlib stream without the 2-byte header into *z (malloc'd). */
static size_t mosaic_2k_stream(uint32_t n, uint8_t **z, uint64_t *total)
{
	kiln_image kodak[24] = {0}, img = {0};
	cr_assert_eq(kiln_image_alloc(&img, 2048, 2048, NULL), KILN_OK);
	img.has_alpha = false;
	img.srgb = true;
	for (uint32_t t = 0; t < 16; t++) {
		uint32_t s = (t * 5 + n * 3) % 24;
		if (!kodak[s].pixels) {
			char path[512], err[256];
			test_kodak_path(path, sizeof path, (int)s + 1);
			cr_assert_eq(kiln_png_read_file(path, NULL, &kodak[s], err, sizeof err), KILN_OK, "%s: %s", path, err);
		}
		const kiln_image *src = &kodak[s];
		uint32_t ox = (n * 131 + t * 57) % (src->width - 511), oy = (n * 89 + t * 41) % (src->height - 511);
		for (uint32_t y = 0; y < 512; y++)
			memcpy(kiln_image_row(&img, t / 4 * 512 + y) + t % 4 * 512 * 4, kiln_image_row(src, oy + y) + ox * 4,
			       512 * 4);
	}
	kiln_buf f;
	kiln_buf_init(&f, (size_t)64 << 20);
	cr_assert_eq(kiln_png_encode(&img, &f), KILN_OK);
	kiln_pngdec_info info;
	char err[256];
	cr_assert_eq(kiln_pngdec_probe(f.data, f.len, NULL, &info, err, sizeof err), KILN_OK, "%s", err);
	cr_assert_eq(info.strips, 1);
	cr_assert_gt(info.idat_chunks, 1, "libpng's 8 KiB IDAT chunks");
	const uint8_t *zs;
	uint8_t *owned = NULL;
	cr_assert_eq(kiln_pngdec_zlib_stream(f.data, &info, &zs, &owned, err, sizeof err), KILN_OK, "%s", err);
	size_t len = info.zlib_size - 2;
	*z = malloc(len);
	cr_assert(*z);
	memcpy(*z, zs + 2, len);
	*total = info.filtered_size;
	free(owned);
	kiln_buf_free(&f);
	kiln_image_free(&img);
	for (int i = 0; i < 24; i++)
		kiln_image_free(&kodak[i]);
	return len;
}

/* A 2048x2048 libpng file's stream (12.6 MB of output, 7.4 MB of stream, 561 blocks of
 * 12-16 KB of stream) has more block headers than one per 16 KiB of stream, the GPU's
 * candidate cap before: those past it were dropped, a mid entry after a dropped header
 * gave up (KILN_INFL_ROAM) and every such file was inflated by one warp. With the GPU's
 * parameters it now inflates in parallel, in pieces about as long as the target, byte for
 * byte kiln_inflate_raw's; and with a cap too small for its headers (some of them kept,
 * no mid entries) still in parallel, a block or more a piece. */
Test(png_inflate_par, libpng_2k_stream_with_the_gpu_caps, .timeout = 60)
{
	uint8_t *z;
	uint64_t total;
	size_t len = mosaic_2k_stream(0, &z, &total);
	cr_assert_eq(total, (uint64_t)2048 * (3 * 2048 + 1));
	gpu_run g = gpu_like(z, len, total, 0, KILN_INFL_SLOT_SCALE, KILN_INFL_SLOT_PAD);
	cr_assert_eq(g.r.rc, KILN_INFL_OK);
	cr_assert_gt(g.found, 16 + len / 16384, "%u headers: more than the old cap", g.found);
	cr_assert(!g.overflow, "%u candidates, cap %u", g.found, g.cand_cap);
	cr_assert(!g.r.serial, "the parallel inflate gave up");
	uint64_t mids = len * 8 / KILN_INFL_PAR_SPACING;
	cr_assert_geq(g.r.segments, mids * 95 / 100, "%u pieces for %llu mid entries", g.r.segments,
		      (unsigned long long)mids);
	cr_assert_geq(g.r.placed, g.r.segments * 98 / 100, "%u of %u pieces placed", g.r.placed, g.r.segments);
	cr_assert_lt(g.r.longest, 4 * KILN_INFL_PAR_TARGET, "longest piece: %llu symbols",
		     (unsigned long long)g.r.longest);
	/* the slots of a batch past the GPU's slot budget (a quarter of the scale): fewer
	 * pieces placed, the rest decoded again, the same bytes */
	g = gpu_like(z, len, total, 0, KILN_INFL_SLOT_SCALE / 4, KILN_INFL_SLOT_PAD / 4);
	cr_assert(g.r.rc == KILN_INFL_OK && !g.r.serial);
	cr_assert_lt(g.r.placed, g.r.segments);
	/* a cap of 100 for 561 headers */
	g = gpu_like(z, len, total, 100, KILN_INFL_SLOT_SCALE, KILN_INFL_SLOT_PAD);
	cr_assert(g.overflow);
	cr_assert_eq(g.r.rc, KILN_INFL_OK);
	cr_assert(!g.r.serial, "past the cap the parallel inflate gave up");
	cr_assert_geq(g.r.segments, 90, "%u pieces", g.r.segments);
	free(z);
}
