/* kiln encode: PNG files to BC1 textures in DDS or KTX 2.0, or ASTC textures in .astc or
 * KTX 2.0, in batches, on the CPU or a GPU; or PNG files re-encoded as PNG by kiln's own
 * codec (--format png: read on the CPU, kernels/png/png_transcode.h, and encoded in batches
 * on the CPU or a GPU, kernels/png/png_runner.h).
 * A bad input is reported and skipped; the others are still written (exit code 1). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "common/alloc.h"
#include "common/container.h"
#include "common/fileio.h"
#include "common/log.h"
#include "kernels/png/png_file.h"
#include "kernels/png/png_runner.h"
#include "kernels/png/png_transcode.h"
#include "kernels/astc/astc.h"
#include "kernels/texenc.h"

#define MAX_PATH_LEN 4096
#define PNG_INPUT_MAX ((size_t)1 << 30) /* as kiln_png_read_path */

static const char usage_text[] =
	"usage: kiln encode [OPTIONS] INPUT.png... -o OUT\n"
	"\n"
	"Encode PNG images to BC1 (DXT1) or ASTC textures, or re-encode them as PNG with kiln's own\n"
	"codec. OUT is a file when there is one input (and OUT is not an existing directory or does\n"
	"not end in '/'), otherwise a directory: each output keeps its input's base name with the\n"
	"container's extension (a.png -> OUT/a.dds).\n"
	"\n"
	"options:\n"
	"  --format bc1|astc|png         texture format (default bc1); png: a PNG file (.png) with\n"
	"                                the input's colour type, bit depth and colour/text chunks,\n"
	"                                not interlaced, in kiln's parallel-decodable layout\n"
	"  --png-rgba8                   with --format png: 8-bit RGBA (RGB when opaque) instead\n"
	"  --block WxH                   ASTC footprint: 4x4 5x4 5x5 6x5 6x6 8x5 8x6 8x8 10x5\n"
	"                                10x6 10x8 10x10 12x10 12x12 (default 4x4)\n"
	"  --quality fast|medium|high    encoder effort (default high)\n"
	"  --container dds|ktx2|astc     file container (default dds for bc1, astc for astc;\n"
	"                                .astc holds one level: --mipmaps needs ktx2)\n"
	"  --srgb | --linear             colour space (default: as the PNG says; sRGB unless it is marked linear)\n"
	"  --mipmaps                     write the full mip chain down to 1x1\n"
	"  --alpha-cutoff N              alpha below N becomes transparent (BC1 punch-through),\n"
	"                                0 keeps everything opaque (default 128)\n"
	"  --device auto|cpu|gpu|gpu:N   where to encode (default auto: the GPU when there is one)\n"
	CLI_PNG_DECODER_HELP
	"  --batch N                     images per batch, 1..1024 (default 32)\n"
	"  --threads N                   CPU threads (default: all cores)\n"
	"  --max-pixels N                refuse inputs with more pixels (default 268435456)\n"
	"  --json                        print a JSON report on stdout\n"
	"  -q, --quiet                   no progress bar\n"
	"  -o, --output OUT              output file or directory (required)\n"
	"  -h, --help                    this text\n"
	"\n"
	"exit status: 0 all written, 1 some inputs failed, 2 usage error, 3 could not run\n"
	"\n"
	"examples:\n"
	"  kiln encode --quality high --mipmaps photo.png -o photo.dds\n"
	"  kiln encode --container ktx2 --srgb textures/*.png -o out/\n"
	"  kiln encode --format astc --block 6x6 --quality medium photo.png -o photo.astc\n"
	"  kiln encode --format png --quality high scans/*.png -o recompressed/\n";

typedef struct encode_args {
	kiln_texenc_opts opts;
	kiln_container container;
	bool container_set, block_set;
	bool png;           /* --format png: PNG sources and a PNG runner, no texture encoder */
	bool png_rgba8;
	bool alpha_set, colorspace_set;
	kiln_device device;
	long batch;
	long threads;
	kiln_image_limits limits;
	kiln_png_decoder png_decoder;
	bool json;
	bool quiet;
	const char *output;
	char **inputs;
	size_t ninputs;
} encode_args;

/* The outcome of one input, for the report. */
typedef struct item_result {
	const char *input;
	char output[MAX_PATH_LEN];
	kiln_status status;
	char detail[256];
	uint32_t width, height, levels;
	size_t bytes;
} item_result;

