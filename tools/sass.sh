#!/bin/sh
# Disassembles a CUDA source file's sm_90 code on a machine without a GPU or cuobjdump:
#   tools/sass.sh kernels/png/png_dec_cuda.cu OUT.sass [extra nvcc flags, e.g. -DFOO=1]
# The CUDA 13 toolkit here ships no disassembler; Debian's nvidia-cuda-toolkit (11.8,
# non-free) has nvdisasm, which reads sm_90 code once the cubin's ELF header carries the
# older flags layout (e_flags 0x005a055a, ABI version 7). Instructions newer than 11.8 are
# left out of the listing (their addresses are missing), so count instructions by address
# ranges. The package is fetched once into ~/.cache/kiln-nvdisasm (apt-get download, no
# install; needs the Debian archive reachable).
set -eu
src=$1
out=$2
shift 2
cache=${HOME}/.cache/kiln-nvdisasm
nvdisasm=$cache/usr/bin/nvdisasm
if [ ! -x "$nvdisasm" ]; then
	mkdir -p "$cache"
	list=$(mktemp --suffix=.sources)
	printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$list"
	apt-get update -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
		-o APT::Get::List-Cleanup=0 -qq
	(cd "$cache" && apt-get download -o Dir::Etc::sourcelist="$list" \
		-o Dir::Etc::sourceparts=- nvidia-cuda-toolkit && dpkg-deb -x nvidia-cuda-toolkit_*.deb .)
	rm -f "$list"
fi
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
cubin=$(mktemp --suffix=.cubin)
"$nvcc" -cubin -O3 -std=c++17 -fmad=false -I. -arch=sm_90 -Xcompiler -ffp-contract=off -DKILN_HAVE_CUDA "$@" \
	"$src" -o "$cubin"
python3 - "$cubin" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
struct.pack_into('<I', d, 0x30, 0x005a055a)  # EF_CUDA_SM90 in the pre-12.x layout
d[8] = 7                                     # ELF ABI version of those toolkits
open(sys.argv[1], 'wb').write(d)
PY
"$nvdisasm" -c "$cubin" > "$out"
rm -f "$cubin"
