#!/bin/sh
# Builds a kiln-bench (or another binary linked with libkiln.a: TARGET=tests/gpu) whose ASTC
# encoder (kernels/astc/) is taken from another revision, for A/B runs of the GPU kernel in
# one device call: only the ASTC objects are compiled (seconds), the rest comes from
# BUILD's library, and the output must stay byte-identical with the CPU backend (the bench
# checks every row against it; tests/gpu checks it for every footprint and batch size).
#   tools/astc-variant.sh REV OUT       e.g. tools/astc-variant.sh astc-locals .bundle/bin/kiln-bench-locals
#   TARGET=tests/gpu tools/astc-variant.sh astc-locals .bundle/bin/tests-gpu-locals
# NVEXTRA: more nvcc flags for the ASTC kernel alone (e.g. a -D an experiment reads).
# BUILD (default build) must hold a finished build of this tree, TARGET included.
set -eu
cd "$(dirname "$0")/.."
rev=$1
out=$2
b=${BUILD:-build}
target=${TARGET:-kiln-bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the ASTC sources of REV over a copy of this tree's headers
mkdir -p "$tmp/src"
git archive HEAD kernels common | tar -x -C "$tmp/src"
git archive "$rev" kernels/astc | tar -x -C "$tmp/src"
nvflags=$(make -s -p -n BUILD="$b" 2>/dev/null | sed -n 's/^NVFLAGS = //p' | head -1)
cflags=$(make -s -p -n BUILD="$b" 2>/dev/null | sed -n 's/^CFLAGS_COMMON = //p' | head -1)
[ -n "$nvflags" ] && [ -n "$cflags" ] || { echo "astc-variant: cannot read NVFLAGS/CFLAGS from the Makefile" >&2; exit 1; }
(cd "$tmp/src" && /usr/local/cuda/bin/nvcc $nvflags ${NVEXTRA:-} -DKILN_HAVE_CUDA -c kernels/astc/astc_cuda.cu -o "$tmp/astc_cuda.cu.o")
(cd "$tmp/src" && cc $cflags -DKILN_HAVE_CUDA -c kernels/astc/astc_cpu.c -o "$tmp/astc_cpu.o")
cp "$b/libkiln.a" "$tmp/libkiln.a"
ar r "$tmp/libkiln.a" "$tmp/astc_cuda.cu.o" "$tmp/astc_cpu.o"
# -B: the link line is printed even when the target is up to date
link=$(make -n -B BUILD="$b" "$b/$target" 2>/dev/null | grep -- "-o $b/$target " | tail -1)
[ -n "$link" ] || { echo "astc-variant: cannot read the $target link line" >&2; exit 1; }
eval "$(echo "$link" | sed "s| $b/libkiln.a | $tmp/libkiln.a |; s|-o $b/$target |-o $out |")"
strip --strip-debug "$out"
echo "astc-variant: $out (kernels/astc of $(git rev-parse --short "$rev"))"