enum { OPT_FORMAT = 256, OPT_QUALITY, OPT_CONTAINER, OPT_SRGB, OPT_LINEAR, OPT_MIPMAPS,
       OPT_ALPHA, OPT_DEVICE, OPT_BATCH, OPT_THREADS, OPT_MAXPIX, OPT_JSON, OPT_BLOCK, OPT_PNG_DECODER,
       OPT_PNG_RGBA8 };

/* "WxH", one of the ASTC footprints. */
static bool parse_block(const char *arg, uint32_t *w, uint32_t *h)
{
	unsigned bw, bh;
	char end;
	if (sscanf(arg, "%2ux%2u%c", &bw, &bh, &end) != 2 || !kiln_astc_footprint_valid(bw, bh))
		return false;
	*w = bw;
	*h = bh;
	return true;
}

/* --format png takes none of the texture options. */
static int check_png_combination(const encode_args *a)
{
	const char *bad = NULL;
	if (a->block_set)
		bad = "--block";
	else if (a->container_set)
		bad = "--container";
	else if (a->opts.mipmaps)
		bad = "--mipmaps";
	else if (a->alpha_set)
		bad = "--alpha-cutoff";
	else if (a->colorspace_set)
		bad = "--srgb/--linear";
	if (bad) {
		fprintf(stderr, "kiln encode: %s does not apply to --format png (the output is a PNG image)\n", bad);
		return CLI_EXIT_USAGE;
	}
	return CLI_EXIT_OK;
}

/* The checks that depend on several options, once all are read. */
static int check_combination(encode_args *a)
{
	if (a->png_rgba8 && !a->png) {
		fprintf(stderr, "kiln encode: --png-rgba8 goes with --format png\n");
		return CLI_EXIT_USAGE;
	}
	if (a->png)
		return check_png_combination(a);
	bool astc = a->opts.format == KILN_TEXFMT_ASTC;
	if (!astc && a->block_set) {
		fprintf(stderr, "kiln encode: --block is the ASTC footprint: give --format astc\n");
		return CLI_EXIT_USAGE;
	}
	if (!a->container_set)
		a->container = astc ? KILN_CONTAINER_ASTC : KILN_CONTAINER_DDS;
	if (astc ? a->container == KILN_CONTAINER_DDS : a->container == KILN_CONTAINER_ASTC) {
		fprintf(stderr, "kiln encode: --container is %s for %s, not %s\n", astc ? "astc or ktx2" : "dds or ktx2",
			astc ? "astc" : "bc1", kiln_container_ext(a->container));
		return CLI_EXIT_USAGE;
	}
	if (a->opts.mipmaps && a->container == KILN_CONTAINER_ASTC) {
		fprintf(stderr, "kiln encode: an .astc file holds one level: --mipmaps needs --container ktx2\n");
		return CLI_EXIT_USAGE;
	}
	return CLI_EXIT_OK;
}

