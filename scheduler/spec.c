/* Job spec validation: a table of the scalar fields (their JSON kind, allowed values,
 * ranges and defaults) and hand-written checks for the two structured ones, input and
 * output. Messages name the field, so a client can fix its request from the 400 alone. */
#include "scheduler/spec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/uri.h"

typedef enum { K_CHOICE, K_BOOL, K_INT } kind;

static const char *const formats[] = {"bc1", "astc", "png", NULL};
static const char *const containers[] = {"dds", "ktx2", "astc", "png", NULL};
static const char *const qualities[] = {"fast", "medium", "high", NULL};
static const char *const colorspaces[] = {"auto", "srgb", "linear", NULL};
static const char *const blocks[] = {"4x4", "5x4", "5x5", "6x5", "6x6", "8x5", "8x6", "8x8",
				     "10x5", "10x6", "10x8", "10x10", "12x10", "12x12", NULL};

typedef struct field {
	const char *name;
	kind kind;
	const char *const *choices;  /* K_CHOICE */
	long min, max;               /* K_INT */
	const char *def_str;         /* K_CHOICE default, NULL: depends on other fields */
	long def_int;                /* K_INT and K_BOOL default */
	bool option;                 /* goes into the shard's codec options */
} field;

static const field fields[] = {
	{"format", K_CHOICE, formats, 0, 0, "bc1", 0, true},
	{"container", K_CHOICE, containers, 0, 0, NULL, 0, true},
	{"quality", K_CHOICE, qualities, 0, 0, "high", 0, true},
	{"colorspace", K_CHOICE, colorspaces, 0, 0, "auto", 0, true},
	{"block", K_CHOICE, blocks, 0, 0, NULL, 0, true},
	{"mipmaps", K_BOOL, NULL, 0, 0, NULL, 0, true},
	{"measure_psnr", K_BOOL, NULL, 0, 0, NULL, 0, true},
	{"alpha_cutoff", K_INT, NULL, 0, 255, NULL, 128, true},
	{"shard_size", K_INT, NULL, 1, KILN_SPEC_MAX_SHARD, NULL, 32, false},
	{"max_attempts", K_INT, NULL, 1, KILN_SPEC_MAX_ATTEMPTS, NULL, 3, false},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

/* Which containers each format may be wrapped in; the first is the default. */
static const struct {
	const char *format;
	const char *containers[3];
} wraps[] = {
	{"bc1", {"dds", "ktx2", NULL}},
	{"astc", {"astc", "ktx2", NULL}},
	{"png", {"png", NULL, NULL}},
};

static kiln_status bad(char *err, size_t cap, const char *fmt, ...)
{
	if (err && cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, cap, fmt, ap);
		va_end(ap);
	}
	return KILN_ERR_INVALID_ARG;
}

static bool string_ok(const json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0 &&
	       json_string_length(v) <= KILN_SPEC_MAX_STRING &&
	       strlen(json_string_value(v)) == json_string_length(v);  /* no NUL inside */
}

static bool in_set(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(s, *set) == 0)
			return true;
	return false;
}

/* A location must name an absolute place: a relative path would depend on the
 * scheduler's working directory, which the client cannot see. */
static kiln_status check_location(const char *what, const char *text, char *err, size_t cap)
{
	kiln_uri *u = kiln_malloc(sizeof *u);
	if (!u)
		return KILN_ERR_NOMEM;
	kiln_status st = kiln_uri_parse(text, u);
	if (st != KILN_OK)
		st = bad(err, cap, "%s: '%.200s' is not a valid location (file path, file:// or s3:// URI "
			 "without '..')", what, text);
	else if (u->scheme == KILN_URI_FILE && u->path[0] != '/')
		st = bad(err, cap, "%s: '%.200s' must be an absolute path", what, text);
	free(u);
	return st;
}

static kiln_status check_scalar(const field *f, const json_t *v, char *err, size_t cap)
{
	switch (f->kind) {
	case K_CHOICE:
		if (!string_ok(v) || !in_set(json_string_value(v), f->choices))
			return bad(err, cap, "%s: expected one of the documented names", f->name);
		return KILN_OK;
	case K_BOOL:
		return json_is_boolean(v) ? KILN_OK : bad(err, cap, "%s: expected true or false", f->name);
	case K_INT:
		if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max)
			return bad(err, cap, "%s: expected a whole number from %ld to %ld", f->name, f->min, f->max);
		return KILN_OK;
	}
	return KILN_ERR_INVALID_ARG;
}

