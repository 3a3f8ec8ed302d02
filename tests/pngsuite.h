/* The PngSuite files (test_data_dir()/pngsuite) as the unit and GPU tests walk them: the
 * names of its *.png files in directory order, the valid ones or the x* ones, which the
 * suite means to be refused. Each test file used to list the directory itself. Header
 * only (static inline), like tests/png_testutil.h, so that both test binaries use it;
 * failures are Criterion assertions in the calling test. */
#ifndef KILN_TESTS_PNGSUITE_H
#define KILN_TESTS_PNGSUITE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/testutil.h"

typedef enum pngsuite_kind {
	PNGSUITE_VALID,   /* names not starting with 'x' */
	PNGSUITE_BROKEN,  /* x*.png: corrupt on purpose */
	PNGSUITE_ALL,
} pngsuite_kind;

enum { PNGSUITE_MAX_FILES = 256, PNGSUITE_NAME_MAX = 64 };

typedef struct pngsuite_list {
	size_t n;
	char names[PNGSUITE_MAX_FILES][PNGSUITE_NAME_MAX];
} pngsuite_list;

/* Fills l with the *.png names of the kind, in directory order (the order the tests have
 * always used, so that batches hold the same files). Asserts that the directory opens and
 * that every name fits. */
static inline void pngsuite_list_files(pngsuite_list *l, pngsuite_kind kind)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/pngsuite", test_data_dir());
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "no PngSuite at %s", dir);
	l->n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 4, ".png") != 0)
			continue;
		if (kind != PNGSUITE_ALL && (e->d_name[0] == 'x') != (kind == PNGSUITE_BROKEN))
			continue;
		cr_assert_lt(l->n, (size_t)PNGSUITE_MAX_FILES, "more than %d PngSuite files", PNGSUITE_MAX_FILES);
		cr_assert_lt(len, (size_t)PNGSUITE_NAME_MAX, "%s", e->d_name);
		memcpy(l->names[l->n++], e->d_name, len + 1);
	}
	closedir(d);
}

/* test_data_dir()/pngsuite/name into out. */
static inline const char *pngsuite_path(char *out, size_t cap, const char *name)
{
	return test_data_path(out, cap, "pngsuite", name);
}

#endif