static int parse_args(int argc, char **argv, encode_args *a)
{
	static const struct option longopts[] = {
		{"format", required_argument, NULL, OPT_FORMAT},
		{"block", required_argument, NULL, OPT_BLOCK},
		{"quality", required_argument, NULL, OPT_QUALITY},
		{"container", required_argument, NULL, OPT_CONTAINER},
		{"srgb", no_argument, NULL, OPT_SRGB},
		{"linear", no_argument, NULL, OPT_LINEAR},
		{"mipmaps", no_argument, NULL, OPT_MIPMAPS},
		{"alpha-cutoff", required_argument, NULL, OPT_ALPHA},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"batch", required_argument, NULL, OPT_BATCH},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"max-pixels", required_argument, NULL, OPT_MAXPIX},
		{"json", no_argument, NULL, OPT_JSON},
		{"png-decoder", required_argument, NULL, OPT_PNG_DECODER},
		{"png-rgba8", no_argument, NULL, OPT_PNG_RGBA8},
		{"quiet", no_argument, NULL, 'q'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	long v;
	kiln_texenc_opts_default(&a->opts);
	a->container = KILN_CONTAINER_DDS;
	a->device.kind = KILN_DEVICE_AUTO;
	a->device.index = 0;
	a->batch = 32;
	a->threads = 0;
	kiln_image_limits_default(&a->limits);
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "qo:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_FORMAT:
			a->png = false;
			if (strcmp(optarg, "bc1") == 0) {
				a->opts.format = KILN_TEXFMT_BC1_RGB;
			} else if (strcmp(optarg, "astc") == 0) {
				a->opts.format = KILN_TEXFMT_ASTC;
			} else if (strcmp(optarg, "png") == 0) {
				a->png = true;
			} else {
				fprintf(stderr, "kiln encode: unknown --format '%s' (supported: bc1, astc, png)\n", optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		case OPT_BLOCK:
			if (!parse_block(optarg, &a->opts.block_w, &a->opts.block_h)) {
				fprintf(stderr, "kiln encode: --block is an ASTC footprint such as 4x4, 6x6 or 12x12, not '%s'\n",
					optarg);
				return CLI_EXIT_USAGE;
			}
			a->block_set = true;
			break;
		case OPT_QUALITY:
			if ((v = kiln_quality_parse(optarg)) < 0) {
				fprintf(stderr, "kiln encode: --quality is fast, medium or high, not '%s'\n", optarg);
				return CLI_EXIT_USAGE;
			}
			a->opts.quality = (kiln_quality)v;
			break;
		case OPT_CONTAINER:
			v = kiln_container_parse(optarg);
			if (v < 0) {
				fprintf(stderr, "kiln encode: --container is dds, ktx2 or astc, not '%s'\n", optarg);
				return CLI_EXIT_USAGE;
			}
			a->container = (kiln_container)v;
			a->container_set = true;
			break;
		case OPT_SRGB: a->opts.colorspace = KILN_COLORSPACE_SRGB; a->colorspace_set = true; break;
		case OPT_LINEAR: a->opts.colorspace = KILN_COLORSPACE_LINEAR; a->colorspace_set = true; break;
		case OPT_MIPMAPS: a->opts.mipmaps = true; break;
		case OPT_ALPHA:
			if (!cli_parse_long("encode", "--alpha-cutoff", optarg, 0, 255, &v))
				return CLI_EXIT_USAGE;
			a->opts.alpha_cutoff = (int)v;
			a->alpha_set = true;
			break;
		case OPT_DEVICE:
			if (!cli_parse_device("encode", optarg, &a->device))
				return CLI_EXIT_USAGE;
			break;
		case OPT_BATCH:
			if (!cli_parse_long("encode", "--batch", optarg, 1, 1024, &a->batch))
				return CLI_EXIT_USAGE;
			break;
		case OPT_THREADS:
			if (!cli_parse_long("encode", "--threads", optarg, 1, 1024, &a->threads))
				return CLI_EXIT_USAGE;
			break;
		case OPT_MAXPIX:
			if (!cli_parse_long("encode", "--max-pixels", optarg, 1, (long)KILN_DEFAULT_MAX_PIXELS * 4, &v))
				return CLI_EXIT_USAGE;
			a->limits.max_pixels = (uint64_t)v;
			break;
		case OPT_JSON: a->json = true; break;
		case OPT_PNG_DECODER:
			if (!cli_parse_png_decoder("encode", optarg, &a->png_decoder))
				return CLI_EXIT_USAGE;
			break;
		case OPT_PNG_RGBA8: a->png_rgba8 = true; break;
		case 'q': a->quiet = true; break;
		case 'o': a->output = optarg; break;
		case 'h':
			fputs(usage_text, stdout);
			return -1;
		default:
			fprintf(stderr, "kiln encode: see 'kiln encode --help'\n");
			return CLI_EXIT_USAGE;
		}
	}
	a->inputs = argv + optind;
	a->ninputs = (size_t)(argc - optind);
	if (a->ninputs == 0 || !a->output) {
		fprintf(stderr, "kiln encode: %s (see 'kiln encode --help')\n",
			a->ninputs == 0 ? "no input files" : "no output: give -o OUT");
		return CLI_EXIT_USAGE;
	}
	return check_combination(a);
}

/* Output names for every input; two inputs that map to one name are a usage error
 * rather than a silent overwrite. */
