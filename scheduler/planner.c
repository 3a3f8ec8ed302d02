/* Input expansion and output naming for jobs; see planner.h. */
#include "scheduler/planner.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/uri.h"

#define ARENA_BLOCK (1u << 20)

typedef struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
} arena_block;

struct kiln_plan {
	kiln_plan_item *items;
	size_t count, cap;
	arena_block *blocks;
	/* output names seen so far, so two inputs that map to one output fail instead of
	 * overwriting each other: open addressing (see SLOT). Keeping 32 bits of each name's
	 * hash in its slot lets growing and probing skip the names themselves: at a million
	 * items those cache misses were a third of planning. */
	uint64_t *seen;
	size_t seen_cap;
};

kiln_status kiln_plan_create(kiln_plan **out)
{
	*out = kiln_calloc(1, sizeof **out);
	return *out ? KILN_OK : KILN_ERR_NOMEM;
}

void kiln_plan_destroy(kiln_plan *plan)
{
	if (!plan)
		return;
	for (arena_block *b = plan->blocks, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	free(plan->items);
	free(plan->seen);
	free(plan);
}

size_t kiln_plan_count(const kiln_plan *plan)
{
	return plan ? plan->count : 0;
}

const kiln_plan_item *kiln_plan_items(const kiln_plan *plan)
{
	return plan ? plan->items : NULL;
}

static const char *arena_strdup(kiln_plan *p, const char *s)
{
	size_t len = strlen(s) + 1;
	arena_block *b = p->blocks;
	if (!b || b->cap - b->used < len) {
		size_t cap = len > ARENA_BLOCK ? len : ARENA_BLOCK;
		arena_block *nb = kiln_malloc(sizeof *nb + cap);
		if (!nb)
			return NULL;
		nb->used = 0;
		nb->cap = cap;
		/* a huge string gets its own block behind the current one, which keeps its room */
		if (b && len > ARENA_BLOCK) {
			nb->next = b->next;
			b->next = nb;
		} else {
			nb->next = b;
			p->blocks = nb;
		}
		b = nb;
	}
	char *dst = b->data + b->used;
	memcpy(dst, s, len);
	b->used += len;
	return dst;
}

/* FNV-1a, then a final mix: FNV's low bits (the ones a power-of-two table uses) never
 * see its high bits, and names that differ only in a few digits before a common suffix
 * (img0000001.dds, img0000002.dds, ...) then land in long runs of neighbouring slots,
 * which linear probing turns into long chains of string comparisons. */
static size_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	h ^= h >> 32;
	return (size_t)h;
}

/* A slot: the upper 32 bits of the name's hash (which also pick its place, so growing
 * needs no name) and the item index + 1 (0 = empty). */
#define SLOT(hash32, idx) (((uint64_t)(hash32) << 32) | (uint64_t)((idx) + 1))
#define SLOT_HASH(slot) ((uint32_t)((slot) >> 32))
#define SLOT_INDEX(slot) ((size_t)((slot) & 0xffffffffu) - 1)

static kiln_status seen_grow(kiln_plan *p)
{
	size_t cap = p->seen_cap ? p->seen_cap * 2 : 1024;
	uint64_t *t = kiln_calloc(cap, sizeof *t);
	if (!t)
		return KILN_ERR_NOMEM;
	for (size_t i = 0; i < p->seen_cap; i++) {
		if (!p->seen[i])
			continue;
		size_t h = SLOT_HASH(p->seen[i]) & (cap - 1);
		while (t[h])
			h = (h + 1) & (cap - 1);
		t[h] = p->seen[i];
	}
	free(p->seen);
	p->seen = t;
	p->seen_cap = cap;
	return KILN_OK;
}

