/* kiln samples: writes a small, deterministic set of PNG images that exercise the encoder
 * (gradients, hard edges, noise, alpha, odd sizes), so `make run` needs no downloaded data. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "common/fileio.h"
#include "kernels/png/png_file.h"

typedef void (*paint_fn)(kiln_image *img);

static uint32_t next_random(uint32_t *state)
{
	/* xorshift32: enough for texture noise, and the same on every machine */
	*state ^= *state << 13;
	*state ^= *state >> 17;
	*state ^= *state << 5;
	return *state;
}

static void paint_gradient(kiln_image *img)
{
	for (uint32_t y = 0; y < img->height; y++)
		for (uint32_t x = 0; x < img->width; x++) {
			uint8_t *p = kiln_image_row(img, y) + 4 * x;
			p[0] = (uint8_t)(255 * x / (img->width - 1));
			p[1] = (uint8_t)(255 * y / (img->height - 1));
			p[2] = (uint8_t)(255 - (p[0] + p[1]) / 2);
			p[3] = 255;
		}
}

static void paint_checker_alpha(kiln_image *img)
{
	img->has_alpha = true;
	for (uint32_t y = 0; y < img->height; y++)
		for (uint32_t x = 0; x < img->width; x++) {
			uint8_t *p = kiln_image_row(img, y) + 4 * x;
			int on = ((x / 16) ^ (y / 16)) & 1;
			p[0] = on ? 230 : 30;
			p[1] = on ? 120 : 200;
			p[2] = on ? 40 : 220;
			/* a soft disc of opacity: punch-through has to pick a side of the cutoff */
			long dx = (long)x - img->width / 2, dy = (long)y - img->height / 2;
			long r2 = dx * dx + dy * dy, rmax = (long)img->width * img->width / 5;
			p[3] = r2 >= rmax ? 0 : (uint8_t)(255 - 255 * r2 / rmax);
		}
}

static void paint_noise(kiln_image *img)
{
	uint32_t state = 0x9e3779b9u;
	for (uint32_t y = 0; y < img->height; y++)
		for (uint32_t x = 0; x < img->width; x++) {
			uint8_t *p = kiln_image_row(img, y) + 4 * x;
			uint32_t r = next_random(&state);
			/* smooth base plus noise: closer to photographs than pure noise */
			p[0] = (uint8_t)((x * 2 + (r & 31)) & 255);
			p[1] = (uint8_t)((y * 3 + ((r >> 8) & 31)) & 255);
			p[2] = (uint8_t)(((x + y) + ((r >> 16) & 63)) & 255);
			p[3] = 255;
		}
}

static void paint_solid(kiln_image *img)
{
	for (uint32_t y = 0; y < img->height; y++)
		for (uint32_t x = 0; x < img->width; x++)
			memcpy(kiln_image_row(img, y) + 4 * x, "\x5a\xa5\x3c\xff", 4);
}

static const struct sample {
	const char *name;
	uint32_t width, height;
	paint_fn paint;
} samples[] = {
	{"gradient.png", 256, 256, paint_gradient},
	{"checker-alpha.png", 300, 200, paint_checker_alpha},
	{"noise.png", 123, 77, paint_noise},
	{"solid-5x3.png", 5, 3, paint_solid},
	{"pixel.png", 1, 1, paint_solid},
	{"wide.png", 4099, 17, paint_gradient},
};

int cli_samples(int argc, char **argv)
{
	const char *dir = NULL;
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		if (c == 'o') {
			dir = optarg;
		} else if (c == 'h') {
			puts("usage: kiln samples -o DIR\n\nWrite generated sample PNG images into DIR.");
			return CLI_EXIT_OK;
		} else {
			return CLI_EXIT_USAGE;
		}
	}
	if (!dir) {
		fprintf(stderr, "kiln samples: no output: give -o DIR\n");
		return CLI_EXIT_USAGE;
	}
	if (kiln_mkdir_p(dir) != KILN_OK) {
		fprintf(stderr, "kiln samples: cannot create '%s'\n", dir);
		return CLI_EXIT_FATAL;
	}
	for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
		kiln_image img;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, samples[i].name);
		kiln_status st = kiln_image_alloc(&img, samples[i].width, samples[i].height, NULL);
		if (st == KILN_OK) {
			samples[i].paint(&img);
			st = kiln_png_write_path(path, &img, KILN_QUALITY_MEDIUM);
		}
		kiln_image_free(&img);
		if (st != KILN_OK) {
			fprintf(stderr, "kiln samples: %s: %s\n", path, kiln_strerror(st));
			return CLI_EXIT_FATAL;
		}
	}
	return CLI_EXIT_OK;
}
