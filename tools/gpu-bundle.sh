#!/bin/sh
# Builds kiln and its GPU tests and benchmark here (this machine has nvcc but no GPU) and
# packs them with their shared libraries and the test images into .bundle/, for a machine
# that has a GPU but no package registry:
#   export LD_LIBRARY_PATH=$PWD/.bundle/lib KILN_SHARED=$PWD/.bundle/data KILN_BIN=$PWD/.bundle/bin/kiln
#   .bundle/bin/tests-gpu        (what `make test-gpu` runs)
#   .bundle/bin/kiln-bench       (what `make bench` runs)
# BUILD (default build) names the build folder, as for make.
set -eu
cd "$(dirname "$0")/.."
b=${BUILD:-build}
make -j2 BUILD="$b" "$b/kiln" "$b/tests/gpu" "$b/tests/unit" "$b/kiln-bench"
rm -rf .bundle
mkdir -p .bundle/bin .bundle/data
cp "$b/kiln" .bundle/bin/kiln
cp "$b/tests/gpu" .bundle/bin/tests-gpu
cp "$b/tests/unit" .bundle/bin/tests-unit
cp "$b/kiln-bench" .bundle/bin/kiln-bench
shared=${KILN_SHARED:-../shared/data}
cp -r "$shared/kodak" "$shared/pngsuite" .bundle/data/
../shared/tools/bundle-libs .bundle .bundle/bin/*
du -sh .bundle
