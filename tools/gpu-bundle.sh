#!/bin/sh
# Builds kiln and its GPU tests and benchmark here (this machine has nvcc but no GPU) and
# packs them with their shared libraries and the test images into .bundle/, for a machine
# that has a GPU but no package registry:
#   export LD_LIBRARY_PATH=$PWD/.bundle/lib KILN_SHARED=$PWD/.bundle/data KILN_BIN=$PWD/.bundle/bin/kiln
#   .bundle/bin/tests-gpu        (what `make test-gpu` runs)
#   .bundle/bin/kiln-bench       (what `make bench` runs)
# BUILD (default build) names the build folder, as for make; BUNDLE (default .bundle) the
# output folder, so that several builds can be bundled side by side.
set -eu
cd "$(dirname "$0")/.."
b=${BUILD:-build}
o=${BUNDLE:-.bundle}
make -j2 BUILD="$b" "$b/kiln" "$b/tests/gpu" "$b/tests/unit" "$b/kiln-bench"
rm -rf "$o"
mkdir -p "$o/bin" "$o/data"
cp "$b/kiln" "$o/bin/kiln"
cp "$b/tests/gpu" "$o/bin/tests-gpu"
cp "$b/tests/unit" "$o/bin/tests-unit"
cp "$b/kiln-bench" "$o/bin/kiln-bench"
# debug info is most of each binary and the device's carry is capped (64 MiB in all)
strip --strip-debug "$o"/bin/*
shared=${KILN_SHARED:-../shared/data}
cp -r "$shared/kodak" "$shared/pngsuite" "$o/data/"
../shared/tools/bundle-libs "$o" "$o"/bin/*
du -sh "$o"
