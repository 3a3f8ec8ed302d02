/* The dependency rules of docs/ARCHITECTURE.md, checked: common/ includes nothing of the
 * other folders, kernels/ only common/, and worker/ and scheduler/ never each other. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static int count_includes(const char *dirs, const char *pattern)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd,
		 "grep -rlE '#include \"(%s)/' %s --include='*.c' --include='*.h' --include='*.cu' 2>/dev/null | wc -l",
		 pattern, dirs);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p);
	int n = -1;
	cr_assert_eq(fscanf(p, "%d", &n), 1);
	pclose(p);
	return n;
}

Test(layout, include_rules_hold)
{
	cr_expect_eq(count_includes("common", "kernels|worker|scheduler|cli|bench|tests"), 0,
		     "common/ must include nothing of the other folders");
	cr_expect_eq(count_includes("kernels", "worker|scheduler|cli|bench|tests"), 0,
		     "kernels/ may include only common/");
	cr_expect_eq(count_includes("worker", "scheduler|cli|bench|tests"), 0,
		     "worker/ must not include scheduler/ or cli/");
	cr_expect_eq(count_includes("scheduler", "worker|kernels|cli|bench|tests"), 0,
		     "scheduler/ may include only common/");
}