/* true if output is new (and records it as item index idx) */
static kiln_status seen_insert(kiln_plan *p, const char *output, size_t idx, bool *fresh)
{
	/* keep the load under one half so probes stay short; a slot holds 32 bits of index
	 * and 32 of hash, so the table can place at most 2^31 names */
	if (idx >= UINT32_MAX / 2)
		return KILN_ERR_TOO_LARGE;
	if ((p->count + 1) * 2 > p->seen_cap) {
		kiln_status st = seen_grow(p);
		if (st != KILN_OK)
			return st;
	}
	uint32_t hash = (uint32_t)(hash_str(output) >> 32);
	size_t h = hash & (p->seen_cap - 1);
	while (p->seen[h]) {
		if (SLOT_HASH(p->seen[h]) == hash && strcmp(p->items[SLOT_INDEX(p->seen[h])].output, output) == 0) {
			*fresh = false;
			return KILN_OK;
		}
		h = (h + 1) & (p->seen_cap - 1);
	}
	p->seen[h] = SLOT(hash, idx);
	*fresh = true;
	return KILN_OK;
}

kiln_status kiln_plan_add(kiln_plan *p, const char *input, const char *output, const char *error)
{
	if (!p || !input || (!output && !error))
		return KILN_ERR_INVALID_ARG;
	if (p->count == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256, bytes;
		if (!kiln_size_mul(cap, sizeof *p->items, &bytes))
			return KILN_ERR_OVERFLOW;
		kiln_plan_item *grown = kiln_realloc(p->items, bytes);
		if (!grown)
			return KILN_ERR_NOMEM;
		p->items = grown;
		p->cap = cap;
	}
	kiln_plan_item *it = &p->items[p->count];
	it->input = arena_strdup(p, input);
	it->output = output ? arena_strdup(p, output) : NULL;
	it->error = error ? arena_strdup(p, error) : NULL;
	if (!it->input || (output && !it->output) || (error && !it->error))
		return KILN_ERR_NOMEM;
	if (it->output) {
		bool fresh;
		kiln_status st = seen_insert(p, it->output, p->count, &fresh);
		if (st != KILN_OK)
			return st;
		if (!fresh) {
			it->output = NULL;
			it->error = arena_strdup(p, "output name collides with an earlier input's");
			if (!it->error)
				return KILN_ERR_NOMEM;
		}
	}
	p->count++;
	return KILN_OK;
}

/* Every segment of rel must be a plain name: no "", ".", "..", no control characters,
 * so that prefix + rel stays under prefix on every backend. */
static const char *unsafe_reason(const char *rel)
{
	if (!rel[0])
		return "empty name";
	if (rel[0] == '/')
		return "absolute name";
	for (const char *s = rel; *s;) {
		const char *end = strchr(s, '/');
		size_t n = end ? (size_t)(end - s) : strlen(s);
		if (n == 0)
			return "empty path segment";
		if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return "'.' or '..' in the name";
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
				return "control character in the name";
		s += n;
		if (*s == '/')
			s++;
		if (end && !*s)
			return "name ends with '/'";
	}
	return NULL;
}

kiln_status kiln_plan_output_name(const kiln_job_spec *spec, const char *rel, char *out,
				  size_t out_cap, const char **why)
{
	*why = unsafe_reason(rel);
	if (*why)
		return KILN_ERR_INVALID_ARG;
	const char *base = strrchr(rel, '/');
	base = base ? base + 1 : rel;
	const char *dot = strrchr(base, '.');
	/* ".png" is a hidden file's whole name, not an extension */
	size_t stem = dot && dot != base ? (size_t)(dot - rel) : strlen(rel);
	int n = snprintf(out, out_cap, "%s%.*s.%s", spec->output, (int)stem, rel, spec->ext);
	if (n < 0 || (size_t)n >= out_cap) {
		*why = "output name too long";
		return KILN_ERR_TOO_LARGE;
	}
	kiln_uri *u = kiln_malloc(sizeof *u);
	if (!u)
		return KILN_ERR_NOMEM;
	kiln_status st = kiln_uri_parse(out, u);
	free(u);
	if (st != KILN_OK)
		*why = "output name is not a valid location";
	return st;
}

