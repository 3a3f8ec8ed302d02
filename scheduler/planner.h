/* Planning: a validated job spec becomes the list of its items (one per input image, with
 * its output name), by walking a directory, listing an S3 prefix, reading a manifest or
 * taking the inline list. An output keeps its input's path relative to the listed place,
 * with the container's extension (in/a/x.png -> out/a/x.dds). An input whose relative
 * name is unsafe (a ".." or "." segment, an absolute part, a control character, an
 * unparsable URI) becomes an item that has already failed, with the reason, so one bad
 * name never refuses a whole job and never writes outside the output prefix.
 *
 * A plan owns its strings in one arena: a million items cost two small allocations per
 * thousand items, not two per item. */
#ifndef KILN_SCHED_PLANNER_H
#define KILN_SCHED_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/storage.h"
#include "scheduler/spec.h"

#define KILN_PLAN_DEFAULT_MAX_ITEMS 10000000u
#define KILN_PLAN_MAX_MANIFEST (256u << 20)  /* bytes */

typedef struct kiln_plan_item {
	const char *input;
	const char *output;  /* NULL when error is set */
	const char *error;   /* NULL, or why the item failed at planning */
} kiln_plan_item;

typedef struct kiln_plan kiln_plan;

/* An empty plan, to be filled by kiln_plan_build or kiln_plan_add (journal replay). */
kiln_status kiln_plan_create(kiln_plan **out);
void kiln_plan_destroy(kiln_plan *plan);

/* Expands spec's input into plan. storage is used for directory walks, S3 listings and
 * manifests (it may be NULL for an inline list). More than max_items items is
 * KILN_ERR_TOO_LARGE. msg receives a reason for the client on failure. */
kiln_status kiln_plan_build(kiln_plan *plan, const kiln_job_spec *spec, kiln_storage *storage,
			    size_t max_items, char *msg, size_t msg_cap);

/* Appends one item, copying the strings (output may be NULL when error is set). */
kiln_status kiln_plan_add(kiln_plan *plan, const char *input, const char *output, const char *error);

size_t kiln_plan_count(const kiln_plan *plan);
const kiln_plan_item *kiln_plan_items(const kiln_plan *plan);

/* The output name for rel (an input's name relative to the listed place) under spec's
 * output prefix, or NULL with a reason in why when rel is unsafe. Exposed for tests. */
kiln_status kiln_plan_output_name(const kiln_job_spec *spec, const char *rel, char *out,
				  size_t out_cap, const char **why);

#endif
