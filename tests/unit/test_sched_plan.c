/* Job specs and planning: validation of hostile specs (unknown fields, wrong types, huge
 * and deeply nested values), defaults, and the expansion of inputs into items with safe,
 * relative output names: directory walks, globs, lists, manifests, '..' refused per item,
 * colliding names, and a 10,000-item list. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/storage.h"
#include "sched_sim.h"
#include "scheduler/planner.h"
#include "scheduler/spec.h"

/* Parses text as a spec; returns the status, with the message in err. */
static kiln_status parse_text(const char *text, kiln_job_spec *spec, char *err, size_t cap)
{
	json_error_t jerr;
	json_t *in = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!in) {
		snprintf(err, cap, "not JSON");
		memset(spec, 0, sizeof *spec);
		return KILN_ERR_INVALID_ARG;
	}
	kiln_status st = kiln_job_spec_parse(in, spec, err, cap);
	json_decref(in);
	return st;
}

static void expect_refused(const char *text, const char *needle)
{
	kiln_job_spec spec;
	char err[256] = "";
	cr_expect_eq(parse_text(text, &spec, err, sizeof err), KILN_ERR_INVALID_ARG, "accepted: %.200s", text);
	if (needle)
		cr_expect(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
	kiln_job_spec_free(&spec);
}

TestSuite(sched_spec, .timeout = 30);

Test(sched_spec, defaults_are_filled_in)
{
	kiln_job_spec spec;
	char err[256];
	cr_assert_eq(parse_text("{\"input\":\"s3://bkt/in/\",\"output\":\"s3://bkt/out\"}", &spec, err, sizeof err),
		     KILN_OK, "%s", err);
	cr_expect_eq(spec.input_kind, KILN_INPUT_PREFIX);
	cr_expect_str_eq(spec.location, "s3://bkt/in/");
	cr_expect_null(spec.glob);
	cr_expect_str_eq(spec.output, "s3://bkt/out/");
	cr_expect_str_eq(spec.format, "bc1");
	cr_expect_str_eq(spec.container, "dds");
	cr_expect_eq(spec.shard_size, 32u);
	cr_expect_eq(spec.max_attempts, 3u);
	cr_expect_str_eq(json_string_value(json_object_get(spec.options, "quality")), "high");
	cr_expect_str_eq(json_string_value(json_object_get(spec.options, "colorspace")), "auto");
	cr_expect_eq(json_integer_value(json_object_get(spec.options, "alpha_cutoff")), 128);
	cr_expect(json_is_false(json_object_get(spec.options, "mipmaps")));
	cr_expect_null(json_object_get(spec.options, "shard_size"), "not a codec option");
	kiln_job_spec_free(&spec);

	cr_assert_eq(parse_text("{\"input\":\"/data/in/img*.png\",\"output\":\"/o/\",\"format\":\"astc\"}", &spec,
				err, sizeof err), KILN_OK, "%s", err);
	cr_expect_str_eq(spec.location, "/data/in/");
	cr_expect_str_eq(spec.glob, "img*.png");
	cr_expect_str_eq(spec.container, "astc");
	cr_expect_str_eq(json_string_value(json_object_get(spec.options, "block")), "4x4");
	kiln_job_spec_free(&spec);

	cr_assert_eq(parse_text("{\"input\":{\"manifest\":\"s3://bkt/list.txt\"},\"output\":\"/o\",\"container\":\"ktx2\","
				"\"mipmaps\":true,\"shard_size\":1024,\"max_attempts\":1}", &spec, err, sizeof err),
		     KILN_OK, "%s", err);
	cr_expect_eq(spec.input_kind, KILN_INPUT_MANIFEST);
	cr_expect_str_eq(spec.location, "s3://bkt/list.txt");
	cr_expect_str_eq(spec.ext, "ktx2");
	kiln_job_spec_free(&spec);
}

Test(sched_spec, unknown_fields_and_wrong_types_are_refused)
{
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"colour\":\"srgb\"}", "unknown field 'colour'");
	expect_refused("{\"input\":\"/a\"}", "missing field 'output'");
	expect_refused("{\"output\":\"/a\"}", "missing field 'input'");
	expect_refused("[1,2]", NULL);
	expect_refused("{\"input\":5,\"output\":\"/b\"}", "input");
	expect_refused("{\"input\":\"/a\",\"output\":[\"/b\"]}", "output");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"shard_size\":\"32\"}", "shard_size");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"shard_size\":0}", "shard_size");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"shard_size\":1025}", "shard_size");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"shard_size\":3.5}", "shard_size");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"max_attempts\":-1}", "max_attempts");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"mipmaps\":\"yes\"}", "mipmaps");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"alpha_cutoff\":256}", "alpha_cutoff");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"quality\":\"ultra\"}", "quality");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"colorspace\":null}", "colorspace");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"container\":\"astc\"}", "container");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"block\":\"6x6\"}", "block");
	expect_refused("{\"input\":{\"manifest\":\"/m\",\"x\":1},\"output\":\"/b\"}", "manifest");
	expect_refused("{\"input\":[],\"output\":\"/b\"}", "input");
	expect_refused("{\"input\":[\"/a\", 7],\"output\":\"/b\"}", "input[1]");
	expect_refused("{\"input\":\"relative/dir\",\"output\":\"/b\"}", "absolute");
	expect_refused("{\"input\":\"/a/../etc\",\"output\":\"/b\"}", "input");
	expect_refused("{\"input\":\"http://example.com/a\",\"output\":\"/b\"}", "input");
	expect_refused("{\"input\":\"/a\",\"output\":\"s3://B!/x\"}", "output");
	expect_refused("{\"input\":\"/a\\u0000b\",\"output\":\"/b\"}", NULL);
}

