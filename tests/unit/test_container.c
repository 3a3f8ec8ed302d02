/* Unit tests of the texture containers (common/container.h). Each writer's output is
 * parsed here, independently of the readers, at the offsets the specifications give
 * (DDS_HEADER / DDS_HEADER_DXT10, KTX 2.0 header, index, level index, DFD and key/value
 * data, the .astc header), then read back through the readers. Truncated, corrupted and
 * randomly damaged files must be rejected with the right status and never read outside
 * the buffer. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/container.h"
#include "common/texture.h"
#include "common/version.h"
#include "tests/unit/testutil.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void set_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static size_t blocks(uint32_t n, uint32_t b)
{
	return (n + b - 1) / b;
}

/* A texture of w x h with `levels` levels (0: the full chain) of random block data;
 * free with kiln_texture_free_levels. */
static kiln_texture make_tex(kiln_texfmt fmt, uint32_t bw, uint32_t bh, bool srgb, uint32_t w,
			     uint32_t h, uint32_t levels)
{
	kiln_texture t;
	cr_assert_eq(kiln_texture_init(&t, fmt, bw, bh, srgb), KILN_OK);
	t.num_levels = levels ? levels : kiln_mip_count(w, h);
	uint32_t seed = w * 31u + h * 17u + (uint32_t)fmt + bw * 7u + (srgb ? 1u : 0u);
	for (uint32_t i = 0; i < t.num_levels; i++) {
		kiln_level *lv = &t.levels[i];
		lv->width = w >> i ? w >> i : 1;
		lv->height = h >> i ? h >> i : 1;
		lv->size = blocks(lv->width, t.block_w) * blocks(lv->height, t.block_h) * t.block_bytes;
		cr_assert_eq(lv->size, kiln_texture_level_size(&t, lv->width, lv->height));
		lv->data = malloc(lv->size);
		cr_assert_not_null(lv->data);
		for (size_t j = 0; j < lv->size; j++)
			lv->data[j] = (uint8_t)test_xorshift32(&seed);
	}
	return t;
}

static kiln_buf write_with(kiln_status (*fn)(const kiln_texture *, kiln_buf *), const kiln_texture *t)
{
	kiln_buf b;
	kiln_buf_init(&b, (size_t)64 << 20);
	kiln_status st = fn(t, &b);
	cr_assert_eq(st, KILN_OK, "write: %s", kiln_strerror(st));
	return b;
}

/* The reader's texture equals the written one, and its levels point inside the file. */
static void expect_same(const kiln_texture *got, const kiln_texture *want, const kiln_buf *file,
			uint32_t levels)
{
	cr_expect_eq(got->format, want->format);
	cr_expect_eq(got->block_w, want->block_w);
	cr_expect_eq(got->block_h, want->block_h);
	cr_expect_eq(got->block_bytes, want->block_bytes);
	cr_expect_eq(got->srgb, want->srgb);
	cr_assert_eq(got->num_levels, levels);
	for (uint32_t i = 0; i < levels; i++) {
		const kiln_level *g = &got->levels[i], *w = &want->levels[i];
		cr_expect_eq(g->width, w->width, "level %u", i);
		cr_expect_eq(g->height, w->height, "level %u", i);
		cr_assert_eq(g->size, w->size, "level %u", i);
		cr_assert(g->data >= file->data && g->data + g->size <= file->data + file->len);
		cr_expect_eq(memcmp(g->data, w->data, w->size), 0, "level %u data", i);
	}
}

/* Every level of a successfully read texture lies inside the buffer (for fuzzing). */
static void expect_inside(const kiln_texture *t, const uint8_t *data, size_t size)
{
	cr_assert(t->num_levels >= 1 && t->num_levels <= KILN_MAX_LEVELS);
	for (uint32_t i = 0; i < t->num_levels; i++) {
		const kiln_level *lv = &t->levels[i];
		cr_assert(lv->data >= data && lv->size <= size &&
			  (size_t)(lv->data - data) <= size - lv->size, "level %u outside", i);
		cr_assert_eq(lv->size, kiln_texture_level_size(t, lv->width, lv->height));
		unsigned sum = 0;
		for (size_t j = 0; j < lv->size; j++)
			sum += lv->data[j];  /* valgrind / ASan check the reads */
		(void)sum;
	}
}

typedef kiln_status (*read_fn)(const uint8_t *, size_t, kiln_texture *);

/* Every proper prefix of a valid file is TRUNCATED, and leaves *out empty. */
static void expect_truncations(read_fn fn, const kiln_buf *file)
{
	for (size_t n = 0; n < file->len; n++) {
		kiln_texture t;
		kiln_status st = fn(file->data, n, &t);
		cr_assert_eq(st, KILN_ERR_TRUNCATED, "cut at %zu of %zu: %s", n, file->len,
			     kiln_strerror(st));
		cr_assert_eq(t.num_levels, 0u);
		cr_assert_null(t.levels[0].data);
	}
	kiln_texture t;
	cr_assert_eq(fn(file->data, file->len, &t), KILN_OK);
}

/* Reads a copy of file whose `bytes`-byte little-endian field at off is replaced by v;
 * a successful read must still point inside the copy. */