static int plan_outputs(const encode_args *a, item_result *items)
{
	const char *ext = a->png ? "png" : kiln_container_ext(a->container);
	size_t outlen = strlen(a->output);
	bool to_file = a->ninputs == 1 && !cli_is_dir(a->output) && a->output[outlen - 1] != '/';
	if (!to_file && kiln_mkdir_p(a->output) != KILN_OK) {
		fprintf(stderr, "kiln encode: cannot create output directory '%s'\n", a->output);
		return CLI_EXIT_FATAL;
	}
	for (size_t i = 0; i < a->ninputs; i++) {
		items[i].input = a->inputs[i];
		bool fits = to_file ? (size_t)snprintf(items[i].output, MAX_PATH_LEN, "%s", a->output) < MAX_PATH_LEN
				    : cli_output_name(a->output, a->inputs[i], ext, items[i].output, MAX_PATH_LEN);
		if (!fits) {
			fprintf(stderr, "kiln encode: output path for '%s' is too long\n", a->inputs[i]);
			return CLI_EXIT_USAGE;
		}
	}
	for (size_t i = 0; i < a->ninputs; i++) {
		/* --format png can name an output that is its own input: never replace it */
		struct stat in_st, out_st;
		if (stat(items[i].input, &in_st) == 0 && stat(items[i].output, &out_st) == 0 &&
		    in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino) {
			fprintf(stderr, "kiln encode: '%s' would overwrite its input\n", items[i].output);
			return CLI_EXIT_USAGE;
		}
	}
	for (size_t i = 0; i < a->ninputs; i++)
		for (size_t j = i + 1; j < a->ninputs; j++)
			if (strcmp(items[i].output, items[j].output) == 0) {
				fprintf(stderr, "kiln encode: '%s' and '%s' would both write '%s'\n",
					items[i].input, items[j].input, items[i].output);
				return CLI_EXIT_USAGE;
			}
	return CLI_EXIT_OK;
}

typedef struct read_job {
	const encode_args *args;
	item_result *items;
	kiln_image *images;
	kiln_buf *files;          /* not NULL: files the GPU decodes stay undecoded here */
	kiln_pngdec_info *infos;
} read_job;

static void read_range(void *p, size_t begin, size_t end)
{
	read_job *job = p;
	for (size_t i = begin; i < end; i++) {
		item_result *it = &job->items[i];
		if (!job->files) {
			it->status = kiln_png_read_path(it->input, job->args->png_decoder, &job->args->limits, NULL,
							&job->images[i], it->detail, sizeof it->detail);
			continue;
		}
		kiln_buf *f = &job->files[i];
		kiln_buf_init(f, PNG_INPUT_MAX);
		it->status = kiln_buf_read_file(f, it->input);
		if (it->status != KILN_OK) {
			snprintf(it->detail, sizeof it->detail, "%.200s: %s", it->input, kiln_strerror(it->status));
			continue;
		}
		it->status = kiln_pngdec_probe(f->data, f->len, &job->args->limits, &job->infos[i], it->detail,
					       sizeof it->detail);
		if (it->status != KILN_OK || kiln_texenc_png_gpu_decodes(&job->infos[i]))
			continue;
		it->status = kiln_pngdec_decode_probed_image(f->data, &job->infos[i], &job->args->limits,
							     &job->images[i], NULL, it->detail, sizeof it->detail);
		kiln_buf_free(f);
	}
}

/* --device gpu with kiln's decoder: the files the GPU decodes go in PNG batches, the rest
 * (decoded by read_range) in one batch of images; results land at each item's index.
 * Returns the first whole-batch failure. */
static kiln_status encode_split(kiln_texenc *enc, const item_result *items, const kiln_image *images,
				const kiln_buf *files, const kiln_pngdec_info *infos, size_t n, kiln_texture *tex,
				kiln_status *enc_status)
{
	kiln_status st = KILN_ERR_NOMEM;
	size_t *which = kiln_calloc(n, sizeof *which);
	kiln_image *imgs = kiln_calloc(n, sizeof *imgs);
	kiln_texture *t = kiln_calloc(n, sizeof *t);
	kiln_status *ts = kiln_calloc(n, sizeof *ts);
	if (!which || !imgs || !t || !ts)
		goto fail;
	st = KILN_OK;
	/* pass 0: decoded images, one batch; pass 1: files, batches the texenc takes */
	for (int pass = 0; pass < 2; pass++) {
		size_t m = 0;
		for (size_t i = 0; i < n; i++)
			if (items[i].status == KILN_OK && (files[i].data != NULL) == (pass == 1))
				which[m++] = i;
		size_t step = pass ? KILN_TEXENC_MAX_PNG_BATCH : (m ? m : 1);
		for (size_t first = 0; first < m; first += step) {
			size_t k = m - first < step ? m - first : step;
			kiln_status bs;
			if (pass == 0) {
				for (size_t j = 0; j < k; j++)
					imgs[j] = images[which[first + j]];
				bs = kiln_texenc_encode(enc, imgs, k, t, ts);
			} else {
				kiln_texenc_png png[KILN_TEXENC_MAX_PNG_BATCH];
				for (size_t j = 0; j < k; j++) {
					size_t i = which[first + j];
					png[j] = (kiln_texenc_png){files[i].data, files[i].len, infos[i]};
				}
				uint64_t ticket;
				bs = kiln_texenc_submit_png(enc, png, k, &ticket);
				if (bs == KILN_OK)
					bs = kiln_texenc_collect(enc, ticket, t, ts);
				else
					for (size_t j = 0; j < k; j++)
						ts[j] = bs;
			}
			if (st == KILN_OK)
				st = bs;
			for (size_t j = 0; j < k; j++) {
				tex[which[first + j]] = t[j];
				enc_status[which[first + j]] = ts[j];
			}
		}
	}
fail:
	free(which);
	free(imgs);
	free(t);
	free(ts);
	return st;
}