static kiln_status check_input(const json_t *in, char *err, size_t cap)
{
	if (json_is_string(in)) {
		if (!string_ok(in))
			return bad(err, cap, "input: empty or longer than %d bytes", KILN_SPEC_MAX_STRING);
		return KILN_OK;  /* the location is checked once its glob is split off */
	}
	if (json_is_array(in)) {
		size_t n = json_array_size(in), i;
		const json_t *e;
		if (n == 0 || n > KILN_SPEC_MAX_LIST)
			return bad(err, cap, "input: a list needs 1 to %d URIs", KILN_SPEC_MAX_LIST);
		json_array_foreach(in, i, e)
			if (!string_ok(e))
				return bad(err, cap, "input[%zu]: expected a non-empty string of at most %d bytes",
					   i, KILN_SPEC_MAX_STRING);
		return KILN_OK;
	}
	if (json_is_object(in)) {
		const json_t *m = json_object_get(in, "manifest");
		if (json_object_size(in) != 1 || !m)
			return bad(err, cap, "input: an object must be {\"manifest\": URI} and nothing else");
		if (!string_ok(m))
			return bad(err, cap, "input.manifest: expected a non-empty string");
		return check_location("input.manifest", json_string_value(m), err, cap);
	}
	return bad(err, cap, "input: expected a location, a list of URIs or {\"manifest\": URI}");
}

