/* Texture containers: DDS (legacy header, DX10 header for sRGB), KTX 2.0 and .astc.
 *
 * Writers check the texture (format, level chain, level sizes) and append the whole file
 * to a kiln_buf in one reservation, so a failed write appends nothing. Readers treat the
 * file as hostile: every field is read through a bounded reader, every size computed from
 * header fields is overflow-checked and every range is checked against the buffer before
 * a level points into it. Statuses: bad magic or inconsistent fields -> CORRUPT, ranges
 * past the end -> TRUNCATED, valid files kiln does not handle -> UNSUPPORTED.
 *
 * Specifications: Microsoft's "DDS_HEADER" / "DDS_HEADER_DXT10" pages, the Khronos KTX
 * File Format Specification 2.0 and the Khronos Data Format Specification 1.3 (the DFD),
 * and the .astc header as written by ARM's astcenc. */
#include "common/container.h"
#include "common/version.h"

#include <stdbool.h>
#include <string.h>

#include "common/alloc.h"

/* ---- little-endian bytes ------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	put_u32(p, (uint32_t)v);
	put_u32(p + 4, (uint32_t)(v >> 32));
}

static void put_u24(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 3; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A bounded view of the input. Reads check off+len <= size first; a read that would go
 * past the end returns 0 and sets `short_read`, so a parser can read a header's fields
 * and check once. */
typedef struct span {
	const uint8_t *data;
	size_t size;
	bool short_read;
} span;

static bool span_has(const span *s, uint64_t off, uint64_t len)
{
	return off <= s->size && len <= s->size - off;
}

static uint64_t rd_le(span *s, uint64_t off, unsigned bytes)
{
	if (!span_has(s, off, bytes)) {
		s->short_read = true;
		return 0;
	}
	uint64_t v = 0;
	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)s->data[off + i] << (8 * i);
	return v;
}

static uint8_t rd_u8(span *s, uint64_t off) { return (uint8_t)rd_le(s, off, 1); }
static uint32_t rd_u24(span *s, uint64_t off) { return (uint32_t)rd_le(s, off, 3); }
static uint32_t rd_u32(span *s, uint64_t off) { return (uint32_t)rd_le(s, off, 4); }
static uint64_t rd_u64(span *s, uint64_t off) { return rd_le(s, off, 8); }

/* OK when the input starts with magic; TRUNCATED when it is a true prefix of it (a file
 * cut inside its signature), CORRUPT otherwise. */
static kiln_status check_magic(const span *s, const uint8_t *magic, size_t len)
{
	size_t n = s->size < len ? s->size : len;
	if (n && memcmp(s->data, magic, n) != 0)
		return KILN_ERR_CORRUPT;
	return n == len ? KILN_OK : KILN_ERR_TRUNCATED;
}

/* ---- shared texture checks ------------------------------------------------------------ */