static void write_output(const encode_args *a, item_result *item, kiln_texture *tex)
{
	kiln_buf file;
	kiln_buf_init(&file, (size_t)1 << 34);
	kiln_status st = kiln_container_write(a->container, tex, &file);
	if (st == KILN_OK)
		st = kiln_file_write_atomic(item->output, file.data, file.len);
	if (st != KILN_OK)
		snprintf(item->detail, sizeof item->detail, "writing %s", item->output);
	item->status = st;
	item->bytes = file.len;
	item->width = tex->levels[0].width;
	item->height = tex->levels[0].height;
	item->levels = tex->num_levels;
	kiln_buf_free(&file);
}

/* Reads, encodes and writes items [first, first+n). */
static kiln_status run_batch(const encode_args *a, kiln_texenc *enc, bool gpu, kiln_pool *pool,
			     item_result *items, size_t n)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_image *images = kiln_calloc(n, sizeof *images);
	kiln_texture *tex = kiln_calloc(n, sizeof *tex);
	kiln_status *enc_status = kiln_calloc(n, sizeof *enc_status);
	/* on a GPU with kiln's decoder, files it decodes faster than the host are read only */
	bool split = gpu && a->png_decoder == KILN_PNG_DECODER_KILN;
	kiln_buf *files = split ? kiln_calloc(n, sizeof *files) : NULL;
	kiln_pngdec_info *infos = split ? kiln_calloc(n, sizeof *infos) : NULL;
	if (!images || !tex || !enc_status || (split && (!files || !infos)))
		goto fail;
	read_job job = {a, items, images, files, infos};
	kiln_pool_for(pool, n, 1, read_range, &job);
	if (split)
		st = encode_split(enc, items, images, files, infos, n, tex, enc_status);
	else
		st = kiln_texenc_encode(enc, images, n, tex, enc_status);
	for (size_t i = 0; i < n; i++) {
		if (items[i].status != KILN_OK)
			continue; /* the read failed and said why */
		items[i].status = enc_status[i];
		if (enc_status[i] == KILN_OK)
			write_output(a, &items[i], &tex[i]);
		else
			snprintf(items[i].detail, sizeof items[i].detail, "%s",
				 files && files[i].data ? "decoding on the GPU and encoding" : "encoding");
		kiln_texture_free_levels(&tex[i]);
	}
fail:
	for (size_t i = 0; images && i < n; i++)
		kiln_image_free(&images[i]);
	for (size_t i = 0; files && i < n; i++)
		kiln_buf_free(&files[i]);
	free(files);
	free(infos);
	free(images);
	free(tex);
	free(enc_status);
	return st;
}

/* --format png: the inputs read, and their samples, for one batch. */
typedef struct png_job {
	const encode_args *args;
	item_result *items;
	kiln_buf *files;
	kiln_png_source *srcs;
} png_job;

static void png_opts_of(const encode_args *a, kiln_png_transcode_opts *opts)
{
	kiln_png_transcode_opts_default(opts);
	opts->quality = a->opts.quality;
	opts->rgba8 = a->png_rgba8;
	opts->decoder = a->png_decoder;
	opts->limits = &a->limits;
}

