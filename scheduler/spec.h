/* A job's specification as clients send it (POST /v1/jobs), validated completely before
 * anything is planned: every field has a type, a range and a size cap, unknown fields are
 * refused, and defaults are filled in. The normalised JSON (defaults included) is what the
 * journal stores, so replay re-validates it through this same parser.
 *
 *   {"input":  "s3://bucket/in/" | "/data/in/img*.png" | ["s3://b/a.png", ...]
 *              | {"manifest": "s3://bucket/list.txt"},
 *    "output": "s3://bucket/out/",
 *    "format": "bc1"|"astc"|"png", "container": "dds"|"ktx2"|"astc"|"png",
 *    "quality": "fast"|"medium"|"high", "mipmaps": bool,
 *    "colorspace": "auto"|"srgb"|"linear", "alpha_cutoff": 0..255, "block": "4x4".."12x12",
 *    "measure_psnr": bool (false: workers report each output's PSNR when true),
 *    "shard_size": 1..1024 (32), "max_attempts": 1..100 (3)} */
#ifndef KILN_SCHED_SPEC_H
#define KILN_SCHED_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define KILN_SPEC_MAX_LIST 100000      /* URIs in an inline list */
#define KILN_SPEC_MAX_STRING 4096      /* bytes in any string */
#define KILN_SPEC_MAX_SHARD 1024
#define KILN_SPEC_MAX_ATTEMPTS 100

typedef enum kiln_input_kind {
	KILN_INPUT_PREFIX,    /* a directory or object prefix, maybe with a glob */
	KILN_INPUT_LIST,      /* URIs given inline */
	KILN_INPUT_MANIFEST,  /* a file or object holding one URI per line */
} kiln_input_kind;

typedef struct kiln_job_spec {
	kiln_input_kind input_kind;
	const char *location;  /* PREFIX: the prefix without its glob; MANIFEST: the manifest */
	const char *glob;      /* PREFIX: fnmatch pattern on the last name segment, or NULL */
	const json_t *list;    /* LIST: array of strings */
	const char *output;    /* ends with '/' */
	const char *format;
	const char *container;
	const char *ext;       /* output file extension, from the container */
	unsigned shard_size;
	unsigned max_attempts;
	json_t *options;       /* the codec options a shard message carries */
	json_t *json;          /* normalised spec; owns every string above */
	char *storage;         /* backing for location/glob/output */
} kiln_job_spec;

/* Validates in (not modified) and fills *out; KILN_ERR_INVALID_ARG with a message for the
 * client in err on any problem. */
kiln_status kiln_job_spec_parse(const json_t *in, kiln_job_spec *out, char *err, size_t err_cap);
/* Frees what parse allocated; a zeroed or NULL spec is fine. */
void kiln_job_spec_free(kiln_job_spec *spec);

#endif