static const char *get_str(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

/* Fills defaults that depend on other fields and checks the combinations. */
static kiln_status check_combination(json_t *norm, char *err, size_t cap)
{
	const char *format = get_str(norm, "format");
	size_t w = 0;
	while (strcmp(wraps[w].format, format) != 0)
		w++;
	const char *container = get_str(norm, "container");
	if (!container) {
		json_object_set_new(norm, "container", json_string(wraps[w].containers[0]));
	} else {
		size_t c = 0;
		while (c < 3 && wraps[w].containers[c] && strcmp(wraps[w].containers[c], container) != 0)
			c++;
		if (c == 3 || !wraps[w].containers[c])
			return bad(err, cap, "container: '%s' cannot hold %s data", container, format);
	}
	bool astc = strcmp(format, "astc") == 0;
	if (!astc && json_object_get(norm, "block"))
		return bad(err, cap, "block: only the astc format has a block footprint");
	if (astc && !json_object_get(norm, "block"))
		json_object_set_new(norm, "block", json_string("4x4"));
	if (strcmp(format, "png") == 0 && json_is_true(json_object_get(norm, "mipmaps")))
		return bad(err, cap, "mipmaps: a png output holds one image");
	return KILN_OK;
}

/* Splits "…/dir/img*.png" into location "…/dir/" and glob "img*.png" when the last segment has
 * a wildcard; storage holds both strings. */
static kiln_status split_glob(kiln_job_spec *out, const char *text)
{
	size_t len = strlen(text);
	out->storage = kiln_malloc(2 * len + 2);
	if (!out->storage)
		return KILN_ERR_NOMEM;
	const char *slash = strrchr(text, '/');
	const char *last = slash ? slash + 1 : text;
	char *loc = out->storage, *glob = out->storage + len + 1;
	if (strpbrk(last, "*?[")) {
		size_t n = (size_t)(last - text);
		memcpy(loc, text, n);
		loc[n] = '\0';
		strcpy(glob, last);
		out->glob = glob;
	} else {
		strcpy(loc, text);
	}
	out->location = loc;
	return KILN_OK;
}

kiln_status kiln_job_spec_parse(const json_t *in, kiln_job_spec *out, char *err, size_t err_cap)
{
	memset(out, 0, sizeof *out);
	if (err && err_cap)
		err[0] = '\0';
	if (!json_is_object(in))
		return bad(err, err_cap, "a job spec is a JSON object");
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)in, key, v) {
		bool known = strcmp(key, "input") == 0 || strcmp(key, "output") == 0;
		for (size_t i = 0; i < NFIELDS && !known; i++)
			known = strcmp(fields[i].name, key) == 0;
		if (!known)
			return bad(err, err_cap, "unknown field '%.64s'", key);
	}
	const json_t *input = json_object_get(in, "input"), *output = json_object_get(in, "output");
	if (!input || !output)
		return bad(err, err_cap, "missing field '%s'", input ? "output" : "input");
	kiln_status st = check_input(input, err, err_cap);
	if (st != KILN_OK)
		return st;
	if (!string_ok(output))
		return bad(err, err_cap, "output: expected a non-empty string of at most %d bytes",
			   KILN_SPEC_MAX_STRING);
	/* the normalised output ends in '/' (below) and is what the journal replays through
	 * this parser: it must be within the cap too, or a job accepted now would be refused
	 * after a restart (found by the spec fuzzer) */
	size_t olen = strlen(json_string_value(output));
	if (json_string_value(output)[olen - 1] != '/' && olen + 1 > KILN_SPEC_MAX_STRING)
		return bad(err, err_cap, "output: at most %d bytes with the '/' that ends a prefix",
			   KILN_SPEC_MAX_STRING);
	st = check_location("output", json_string_value(output), err, err_cap);
	if (st != KILN_OK)
		return st;

	st = KILN_ERR_NOMEM;
	json_t *norm = json_object();
	if (!norm)
		return st;
	out->json = norm;
	for (size_t i = 0; i < NFIELDS; i++) {
		const field *f = &fields[i];
		v = json_object_get(in, f->name);
		if (v) {
			st = check_scalar(f, v, err, err_cap);
			if (st != KILN_OK)
				goto fail;
			json_object_set_new(norm, f->name, json_deep_copy(v));
		} else if (f->kind == K_CHOICE && f->def_str) {
			json_object_set_new(norm, f->name, json_string(f->def_str));
		} else if (f->kind == K_BOOL) {
			json_object_set_new(norm, f->name, json_boolean(f->def_int));
		} else if (f->kind == K_INT) {
			json_object_set_new(norm, f->name, json_integer(f->def_int));
		}
	}
	st = check_combination(norm, err, err_cap);
	if (st != KILN_OK)
		goto fail;
	json_object_set_new(norm, "input", json_deep_copy(input));
	const char *o = json_string_value(output);
	json_object_set_new(norm, "output", o[olen - 1] == '/' ? json_string(o) : json_pack("s+", o, "/"));

	st = KILN_ERR_NOMEM;
	out->options = json_object();
	if (!out->options)
		goto fail;
	for (size_t i = 0; i < NFIELDS; i++)
		if (fields[i].option && (v = json_object_get(norm, fields[i].name)))
			json_object_set(out->options, fields[i].name, (json_t *)v);

	input = json_object_get(norm, "input");
	if (json_is_string(input)) {
		out->input_kind = KILN_INPUT_PREFIX;
		st = split_glob(out, json_string_value(input));
		if (st != KILN_OK)
			goto fail;
		st = check_location("input", out->location, err, err_cap);
		if (st != KILN_OK)
			goto fail;
	} else if (json_is_array(input)) {
		out->input_kind = KILN_INPUT_LIST;
		out->list = input;
	} else {
		out->input_kind = KILN_INPUT_MANIFEST;
		out->location = get_str(input, "manifest");
	}
	out->output = get_str(norm, "output");
	out->format = get_str(norm, "format");
	out->container = get_str(norm, "container");
	out->ext = out->container;  /* every container's extension is its name */
	out->shard_size = (unsigned)json_integer_value(json_object_get(norm, "shard_size"));
	out->max_attempts = (unsigned)json_integer_value(json_object_get(norm, "max_attempts"));
	if (!out->output || !out->format || !out->container) {
		st = KILN_ERR_NOMEM;  /* only a failed allocation leaves these unset */
		goto fail;
	}
	return KILN_OK;
fail:
	kiln_job_spec_free(out);
	return st;
}

void kiln_job_spec_free(kiln_job_spec *spec)
{
	if (!spec)
		return;
	json_decref(spec->options);
	json_decref(spec->json);
	free(spec->storage);
	memset(spec, 0, sizeof *spec);
}