static kiln_status read_patched(read_fn fn, const kiln_buf *file, size_t off, unsigned bytes,
				uint64_t v)
{
	uint8_t *copy = malloc(file->len);
	cr_assert_not_null(copy);
	cr_assert_leq(off + bytes, file->len);
	memcpy(copy, file->data, file->len);
	for (unsigned i = 0; i < bytes; i++)
		copy[off + i] = (uint8_t)(v >> (8 * i));
	kiln_texture t;
	kiln_status st = fn(copy, file->len, &t);
	if (st == KILN_OK)
		expect_inside(&t, copy, file->len);
	else
		cr_expect_eq(t.num_levels, 0u);
	free(copy);
	return st;
}

static kiln_status read_patched32(read_fn fn, const kiln_buf *file, size_t off, uint32_t v)
{
	return read_patched(fn, file, off, 4, v);
}

static kiln_status read_patched64(read_fn fn, const kiln_buf *file, size_t off, uint64_t v)
{
	return read_patched(fn, file, off, 8, v);
}

/* Random bit flips (fixed seed): every outcome is OK with levels inside the buffer, or an
 * error with an empty texture. */
static void fuzz(read_fn fn, const kiln_buf *file, uint32_t seed, int trials)
{
	uint8_t *copy = malloc(file->len);
	cr_assert_not_null(copy);
	for (int trial = 0; trial < trials; trial++) {
		memcpy(copy, file->data, file->len);
		int flips = 1 + (int)(test_xorshift32(&seed) % 3);
		for (int i = 0; i < flips; i++) {
			/* Mostly the header, where the fields are. */
			size_t span = test_xorshift32(&seed) % 4 ? (file->len < 256 ? file->len : 256) : file->len;
			uint32_t bit = test_xorshift32(&seed) % (uint32_t)(span * 8);
			copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		size_t len = test_xorshift32(&seed) % 8 ? file->len : test_xorshift32(&seed) % file->len;
		kiln_texture t;
		kiln_status st = fn(copy, len, &t);
		if (st == KILN_OK)
			expect_inside(&t, copy, len);
		else
			cr_assert_eq(t.num_levels, 0u, "trial %d", trial);
	}
	free(copy);
}

/* Truncations and bit flips (fuzz) of t, written by wr and read back by rd; frees t. */
static void abuse(kiln_status (*wr)(const kiln_texture *, kiln_buf *), read_fn rd, kiln_texture t, uint32_t seed,
		  int trials)
{
	kiln_buf b = write_with(wr, &t);
	expect_truncations(rd, &b);
	fuzz(rd, &b, seed, trials);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

/* ---- DDS ----------------------------------------------------------------------------------- */

#define DDSD_CAPS 0x1u
#define DDSD_HEIGHT 0x2u
#define DDSD_WIDTH 0x4u
#define DDSD_PIXELFORMAT 0x1000u
#define DDSD_MIPMAPCOUNT 0x20000u
#define DDSD_LINEARSIZE 0x80000u
#define DDSCAPS_COMPLEX 0x8u
#define DDSCAPS_TEXTURE 0x1000u
#define DDSCAPS_MIPMAP 0x400000u
#define DDPF_ALPHAPIXELS 0x1u
#define DDPF_FOURCC 0x4u

/* Checks the 128-byte legacy part of a DDS written by kiln. */
static void check_dds_header(const kiln_buf *b, const kiln_texture *t, const char *fourcc,
			     bool alpha_flag)
{
	const uint8_t *p = b->data;
	cr_assert_geq(b->len, 128u);
	cr_expect_eq(memcmp(p, "DDS ", 4), 0);
	cr_expect_eq(le32(p + 4), 124u, "dwSize");
	uint32_t flags = DDSD_CAPS | DDSD_HEIGHT | DDSD_WIDTH | DDSD_PIXELFORMAT | DDSD_LINEARSIZE;
	uint32_t caps = DDSCAPS_TEXTURE;
	if (t->num_levels > 1) {
		flags |= DDSD_MIPMAPCOUNT;
		caps |= DDSCAPS_COMPLEX | DDSCAPS_MIPMAP;
	}
	cr_expect_eq(le32(p + 8), flags, "dwFlags %#x", le32(p + 8));
	cr_expect_eq(le32(p + 12), t->levels[0].height, "dwHeight");
	cr_expect_eq(le32(p + 16), t->levels[0].width, "dwWidth");
	cr_expect_eq(le32(p + 20), (uint32_t)t->levels[0].size, "dwPitchOrLinearSize");
	cr_expect_eq(le32(p + 24), 0u, "dwDepth");
	cr_expect_eq(le32(p + 28), t->num_levels, "dwMipMapCount");
	for (int i = 0; i < 11; i++)
		cr_expect_eq(le32(p + 32 + 4 * i), 0u, "dwReserved1[%d]", i);
	cr_expect_eq(le32(p + 76), 32u, "ddspf.dwSize");
	cr_expect_eq(le32(p + 80), DDPF_FOURCC | (alpha_flag ? DDPF_ALPHAPIXELS : 0), "ddspf.dwFlags");
	cr_expect_eq(memcmp(p + 84, fourcc, 4), 0, "ddspf.dwFourCC");
	for (int i = 0; i < 5; i++)
		cr_expect_eq(le32(p + 88 + 4 * i), 0u, "bit count / masks");
	cr_expect_eq(le32(p + 108), caps, "dwCaps %#x", le32(p + 108));
	cr_expect_eq(le32(p + 112), 0u, "dwCaps2");
	cr_expect_eq(le32(p + 116), 0u, "dwCaps3");
	cr_expect_eq(le32(p + 120), 0u, "dwCaps4");
	cr_expect_eq(le32(p + 124), 0u, "dwReserved2");
}

/* The level data follows the header, level 0 first, without padding. */
static void check_dds_data(const kiln_buf *b, const kiln_texture *t, size_t header)
{
	size_t off = header;
	for (uint32_t i = 0; i < t->num_levels; i++) {
		cr_assert_leq(off + t->levels[i].size, b->len);
		cr_expect_eq(memcmp(b->data + off, t->levels[i].data, t->levels[i].size), 0, "level %u", i);
		off += t->levels[i].size;
	}
	cr_expect_eq(off, b->len, "file size");
}

Test(container_dds, linear_bc1_uses_the_legacy_header)
{
	for (int alpha = 0; alpha < 2; alpha++) {
		kiln_texfmt fmt = alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB;
		kiln_texture t = make_tex(fmt, 4, 4, false, 37, 21, 0);
		cr_assert_eq(t.num_levels, 6u);
		kiln_buf b = write_with(kiln_dds_write, &t);
		check_dds_header(&b, &t, "DXT1", alpha);
		cr_expect_eq(le32(b.data + 20), 10u * 6u * 8u);
		check_dds_data(&b, &t, 128);
		kiln_texture r;
		cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
		expect_same(&r, &t, &b, 6);
		kiln_texture_free_levels(&t);
		kiln_buf_free(&b);
	}
}

Test(container_dds, srgb_bc1_uses_the_dx10_header)
{
	for (int alpha = 0; alpha < 2; alpha++) {
		kiln_texfmt fmt = alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB;
		kiln_texture t = make_tex(fmt, 4, 4, true, 64, 64, alpha ? 1 : 0);
		kiln_buf b = write_with(kiln_dds_write, &t);
		check_dds_header(&b, &t, "DX10", alpha);
		cr_assert_geq(b.len, 148u);
		cr_expect_eq(le32(b.data + 128), 72u, "dxgiFormat BC1_UNORM_SRGB");
		cr_expect_eq(le32(b.data + 132), 3u, "resourceDimension TEXTURE2D");
		cr_expect_eq(le32(b.data + 136), 0u, "miscFlag");
		cr_expect_eq(le32(b.data + 140), 1u, "arraySize");
		/* DDS_ALPHA_MODE_STRAIGHT for BC1 with alpha, DDS_ALPHA_MODE_OPAQUE without. */
		cr_expect_eq(le32(b.data + 144), alpha ? 1u : 3u, "miscFlags2");
		check_dds_data(&b, &t, 148);
		kiln_texture r;
		cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
		expect_same(&r, &t, &b, t.num_levels);
		kiln_texture_free_levels(&t);
		kiln_buf_free(&b);
	}
}

Test(container_dds, reader_decides_alpha_and_colour_space)
{
	kiln_texture t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, true, 8, 8, 1);
	kiln_buf b = write_with(kiln_dds_write, &t);
	kiln_texture r;
	/* DX10 with BC1_UNORM (71): linear. */
	set_le32(b.data + 128, 71);
	cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
	cr_expect_not(r.srgb);
	cr_expect_eq(r.format, KILN_TEXFMT_BC1_RGB);
	/* Alpha mode straight or premultiplied: BC1 with alpha. */
	for (uint32_t mode = 0; mode <= 4; mode++) {
		set_le32(b.data + 144, mode);
		cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
		cr_expect_eq(r.format, mode == 1 || mode == 2 ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB,
			     "mode %u", mode);
	}
	/* DDPF_ALPHAPIXELS alone also says alpha. */
	set_le32(b.data + 80, DDPF_FOURCC | DDPF_ALPHAPIXELS);
	cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
	cr_expect_eq(r.format, KILN_TEXFMT_BC1_RGBA);
	/* dwMipMapCount 0 means one level. */
	set_le32(b.data + 28, 0);
	cr_assert_eq(kiln_dds_read(b.data, b.len, &r), KILN_OK);
	cr_expect_eq(r.num_levels, 1u);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_dds, astc_and_bad_textures_are_refused)
{
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	kiln_texture t = make_tex(KILN_TEXFMT_ASTC, 6, 6, true, 32, 32, 1);
	cr_expect_eq(kiln_dds_write(&t, &b), KILN_ERR_UNSUPPORTED);
	kiln_texture_free_levels(&t);
	t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, false, 32, 32, 3);
	kiln_texture bad = t;
	bad.num_levels = 0;
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	bad = t;
	bad.levels[1].size -= 8;
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	bad = t;
	bad.levels[2].width = 16;
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	bad = t;
	bad.levels[1].data = NULL;
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	bad = t;
	bad.block_bytes = 16;
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	bad = t;
	bad.num_levels = 7;  /* 32x32 has 6 */
	cr_expect_eq(kiln_dds_write(&bad, &b), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_dds_write(NULL, &b), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_dds_write(&t, NULL), KILN_ERR_INVALID_ARG);
	cr_expect_eq(b.len, 0u, "failed writes append nothing");
	/* Appends after existing bytes; a cap too small appends nothing. */
	kiln_buf_append(&b, "xy", 2);
	cr_assert_eq(kiln_dds_write(&t, &b), KILN_OK);
	cr_expect_eq(memcmp(b.data + 2, "DDS ", 4), 0);
	kiln_buf small;
	kiln_buf_init(&small, 200);
	cr_expect_eq(kiln_dds_write(&t, &small), KILN_ERR_TOO_LARGE);
	cr_expect_eq(small.len, 0u);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
	kiln_buf_free(&small);
}