static uint32_t level_dim(uint32_t base, uint32_t level)
{
	uint32_t d = base >> level;
	return d ? d : 1;
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* Every level must be the halved size of the level above with exactly its block data, so
 * that a reader computing sizes from the base level finds what the writer wrote. */
static kiln_status check_texture(const kiln_texture *tex)
{
	kiln_texture ref;
	if (!tex || kiln_texture_init(&ref, tex->format, tex->block_w, tex->block_h, tex->srgb) != KILN_OK)
		return KILN_ERR_INVALID_ARG;
	if (ref.block_w != tex->block_w || ref.block_h != tex->block_h ||
	    ref.block_bytes != tex->block_bytes)
		return KILN_ERR_INVALID_ARG;
	uint32_t w0 = tex->levels[0].width, h0 = tex->levels[0].height;
	if (tex->num_levels == 0 || tex->num_levels > KILN_MAX_LEVELS || w0 == 0 || h0 == 0 ||
	    tex->num_levels > kiln_mip_count(w0, h0))
		return KILN_ERR_INVALID_ARG;
	for (uint32_t i = 0; i < tex->num_levels; i++) {
		const kiln_level *lv = &tex->levels[i];
		if (lv->width != level_dim(w0, i) || lv->height != level_dim(h0, i) || !lv->data)
			return KILN_ERR_INVALID_ARG;
		size_t size = kiln_texture_level_size(tex, lv->width, lv->height);
		if (size == 0)
			return KILN_ERR_OVERFLOW;
		if (lv->size != size)
			return KILN_ERR_INVALID_ARG;
	}
	return KILN_OK;
}

/* Bytes of all levels' data; false on overflow. */
static bool levels_total(const kiln_texture *tex, size_t *total)
{
	size_t sum = 0;
	for (uint32_t i = 0; i < tex->num_levels; i++)
		if (!kiln_size_add(sum, tex->levels[i].size, &sum))
			return false;
	*total = sum;
	return true;
}

/* The reader side: level `i` of a w0 x h0 texture lies at data[off..off+len). len is what
 * the file claims (or what the format implies); it must equal the block data size. */
static kiln_status set_level(kiln_texture *tex, const span *s, uint32_t i, uint32_t w0,
			     uint32_t h0, uint64_t off, uint64_t len)
{
	kiln_level *lv = &tex->levels[i];
	lv->width = level_dim(w0, i);
	lv->height = level_dim(h0, i);
	lv->size = kiln_texture_level_size(tex, lv->width, lv->height);
	if (lv->size == 0)
		return KILN_ERR_OVERFLOW;
	if (len != lv->size)
		return KILN_ERR_CORRUPT;
	if (!span_has(s, off, len))
		return KILN_ERR_TRUNCATED;
	/* Readers hand out views of the caller's buffer; kiln_level has no const variant. */
	lv->data = (uint8_t *)(s->data + off);
	return KILN_OK;
}

/* A level count read from a header: at least 1, at most a full chain. */
static bool levels_valid(uint32_t n, uint32_t w0, uint32_t h0)
{
	return n >= 1 && n <= KILN_MAX_LEVELS && n <= kiln_mip_count(w0, h0);
}

/* ---- ASTC footprints and Vulkan formats ------------------------------------------------ */

/* The 2D footprints ASTC defines, with the VK_FORMAT_ASTC_*_UNORM_BLOCK value of each
 * (the _SRGB_BLOCK value is one more). */
static const struct astc_footprint {
	uint8_t w, h;
	uint16_t vk_unorm;
} astc_footprints[] = {
	{4, 4, 157},  {5, 4, 159},  {5, 5, 161},   {6, 5, 163},   {6, 6, 165},
	{8, 5, 167},  {8, 6, 169},  {8, 8, 171},   {10, 5, 173},  {10, 6, 175},
	{10, 8, 177}, {10, 10, 179}, {12, 10, 181}, {12, 12, 183},
};
#define NUM_ASTC_FOOTPRINTS (sizeof astc_footprints / sizeof astc_footprints[0])

static const struct astc_footprint *astc_find(uint32_t w, uint32_t h)
{
	for (size_t i = 0; i < NUM_ASTC_FOOTPRINTS; i++)
		if (astc_footprints[i].w == w && astc_footprints[i].h == h)
			return &astc_footprints[i];
	return NULL;
}

#define VK_BC1_RGB_UNORM 131u
#define VK_BC1_RGB_SRGB 132u
#define VK_BC1_RGBA_UNORM 133u
#define VK_BC1_RGBA_SRGB 134u

/* 0 when the texture has no Vulkan format (an ASTC footprint outside the standard set). */
static uint32_t vk_format_of(const kiln_texture *tex)
{
	switch (tex->format) {
	case KILN_TEXFMT_BC1_RGB:
		return tex->srgb ? VK_BC1_RGB_SRGB : VK_BC1_RGB_UNORM;
	case KILN_TEXFMT_BC1_RGBA:
		return tex->srgb ? VK_BC1_RGBA_SRGB : VK_BC1_RGBA_UNORM;
	case KILN_TEXFMT_ASTC: {
		const struct astc_footprint *fp = astc_find(tex->block_w, tex->block_h);
		return fp ? fp->vk_unorm + (tex->srgb ? 1u : 0u) : 0;
	}
	default:
		return 0;
	}
}

/* The inverse: initialises tex for a vkFormat, UNSUPPORTED for any other format. */
static kiln_status texture_from_vk(kiln_texture *tex, uint32_t vk)
{
	switch (vk) {
	case VK_BC1_RGB_UNORM:
	case VK_BC1_RGB_SRGB:
		return kiln_texture_init(tex, KILN_TEXFMT_BC1_RGB, 4, 4, vk == VK_BC1_RGB_SRGB);
	case VK_BC1_RGBA_UNORM:
	case VK_BC1_RGBA_SRGB:
		return kiln_texture_init(tex, KILN_TEXFMT_BC1_RGBA, 4, 4, vk == VK_BC1_RGBA_SRGB);
	}
	for (size_t i = 0; i < NUM_ASTC_FOOTPRINTS; i++) {
		const struct astc_footprint *fp = &astc_footprints[i];
		if (vk == fp->vk_unorm || vk == fp->vk_unorm + 1u)
			return kiln_texture_init(tex, KILN_TEXFMT_ASTC, fp->w, fp->h, vk != fp->vk_unorm);
	}
	return KILN_ERR_UNSUPPORTED;
}

/* ---- DDS -------------------------------------------------------------------------------- */

static const uint8_t dds_magic[4] = {'D', 'D', 'S', ' '};

#define DDS_HEADER_SIZE 124u
#define DDS_PF_SIZE 32u
#define DDS_DX10_SIZE 20u
#define DDS_LEGACY_END (4u + DDS_HEADER_SIZE)       /* 128 */
#define DDS_DX10_END (DDS_LEGACY_END + DDS_DX10_SIZE) /* 148 */

/* File offsets of the DDS_HEADER fields (after the 4-byte magic). */
enum {
	DDS_OFF_SIZE = 4, DDS_OFF_FLAGS = 8, DDS_OFF_HEIGHT = 12, DDS_OFF_WIDTH = 16,
	DDS_OFF_LINEARSIZE = 20, DDS_OFF_DEPTH = 24, DDS_OFF_MIPCOUNT = 28,
	DDS_OFF_PF_SIZE = 76, DDS_OFF_PF_FLAGS = 80, DDS_OFF_PF_FOURCC = 84,
	DDS_OFF_CAPS = 108, DDS_OFF_CAPS2 = 112,
	DDS_OFF_DXGI = 128, DDS_OFF_DIMENSION = 132, DDS_OFF_MISC = 136, DDS_OFF_ARRAY = 140,
	DDS_OFF_MISC2 = 144,
};

#define DDSD_CAPS 0x1u
#define DDSD_HEIGHT 0x2u
#define DDSD_WIDTH 0x4u
#define DDSD_PIXELFORMAT 0x1000u
#define DDSD_MIPMAPCOUNT 0x20000u
#define DDSD_LINEARSIZE 0x80000u
#define DDSD_DEPTH 0x800000u
#define DDSCAPS_COMPLEX 0x8u
#define DDSCAPS_TEXTURE 0x1000u
#define DDSCAPS_MIPMAP 0x400000u
#define DDSCAPS2_CUBEMAP 0x200u
#define DDSCAPS2_VOLUME 0x200000u
#define DDPF_ALPHAPIXELS 0x1u
#define DDPF_FOURCC 0x4u
#define FOURCC(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define FOURCC_DXT1 FOURCC('D', 'X', 'T', '1')
#define FOURCC_DX10 FOURCC('D', 'X', '1', '0')
#define DXGI_BC1_UNORM 71u
#define DXGI_BC1_UNORM_SRGB 72u
#define DDS_DIMENSION_TEXTURE2D 3u
#define DDS_MISC_TEXTURECUBE 0x4u
#define DDS_ALPHA_MODE_MASK 0x7u
#define DDS_ALPHA_MODE_STRAIGHT 1u
#define DDS_ALPHA_MODE_PREMULTIPLIED 2u
#define DDS_ALPHA_MODE_OPAQUE 3u

kiln_status kiln_dds_write(const kiln_texture *tex, kiln_buf *out)
{
	if (!out)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = check_texture(tex);
	if (st != KILN_OK)
		return st;
	/* DXGI has ASTC formats, but no DDS reader kiln's users have accepts them. */
	if (tex->format == KILN_TEXFMT_ASTC)
		return KILN_ERR_UNSUPPORTED;
	if (tex->levels[0].size > UINT32_MAX)
		return KILN_ERR_TOO_LARGE;  /* dwPitchOrLinearSize is 32 bits */

	/* The legacy header cannot say sRGB: sRGB needs the DX10 extension. */
	bool dx10 = tex->srgb;
	bool alpha = tex->format == KILN_TEXFMT_BC1_RGBA;
	size_t header = dx10 ? DDS_DX10_END : DDS_LEGACY_END;
	size_t data_bytes, total;
	if (!levels_total(tex, &data_bytes) || !kiln_size_add(header, data_bytes, &total))
		return KILN_ERR_OVERFLOW;
	uint8_t *p;
	st = kiln_buf_extend(out, total, &p);
	if (st != KILN_OK)
		return st;

	uint32_t flags = DDSD_CAPS | DDSD_HEIGHT | DDSD_WIDTH | DDSD_PIXELFORMAT | DDSD_LINEARSIZE;
	uint32_t caps = DDSCAPS_TEXTURE;
	if (tex->num_levels > 1) {
		flags |= DDSD_MIPMAPCOUNT;
		caps |= DDSCAPS_COMPLEX | DDSCAPS_MIPMAP;
	}
	memcpy(p, dds_magic, sizeof dds_magic);
	put_u32(p + DDS_OFF_SIZE, DDS_HEADER_SIZE);
	put_u32(p + DDS_OFF_FLAGS, flags);
	put_u32(p + DDS_OFF_HEIGHT, tex->levels[0].height);
	put_u32(p + DDS_OFF_WIDTH, tex->levels[0].width);
	put_u32(p + DDS_OFF_LINEARSIZE, (uint32_t)tex->levels[0].size);
	put_u32(p + DDS_OFF_MIPCOUNT, tex->num_levels);
	put_u32(p + DDS_OFF_PF_SIZE, DDS_PF_SIZE);
	/* The only way the legacy header tells BC1 with alpha from opaque BC1. */
	put_u32(p + DDS_OFF_PF_FLAGS, DDPF_FOURCC | (alpha ? DDPF_ALPHAPIXELS : 0));
	put_u32(p + DDS_OFF_PF_FOURCC, dx10 ? FOURCC_DX10 : FOURCC_DXT1);
	put_u32(p + DDS_OFF_CAPS, caps);
	if (dx10) {
		put_u32(p + DDS_OFF_DXGI, DXGI_BC1_UNORM_SRGB);
		put_u32(p + DDS_OFF_DIMENSION, DDS_DIMENSION_TEXTURE2D);
		put_u32(p + DDS_OFF_ARRAY, 1);
		put_u32(p + DDS_OFF_MISC2, alpha ? DDS_ALPHA_MODE_STRAIGHT : DDS_ALPHA_MODE_OPAQUE);
	}
	p += header;
	for (uint32_t i = 0; i < tex->num_levels; i++) {
		memcpy(p, tex->levels[i].data, tex->levels[i].size);
		p += tex->levels[i].size;
	}
	return KILN_OK;
}

static kiln_status dds_read(span *s, kiln_texture *out)
{
	kiln_status st = check_magic(s, dds_magic, sizeof dds_magic);
	if (st != KILN_OK)
		return st;
	if (!span_has(s, 0, DDS_LEGACY_END))
		return KILN_ERR_TRUNCATED;
	uint32_t hsize = rd_u32(s, DDS_OFF_SIZE);
	uint32_t flags = rd_u32(s, DDS_OFF_FLAGS);
	uint32_t height = rd_u32(s, DDS_OFF_HEIGHT);
	uint32_t width = rd_u32(s, DDS_OFF_WIDTH);
	uint32_t depth = rd_u32(s, DDS_OFF_DEPTH);
	uint32_t mips = rd_u32(s, DDS_OFF_MIPCOUNT);
	uint32_t pf_size = rd_u32(s, DDS_OFF_PF_SIZE);
	uint32_t pf_flags = rd_u32(s, DDS_OFF_PF_FLAGS);
	uint32_t fourcc = rd_u32(s, DDS_OFF_PF_FOURCC);
	uint32_t caps2 = rd_u32(s, DDS_OFF_CAPS2);
	if (hsize != DDS_HEADER_SIZE || pf_size != DDS_PF_SIZE || width == 0 || height == 0)
		return KILN_ERR_CORRUPT;
	if ((caps2 & (DDSCAPS2_CUBEMAP | DDSCAPS2_VOLUME)) || ((flags & DDSD_DEPTH) && depth > 1))
		return KILN_ERR_UNSUPPORTED;
	if (!(pf_flags & DDPF_FOURCC))
		return KILN_ERR_UNSUPPORTED;  /* uncompressed pixels */

	bool alpha = pf_flags & DDPF_ALPHAPIXELS;
	bool srgb = false;
	size_t data_off = DDS_LEGACY_END;
	if (fourcc == FOURCC_DX10) {
		if (!span_has(s, 0, DDS_DX10_END))
			return KILN_ERR_TRUNCATED;
		uint32_t dxgi = rd_u32(s, DDS_OFF_DXGI);
		uint32_t dim = rd_u32(s, DDS_OFF_DIMENSION);
		uint32_t misc = rd_u32(s, DDS_OFF_MISC);
		uint32_t array = rd_u32(s, DDS_OFF_ARRAY);
		uint32_t mode = rd_u32(s, DDS_OFF_MISC2) & DDS_ALPHA_MODE_MASK;
		if (dxgi != DXGI_BC1_UNORM && dxgi != DXGI_BC1_UNORM_SRGB)
			return KILN_ERR_UNSUPPORTED;
		if (array == 0)
			return KILN_ERR_CORRUPT;
		if (dim != DDS_DIMENSION_TEXTURE2D || (misc & DDS_MISC_TEXTURECUBE) || array != 1)
			return KILN_ERR_UNSUPPORTED;
		srgb = dxgi == DXGI_BC1_UNORM_SRGB;
		alpha = alpha || mode == DDS_ALPHA_MODE_STRAIGHT || mode == DDS_ALPHA_MODE_PREMULTIPLIED;
		data_off = DDS_DX10_END;
	} else if (fourcc != FOURCC_DXT1) {
		return KILN_ERR_UNSUPPORTED;
	}

	/* Some writers leave the MIPMAPCOUNT flag out; the count itself decides, 0 meaning 1. */
	uint32_t levels = mips ? mips : 1;
	if (!levels_valid(levels, width, height))
		return KILN_ERR_CORRUPT;
	st = kiln_texture_init(out, alpha ? KILN_TEXFMT_BC1_RGBA : KILN_TEXFMT_BC1_RGB, 4, 4, srgb);
	if (st != KILN_OK)
		return st;
	out->num_levels = levels;
	uint64_t off = data_off;
	for (uint32_t i = 0; i < levels; i++) {
		size_t len = kiln_texture_level_size(out, level_dim(width, i), level_dim(height, i));
		st = set_level(out, s, i, width, height, off, len);
		if (st != KILN_OK)
			return st;
		off += len;  /* <= s->size: set_level checked it */
	}
	return s->short_read ? KILN_ERR_TRUNCATED : KILN_OK;
}

/* ---- KTX 2.0 ----------------------------------------------------------------------------- */

static const uint8_t ktx2_magic[12] = {0xAB, 'K', 'T', 'X', ' ', '2', '0', 0xBB, '\r', '\n', 0x1A, '\n'};

/* File offsets of the header and index fields. */
enum {
	KTX_OFF_VKFORMAT = 12, KTX_OFF_TYPESIZE = 16, KTX_OFF_WIDTH = 20, KTX_OFF_HEIGHT = 24,
	KTX_OFF_DEPTH = 28, KTX_OFF_LAYERS = 32, KTX_OFF_FACES = 36, KTX_OFF_LEVELS = 40,
	KTX_OFF_SCHEME = 44, KTX_OFF_DFD_OFF = 48, KTX_OFF_DFD_LEN = 52, KTX_OFF_KVD_OFF = 56,
	KTX_OFF_KVD_LEN = 60, KTX_OFF_SGD_OFF = 64, KTX_OFF_SGD_LEN = 72,
	KTX_HEADER_END = 80, KTX_LEVEL_ENTRY = 24,
};

/* The Basic data format descriptor block (KDFS 1.3, one sample): 24 bytes of block
 * header plus 16 per sample, behind the 4-byte dfdTotalSize. */
#define DFD_BLOCK_SIZE (24u + 16u)
#define DFD_TOTAL (4u + DFD_BLOCK_SIZE)
#define KHR_DF_VERSION 2u           /* KHR_DF_VERSIONNUMBER_1_3 */
#define KHR_DF_MODEL_BC1A 128u
#define KHR_DF_MODEL_ASTC 162u
#define KHR_DF_PRIMARIES_BT709 1u
#define KHR_DF_TRANSFER_LINEAR 1u
#define KHR_DF_TRANSFER_SRGB 2u
#define KHR_DF_CHANNEL_BC1A_COLOR 0u
#define KHR_DF_CHANNEL_BC1A_ALPHAPRESENT 1u
#define KHR_DF_CHANNEL_ASTC_DATA 0u

/* The one key/value pair kiln writes; the spec wants the value NUL-terminated and counted. */
static const char ktx_writer_key[] = "KTXwriter";
static const char ktx_writer_value[] = "kiln " KILN_VERSION;
#define KTX_KV_LEN (sizeof ktx_writer_key + sizeof ktx_writer_value)

/* DFD words 2-4 and the sample's first word for a texture: BC1 follows the spec's BC1A
 * examples (one 64-bit sample, channel COLOR for opaque BC1, ALPHAPRESENT for BC1 with
 * punch-through alpha; no LINEAR qualifier, since that sample carries colour as well),
 * ASTC one 128-bit DATA sample. */
struct dfd_fields {
	uint32_t model_word;  /* colorModel | primaries << 8 | transfer << 16 | flags << 24 */
	uint32_t block_word;  /* texelBlockDimension0..3 */
	uint32_t bytes_plane0;
	uint32_t sample_word; /* bitOffset | bitLength << 16 | channelType << 24 */
};

static struct dfd_fields dfd_for(const kiln_texture *tex)
{
	bool astc = tex->format == KILN_TEXFMT_ASTC;
	uint32_t model = astc ? KHR_DF_MODEL_ASTC : KHR_DF_MODEL_BC1A;
	uint32_t transfer = tex->srgb ? KHR_DF_TRANSFER_SRGB : KHR_DF_TRANSFER_LINEAR;
	uint32_t channel = astc ? KHR_DF_CHANNEL_ASTC_DATA
			   : tex->format == KILN_TEXFMT_BC1_RGBA ? KHR_DF_CHANNEL_BC1A_ALPHAPRESENT
								 : KHR_DF_CHANNEL_BC1A_COLOR;
	struct dfd_fields f = {
		.model_word = model | KHR_DF_PRIMARIES_BT709 << 8 | transfer << 16,
		.block_word = (tex->block_w - 1) | (tex->block_h - 1) << 8,
		.bytes_plane0 = tex->block_bytes,
		.sample_word = (tex->block_bytes * 8 - 1) << 16 | channel << 24,
	};
	return f;
}

/* lcm(block bytes, 4): the alignment of every level's data. */
static size_t ktx_level_align(const kiln_texture *tex)
{
	size_t b = tex->block_bytes;
	return b % 4 == 0 ? b : b % 2 == 0 ? 2 * b : 4 * b;
}

kiln_status kiln_ktx2_write(const kiln_texture *tex, kiln_buf *out)
{
	if (!out)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = check_texture(tex);
	if (st != KILN_OK)
		return st;
	uint32_t vk = vk_format_of(tex);
	if (vk == 0)
		return KILN_ERR_UNSUPPORTED;

	uint32_t n = tex->num_levels;
	size_t dfd_off = KTX_HEADER_END + (size_t)KTX_LEVEL_ENTRY * n;
	size_t kvd_off = dfd_off + DFD_TOTAL;
	size_t kvd_len = 4 + align_up(KTX_KV_LEN, 4);
	size_t align = ktx_level_align(tex);
	/* Level data goes smallest level first (streaming readers show something early);
	 * the index still lists level 0 first. */
	size_t level_off[KILN_MAX_LEVELS];
	size_t pos = kvd_off + kvd_len;
	for (uint32_t i = n; i-- > 0;) {
		pos = align_up(pos, align);
		level_off[i] = pos;
		if (!kiln_size_add(pos, tex->levels[i].size, &pos))
			return KILN_ERR_OVERFLOW;
	}
	uint8_t *p;
	st = kiln_buf_extend(out, pos, &p);  /* zero-filled: padding and reserved fields */
	if (st != KILN_OK)
		return st;

	memcpy(p, ktx2_magic, sizeof ktx2_magic);
	put_u32(p + KTX_OFF_VKFORMAT, vk);
	put_u32(p + KTX_OFF_TYPESIZE, 1);  /* block formats */
	put_u32(p + KTX_OFF_WIDTH, tex->levels[0].width);
	put_u32(p + KTX_OFF_HEIGHT, tex->levels[0].height);
	/* pixelDepth 0, layerCount 0: a plain 2D texture */
	put_u32(p + KTX_OFF_FACES, 1);
	put_u32(p + KTX_OFF_LEVELS, n);
	/* supercompressionScheme 0 */
	put_u32(p + KTX_OFF_DFD_OFF, (uint32_t)dfd_off);
	put_u32(p + KTX_OFF_DFD_LEN, DFD_TOTAL);
	put_u32(p + KTX_OFF_KVD_OFF, (uint32_t)kvd_off);
	put_u32(p + KTX_OFF_KVD_LEN, (uint32_t)kvd_len);
	/* sgdByteOffset, sgdByteLength 0: no global data */
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = p + KTX_HEADER_END + (size_t)KTX_LEVEL_ENTRY * i;
		put_u64(e, level_off[i]);
		put_u64(e + 8, tex->levels[i].size);
		put_u64(e + 16, tex->levels[i].size);  /* no supercompression */
		memcpy(p + level_off[i], tex->levels[i].data, tex->levels[i].size);
	}

	struct dfd_fields f = dfd_for(tex);
	uint8_t *d = p + dfd_off;
	put_u32(d, DFD_TOTAL);
	put_u32(d + 4, 0);  /* vendorId KHRONOS, descriptorType BASICFORMAT */
	put_u32(d + 8, KHR_DF_VERSION | DFD_BLOCK_SIZE << 16);
	put_u32(d + 12, f.model_word);
	put_u32(d + 16, f.block_word);
	put_u32(d + 20, f.bytes_plane0);
	put_u32(d + 24, 0);  /* bytesPlane4..7 */
	put_u32(d + 28, f.sample_word);
	put_u32(d + 32, 0);           /* sample position 0,0 */
	put_u32(d + 36, 0);           /* sampleLower */
	put_u32(d + 40, UINT32_MAX);  /* sampleUpper */

	uint8_t *kv = p + kvd_off;
	put_u32(kv, (uint32_t)KTX_KV_LEN);
	memcpy(kv + 4, ktx_writer_key, sizeof ktx_writer_key);
	memcpy(kv + 4 + sizeof ktx_writer_key, ktx_writer_value, sizeof ktx_writer_value);
	return KILN_OK;
}

