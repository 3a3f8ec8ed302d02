#!/bin/sh
# Runs the libFuzzer targets built by `make fuzz`, each for a bounded time, and prints per
# target the executions, the corpus size and the findings. A finding (crash, leak,
# timeout, out-of-memory) is copied to tests/fuzz/regressions/<target>/, where
# `make test` (suite fuzz_regress) replays it from then on; the exit status is 1 when
# anything was found.
#
# usage: tests/fuzz/run.sh FUZZ_DIR SECONDS KILN_BIN TARGET...
# Seeds: tests/fuzz/corpus/<target> and earlier regressions; for png also PngSuite and
# `kiln samples` output; for container also what `kiln encode` writes from those samples
# (DDS and KTX 2.0, with and without mips). Generated seeds live under FUZZ_DIR only.
set -u
dir=$1 secs=$2 kiln=$3
shift 3
shared=${KILN_SHARED:-../shared/data}
found=0

mkdir -p "$dir/seeds/png" "$dir/seeds/container"
if [ -x "$kiln" ] && [ ! -e "$dir/seeds/.done" ]; then
	"$kiln" samples -o "$dir/seeds/png" >/dev/null 2>&1
	for p in "$dir"/seeds/png/*.png; do
		b=$(basename "$p" .png)
		"$kiln" encode -q --device cpu --quality fast "$p" -o "$dir/seeds/container/$b.dds" >/dev/null 2>&1
		"$kiln" encode -q --device cpu --quality fast --srgb --mipmaps "$p" -o "$dir/seeds/container/$b-srgb-mip.dds" >/dev/null 2>&1
		"$kiln" encode -q --device cpu --quality fast --container ktx2 --mipmaps "$p" -o "$dir/seeds/container/$b-mip.ktx2" >/dev/null 2>&1
	done
	touch "$dir/seeds/.done"
fi

for t in "$@"; do
	corpus="$dir/corpus/$t" art="$dir/artifacts/$t" reg="tests/fuzz/regressions/$t"
	mkdir -p "$corpus" "$art"
	rm -f "$art"/*
	set -- "tests/fuzz/corpus/$t"
	[ -d "$reg" ] && set -- "$@" "$reg"
	[ -d "$dir/seeds/$t" ] && set -- "$@" "$dir/seeds/$t"
	case $t in png|png_kiln) [ -d "$shared/pngsuite" ] && set -- "$@" "$shared/pngsuite" ;; esac
	[ "$t" = png_kiln ] && set -- "$@" "$dir/seeds/png"
	dict=""
	case $t in
	png|png_kiln) dict=tests/fuzz/png.dict ;;
	container) dict=tests/fuzz/container.dict ;;
	proto|spec) dict=tests/fuzz/json.dict ;;
	esac
	dictarg=""
	[ -n "$dict" ] && dictarg="-dict=$dict"
	# -rss_limit_mb: an input that makes the parser allocate 2 GiB is a finding, not a
	# reason for the machine to swap; -timeout: one input taking 10 s is a finding too.
	"$dir/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 $dictarg -artifact_prefix="$art/" \
		"$corpus" "$@" >"$dir/$t.log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/$t.log" | tail -1)
	[ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$dir/$t.log" | tail -1 | tr -d '#')
	cov=$(grep -o 'cov: [0-9]*' "$dir/$t.log" | tail -1)
	n=0
	for a in "$art"/*; do
		[ -f "$a" ] || continue
		mkdir -p "$reg"
		cp "$a" "$reg/"
		n=$((n + 1))
	done
	status="no findings"
	if [ "$n" -gt 0 ] || [ "$rc" -ne 0 ]; then
		found=1
		status="$n finding(s), kept in $reg/ (log: $dir/$t.log)"
		grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|fuzz invariant' "$dir/$t.log"
	fi
	echo "fuzz $t: ${execs:-?} executions in ${secs} s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) files: $status"
done
exit $found
