#!/bin/sh
# On the GPU machine, over the .bundle that tools/gpu-bundle.sh made: what `make test-gpu`
# runs (CPU/GPU byte identity, GPU behaviour), then the GPU part of `make bench`.
# Logs go to $OUT (the device tool's output folder) or ./gpu-logs.
set -u
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.bundle/lib" KILN_SHARED="$PWD/.bundle/data" KILN_BIN="$PWD/.bundle/bin/kiln"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$KILN_BIN" devices | tee -a "$out/gpu.txt"
rc=0
case " $* " in *" tests "*|"  ") .bundle/bin/tests-gpu --jobs=1 --verbose=0 >"$out/test-gpu.log" 2>&1 || rc=1
	tail -5 "$out/test-gpu.log"; grep -E "FAIL|Assertion|Crash" "$out/test-gpu.log" | head -20 ;; esac
case " $* " in *" bench "*|"  ") .bundle/bin/kiln-bench --only gpu --out "$out/bench-gpu.md" >"$out/bench-gpu.log" 2>&1 || rc=1
	cat "$out/bench-gpu.md" 2>/dev/null || tail -20 "$out/bench-gpu.log" ;; esac
exit $rc