/* The DFD must describe the format vkFormat names (the KTX spec requires it); only the
 * colour primaries and flags are free. */
static kiln_status ktx2_check_dfd(span *s, uint32_t off, uint32_t len, const kiln_texture *tex)
{
	if (!span_has(s, off, len))
		return KILN_ERR_TRUNCATED;
	if (len < DFD_TOTAL)
		return KILN_ERR_CORRUPT;
	struct dfd_fields f = dfd_for(tex);
	uint32_t total = rd_u32(s, off);
	uint32_t vendor_type = rd_u32(s, off + 4);
	uint32_t version_size = rd_u32(s, off + 8);
	uint32_t model_word = rd_u32(s, off + 12);
	uint32_t block_word = rd_u32(s, off + 16);
	uint32_t bytes_plane0 = rd_u32(s, off + 20);
	uint32_t sample_word = rd_u32(s, off + 28);
	uint32_t block_size = version_size >> 16;
	if (total != len || vendor_type != 0 || (version_size & 0xffff) != KHR_DF_VERSION ||
	    block_size < DFD_BLOCK_SIZE || block_size > len - 4)
		return KILN_ERR_CORRUPT;
	/* colorModel and transferFunction must match; primaries and flags are free. */
	if ((model_word & 0x00ff00ffu) != (f.model_word & 0x00ff00ffu) ||
	    block_word != f.block_word || bytes_plane0 != f.bytes_plane0)
		return KILN_ERR_CORRUPT;
	/* Sample: bit offset, bit length, channel id; qualifiers are free. */
	if ((sample_word & 0x0fffffffu) != f.sample_word)
		return KILN_ERR_CORRUPT;
	return KILN_OK;
}

