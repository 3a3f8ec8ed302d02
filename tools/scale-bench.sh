#!/bin/bash
# End-to-end scaling on a GPU machine (issue 9): PNG files on local disk -> BC1 DDS on local
# disk, through the real scheduler and workers, on 1..N GPUs, two ways: one worker using
# all the GPUs, and one worker per GPU against one scheduler. Runs over the .bundle made
# by tools/gpu-bundle.sh. Prints a markdown table; logs under $OUT.
#   REPEAT=40 QUALITY=high SKIP_CPU=1 tools/scale-bench.sh
# BUNDLE names the bundle folder (default .bundle); FORMAT_ARGS adds options to every job
# (e.g. "--format astc --block 4x4" for PNG -> ASTC 4x4 .astc); SKIP_RUN=1 leaves out the
# kiln run rows (then the efficiency column has no base); WORKER_THREADS: below; WORK the
# scratch folder of inputs and outputs (default /tmp/kiln-scale; /dev/shm/... keeps the disk out).
set -u
bundle=${BUNDLE:-.bundle}
export LD_LIBRARY_PATH="$PWD/$bundle/lib"
K="$PWD/$bundle/bin/kiln"
read -r -a fmt <<< "${FORMAT_ARGS:-}"
out=${OUT:-scale-logs}
mkdir -p "$out"
repeat=${REPEAT:-40}
quality=${QUALITY:-high}
ngpu=$(nvidia-smi -L | wc -l)
work=${WORK:-/tmp/kiln-scale}
rm -rf "$work"
mkdir -p "$work/in"
# distinct names, so every output is its own file
for r in $(seq 1 "$repeat"); do
	for f in "$bundle"/data/kodak/*.png; do cp "$f" "$work/in/r${r}_$(basename "$f")"; done
done
n=$(ls "$work/in" | wc -l)
mpix=$(awk -v n="$n" 'BEGIN { printf "%.1f", n * 768 * 512 / 1e6 }')
echo "inputs: $n Kodak-size PNGs ($mpix Mpix), $(du -sh "$work/in" | cut -f1); GPUs: $ngpu; quality $quality ${FORMAT_ARGS:-}"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
nproc

gpulist() { seq -s, 0 $(($1 - 1)); }

# kiln run: scheduler + one worker using the given devices, in one process
run_one_worker() {
	local devs=$1
	rm -rf "$work/out"
	local t0=$(date +%s.%N)
	"$K" run -q --input "$work/in" --output "$work/out" --quality "$quality" --devices "$devs" "${fmt[@]}" \
		>"$out/run-$devs.log" 2>&1 || echo "run $devs failed: $(tail -2 "$out/run-$devs.log")"
	local t1=$(date +%s.%N)
	echo "$t0 $t1"
}

# Host threads of each of g workers on this host: its share of the cores. Alone, every
# worker would take all of them (kiln worker's default) and the g workers would
# oversubscribe the CPU (ASTC on 2 GPUs: 1.56x one GPU, against 2.06x for one worker).
# WORKER_THREADS=N gives every worker N instead (an A/B of the sharing).
worker_threads() {
	local t=${WORKER_THREADS:-$(($(nproc) / $1))}
	echo $((t > 0 ? t : 1))
}

# kiln scheduler + one kiln worker per GPU (each with its share of the cores), kiln submit --wait
run_worker_per_gpu() {
	local g=$1
	local threads
	threads=$(worker_threads "$g")
	rm -rf "$work/out" "$work/state"
	"$K" scheduler --listen tcp://127.0.0.1:27001 --http 127.0.0.1:27002 --state-dir "$work/state" \
		>"$out/sched-$g.log" 2>&1 &
	local sp=$!
	sleep 0.5
	local wp=()
	for i in $(seq 0 $((g - 1))); do
		"$K" worker --connect tcp://127.0.0.1:27001 --devices "$i" --threads "$threads" \
			>"$out/worker-$g-$i.log" 2>&1 &
		wp+=($!)
	done
	sleep 1
	local t0=$(date +%s.%N)
	"$K" submit --server http://127.0.0.1:27002 --input "$work/in" --output "$work/out" \
		--quality "$quality" "${fmt[@]}" --wait >"$out/submit-$g.log" 2>&1 || echo "submit $g failed: $(tail -2 "$out/submit-$g.log")"
	local t1=$(date +%s.%N)
	kill "${wp[@]}" 2>/dev/null; wait "${wp[@]}" 2>/dev/null
	kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
	echo "$t0 $t1"
}

row() { # mode gpus t0 t1 base_rate
	awk -v m="$1" -v g="$2" -v t0="$3" -v t1="$4" -v n="$n" -v mp="$mpix" -v base="$5" 'BEGIN {
		s = t1 - t0; r = n / s;
		eff = base > 0 ? sprintf("%.0f%%", 100 * r / (base * g)) : "-";
		printf "| %s | %s | %.2f | %.0f | %.0f | %s |\n", m, g, s, r, mp / s, eff }'
}

echo
echo "| mode | GPUs | seconds | images/s | Mpix/s | efficiency vs 1 GPU |"
echo "|---|---|---|---|---|---|"
if [ "${SKIP_CPU:-0}" != 1 ]; then
	read t0 t1 < <(run_one_worker cpu)
	row "one worker, CPU only ($(nproc) threads)" 0 "$t0" "$t1" 0
fi
base=0
for g in $(seq 1 "$ngpu"); do
	[ "${SKIP_RUN:-0}" = 1 ] && break
	read t0 t1 < <(run_one_worker "$(gpulist "$g")")
	[ "$g" = 1 ] && base=$(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { print n / (b - a) }')
	row "kiln run, one worker, all GPUs" "$g" "$t0" "$t1" "$base"
done
for g in $(seq 1 "$ngpu"); do
	read t0 t1 < <(run_worker_per_gpu "$g")
	row "scheduler + one worker per GPU, --threads $(worker_threads "$g") each" "$g" "$t0" "$t1" "$base"
done
ls "$work/out" | wc -l | xargs echo "outputs of the last run:"