static void read_sources(void *p, size_t begin, size_t end)
{
	png_job *job = p;
	kiln_png_transcode_opts opts;
	png_opts_of(job->args, &opts);
	for (size_t i = begin; i < end; i++) {
		item_result *it = &job->items[i];
		kiln_buf_init(&job->files[i], PNG_INPUT_MAX);
		it->status = kiln_buf_read_file(&job->files[i], it->input);
		if (it->status != KILN_OK) {
			snprintf(it->detail, sizeof it->detail, "%s: %s", it->input, kiln_strerror(it->status));
			continue;
		}
		it->status = kiln_png_source_read(job->files[i].data, job->files[i].len, NULL, &opts, NULL,
						  &job->srcs[i], it->detail, sizeof it->detail);
	}
}

/* --format png: items [first, first+n) read in parallel, encoded as one batch on the
 * device, written. Returns what stopped the whole batch (the runner explains it). */
static kiln_status run_png_batch(const encode_args *a, kiln_pngenc_runner *runner, kiln_pool *pool,
				 item_result *items, size_t n)
{
	kiln_status st = KILN_ERR_NOMEM;
	kiln_buf *files = kiln_calloc(n, sizeof *files), *out = kiln_calloc(n, sizeof *out);
	kiln_png_source *srcs = kiln_calloc(n, sizeof *srcs);
	kiln_png_source **batch = kiln_calloc(n, sizeof *batch);
	kiln_status *enc_status = kiln_calloc(n, sizeof *enc_status);
	size_t *which = kiln_calloc(n, sizeof *which);
	if (!files || !out || !srcs || !batch || !enc_status || !which) {
		for (size_t i = 0; i < n; i++)
			items[i].status = KILN_ERR_NOMEM;
		goto fail;
	}
	png_job job = {a, items, files, srcs};
	kiln_pool_for(pool, n, 1, read_sources, &job);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (items[i].status != KILN_OK)
			continue; /* the read failed and said why */
		batch[m] = &srcs[i];
		kiln_buf_init(&out[m], (size_t)1 << 34);
		which[m++] = i;
	}
	kiln_png_transcode_opts opts;
	png_opts_of(a, &opts);
	char why[200] = "";
	st = kiln_png_source_encode(runner, &opts, batch, m, out, enc_status, why, sizeof why);
	for (size_t k = 0; k < m; k++) {
		item_result *it = &items[which[k]];
		it->status = st != KILN_OK ? st : enc_status[k];
		if (it->status != KILN_OK) {
			snprintf(it->detail, sizeof it->detail, "encoding%s%s", st != KILN_OK ? ": " : "", why);
			continue;
		}
		it->status = kiln_file_write_atomic(it->output, out[k].data, out[k].len);
		if (it->status != KILN_OK) {
			snprintf(it->detail, sizeof it->detail, "writing %.200s", it->output);
			continue;
		}
		it->width = batch[k]->info.width;
		it->height = batch[k]->info.height;
		it->levels = 1;
		it->bytes = (size_t)batch[k]->info.bytes;
	}
fail:
	for (size_t i = 0; i < n && files && out && srcs; i++) {
		kiln_png_source_free(&srcs[i]);
		kiln_buf_free(&files[i]);
		kiln_buf_free(&out[i]);
	}
	free(files);
	free(out);
	free(srcs);
	free(batch);
	free(enc_status);
	free(which);
	return st;
}