static kiln_status ktx2_read(span *s, kiln_texture *out)
{
	kiln_status st = check_magic(s, ktx2_magic, sizeof ktx2_magic);
	if (st != KILN_OK)
		return st;
	if (!span_has(s, 0, KTX_HEADER_END))
		return KILN_ERR_TRUNCATED;
	uint32_t vk = rd_u32(s, KTX_OFF_VKFORMAT);
	uint32_t type_size = rd_u32(s, KTX_OFF_TYPESIZE);
	uint32_t width = rd_u32(s, KTX_OFF_WIDTH);
	uint32_t height = rd_u32(s, KTX_OFF_HEIGHT);
	uint32_t depth = rd_u32(s, KTX_OFF_DEPTH);
	uint32_t layers = rd_u32(s, KTX_OFF_LAYERS);
	uint32_t faces = rd_u32(s, KTX_OFF_FACES);
	uint32_t levels = rd_u32(s, KTX_OFF_LEVELS);
	uint32_t scheme = rd_u32(s, KTX_OFF_SCHEME);
	uint32_t dfd_off = rd_u32(s, KTX_OFF_DFD_OFF);
	uint32_t dfd_len = rd_u32(s, KTX_OFF_DFD_LEN);
	uint32_t kvd_off = rd_u32(s, KTX_OFF_KVD_OFF);
	uint32_t kvd_len = rd_u32(s, KTX_OFF_KVD_LEN);
	uint64_t sgd_len = rd_u64(s, KTX_OFF_SGD_LEN);

	if (scheme != 0)
		return KILN_ERR_UNSUPPORTED;  /* BasisLZ, zstd, zlib */
	st = texture_from_vk(out, vk);
	if (st != KILN_OK)
		return st;
	/* Block formats: typeSize 1, a height, and a level count (0 = "generate" is not
	 * allowed for them). */
	if (type_size != 1 || width == 0 || height == 0 || sgd_len != 0 ||
	    !levels_valid(levels, width, height))
		return KILN_ERR_CORRUPT;
	if (depth != 0 || layers > 1 || faces == 6)
		return KILN_ERR_UNSUPPORTED;  /* 3D, arrays, cube maps */
	if (faces != 1)
		return KILN_ERR_CORRUPT;

	uint64_t index_end = KTX_HEADER_END + (uint64_t)KTX_LEVEL_ENTRY * levels;
	if (!span_has(s, 0, index_end))
		return KILN_ERR_TRUNCATED;
	if (dfd_off < index_end)
		return KILN_ERR_CORRUPT;
	st = ktx2_check_dfd(s, dfd_off, dfd_len, out);
	if (st != KILN_OK)
		return st;
	if (kvd_len && !span_has(s, kvd_off, kvd_len))
		return KILN_ERR_TRUNCATED;

	size_t align = ktx_level_align(out);
	out->num_levels = levels;
	for (uint32_t i = 0; i < levels; i++) {
		uint64_t e = KTX_HEADER_END + (uint64_t)KTX_LEVEL_ENTRY * i;
		uint64_t off = rd_u64(s, e);
		uint64_t len = rd_u64(s, e + 8);
		uint64_t ulen = rd_u64(s, e + 16);
		if (ulen != len || off % align != 0 || off < index_end)
			return KILN_ERR_CORRUPT;
		st = set_level(out, s, i, width, height, off, len);
		if (st != KILN_OK)
			return st;
	}
	return s->short_read ? KILN_ERR_TRUNCATED : KILN_OK;
}