Test(container_dds, damaged_headers_get_the_right_status)
{
	kiln_texture t = make_tex(KILN_TEXFMT_BC1_RGBA, 4, 4, false, 16, 8, 0);
	kiln_buf b = write_with(kiln_dds_write, &t);
	read_fn rd = kiln_dds_read;
	cr_expect_eq(read_patched32(rd, &b, 0, 0x20534444u ^ 0x100), KILN_ERR_CORRUPT, "magic");
	cr_expect_eq(read_patched32(rd, &b, 4, 123), KILN_ERR_CORRUPT, "dwSize");
	cr_expect_eq(read_patched32(rd, &b, 76, 0), KILN_ERR_CORRUPT, "ddspf.dwSize");
	cr_expect_eq(read_patched32(rd, &b, 12, 0), KILN_ERR_CORRUPT, "height 0");
	cr_expect_eq(read_patched32(rd, &b, 16, 0), KILN_ERR_CORRUPT, "width 0");
	cr_expect_eq(read_patched32(rd, &b, 28, 6), KILN_ERR_CORRUPT, "16x8 has 5 levels");
	cr_expect_eq(read_patched32(rd, &b, 28, 0xffffffffu), KILN_ERR_CORRUPT, "mip count");
	cr_expect_eq(read_patched32(rd, &b, 84, 0x35545844u), KILN_ERR_UNSUPPORTED, "DXT5");
	cr_expect_eq(read_patched32(rd, &b, 80, 0x40), KILN_ERR_UNSUPPORTED, "uncompressed RGB");
	cr_expect_eq(read_patched32(rd, &b, 112, 0x200), KILN_ERR_UNSUPPORTED, "cube map");
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);

	/* Sizes that would overflow a careless multiplication: the data is simply missing. */
	t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, false, 16, 8, 1);
	b = write_with(kiln_dds_write, &t);
	cr_expect_eq(read_patched32(rd, &b, 16, 0xffffffffu), KILN_ERR_TRUNCATED, "huge width");
	cr_expect_eq(read_patched32(rd, &b, 28, 5), KILN_ERR_TRUNCATED, "levels missing");
	cr_expect_eq(read_patched32(rd, &b, 12, 0xffffffffu), KILN_ERR_TRUNCATED, "huge height");
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);

	t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, true, 16, 8, 1);
	b = write_with(kiln_dds_write, &t);
	cr_expect_eq(read_patched32(rd, &b, 128, 98), KILN_ERR_UNSUPPORTED, "BC7");
	cr_expect_eq(read_patched32(rd, &b, 132, 4), KILN_ERR_UNSUPPORTED, "3D");
	cr_expect_eq(read_patched32(rd, &b, 136, 4), KILN_ERR_UNSUPPORTED, "cube");
	cr_expect_eq(read_patched32(rd, &b, 140, 6), KILN_ERR_UNSUPPORTED, "array");
	cr_expect_eq(read_patched32(rd, &b, 140, 0), KILN_ERR_CORRUPT, "array size 0");
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_dds, truncations_and_bit_flips, .timeout = 60)
{
	abuse(kiln_dds_write, kiln_dds_read, make_tex(KILN_TEXFMT_BC1_RGBA, 4, 4, false, 13, 9, 0), 0xdd5, 400);
	abuse(kiln_dds_write, kiln_dds_read, make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, true, 13, 9, 0), 0xdd10, 400);
}

