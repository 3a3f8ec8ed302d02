/* PNG files handed to the encode front end undecoded (kiln_texenc_submit_png), on the CPU
 * backend: the textures are those of decoding with libpng and submitting the pixels, a
 * file that does not decode fails alone, and the choice of decoder (kiln_png_read) gives
 * the same pixels. The GPU side of the same path: tests/gpu/test_texenc_png_gpu.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/png_io.h"
#include "kernels/png/png_file.h"
#include "kernels/texenc.h"
#include "tests/png_breaker.h"

#define NFILES 9

static void random_png(kiln_buf *out, uint32_t w, uint32_t h, uint32_t seed, bool alpha)
{
	kiln_image img;
	cr_assert_eq(kiln_image_alloc(&img, w, h, NULL), KILN_OK);
	img.has_alpha = alpha;
	img.srgb = true;
	uint32_t s = seed * 2654435761u + 7;
	for (size_t i = 0; i < (size_t)w * h * 4; i++) {
		s = s * 1103515245u + 12345u;
		img.pixels[i] = (uint8_t)((s >> 17) & 0x1f) + (uint8_t)(i / 4 % w * 200 / w);
		if (!alpha && i % 4 == 3)
			img.pixels[i] = 255;
	}
	kiln_buf_init(out, (size_t)64 << 20);
	cr_assert_eq(kiln_png_encode(&img, out), KILN_OK);
	kiln_image_free(&img);
}

static void check_same_textures(const kiln_texture *a, const kiln_texture *b)
{
	cr_assert_eq(a->num_levels, b->num_levels);
	cr_assert_eq(a->format, b->format);
	cr_assert_eq(a->srgb, b->srgb);
	for (uint32_t l = 0; l < a->num_levels; l++) {
		cr_assert_eq(a->levels[l].size, b->levels[l].size);
		cr_assert(memcmp(a->levels[l].data, b->levels[l].data, a->levels[l].size) == 0, "level %u", l);
	}
}

static void run_formats(kiln_texfmt format)
{
	kiln_buf files[NFILES];
	for (int i = 0; i < NFILES; i++)
		random_png(&files[i], 13 + 29 * (uint32_t)i, 7 + 11 * (uint32_t)i, (uint32_t)i, i % 3 == 1);
	cr_assert(png_break_idat(files[4].data, files[4].len, 4, 7, 0x5a));

	kiln_pool *pool;
	cr_assert_eq(kiln_pool_create(2, &pool), KILN_OK);
	kiln_device cpu = {KILN_DEVICE_CPU, 0};
	kiln_texenc_opts opts;
	kiln_texenc_opts_default(&opts);
	opts.format = format;
	opts.quality = KILN_QUALITY_FAST;
	opts.mipmaps = true;
	if (format == KILN_TEXFMT_ASTC)
		opts.block_w = opts.block_h = 6;
	kiln_texenc *enc;
	cr_assert_eq(kiln_texenc_create(&cpu, &opts, pool, &enc), KILN_OK);

	/* reference: libpng decodes, the pixels are submitted */
	kiln_image images[NFILES];
	kiln_status ref_dec[NFILES];
	for (int i = 0; i < NFILES; i++)
		ref_dec[i] = kiln_png_decode(files[i].data, files[i].len, NULL, &images[i], NULL, 0);
	cr_assert_neq(ref_dec[4], KILN_OK, "libpng takes the corrupt stream");
	kiln_texture ref[NFILES], got[NFILES];
	kiln_status ref_st[NFILES], got_st[NFILES];
	kiln_image ok_images[NFILES];
	int nok = 0;
	for (int i = 0; i < NFILES; i++)
		if (ref_dec[i] == KILN_OK)
			ok_images[nok++] = images[i];
	kiln_texture ok_tex[NFILES];
	kiln_status ok_st[NFILES];
	cr_assert_eq(kiln_texenc_encode(enc, ok_images, (size_t)nok, ok_tex, ok_st), KILN_OK);
	for (int k = 0, i = 0; i < NFILES; i++) {
		if (ref_dec[i] != KILN_OK) {
			ref_st[i] = ref_dec[i];
			continue;
		}
		ref[i] = ok_tex[k];
		ref_st[i] = ok_st[k++];
	}

	/* the same files undecoded */
	kiln_texenc_png png[NFILES];
	for (int i = 0; i < NFILES; i++) {
		png[i] = (kiln_texenc_png){.data = files[i].data, .size = files[i].len};
		cr_assert_eq(kiln_pngdec_probe(files[i].data, files[i].len, NULL, &png[i].info, NULL, 0), KILN_OK,
			     "the container of file %d is sound", i);
	}
	uint64_t ticket;
	cr_assert_eq(kiln_texenc_submit_png(enc, png, NFILES, &ticket), KILN_OK);
	cr_assert_eq(kiln_texenc_collect(enc, ticket, got, got_st), KILN_OK);
	for (int i = 0; i < NFILES; i++) {
		if (i == 4) {
			cr_expect_neq(got_st[i], KILN_OK, "the corrupt stream fails its image");
			continue;
		}
		cr_assert_eq(got_st[i], KILN_OK, "file %d: %s", i, kiln_strerror(got_st[i]));
		cr_assert_eq(ref_st[i], KILN_OK);
		check_same_textures(&got[i], &ref[i]);
		kiln_texture_free_levels(&got[i]);
		kiln_texture_free_levels(&ref[i]);
	}
	for (int i = 0; i < NFILES; i++) {
		kiln_image_free(&images[i]);
		kiln_buf_free(&files[i]);
	}
	kiln_texenc_destroy(enc);
	kiln_pool_destroy(pool);
}