static void print_json(const encode_args *a, const item_result *items, const kiln_device *dev,
		       double seconds)
{
	json_t *outputs = json_array();
	size_t ok = 0;
	for (size_t i = 0; i < a->ninputs; i++) {
		const item_result *it = &items[i];
		json_t *o = json_pack("{s:s, s:s, s:s}", "input", it->input, "output", it->output,
				      "status", it->status == KILN_OK ? "ok" : "error");
		if (it->status == KILN_OK) {
			ok++;
			json_object_set_new(o, "width", json_integer(it->width));
			json_object_set_new(o, "height", json_integer(it->height));
			json_object_set_new(o, "levels", json_integer(it->levels));
			json_object_set_new(o, "bytes", json_integer((json_int_t)it->bytes));
		} else {
			json_object_set_new(o, "error", json_string(kiln_strerror(it->status)));
			if (it->detail[0])
				json_object_set_new(o, "detail", json_string(it->detail));
		}
		json_array_append_new(outputs, o);
	}
	char devname[32];
	snprintf(devname, sizeof devname, dev->kind == KILN_DEVICE_GPU ? "gpu:%d" : "cpu", dev->index);
	json_t *root = json_pack("{s:o, s:I, s:I, s:s, s:f}", "outputs", outputs, "ok", (json_int_t)ok,
				 "failed", (json_int_t)(a->ninputs - ok), "device", devname, "seconds", seconds);
	json_dumpf(root, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(root);
}

int cli_encode(int argc, char **argv)
{
	encode_args a = {0};
	int rc = parse_args(argc, argv, &a);
	if (rc != CLI_EXIT_OK)
		return rc < 0 ? CLI_EXIT_OK : rc;

	kiln_pool *pool = NULL;
	kiln_texenc *enc = NULL;
	kiln_pngenc_runner *runner = NULL;
	kiln_device dev;
	item_result *items = kiln_calloc(a.ninputs, sizeof *items);
	if (!items) {
		fprintf(stderr, "kiln encode: out of memory\n");
		return CLI_EXIT_FATAL;
	}
	rc = plan_outputs(&a, items);
	if (rc != CLI_EXIT_OK)
		goto fail;
	rc = CLI_EXIT_FATAL;
	bool gpu_format = a.png || kiln_texenc_gpu_supported(a.opts.format);
	if (!gpu_format && a.device.kind == KILN_DEVICE_GPU) {
		fprintf(stderr, "kiln encode: this format has no GPU backend: use --device cpu (or auto)\n");
		goto fail;
	}
	if (!gpu_format)
		a.device.kind = KILN_DEVICE_CPU; /* auto: the only backend there is */
	kiln_status st = kiln_device_resolve(&a.device, &dev);
	if (st != KILN_OK) {
		fprintf(stderr, "kiln encode: --device: %s (%d GPUs found%s)\n", kiln_strerror(st),
			kiln_gpu_count(), kiln_gpu_built() ? "" : "; built without CUDA");
		goto fail;
	}
	if ((st = kiln_pool_create((unsigned)a.threads, &pool)) != KILN_OK ||
	    (a.png && (st = kiln_pngenc_runner_create(&dev, dev.kind == KILN_DEVICE_CPU ? pool : NULL, &runner)) !=
			      KILN_OK) ||
	    (!a.png && (st = kiln_texenc_create(&dev, &a.opts, pool, &enc)) != KILN_OK)) {
		fprintf(stderr, "kiln encode: cannot start the encoder: %s %s\n", kiln_strerror(st),
			dev.kind == KILN_DEVICE_GPU ? kiln_gpu_last_error() : "");
		goto fail;
	}
	kiln_pool_set_name(pool, "kiln-cpu");

	cli_progress progress;
	cli_progress_start(&progress, a.ninputs, a.quiet || a.json);
	double start = cli_now();
	size_t done = 0, failed = 0;
	for (size_t first = 0; first < a.ninputs; first += (size_t)a.batch) {
		size_t n = a.ninputs - first < (size_t)a.batch ? a.ninputs - first : (size_t)a.batch;
		if (a.png)
			st = run_png_batch(&a, runner, pool, items + first, n);
		else
			st = run_batch(&a, enc, dev.kind == KILN_DEVICE_GPU, pool, items + first, n);
		if (st != KILN_OK)
			KILN_WARN("batch failed", "first=%zu count=%zu error=\"%s\" detail=\"%s\"", first, n,
				  kiln_strerror(st),
				  a.png ? kiln_pngenc_runner_last_error(runner) : kiln_texenc_last_error(enc));
		for (size_t i = first; i < first + n; i++) {
			done++;
			if (items[i].status != KILN_OK) {
				failed++;
				if (progress.enabled)
					fputc('\n', stderr);
				fprintf(stderr, "kiln encode: %s: %s%s%s\n", items[i].input,
					kiln_strerror(items[i].status), items[i].detail[0] ? ": " : "",
					items[i].detail);
			}
		}
		cli_progress_update(&progress, done, failed);
	}
	cli_progress_finish(&progress);
	if (a.json)
		print_json(&a, items, &dev, cli_now() - start);
	rc = failed ? CLI_EXIT_PARTIAL : CLI_EXIT_OK;
fail:
	kiln_texenc_destroy(enc);
	kiln_pngenc_runner_destroy(runner);
	kiln_pool_destroy(pool);
	free(items);
	return rc;
}