/* ---- KTX 2.0 ------------------------------------------------------------------------------ */

static const uint8_t ktx2_id[12] = {0xAB, 0x4B, 0x54, 0x58, 0x20, 0x32,
				    0x30, 0xBB, 0x0D, 0x0A, 0x1A, 0x0A};

/* The expected vkFormat, written out from the Vulkan enum (VkFormat). */
static uint32_t expected_vk(kiln_texfmt fmt, uint32_t bw, uint32_t bh, bool srgb)
{
	if (fmt == KILN_TEXFMT_BC1_RGB)
		return srgb ? 132 : 131;  /* VK_FORMAT_BC1_RGB_{UNORM,SRGB}_BLOCK */
	if (fmt == KILN_TEXFMT_BC1_RGBA)
		return srgb ? 134 : 133;  /* VK_FORMAT_BC1_RGBA_{UNORM,SRGB}_BLOCK */
	static const struct {
		uint32_t w, h, unorm;
	} astc[] = {
		{4, 4, 157},  {5, 4, 159},  {5, 5, 161},   {6, 5, 163},   {6, 6, 165},
		{8, 5, 167},  {8, 6, 169},  {8, 8, 171},   {10, 5, 173},  {10, 6, 175},
		{10, 8, 177}, {10, 10, 179}, {12, 10, 181}, {12, 12, 183},
	};
	for (size_t i = 0; i < sizeof astc / sizeof astc[0]; i++)
		if (astc[i].w == bw && astc[i].h == bh)
			return astc[i].unorm + (srgb ? 1 : 0);
	return 0;
}

