#!/bin/sh
# Entrypoint of the kiln container images. Turns KILN_* variables and mounted secret
# files into the flags of `kiln worker` / `kiln scheduler`, then execs kiln, so that kiln
# runs as PID 1 and gets SIGTERM itself (a worker drains its shards on it).
#
#   kiln-entrypoint /usr/local/bin/kiln worker [FLAGS...]
#
# Flags from the environment come first and FLAGS last, so a flag given on the command
# line overrides the environment. A variable that is unset or empty adds nothing; a *_FILE
# variable must name a readable file. The flag maps below are also read by
# tests/tools/check_manifests.py, which checks every flag against `kiln SUB --help`:
# keep one "--flag=VAR" per word, "@" marking a variable that names a file.
set -eu

die() {
	echo "kiln-entrypoint: $*" >&2
	exit 2
}

[ $# -ge 2 ] || die "usage: kiln-entrypoint PATH-TO-KILN SUBCOMMAND [FLAGS...]"
bin=$1
sub=$2
shift 2

# The storage layer reads S3 credentials from AWS_* only; a mounted secret file can be
# named instead with AWS_*_FILE (the convention of many official images).
for var in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN; do
	eval "file=\${${var}_FILE:-}"
	[ -n "$file" ] || continue
	eval "direct=\${${var}:-}"
	[ -z "$direct" ] || die "both $var and ${var}_FILE are set; keep one"
	[ -r "$file" ] || die "${var}_FILE: cannot read $file (is the secret mounted?)"
	value=$(cat "$file")
	export "$var=$value"
	unset "${var}_FILE"
done

case $sub in
worker)
	map="--connect=KILN_SCHEDULER --devices=KILN_DEVICES --slots=KILN_SLOTS
	     --curve-server-key=@KILN_CURVE_SERVER_KEY_FILE --curve-secret=@KILN_CURVE_SECRET_FILE"
	if [ -z "${KILN_SCHEDULER:-}" ]; then
		case " $* " in
		*" --connect"* | *" --health "* | *" --help "* | *" -h "*) ;;
		*) die "set KILN_SCHEDULER=tcp://HOST:PORT (the scheduler's --listen address)" ;;
		esac
	fi
	;;
scheduler)
	map="--listen=KILN_LISTEN --http=KILN_HTTP --state-dir=KILN_STATE_DIR
	     --token-file=@KILN_TOKEN_FILE --curve-secret=@KILN_CURVE_SECRET_FILE"
	;;
*)
	map=""
	;;
esac

n=$#
for pair in $map; do
	flag=${pair%%=*}
	var=${pair#*=}
	is_file=""
	case $var in @*) is_file=1 var=${var#@} ;; esac
	eval "value=\${${var}:-}"
	[ -n "$value" ] || continue
	if [ -n "$is_file" ] && [ ! -r "$value" ]; then
		die "$var: cannot read $value (is the secret mounted?)"
	fi
	set -- "$@" "$flag" "$value"
done
# Rotate the caller's FLAGS (the first n) behind the ones from the environment.
i=0
while [ "$i" -lt "$n" ]; do
	set -- "$@" "$1"
	shift
	i=$((i + 1))
done
exec "$bin" "$sub" "$@"
