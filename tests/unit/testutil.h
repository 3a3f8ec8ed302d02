/* Helpers shared by the unit tests: where the shared test data lives, temp dirs. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

/* ../shared/data relative to the repository root (tests run from there), or $KILN_SHARED. */
static inline const char *test_data_dir(void)
{
	const char *env = getenv("KILN_SHARED");
	return env ? env : "../shared/data";
}

/* Joins test_data_dir()/sub/name into out. */
static inline const char *test_data_path(char *out, size_t cap, const char *sub, const char *name)
{
	snprintf(out, cap, "%s/%s/%s", test_data_dir(), sub, name);
	return out;
}

#endif