/* Parses a KTX2 file written by kiln field by field. */
static void check_ktx2(const kiln_buf *b, const kiln_texture *t)
{
	const uint8_t *p = b->data;
	uint32_t n = t->num_levels;
	bool astc = t->format == KILN_TEXFMT_ASTC;
	cr_assert_geq(b->len, 80u + 24u * n);
	cr_expect_eq(memcmp(p, ktx2_id, 12), 0, "identifier");
	cr_expect_eq(le32(p + 12), expected_vk(t->format, t->block_w, t->block_h, t->srgb), "vkFormat");
	cr_expect_eq(le32(p + 16), 1u, "typeSize");
	cr_expect_eq(le32(p + 20), t->levels[0].width, "pixelWidth");
	cr_expect_eq(le32(p + 24), t->levels[0].height, "pixelHeight");
	cr_expect_eq(le32(p + 28), 0u, "pixelDepth");
	cr_expect_eq(le32(p + 32), 0u, "layerCount");
	cr_expect_eq(le32(p + 36), 1u, "faceCount");
	cr_expect_eq(le32(p + 40), n, "levelCount");
	cr_expect_eq(le32(p + 44), 0u, "supercompressionScheme");
	uint32_t dfd_off = le32(p + 48), dfd_len = le32(p + 52);
	uint32_t kvd_off = le32(p + 56), kvd_len = le32(p + 60);
	cr_expect_eq(le64(p + 64), 0u, "sgdByteOffset");
	cr_expect_eq(le64(p + 72), 0u, "sgdByteLength");
	/* The DFD follows the level index, the key/value data follows the DFD. */
	cr_expect_eq(dfd_off, 80u + 24u * n, "dfdByteOffset");
	cr_expect_eq(dfd_len, 44u, "dfdByteLength: one Basic block with one sample");
	cr_expect_eq(kvd_off, dfd_off + dfd_len, "kvdByteOffset");
	cr_assert_leq((size_t)kvd_off + kvd_len, b->len);

	/* Data Format Descriptor. */
	const uint8_t *d = p + dfd_off;
	cr_expect_eq(le32(d), 44u, "dfdTotalSize");
	cr_expect_eq(le32(d + 4) & 0x1ffff, 0u, "vendorId KHRONOS");
	cr_expect_eq(le32(d + 4) >> 17, 0u, "descriptorType BASICFORMAT");
	cr_expect_eq(le32(d + 8) & 0xffff, 2u, "versionNumber 1.3");
	cr_expect_eq(le32(d + 8) >> 16, 40u, "descriptorBlockSize");
	cr_expect_eq(d[12], astc ? 162 : 128, "colorModel ASTC / BC1A");
	cr_expect_eq(d[13], 1, "colorPrimaries BT709");
	cr_expect_eq(d[14], t->srgb ? 2 : 1, "transferFunction SRGB / LINEAR");
	cr_expect_eq(d[15], 0, "flags ALPHA_STRAIGHT");
	cr_expect_eq(d[16], t->block_w - 1, "texelBlockDimension0");
	cr_expect_eq(d[17], t->block_h - 1, "texelBlockDimension1");
	cr_expect_eq(d[18], 0, "texelBlockDimension2");
	cr_expect_eq(d[19], 0, "texelBlockDimension3");
	cr_expect_eq(d[20], astc ? 16 : 8, "bytesPlane0");
	for (int i = 21; i < 28; i++)
		cr_expect_eq(d[i], 0, "bytesPlane%d", i - 20);
	uint32_t s0 = le32(d + 28);
	cr_expect_eq(s0 & 0xffff, 0u, "bitOffset");
	cr_expect_eq((s0 >> 16) & 0xff, astc ? 127u : 63u, "bitLength");
	uint32_t channel = astc ? 0 : t->format == KILN_TEXFMT_BC1_RGBA ? 1 : 0;
	cr_expect_eq((s0 >> 24) & 0xf, channel, "channelType");
	cr_expect_eq(s0 >> 28, 0u, "qualifiers");
	cr_expect_eq(le32(d + 32), 0u, "samplePosition0..3");
	cr_expect_eq(le32(d + 36), 0u, "sampleLower");
	cr_expect_eq(le32(d + 40), 0xffffffffu, "sampleUpper");

	/* Key/value data: KTXwriter, NUL-terminated value, padded to 4. */
	static const char kv[] = "KTXwriter\0kiln " KILN_VERSION;
	cr_expect_eq(kvd_len, 4u + 24u);
	cr_expect_eq(le32(p + kvd_off), (uint32_t)sizeof kv, "keyAndValueByteLength");
	cr_expect_eq(memcmp(p + kvd_off + 4, kv, sizeof kv), 0, "KTXwriter");
	for (uint32_t i = 4 + sizeof kv; i < kvd_len; i++)
		cr_expect_eq(p[kvd_off + i], 0, "valuePadding");

	/* Level index: level 0 first; data smallest level first, each level aligned to
	 * lcm(block bytes, 4) and packed with only that (zero) padding. */
	size_t align = astc ? 16 : 8;
	size_t prev_end = kvd_off + kvd_len;
	for (uint32_t i = n; i-- > 0;) {
		const uint8_t *e = p + 80 + 24 * i;
		uint64_t off = le64(e), len = le64(e + 8), ulen = le64(e + 16);
		size_t aligned = (prev_end + align - 1) / align * align;
		cr_expect_eq(off, aligned, "level %u byteOffset", i);
		cr_expect_eq(off % align, 0u, "level %u alignment", i);
		cr_expect_eq(len, t->levels[i].size, "level %u byteLength", i);
		cr_expect_eq(ulen, len, "level %u uncompressedByteLength", i);
		if (i + 1 < n)
			cr_expect_lt(le64(p + 80 + 24 * (i + 1)), off, "smaller level stored earlier");
		cr_assert_leq(off + len, b->len);
		cr_expect_eq(memcmp(p + off, t->levels[i].data, len), 0, "level %u data", i);
		for (size_t z = prev_end; z < off; z++)
			cr_expect_eq(p[z], 0, "mipPadding at %zu", z);
		prev_end = off + len;
	}
	cr_expect_eq(prev_end, b->len, "level 0 ends the file");
}