Test(sched_spec, huge_and_deeply_nested_values_are_refused)
{
	/* a 100 KiB string */
	size_t n = 100000;
	char *big = malloc(n + 64);
	cr_assert_not_null(big);
	strcpy(big, "{\"input\":\"/");
	memset(big + 11, 'a', n);
	strcpy(big + 11 + n, "\",\"output\":\"/b\"}");
	expect_refused(big, "input");
	free(big);

	/* nesting 100,000 deep: refused by the JSON parser's depth limit, not a stack overflow */
	size_t depth = 100000;
	char *nest = malloc(2 * depth + 64);
	cr_assert_not_null(nest);
	char *p = nest + sprintf(nest, "{\"input\":");
	memset(p, '[', depth);
	memset(p + depth, ']', depth);
	strcpy(p + 2 * depth, ",\"output\":\"/b\"}");
	expect_refused(nest, NULL);
	free(nest);

	/* nested values the parser accepts are still the wrong type */
	expect_refused("{\"input\":[[[\"/a\"]]],\"output\":\"/b\"}", "input[0]");
	expect_refused("{\"input\":\"/a\",\"output\":\"/b\",\"format\":{\"a\":{\"b\":1}}}", "format");

	/* a list over the cap */
	json_t *list = json_array();
	for (int i = 0; i <= KILN_SPEC_MAX_LIST; i++)
		json_array_append_new(list, json_string("/a.png"));
	json_t *spec = json_pack("{s:o, s:s}", "input", list, "output", "/b");
	kiln_job_spec out;
	char err[256];
	cr_expect_eq(kiln_job_spec_parse(spec, &out, err, sizeof err), KILN_ERR_INVALID_ARG);
	json_decref(spec);
}

/* ---- planner ---- */

static char dir[128];

static void setup(void)
{
	sim_mkdtemp(dir, sizeof dir, "planner");
}

static void teardown(void)
{
	sim_rmdir(dir);
}

TestSuite(sched_planner, .init = setup, .fini = teardown, .timeout = 60);

static void touch(const char *rel)
{
	char path[512], cmd[1200];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && echo x > '%s'", path, path);
	cr_assert_eq(system(cmd), 0);
}

/* Plans spec_text (printf-formatted with dir) into *plan. */
static kiln_status plan(kiln_plan **plan, char *msg, size_t cap, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	kiln_job_spec spec;
	char err[256];
	cr_assert_eq(parse_text(text, &spec, err, sizeof err), KILN_OK, "%s: %s", text, err);
	kiln_storage *st;
	cr_assert_eq(kiln_storage_create(NULL, &st, NULL, 0), KILN_OK);
	cr_assert_eq(kiln_plan_create(plan), KILN_OK);
	kiln_status s = kiln_plan_build(*plan, &spec, st, 0, msg, cap);
	kiln_storage_destroy(st);
	kiln_job_spec_free(&spec);
	return s;
}

static const kiln_plan_item *find_input(const kiln_plan *p, const char *suffix)
{
	for (size_t i = 0; i < kiln_plan_count(p); i++) {
		const char *in = kiln_plan_items(p)[i].input;
		size_t a = strlen(in), b = strlen(suffix);
		if (a >= b && strcmp(in + a - b, suffix) == 0)
			return &kiln_plan_items(p)[i];
	}
	cr_assert_fail("no item for input %s", suffix);
	return NULL;
}