/* ---- .astc ------------------------------------------------------------------------------ */

static const uint8_t astc_magic[4] = {0x13, 0xAB, 0xA1, 0x5C};  /* 0x5CA1AB13 LE */
#define ASTC_HEADER_SIZE 16u
#define ASTC_MAX_DIM 0xFFFFFFu  /* 24-bit fields */

kiln_status kiln_astc_file_write(const kiln_texture *tex, kiln_buf *out)
{
	if (!out)
		return KILN_ERR_INVALID_ARG;
	kiln_status st = check_texture(tex);
	if (st != KILN_OK)
		return st;
	if (tex->format != KILN_TEXFMT_ASTC || !astc_find(tex->block_w, tex->block_h))
		return KILN_ERR_UNSUPPORTED;
	const kiln_level *lv = &tex->levels[0];
	if (lv->width > ASTC_MAX_DIM || lv->height > ASTC_MAX_DIM)
		return KILN_ERR_TOO_LARGE;
	size_t total;
	if (!kiln_size_add(ASTC_HEADER_SIZE, lv->size, &total))
		return KILN_ERR_OVERFLOW;
	uint8_t *p;
	st = kiln_buf_extend(out, total, &p);
	if (st != KILN_OK)
		return st;
	/* The format has no colour space and no mip levels: level 0 only, sRGB is lost. */
	memcpy(p, astc_magic, sizeof astc_magic);
	p[4] = (uint8_t)tex->block_w;
	p[5] = (uint8_t)tex->block_h;
	p[6] = 1;
	put_u24(p + 7, lv->width);
	put_u24(p + 10, lv->height);
	put_u24(p + 13, 1);
	memcpy(p + ASTC_HEADER_SIZE, lv->data, lv->size);
	return KILN_OK;
}