static void ktx2_round_trip(kiln_texfmt fmt, uint32_t bw, uint32_t bh, bool srgb, uint32_t w,
			    uint32_t h, uint32_t levels)
{
	kiln_texture t = make_tex(fmt, bw, bh, srgb, w, h, levels);
	kiln_buf b = write_with(kiln_ktx2_write, &t);
	check_ktx2(&b, &t);
	kiln_texture r;
	cr_assert_eq(kiln_ktx2_read(b.data, b.len, &r), KILN_OK);
	expect_same(&r, &t, &b, t.num_levels);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_ktx2, bc1_field_by_field)
{
	for (int alpha = 0; alpha < 2; alpha++)
		for (int srgb = 0; srgb < 2; srgb++) {
			kiln_texfmt fmt = alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB;
			ktx2_round_trip(fmt, 4, 4, srgb, 37, 21, 0);
			ktx2_round_trip(fmt, 4, 4, srgb, 1, 1, 1);
			ktx2_round_trip(fmt, 4, 4, srgb, 256, 128, 3);
		}
}

Test(container_ktx2, every_astc_footprint_field_by_field)
{
	static const uint32_t fp[][2] = {{4, 4}, {5, 4}, {5, 5}, {6, 5}, {6, 6}, {8, 5}, {8, 6},
					 {8, 8}, {10, 5}, {10, 6}, {10, 8}, {10, 10}, {12, 10}, {12, 12}};
	for (size_t i = 0; i < sizeof fp / sizeof fp[0]; i++)
		for (int srgb = 0; srgb < 2; srgb++) {
			ktx2_round_trip(KILN_TEXFMT_ASTC, fp[i][0], fp[i][1], srgb, 37, 21, 0);
			ktx2_round_trip(KILN_TEXFMT_ASTC, fp[i][0], fp[i][1], srgb, 3, 100, 2);
		}
}

