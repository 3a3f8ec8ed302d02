/* Replays every fuzzing input kept in the repository through the fuzzed entry points
 * (tests/fuzz/fuzz_targets.h), built here by the normal compiler into the unit binary:
 * the seed corpora under tests/fuzz/corpus/<target>/ and the inputs that once crashed a
 * target, under tests/fuzz/regressions/<target>/. Each must come back with a status (a
 * crash or a broken invariant aborts, which Criterion reports as a failure). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "tests/fuzz/fuzz_targets.h"

typedef kiln_status (*entry_fn)(const uint8_t *data, size_t size);

/* Feeds every regular file of dir (a missing dir is fine: no findings yet) to fn;
 * returns how many files were fed. */
static unsigned replay_dir(const char *dir, entry_fn fn)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		kiln_buf file;
		kiln_buf_init(&file, (size_t)64 << 20);
		cr_assert_eq(kiln_buf_read_file(&file, path), KILN_OK, "%s", path);
		/* an empty file reads as a NULL buffer; the fuzzer passes a valid pointer */
		static const uint8_t none[1];
		kiln_status st = fn(file.len ? file.data : none, file.len);
		cr_expect(st >= KILN_OK && st < KILN_ERR_COUNT_, "%s: no status (%d)", path, (int)st);
		kiln_buf_free(&file);
		n++;
	}
	closedir(d);
	return n;
}

static void replay(const char *target, entry_fn fn)
{
	char dir[256];
	snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", target);
	unsigned seeds = replay_dir(dir, fn);
	cr_expect_gt(seeds, 0, "the %s seed corpus is in the repository", target);
	snprintf(dir, sizeof dir, "tests/fuzz/regressions/%s", target);
	replay_dir(dir, fn);
}

TestSuite(fuzz_regress, .timeout = 60);

Test(fuzz_regress, png) { replay("png", kiln_fuzz_png); }
Test(fuzz_regress, container) { replay("container", kiln_fuzz_container); }
Test(fuzz_regress, proto) { replay("proto", kiln_fuzz_proto); }
Test(fuzz_regress, spec) { replay("spec", kiln_fuzz_spec); }
Test(fuzz_regress, astc) { replay("astc", kiln_fuzz_astc); }
Test(fuzz_regress, astc_encode) { replay("astc_encode", kiln_fuzz_astc_encode); }