static kiln_status astc_read(span *s, kiln_texture *out)
{
	kiln_status st = check_magic(s, astc_magic, sizeof astc_magic);
	if (st != KILN_OK)
		return st;
	if (!span_has(s, 0, ASTC_HEADER_SIZE))
		return KILN_ERR_TRUNCATED;
	uint8_t bw = rd_u8(s, 4), bh = rd_u8(s, 5), bd = rd_u8(s, 6);
	uint32_t width = rd_u24(s, 7), height = rd_u24(s, 10), depth = rd_u24(s, 13);
	if (width == 0 || height == 0 || depth == 0 || bw == 0 || bh == 0 || bd == 0)
		return KILN_ERR_CORRUPT;
	if (bd != 1 || depth != 1 || !astc_find(bw, bh))
		return KILN_ERR_UNSUPPORTED;  /* 3D blocks or images, nonstandard footprints */
	st = kiln_texture_init(out, KILN_TEXFMT_ASTC, bw, bh, false);
	if (st != KILN_OK)
		return st;
	out->num_levels = 1;
	st = set_level(out, s, 0, width, height, ASTC_HEADER_SIZE,
		       kiln_texture_level_size(out, width, height));
	if (st != KILN_OK)
		return st;
	return s->short_read ? KILN_ERR_TRUNCATED : KILN_OK;
}