typedef struct plan_ctx {
	kiln_plan *plan;
	const kiln_job_spec *spec;
	size_t max_items;
	const char *partial;  /* prepended to listed names: see build_prefix */
	char *rel;            /* scratch, KILN_URI_PATH_MAX */
	char *out;            /* scratch, KILN_URI_PATH_MAX */
} plan_ctx;

/* Plans one input whose relative name is partial + name. */
static kiln_status plan_one(plan_ctx *c, const char *input, const char *name)
{
	if (c->plan->count >= c->max_items)
		return KILN_ERR_TOO_LARGE;
	const char *why = NULL;
	int n = snprintf(c->rel, KILN_URI_PATH_MAX, "%s%s", c->partial, name);
	if (n < 0 || n >= KILN_URI_PATH_MAX)
		why = "name too long";
	else if (kiln_plan_output_name(c->spec, c->rel, c->out, KILN_URI_PATH_MAX, &why) == KILN_ERR_NOMEM)
		return KILN_ERR_NOMEM;
	return kiln_plan_add(c->plan, input, why ? NULL : c->out, why);
}

static kiln_status list_entry(void *ctx, const kiln_storage_entry *e)
{
	return plan_one(ctx, e->uri, e->name);
}

/* Listed names are relative to the prefix. "s3://b/img/" lists names under img/;
 * "s3://b/img" also matches "img2/x", so the relative name starts at "img" (the partial
 * last segment) to keep such siblings apart. A local directory named without its
 * trailing slash is listed as the directory itself. */
static kiln_status build_prefix(plan_ctx *c, kiln_storage *storage, char *msg, size_t msg_cap)
{
	kiln_uri *u = kiln_malloc(sizeof *u);
	if (!u)
		return KILN_ERR_NOMEM;
	kiln_status st = kiln_uri_parse(c->spec->location, u);
	if (st != KILN_OK) {
		snprintf(msg, msg_cap, "input: invalid location");
		goto fail;
	}
	const char *slash = strrchr(u->path, '/');
	const char *last = slash ? slash + 1 : u->path;
	struct stat sb;
	bool is_dir = u->scheme == KILN_URI_FILE && stat(u->path, &sb) == 0 && S_ISDIR(sb.st_mode);
	c->partial = is_dir ? "" : last;
	st = kiln_storage_list(storage, c->spec->location, c->spec->glob, list_entry, c, msg, msg_cap);
	if (st == KILN_ERR_TOO_LARGE && c->plan->count >= c->max_items)
		snprintf(msg, msg_cap, "input: more than %zu items", c->max_items);
fail:
	free(u);
	return st;
}

/* Inputs given by URI (inline or from a manifest) are named relative to the longest
 * directory prefix that the valid ones share, so a list from one folder keeps its
 * sub-folders; an invalid URI fails its own item and does not shorten everyone's name. */
static kiln_status build_uris(plan_ctx *c, const char *const *uris, size_t n, char *msg, size_t msg_cap)
{
	if (n > c->max_items) {
		snprintf(msg, msg_cap, "input: more than %zu items", c->max_items);
		return KILN_ERR_TOO_LARGE;
	}
	kiln_status st = KILN_ERR_NOMEM;
	kiln_uri *u = kiln_malloc(sizeof *u);
	bool *valid = kiln_calloc(n ? n : 1, sizeof *valid);
	if (!u || !valid)
		goto fail;
	const char *first = NULL;
	size_t common = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(valid[i] = kiln_uri_parse(uris[i], u) == KILN_OK))
			continue;
		if (!first) {
			first = uris[i];
			common = strlen(first);
		}
		size_t k = 0;
		while (k < common && uris[i][k] == first[k])
			k++;
		common = k;
	}
	/* with one URI the common prefix is the whole URI: its base name remains */
	while (common && first[common - 1] != '/')
		common--;
	c->partial = "";
	st = KILN_OK;
	for (size_t i = 0; i < n && st == KILN_OK; i++) {
		if (!valid[i])
			st = kiln_plan_add(c->plan, uris[i], NULL, "invalid input URI (bad scheme, '.' or '..', or too long)");
		else if (common)
			st = plan_one(c, uris[i], uris[i] + common);
		else if ((st = kiln_uri_parse(uris[i], u)) == KILN_OK)
			/* nothing shared (mixed buckets or schemes): the path or key itself */
			st = plan_one(c, uris[i], u->path + (u->path[0] == '/'));
	}
