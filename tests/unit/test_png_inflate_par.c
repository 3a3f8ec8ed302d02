/* Unit tests of the parallel inflate of one stream (kernels/png/png_inflate_par.h): its
 * steps run here one after the other on the CPU (the driver of the fuzz target
 * tests/fuzz/fuzz_inflate_par.c), as the GPU runs them side by side, and the result (rc,
 * bytes, bytes consumed) must be kiln_inflate_raw's on the same stream: Kodak files'
 * streams as libpng wrote them, zlib at every level and strategy, streams whose stored
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

/* Inflates raw deflate data both ways (any difference aborts); the parallel run's figures. */
static par_result check_stream(const uint8_t *in, size_t len, uint64_t total, const char *what)
{
	kiln_fuzz_par_case = what;
	return kiln_fuzz_par_compare(in, len, total);
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
		par_result r = check_stream(z + 2, info.zlib_size - 2, info.filtered_size, names[i]);
		cr_assert_eq(r.rc, KILN_INFL_OK);
		/* zlib ends a block every 16K symbols: a Kodak image is dozens of segments */
		cr_assert_geq(r.segments, 8, "%s: %u segments", names[i], r.segments);
		free(owned);
		kiln_buf_free(&f);
	}
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
			par_result r = check_stream(z, len, n, what);
			cr_assert_eq(r.rc, KILN_INFL_OK, "%s", what);
			/* dynamic blocks are found (fixed-code and stored streams stay one segment) */
			if (level > 0 && strategies[s] != Z_FIXED)
				cr_assert_geq(r.segments, 2, "%s: %u segments", what, r.segments);
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
	par_result r = check_stream(z, len, inner_len, "stored inner stream");
	cr_assert_eq(r.rc, KILN_INFL_OK);
	cr_assert_gt(r.candidates, 2, "the inner stream's headers are candidates");
	cr_assert_eq(r.segments, 1, "no segment starts inside stored data");
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
		check_stream(z, len, totals[i], what);
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
		par_result r = check_stream(z, cut, n, what);
		cr_assert_neq(r.rc, KILN_INFL_OK, "%s", what);
	}
	unsigned errors = 0;
	for (int i = 0; i < 300; i++) {
		memcpy(copy, z, len);
		size_t at = rnd() % len;
		copy[at] ^= (uint8_t)(1u << (rnd() % 8));
		char what[64];
		snprintf(what, sizeof what, "flip at byte %zu", at);
		errors += check_stream(copy, len, n, what).rc != KILN_INFL_OK;
	}
	cr_expect_gt(errors, 0);
	free(copy);
	free(d);
	free(z);
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