/* ---- public readers and dispatch --------------------------------------------------------- */

typedef kiln_status (*reader_fn)(span *s, kiln_texture *out);

/* Runs a reader; on failure *out is left empty rather than half filled. */
static kiln_status run_reader(reader_fn fn, const uint8_t *data, size_t size, kiln_texture *out)
{
	if (!out || (!data && size))
		return KILN_ERR_INVALID_ARG;
	memset(out, 0, sizeof *out);
	span s = {.data = data, .size = size};
	kiln_status st = fn(&s, out);
	if (st != KILN_OK)
		memset(out, 0, sizeof *out);
	return st;
}

kiln_status kiln_dds_read(const uint8_t *data, size_t size, kiln_texture *out)
{
	return run_reader(dds_read, data, size, out);
}

kiln_status kiln_ktx2_read(const uint8_t *data, size_t size, kiln_texture *out)
{
	return run_reader(ktx2_read, data, size, out);
}

kiln_status kiln_astc_file_read(const uint8_t *data, size_t size, kiln_texture *out)
{
	return run_reader(astc_read, data, size, out);
}

static const char *const container_names[] = {
	[KILN_CONTAINER_DDS] = "dds",
	[KILN_CONTAINER_KTX2] = "ktx2",
	[KILN_CONTAINER_ASTC] = "astc",
};
#define NUM_CONTAINERS (sizeof container_names / sizeof container_names[0])

