/* kiln decode: any texture kiln writes (DDS, KTX 2.0, .astc) back to a PNG, for inspection
 * and tests. Decoding runs on the CPU backend; --device is accepted for symmetry with encode. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "common/buf.h"
#include "common/container.h"
#include "kernels/png/png_file.h"
#include "kernels/astc/astc.h"
#include "kernels/bc1/bc1.h"
#include "kernels/gpu.h"

static const char usage_text[] =
	"usage: kiln decode [OPTIONS] IN -o OUT.png\n"
	"\n"
	"Decode a texture written by kiln (DDS, KTX 2.0, .astc; BC1, ASTC) to a PNG.\n"
	"\n"
	"options:\n"
	"  --level N                     mip level to decode (default 0, the full size)\n"
	"  --srgb                        the data is sRGB (for .astc files, which do not say;\n"
	"                                KTX 2.0 and DDS files carry their colour space)\n"
	"  --device auto|cpu|gpu|gpu:N   accepted; decoding runs on the CPU\n"
	"  -o, --output OUT.png          output file (required)\n"
	"  -h, --help                    this text\n"
	"\n"
	"exit status: 0 written, 2 usage error, 3 the input could not be decoded or written\n";

enum { OPT_LEVEL = 256, OPT_DEVICE, OPT_SRGB };

static kiln_status decode_level(const kiln_texture *tex, uint32_t level, kiln_image *img)
{
	const kiln_level *lv = &tex->levels[level];
	kiln_status st = kiln_image_alloc(img, lv->width, lv->height, NULL);
	if (st != KILN_OK)
		return st;
	img->srgb = tex->srgb;
	switch (tex->format) {
	case KILN_TEXFMT_BC1_RGB:
	case KILN_TEXFMT_BC1_RGBA:
		img->has_alpha = tex->format == KILN_TEXFMT_BC1_RGBA;
		st = kiln_bc1_decode(lv->data, lv->size, lv->width, lv->height, img->has_alpha,
				     img->pixels, img->stride);
		break;
	case KILN_TEXFMT_ASTC:
		/* sRGB data decodes as astcenc -ds does: the 8-bit values stay sRGB-encoded */
		st = kiln_astc_decode(lv->data, lv->size, lv->width, lv->height, tex->block_w, tex->block_h,
				      tex->srgb, img->pixels, img->stride);
		/* ASTC always carries alpha: the PNG gets it when a texel is not opaque */
		for (uint32_t y = 0; y < lv->height && st == KILN_OK && !img->has_alpha; y++)
			for (uint32_t x = 0; x < lv->width && !img->has_alpha; x++)
				img->has_alpha = img->pixels[(size_t)y * img->stride + 4 * (size_t)x + 3] != 255;
		break;
	default:
		st = KILN_ERR_UNSUPPORTED;
	}
	if (st != KILN_OK)
		kiln_image_free(img);
	return st;
}

int cli_decode(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"level", required_argument, NULL, OPT_LEVEL},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"srgb", no_argument, NULL, OPT_SRGB},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	const char *output = NULL;
	long level = 0;
	bool srgb = false;
	kiln_device dev;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LEVEL:
			if (!cli_parse_long("decode", "--level", optarg, 0, KILN_MAX_LEVELS - 1, &level))
				return CLI_EXIT_USAGE;
			break;
		case OPT_DEVICE:
			if (!cli_parse_device("decode", optarg, &dev))
				return CLI_EXIT_USAGE;
			break;
		case OPT_SRGB: srgb = true; break;
		case 'o': output = optarg; break;
		case 'h': fputs(usage_text, stdout); return CLI_EXIT_OK;
		default:
			fprintf(stderr, "kiln decode: see 'kiln decode --help'\n");
			return CLI_EXIT_USAGE;
		}
	}
	if (argc - optind != 1 || !output) {
		fprintf(stderr, "kiln decode: %s (see 'kiln decode --help')\n",
			argc - optind != 1 ? "give exactly one input" : "no output: give -o OUT.png");
		return CLI_EXIT_USAGE;
	}
	const char *input = argv[optind];
	int rc = CLI_EXIT_FATAL;
	kiln_buf file;
	kiln_texture tex;
	kiln_image img = {0};
	kiln_buf_init(&file, (size_t)1 << 32);
	kiln_status st = kiln_buf_read_file(&file, input);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln decode: %s: %s\n", input, kiln_strerror(st));
		goto fail;
	}
	st = kiln_container_read(file.data, file.len, &tex);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln decode: %s: not a texture kiln can read: %s\n", input, kiln_strerror(st));
		goto fail;
	}
	if (srgb && kiln_container_detect(file.data, file.len) == KILN_CONTAINER_ASTC)
		tex.srgb = true; /* .astc has no colour space: the caller knows it */
	if ((uint32_t)level >= tex.num_levels) {
		fprintf(stderr, "kiln decode: %s has %u levels; --level %ld does not exist\n", input,
			tex.num_levels, level);
		goto fail;
	}
	st = decode_level(&tex, (uint32_t)level, &img);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln decode: %s: %s\n", input, kiln_strerror(st));
		goto fail;
	}
	st = kiln_png_write_path(output, &img, KILN_QUALITY_MEDIUM);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln decode: writing %s: %s\n", output, kiln_strerror(st));
		goto fail;
	}
	rc = CLI_EXIT_OK;
fail:
	kiln_image_free(&img);
	kiln_buf_free(&file);
	return rc;
}