static void expect_output(const kiln_plan *p, const char *input_suffix, const char *output)
{
	const kiln_plan_item *it = find_input(p, input_suffix);
	cr_assert_not_null(it, "no item for %s", input_suffix);
	cr_expect_null(it->error, "%s failed: %s", input_suffix, it->error);
	cr_expect_str_eq(it->output ? it->output : "(null)", output);
}

Test(sched_planner, directory_walk_keeps_relative_paths)
{
	touch("in/a.png");
	touch("in/sub/b.png");
	touch("in/sub/deeper/c.PNG");
	touch("in/noext");
	touch("in/.hidden.png");
	touch("in/d.tar.png");
	kiln_plan *p;
	char msg[256];
	cr_assert_eq(plan(&p, msg, sizeof msg, "{\"input\":\"%s/in\",\"output\":\"s3://bkt/out\"}", dir), KILN_OK, "%s", msg);
	cr_expect_eq(kiln_plan_count(p), 5u, "hidden files are skipped");
	expect_output(p, "/in/a.png", "s3://bkt/out/a.dds");
	expect_output(p, "/in/sub/b.png", "s3://bkt/out/sub/b.dds");
	expect_output(p, "/in/sub/deeper/c.PNG", "s3://bkt/out/sub/deeper/c.dds");
	expect_output(p, "/in/noext", "s3://bkt/out/noext.dds");
	expect_output(p, "/in/d.tar.png", "s3://bkt/out/d.tar.dds");
	kiln_plan_destroy(p);

	/* a glob on the last segment, ktx2 */
	cr_assert_eq(plan(&p, msg, sizeof msg, "{\"input\":\"file://%s/in/sub/*.png\",\"output\":\"%s/o/\","
			  "\"container\":\"ktx2\"}", dir, dir), KILN_OK, "%s", msg);
	char want[256];
	snprintf(want, sizeof want, "%s/o/b.ktx2", dir);
	expect_output(p, "/in/sub/b.png", want);
	kiln_plan_destroy(p);

	/* a missing directory fails the plan with a reason */
	cr_expect_neq(plan(&p, msg, sizeof msg, "{\"input\":\"%s/nope/\",\"output\":\"/o\"}", dir), KILN_OK);
	cr_expect_neq(msg[0], '\0');
	kiln_plan_destroy(p);
}

Test(sched_planner, lists_use_their_common_directory_and_refuse_bad_names)
{
	kiln_plan *p;
	char msg[256];
	cr_assert_eq(plan(&p, msg, sizeof msg, "{\"input\":[\"s3://bkt/in/x/a.png\",\"s3://bkt/in/y/b.png\","
			  "\"s3://bkt/in/x/../../etc/passwd\",\"s3://bkt/in/x/./c.png\",\"s3://bkt/in/x/a.jpg\","
			  "\"gs://b/z.png\"],\"output\":\"/out\"}"), KILN_OK, "%s", msg);
	cr_assert_eq(kiln_plan_count(p), 6u);
	expect_output(p, "in/x/a.png", "/out/x/a.dds");
	expect_output(p, "in/y/b.png", "/out/y/b.dds");
	const kiln_plan_item *it = find_input(p, "etc/passwd");
	cr_assert_not_null(it);
	cr_expect_null(it->output);
	cr_expect_not_null(it->error, "'..' must fail the item");
	it = find_input(p, "./c.png");
	cr_expect_not_null(it->error);
	it = find_input(p, "x/a.jpg");
	cr_expect_not_null(it->error, "x/a.jpg maps to the same output as x/a.png");
	cr_expect(strstr(it->error, "collides") != NULL);
	it = find_input(p, "gs://b/z.png");
	cr_expect_not_null(it->error);
	kiln_plan_destroy(p);

	/* a single URI keeps its base name */
	cr_assert_eq(plan(&p, msg, sizeof msg, "{\"input\":[\"s3://bkt/deep/er/one.png\"],\"output\":\"s3://out/p/\"}"),
		     KILN_OK);
	expect_output(p, "one.png", "s3://out/p/one.dds");
	kiln_plan_destroy(p);
}

Test(sched_planner, relative_names_are_checked_segment_by_segment)
{
	kiln_job_spec spec;
	char err[256], out[4096];
	const char *why;
	cr_assert_eq(parse_text("{\"input\":\"/a\",\"output\":\"/o\"}", &spec, err, sizeof err), KILN_OK);
	static const char *const bad[] = {"../x.png", "a/../../x.png", "/abs.png", "a//b.png", "a/./b.png",
					  "", "a/", "..", "a/\x01.png"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_neq(kiln_plan_output_name(&spec, bad[i], out, sizeof out, &why), KILN_OK, "%s", bad[i]);
		cr_expect_not_null(why);
	}
	cr_expect_eq(kiln_plan_output_name(&spec, "..x/y..png", out, sizeof out, &why), KILN_OK);
	cr_expect_str_eq(out, "/o/..x/y..dds");
	cr_expect_eq(kiln_plan_output_name(&spec, ".png", out, sizeof out, &why), KILN_OK);
	cr_expect_str_eq(out, "/o/.png.dds");
	kiln_job_spec_free(&spec);
}