int kiln_container_parse(const char *name)
{
	for (size_t i = 0; name && i < NUM_CONTAINERS; i++)
		if (strcmp(name, container_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *kiln_container_ext(kiln_container c)
{
	return (unsigned)c < NUM_CONTAINERS ? container_names[c] : "";
}

int kiln_container_detect(const uint8_t *data, size_t size)
{
	if (!data)
		return -1;
	if (size >= sizeof dds_magic && memcmp(data, dds_magic, sizeof dds_magic) == 0)
		return KILN_CONTAINER_DDS;
	if (size >= sizeof ktx2_magic && memcmp(data, ktx2_magic, sizeof ktx2_magic) == 0)
		return KILN_CONTAINER_KTX2;
	if (size >= sizeof astc_magic && memcmp(data, astc_magic, sizeof astc_magic) == 0)
		return KILN_CONTAINER_ASTC;
	return -1;
}

kiln_status kiln_container_write(kiln_container c, const kiln_texture *tex, kiln_buf *out)
{
	switch (c) {
	case KILN_CONTAINER_DDS: return kiln_dds_write(tex, out);
	case KILN_CONTAINER_KTX2: return kiln_ktx2_write(tex, out);
	case KILN_CONTAINER_ASTC: return kiln_astc_file_write(tex, out);
	}
	return KILN_ERR_INVALID_ARG;
}

kiln_status kiln_container_read(const uint8_t *data, size_t size, kiln_texture *out)
{
	switch (kiln_container_detect(data, size)) {
	case KILN_CONTAINER_DDS: return kiln_dds_read(data, size, out);
	case KILN_CONTAINER_KTX2: return kiln_ktx2_read(data, size, out);
	case KILN_CONTAINER_ASTC: return kiln_astc_file_read(data, size, out);
	}
	if (out)
		memset(out, 0, sizeof *out);
	return size == 0 ? KILN_ERR_TRUNCATED : KILN_ERR_UNSUPPORTED;
}
