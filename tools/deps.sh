#!/bin/sh
# Installs the Debian/Ubuntu packages kiln needs to build, test and benchmark, when missing.
# Run by every make target through a stamp file; says what it installs.
set -eu
pkgs="build-essential pkg-config libpng-dev libspng-dev zlib1g-dev libjansson-dev libcriterion-dev
      libzmq3-dev libcurl4-openssl-dev libmicrohttpd-dev libsquish-dev libastcenc-dev
      astcenc libssl-dev python3-botocore python3-yaml pngcheck"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js runs the S3 test server (s3rver); any installed node/npm will do, and Debian's
# packages would conflict with a node installed another way.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -z "$missing" ]; then
	exit 0
fi
echo "kiln: installing missing packages:$missing"
if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "kiln: not root and no sudo; install these packages yourself:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