Test(container_ktx2, nonstandard_astc_footprint_is_unsupported)
{
	kiln_texture t = make_tex(KILN_TEXFMT_ASTC, 7, 7, false, 16, 16, 1);
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	cr_expect_eq(kiln_ktx2_write(&t, &b), KILN_ERR_UNSUPPORTED);
	cr_expect_eq(kiln_astc_file_write(&t, &b), KILN_ERR_UNSUPPORTED);
	cr_expect_eq(b.len, 0u);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_ktx2, damaged_files_get_the_right_status)
{
	kiln_texture t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, true, 16, 8, 0);  /* 5 levels */
	kiln_buf b = write_with(kiln_ktx2_write, &t);
	read_fn rd = kiln_ktx2_read;
	uint32_t dfd = le32(b.data + 48);
	uint64_t l0 = 80, l4 = 80 + 24 * 4;
	cr_expect_eq(read_patched32(rd, &b, 4, 0x58545800), KILN_ERR_CORRUPT, "identifier");
	cr_expect_eq(read_patched32(rd, &b, 12, 0), KILN_ERR_UNSUPPORTED, "VK_FORMAT_UNDEFINED");
	cr_expect_eq(read_patched32(rd, &b, 12, 37), KILN_ERR_UNSUPPORTED, "R8G8B8A8_UNORM");
	cr_expect_eq(read_patched32(rd, &b, 12, 135), KILN_ERR_UNSUPPORTED, "BC2");
	cr_expect_eq(read_patched32(rd, &b, 16, 4), KILN_ERR_CORRUPT, "typeSize");
	cr_expect_eq(read_patched32(rd, &b, 20, 0), KILN_ERR_CORRUPT, "pixelWidth 0");
	cr_expect_eq(read_patched32(rd, &b, 24, 0), KILN_ERR_CORRUPT, "pixelHeight 0");
	cr_expect_eq(read_patched32(rd, &b, 28, 1), KILN_ERR_UNSUPPORTED, "pixelDepth");
	cr_expect_eq(read_patched32(rd, &b, 32, 2), KILN_ERR_UNSUPPORTED, "layerCount");
	cr_expect_eq(read_patched32(rd, &b, 36, 6), KILN_ERR_UNSUPPORTED, "faceCount 6");
	cr_expect_eq(read_patched32(rd, &b, 36, 2), KILN_ERR_CORRUPT, "faceCount 2");
	cr_expect_eq(read_patched32(rd, &b, 40, 0), KILN_ERR_CORRUPT, "levelCount 0, block format");
	cr_expect_eq(read_patched32(rd, &b, 40, 6), KILN_ERR_CORRUPT, "16x8 has 5 levels");
	cr_expect_eq(read_patched32(rd, &b, 40, 0xffffffffu), KILN_ERR_CORRUPT, "levelCount");
	cr_expect_eq(read_patched32(rd, &b, 44, 2), KILN_ERR_UNSUPPORTED, "Zstandard");
	cr_expect_eq(read_patched32(rd, &b, 40, 4), KILN_OK, "fewer levels than the chain");
	cr_expect_eq(read_patched64(rd, &b, 72, 8), KILN_ERR_CORRUPT, "sgdByteLength");
	/* Index ranges. */
	cr_expect_eq(read_patched32(rd, &b, 48, (uint32_t)b.len), KILN_ERR_TRUNCATED, "dfd past the end");
	cr_expect_eq(read_patched32(rd, &b, 48, 0xfffffff0u), KILN_ERR_TRUNCATED, "dfd offset huge");
	cr_expect_eq(read_patched32(rd, &b, 52, 0xffffffffu), KILN_ERR_TRUNCATED, "dfd length huge");
	cr_expect_eq(read_patched32(rd, &b, 48, 80), KILN_ERR_CORRUPT, "dfd inside the level index");
	cr_expect_eq(read_patched32(rd, &b, 60, 0xffff0000u), KILN_ERR_TRUNCATED, "kvd length");
	/* DFD contents. */
	cr_expect_eq(read_patched32(rd, &b, dfd, 40), KILN_ERR_CORRUPT, "dfdTotalSize");
	cr_expect_eq(read_patched32(rd, &b, dfd + 8, 1 | 40u << 16), KILN_ERR_CORRUPT, "version");
	cr_expect_eq(read_patched32(rd, &b, dfd + 12, 162 | 1u << 8 | 2u << 16), KILN_ERR_CORRUPT, "ASTC model");
	cr_expect_eq(read_patched32(rd, &b, dfd + 12, 128 | 1u << 8 | 1u << 16), KILN_ERR_CORRUPT, "linear transfer");
	cr_expect_eq(read_patched32(rd, &b, dfd + 12, 128 | 9u << 8 | 2u << 16 | 1u << 24), KILN_OK, "primaries, flags free");
	cr_expect_eq(read_patched32(rd, &b, dfd + 16, 0x0505), KILN_ERR_CORRUPT, "block dims");
	cr_expect_eq(read_patched32(rd, &b, dfd + 20, 16), KILN_ERR_CORRUPT, "bytesPlane0");
	cr_expect_eq(read_patched32(rd, &b, dfd + 28, 63u << 16 | 1u << 24), KILN_ERR_CORRUPT, "channel");
	/* Level index entries. */
	uint64_t off0 = le64(b.data + l0);
	cr_expect_eq(read_patched64(rd, &b, l0 + 8, le64(b.data + l0 + 8) + 8), KILN_ERR_CORRUPT, "byteLength");
	cr_expect_eq(read_patched64(rd, &b, l0 + 16, 0), KILN_ERR_CORRUPT, "uncompressedByteLength");
	cr_expect_eq(read_patched64(rd, &b, l0, off0 + 4), KILN_ERR_CORRUPT, "misaligned");
	cr_expect_eq(read_patched64(rd, &b, l0, 8), KILN_ERR_CORRUPT, "offset inside the header");
	cr_expect_eq(read_patched64(rd, &b, l0, off0 + 8), KILN_ERR_TRUNCATED, "past the end");
	cr_expect_eq(read_patched64(rd, &b, l4, 0x8000000000000000ull), KILN_ERR_TRUNCATED, "2^63");
	cr_expect_eq(read_patched64(rd, &b, l4, 0xfffffffffffffff8ull), KILN_ERR_TRUNCATED, "wraps");
	cr_expect_eq(read_patched64(rd, &b, l4 + 8, 0xfffffffffffffff8ull), KILN_ERR_CORRUPT, "length wraps");
	/* pixelWidth so large the file cannot hold level 0. */
	cr_expect_eq(read_patched32(rd, &b, 20, 0xffffffffu), KILN_ERR_CORRUPT, "level sizes then differ");
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_ktx2, truncations_and_bit_flips, .timeout = 60)
{
	abuse(kiln_ktx2_write, kiln_ktx2_read, make_tex(KILN_TEXFMT_BC1_RGBA, 4, 4, false, 13, 9, 0), 0x4b5832, 600);
	abuse(kiln_ktx2_write, kiln_ktx2_read, make_tex(KILN_TEXFMT_ASTC, 8, 5, true, 29, 11, 0), 0xa57c, 600);
}

/* ---- .astc --------------------------------------------------------------------------------- */

Test(container_astc, header_field_by_field)
{
	kiln_texture t = make_tex(KILN_TEXFMT_ASTC, 6, 5, true, 37, 21, 3);
	kiln_buf b = write_with(kiln_astc_file_write, &t);
	static const uint8_t header[16] = {0x13, 0xAB, 0xA1, 0x5C, 6, 5, 1, 37, 0, 0, 21, 0, 0, 1, 0, 0};
	cr_expect_eq(memcmp(b.data, header, 16), 0, "header");
	/* Level 0 only: 7 x 5 blocks of 16 bytes. */
	cr_assert_eq(b.len, 16u + 7u * 5u * 16u);
	cr_expect_eq(memcmp(b.data + 16, t.levels[0].data, t.levels[0].size), 0);
	kiln_texture r;
	cr_assert_eq(kiln_astc_file_read(b.data, b.len, &r), KILN_OK);
	cr_expect_not(r.srgb, "the file has no colour space");
	kiln_texture want = t;
	want.srgb = false;
	expect_same(&r, &want, &b, 1);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);

	/* 24-bit sizes. */
	t = make_tex(KILN_TEXFMT_ASTC, 12, 12, false, 70000, 1, 1);
	b = write_with(kiln_astc_file_write, &t);
	cr_expect(b.data[7] == 0x70 && b.data[8] == 0x11 && b.data[9] == 0x01);
	cr_assert_eq(kiln_astc_file_read(b.data, b.len, &r), KILN_OK);
	cr_expect_eq(r.levels[0].width, 70000u);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