Test(texenc_png, undecoded_files_give_the_textures_of_decoded_pixels_bc1, .timeout = 120)
{
	run_formats(KILN_TEXFMT_BC1_RGB);
}

Test(texenc_png, undecoded_files_give_the_textures_of_decoded_pixels_astc, .timeout = 120)
{
	run_formats(KILN_TEXFMT_ASTC);
}

Test(texenc_png, decoders_agree_and_names_parse, .timeout = 60)
{
	kiln_png_decoder d;
	cr_assert_eq(kiln_png_decoder_parse("kiln", &d), KILN_OK);
	cr_assert_eq(d, KILN_PNG_DECODER_KILN);
	cr_assert_eq(kiln_png_decoder_parse("libpng", &d), KILN_OK);
	cr_assert_eq(d, KILN_PNG_DECODER_LIBPNG);
	cr_assert_str_eq(kiln_png_decoder_name(d), "libpng");
	cr_assert_eq(kiln_png_decoder_parse("spng", &d), KILN_ERR_INVALID_ARG);
	cr_assert_eq(kiln_png_decoder_parse(NULL, &d), KILN_ERR_INVALID_ARG);

	kiln_buf f;
	random_png(&f, 77, 45, 3, true);
	kiln_image a, b;
	char err[200];
	cr_assert_eq(kiln_png_read(f.data, f.len, KILN_PNG_DECODER_KILN, NULL, NULL, &a, err, sizeof err), KILN_OK, "%s", err);
	cr_assert_eq(kiln_png_read(f.data, f.len, KILN_PNG_DECODER_LIBPNG, NULL, NULL, &b, err, sizeof err), KILN_OK, "%s", err);
	cr_assert_eq(a.width, b.width);
	cr_assert_eq(a.has_alpha, b.has_alpha);
	cr_assert_eq(a.srgb, b.srgb);
	for (uint32_t y = 0; y < a.height; y++)
		cr_assert(memcmp(kiln_image_row(&a, y), kiln_image_row(&b, y), (size_t)a.width * 4) == 0, "row %u", y);
	kiln_image_free(&a);
	kiln_image_free(&b);
	/* both refuse a file cut short, each with a reason */
	for (int dec = 0; dec < 2; dec++) {
		err[0] = '\0';
		cr_assert_neq(kiln_png_read(f.data, f.len / 2, (kiln_png_decoder)dec, NULL, NULL, &a, err, sizeof err), KILN_OK);
		cr_assert(err[0] != '\0');
		cr_assert_null(a.pixels);
	}
	kiln_buf_free(&f);
}

/* Which probed files a GPU worker hands over undecoded: ordinary files of any size (the
 * GPU inflates their one stream in parallel), strip files with enough strips, never what
 * the GPU decoder does not take. */
Test(texenc_png, gpu_takes_the_files_it_decodes_fast, .timeout = 60)
{
	struct {
		uint32_t w, h;
		bool gpu;
	} cases[] = {{768, 512, true}, {1100, 1000, true}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		kiln_buf f;
		random_png(&f, cases[c].w, cases[c].h, (uint32_t)c, true);
		kiln_pngdec_info info;
		cr_assert_eq(kiln_pngdec_probe(f.data, f.len, NULL, &info, NULL, 0), KILN_OK);
		cr_assert_eq(info.strips, 1u);
		cr_expect_eq(kiln_texenc_png_gpu_decodes(&info), cases[c].gpu, "%ux%u RGBA, %llu filtered bytes",
			     cases[c].w, cases[c].h, (unsigned long long)info.filtered_size);
		if (c == 0) {
			kiln_pngdec_info strips = info;
			strips.strips = KILN_TEXENC_GPU_DECODE_MIN_STRIPS - 1;
			cr_expect(!kiln_texenc_png_gpu_decodes(&strips), "a few strips: a warp each, slower than the host");
			strips.strips = KILN_TEXENC_GPU_DECODE_MIN_STRIPS;
			cr_expect(kiln_texenc_png_gpu_decodes(&strips));
			info.gpu_ok = 0; /* 16-bit or Adam7 */
			cr_expect(!kiln_texenc_png_gpu_decodes(&info));
		}
		kiln_buf_free(&f);
	}
}