fail:
	free(valid);
	free(u);
	return st;
}

static kiln_status build_list(plan_ctx *c, char *msg, size_t msg_cap)
{
	size_t n = json_array_size(c->spec->list);
	const char **uris = kiln_malloc_array(n ? n : 1, sizeof *uris);
	if (!uris)
		return KILN_ERR_NOMEM;
	for (size_t i = 0; i < n; i++)
		uris[i] = json_string_value(json_array_get(c->spec->list, i));
	kiln_status st = build_uris(c, uris, n, msg, msg_cap);
	free(uris);
	return st;
}

/* A manifest: one URI per line; blank lines and lines starting with '#' are skipped, a
 * trailing '\r' is dropped (manifests written on Windows). */
static kiln_status build_manifest(plan_ctx *c, kiln_storage *storage, char *msg, size_t msg_cap)
{
	kiln_buf buf;
	kiln_buf_init(&buf, KILN_PLAN_MAX_MANIFEST);
	const char **uris = NULL;
	size_t n = 0, cap = 0;
	kiln_status st = kiln_storage_get(storage, c->spec->location, &buf, msg, msg_cap);
	if (st == KILN_ERR_TOO_LARGE)
		snprintf(msg, msg_cap, "input.manifest: larger than %u bytes", KILN_PLAN_MAX_MANIFEST);
	if (st != KILN_OK)
		goto fail;
	st = kiln_buf_append(&buf, "", 1);
	if (st != KILN_OK)
		goto fail;
	char *text = (char *)buf.data;
	if (memchr(text, '\0', buf.len - 1)) {
		snprintf(msg, msg_cap, "input.manifest: holds a NUL byte; expected text");
		st = KILN_ERR_CORRUPT;
		goto fail;
	}
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		size_t len = strlen(line);
		if (len && line[len - 1] == '\r')
			line[--len] = '\0';
		if (!len || line[0] == '#')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			const char **grown = kiln_realloc(uris, cap * sizeof *uris);
			st = KILN_ERR_NOMEM;
			if (!grown)
				goto fail;
			uris = grown;
		}
		uris[n++] = line;
	}
	st = build_uris(c, uris, n, msg, msg_cap);
fail:
	free(uris);
	kiln_buf_free(&buf);
	return st;
}

kiln_status kiln_plan_build(kiln_plan *plan, const kiln_job_spec *spec, kiln_storage *storage,
			    size_t max_items, char *msg, size_t msg_cap)
{
	if (msg && msg_cap)
		msg[0] = '\0';
	if (!plan || !spec || (spec->input_kind != KILN_INPUT_LIST && !storage) || !msg || !msg_cap)
		return KILN_ERR_INVALID_ARG;
	plan_ctx c = {plan, spec, max_items ? max_items : KILN_PLAN_DEFAULT_MAX_ITEMS, "", NULL, NULL};
	kiln_status st = KILN_ERR_NOMEM;
	c.rel = kiln_malloc(KILN_URI_PATH_MAX);
	c.out = kiln_malloc(KILN_URI_PATH_MAX);
	if (!c.rel || !c.out)
		goto fail;
	switch (spec->input_kind) {
	case KILN_INPUT_PREFIX: st = build_prefix(&c, storage, msg, msg_cap); break;
	case KILN_INPUT_LIST: st = build_list(&c, msg, msg_cap); break;
	case KILN_INPUT_MANIFEST: st = build_manifest(&c, storage, msg, msg_cap); break;
	}
	if (st != KILN_OK && !msg[0])
		snprintf(msg, msg_cap, "planning failed: %s", kiln_strerror(st));
fail:
	free(c.rel);
	free(c.out);
	return st;
}