Test(container_astc, bc1_and_damaged_files)
{
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	kiln_texture t = make_tex(KILN_TEXFMT_BC1_RGB, 4, 4, false, 8, 8, 1);
	cr_expect_eq(kiln_astc_file_write(&t, &b), KILN_ERR_UNSUPPORTED);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);

	t = make_tex(KILN_TEXFMT_ASTC, 4, 4, false, 9, 7, 1);
	b = write_with(kiln_astc_file_write, &t);
	read_fn rd = kiln_astc_file_read;
	cr_expect_eq(read_patched32(rd, &b, 0, 0x5CA1AB14), KILN_ERR_CORRUPT, "magic");
	cr_expect_eq(read_patched(rd, &b, 6, 1, 2), KILN_ERR_UNSUPPORTED, "3D blocks");
	cr_expect_eq(read_patched(rd, &b, 6, 1, 0), KILN_ERR_CORRUPT, "block depth 0");
	cr_expect_eq(read_patched(rd, &b, 4, 2, 0x0707), KILN_ERR_UNSUPPORTED, "7x7");
	cr_expect_eq(read_patched(rd, &b, 5, 1, 0), KILN_ERR_CORRUPT, "block height 0");
	cr_expect_eq(read_patched(rd, &b, 7, 3, 0), KILN_ERR_CORRUPT, "width 0");
	cr_expect_eq(read_patched(rd, &b, 10, 3, 0), KILN_ERR_CORRUPT, "height 0");
	cr_expect_eq(read_patched(rd, &b, 13, 3, 2), KILN_ERR_UNSUPPORTED, "depth 2");
	cr_expect_eq(read_patched(rd, &b, 7, 3, 0xff0009), KILN_ERR_TRUNCATED, "huge width");
	cr_expect_eq(read_patched(rd, &b, 7, 6, 0xffffffffffff), KILN_ERR_TRUNCATED, "huge both");
	expect_truncations(rd, &b);
	fuzz(rd, &b, 0xa5c, 300);
	kiln_texture_free_levels(&t);
	kiln_buf_free(&b);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

Test(container_dispatch, names_extensions_and_magic)
{
	cr_expect_eq(kiln_container_parse("dds"), KILN_CONTAINER_DDS);
	cr_expect_eq(kiln_container_parse("ktx2"), KILN_CONTAINER_KTX2);
	cr_expect_eq(kiln_container_parse("astc"), KILN_CONTAINER_ASTC);
	cr_expect_eq(kiln_container_parse("ktx"), -1);
	cr_expect_eq(kiln_container_parse(""), -1);
	cr_expect_eq(kiln_container_parse(NULL), -1);
	for (int c = KILN_CONTAINER_DDS; c <= KILN_CONTAINER_ASTC; c++)
		cr_expect_eq(kiln_container_parse(kiln_container_ext((kiln_container)c)), c);
	cr_expect_str_eq(kiln_container_ext((kiln_container)99), "");

	cr_expect_eq(kiln_container_detect((const uint8_t *)"DDS ", 4), KILN_CONTAINER_DDS);
	cr_expect_eq(kiln_container_detect((const uint8_t *)"DDS", 3), -1);
	cr_expect_eq(kiln_container_detect(ktx2_id, 12), KILN_CONTAINER_KTX2);
	cr_expect_eq(kiln_container_detect(ktx2_id, 11), -1);
	cr_expect_eq(kiln_container_detect((const uint8_t *)"\x13\xab\xa1\x5c", 4), KILN_CONTAINER_ASTC);
	cr_expect_eq(kiln_container_detect((const uint8_t *)"\x89PNG\r\n\x1a\n", 8), -1);
	cr_expect_eq(kiln_container_detect(NULL, 0), -1);
}

Test(container_dispatch, write_and_read_through_the_dispatcher)
{
	kiln_texture bc1 = make_tex(KILN_TEXFMT_BC1_RGBA, 4, 4, true, 20, 12, 0);
	kiln_texture astc = make_tex(KILN_TEXFMT_ASTC, 5, 5, false, 20, 12, 1);
	for (int c = KILN_CONTAINER_DDS; c <= KILN_CONTAINER_ASTC; c++) {
		const kiln_texture *t = c == KILN_CONTAINER_ASTC ? &astc : &bc1;
		kiln_buf b;
		kiln_buf_init(&b, 1 << 20);
		cr_assert_eq(kiln_container_write((kiln_container)c, t, &b), KILN_OK, "container %d", c);
		cr_expect_eq(kiln_container_detect(b.data, b.len), c);
		kiln_texture r;
		cr_assert_eq(kiln_container_read(b.data, b.len, &r), KILN_OK);
		expect_same(&r, t, &b, t->num_levels);
		kiln_buf_free(&b);
	}
	kiln_buf b;
	kiln_buf_init(&b, 1 << 20);
	cr_expect_eq(kiln_container_write((kiln_container)7, &bc1, &b), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_container_write(KILN_CONTAINER_DDS, &astc, &b), KILN_ERR_UNSUPPORTED);
	kiln_texture r;
	cr_expect_eq(kiln_container_read((const uint8_t *)"GIF89a", 6, &r), KILN_ERR_UNSUPPORTED);
	cr_expect_eq(kiln_container_read(NULL, 0, &r), KILN_ERR_TRUNCATED);
	cr_expect_eq(kiln_dds_read(NULL, 5, &r), KILN_ERR_INVALID_ARG);
	cr_expect_eq(kiln_ktx2_read(ktx2_id, 12, NULL), KILN_ERR_INVALID_ARG);
	kiln_texture_free_levels(&bc1);
	kiln_texture_free_levels(&astc);
	kiln_buf_free(&b);
}
