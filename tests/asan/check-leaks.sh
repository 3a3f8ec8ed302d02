#!/bin/sh
# Reads the log of an ASan test run and fails (exit 1) on any LeakSanitizer report with a
# frame outside the test framework: a leak in kiln or in a test. Reports whose frames all
# lie in libcriterion (its runner keeps per-run state it never frees, and it is built
# without frame pointers, so its stacks stop there) are counted and let pass. A path-wide
# suppression of libcriterion.so cannot be used instead: every test's stack passes
# through it, so it would hide every leak (tests/asan/lsan.supp).
#
# usage: tests/asan/check-leaks.sh LOG
log=$1
awk '
/ERROR: LeakSanitizer/ { reports++ }
/^(Direct|Indirect) leak of/ { if (inblk) finish(); inblk = 1; ours = 0; head = $0; next }
inblk && /^ *#[0-9]+ / {
	if ($1 == "#0") next  # the allocator interceptor
	if ($0 !~ /libcriterion\.so|libnanomsg\.so|libboxfort/) { ours = 1; frames = frames "\n" $0 }
	next
}
inblk && !/^ *#[0-9]+ / { finish() }
function finish() {
	if (ours) { bad++; print "leak outside the test framework: " head frames }
	else framework++
	inblk = 0; frames = ""
}
END {
	if (inblk) finish()
	printf "check-leaks: %d LeakSanitizer report(s), %d leak(s) inside libcriterion only, %d elsewhere\n", reports, framework, bad
	exit bad ? 1 : 0
}' "$log"