Test(sched_planner, manifest_of_uris)
{
	char path[256];
	snprintf(path, sizeof path, "%s/list.txt", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "# inputs\n/data/set/a.png\r\n\n/data/set/sub/b.png\n/data/set/../x.png\n");
	fclose(f);
	kiln_plan *p;
	char msg[256];
	cr_assert_eq(plan(&p, msg, sizeof msg, "{\"input\":{\"manifest\":\"%s\"},\"output\":\"/o\"}", path), KILN_OK,
		     "%s", msg);
	cr_assert_eq(kiln_plan_count(p), 3u);
	expect_output(p, "/data/set/a.png", "/o/a.dds");
	expect_output(p, "/data/set/sub/b.png", "/o/sub/b.dds");
	cr_expect_not_null(find_input(p, "../x.png")->error);
	kiln_plan_destroy(p);
}

Test(sched_planner, ten_thousand_item_list)
{
	json_t *list = json_array();
	for (int i = 0; i < 10000; i++)
		json_array_append_new(list, json_sprintf("s3://bucket/set/d%02d/img%05d.png", i % 100, i));
	json_t *in = json_pack("{s:o, s:s, s:s}", "input", list, "output", "s3://out/x/", "container", "ktx2");
	kiln_job_spec spec;
	char err[256];
	cr_assert_eq(kiln_job_spec_parse(in, &spec, err, sizeof err), KILN_OK, "%s", err);
	kiln_plan *p;
	cr_assert_eq(kiln_plan_create(&p), KILN_OK);
	cr_assert_eq(kiln_plan_build(p, &spec, NULL, 0, err, sizeof err), KILN_OK, "%s", err);
	cr_assert_eq(kiln_plan_count(p), 10000u);
	for (size_t i = 0; i < 10000; i++)
		cr_assert_null(kiln_plan_items(p)[i].error, "%zu: %s", i, kiln_plan_items(p)[i].error);
	cr_expect_str_eq(kiln_plan_items(p)[1234].output, "s3://out/x/d34/img01234.ktx2");
	kiln_plan_destroy(p);

	/* the per-job item cap */
	cr_assert_eq(kiln_plan_create(&p), KILN_OK);
	cr_expect_eq(kiln_plan_build(p, &spec, NULL, 9999, err, sizeof err), KILN_ERR_TOO_LARGE);
	kiln_plan_destroy(p);
	kiln_job_spec_free(&spec);
	json_decref(in);
}

/* An output of the cap's length that does not end in '/' would become one byte longer when
 * normalised, and the journal's replay of that JSON would refuse the job after a restart
 * (found by the spec fuzzer): it is refused at once; with its '/' it fits and replays. */
Test(sched_spec, an_output_whose_normalised_form_passes_the_cap_is_refused)
{
	char *text = malloc(KILN_SPEC_MAX_STRING + 64);
	cr_assert_not_null(text);
	/* a file:// URI of the cap's length whose path is far shorter than PATH_MAX ("%6f" is
	 * 'o'): "file:///" (8 bytes), 40 folders of 33 escapes and a '/' (4,000), 29 escapes
	 * (87) and an 'o' */
	_Static_assert(KILN_SPEC_MAX_STRING == 8 + 40 * 100 + 87 + 1, "the URI below has the cap's length");
	int at = sprintf(text, "{\"input\":\"/a\",\"output\":\"");
	char *o = text + at + sprintf(text + at, "file:///");
	for (int d = 0; d < 40; d++) {
		for (int e = 0; e < 33; e++)
			o += sprintf(o, "%%6f");
		*o++ = '/';
	}
	for (int e = 0; e < 29; e++)
		o += sprintf(o, "%%6f");
	strcpy(o, "o\"}");
	expect_refused(text, "'/'");

	/* the same length ending in '/': accepted, and its normalised JSON parses again */
	*o = '/';
	kiln_job_spec spec, again;
	char err[256] = "";
	cr_assert_eq(parse_text(text, &spec, err, sizeof err), KILN_OK, "%s", err);
	cr_expect_eq(kiln_job_spec_parse(spec.json, &again, err, sizeof err), KILN_OK, "%s", err);
	cr_expect(json_equal(spec.json, again.json));
	kiln_job_spec_free(&again);
	kiln_job_spec_free(&spec);
	free(text);
}
