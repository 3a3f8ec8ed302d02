#!/bin/sh
# Runs s3rver, a fake S3 server from npm, for kiln's storage tests. On first use it installs
# the pinned version into tools/node_modules (npm and nodejs come from tools/deps.sh); then
# it replaces itself with the server, so the caller's child pid is the server's pid.
#
#   tools/s3rver.sh --install          install only
#   tools/s3rver.sh PORT DIR [opts]    serve DIR on 127.0.0.1:PORT; PORT 0 picks a free port.
#                                      Prints "S3rver listening on 127.0.0.1:<port>" when
#                                      ready. opts go to s3rver, e.g. --configure-bucket NAME
#
# s3rver checks the access key (S3RVER) but not SigV4 signatures; the tests compare kiln's
# signatures with botocore's for that.
set -eu
version=3.7.1
here=$(cd "$(dirname "$0")" && pwd)
modules="$here/node_modules"
stamp="$modules/.kiln-s3rver-$version"

if [ ! -f "$stamp" ]; then
	command -v npm >/dev/null 2>&1 || { echo "s3rver.sh: npm not found (tools/deps.sh installs it)" >&2; exit 1; }
	mkdir -p "$modules"
	# Test processes run in parallel: one installs, the others wait for it.
	(
		flock 9
		if [ ! -f "$stamp" ]; then
			npm install --prefix "$here" --no-save --no-package-lock --no-audit --no-fund \
				--loglevel=error "s3rver@$version" >&2
			touch "$stamp"
		fi
	) 9>"$modules/.kiln-install.lock"
fi

if [ "${1:-}" = "--install" ]; then
	exit 0
fi
if [ $# -lt 2 ]; then
	echo "usage: $0 PORT DIR [s3rver options] | --install" >&2
	exit 2
fi
port=$1
dir=$2
shift 2
# s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy
# provider: without it every paged listing fails with InternalError.
legacy=""
if node --openssl-legacy-provider -e 0 >/dev/null 2>&1; then
	legacy="--openssl-legacy-provider"
fi
exec node $legacy "$modules/s3rver/bin/s3rver.js" --silent --address 127.0.0.1 --port "$port" \
	--directory "$dir" "$@"
