#!/usr/bin/env bash
# rnicd's daemon path (the only one) against honest anchors, in one run on
# one veth pair (bench/netbench/compare.go says what is measured):
# a C UDP ping-pong built here with gcc, busy-polling and blocking; iperf3
# UDP at 108 B and at full packets, TCP one stream and -P 8; the rnic tools
# and Debian's perftest through the C library; 1, 2, 4 and 8 parallel tool
# pairs; the daemons' CPU per Gbit/s and when idle. Each figure is the
# best of -rounds runs, the builds taking turns; the table goes into
# BENCHMARKS.md above the earlier runs, with date, machine, load average
# and each build's commit.
#
#   bench/run.sh [-t SECS] [-rounds N] [-o FILE] [-only REGEXP] [-quick] [NAME=REV ...]
#       builds REV (a git revision; "." or none: this working tree) of each
#       NAME into one folder, then runs. Needs root (network namespaces).
#       -only keeps the figures whose name matches REGEXP, to take one
#       figure the best of many rounds: -rounds 6 -only '65536, 1 QP$|TCP, 1 stream'.
#   bench/run.sh -build DIR [NAME=REV ...]
#       only builds, into DIR: DIR/anchors (udppp, udprr, netbench, all
#       static; DIR/anchors/debian: this machine's iperf3 and perftest
#       tools, if installed, with their libraries and the loader that runs
#       them) and DIR/NAME (rnicd, rnic, clib/, COMMIT). To run on a
#       machine without Go, gcc, iproute2 or packages, copy DIR there and run
#           DIR/anchors/netbench -compare -anchors DIR/anchors NAME=DIR/NAME ...
#       A build named twice, once with rnicd flags, measures a setting
#       against the default in the same run: 'ack0=DIR/NAME -ack-hold 0'.
#       What is missing (iperf3, perftest) is said in the table. On a
#       machine that refuses network namespaces (a container) netbench
#       says so and runs both sides on loopback (-net auto, the default).
#       For a lent machine that takes one folder (bench/out is ignored):
#           bench/run.sh -build bench/out/b this=HEAD && tar czf bench/out/b.tgz -C bench/out b
#       and there, root, from the repository's root:
#           tar xzf bench/out/b.tgz -C /tmp && /tmp/b/anchors/netbench -compare -anchors /tmp/b/anchors -o OUT.md this=/tmp/b/this 'ack0=/tmp/b/this -ack-hold 0'
#       (the second build is the same daemons ACKing at once: on 2 cores
#       the held ACK costs a datagram on every message's path and spares
#       a pure-spinning program's tail; BENCHMARKS.md, "Where a 2-byte
#       message's time goes")
#       Where a 2-byte message's time goes, on the same machine, from the
#       same folder (loopback, a few seconds; the traces cut into hops):
#           bench/latpath.sh /tmp/b/this /tmp/b/anchors
#   bench/run.sh -netbench [netbench flags]
#       the older table (both MTUs, 1024 QPs, -soak-only).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

# build_anchors DIR: the anchors and the runner, static.
build_anchors() {
	mkdir -p "$1"
	gcc -O2 -Wall -Wextra -static -o "$1/udppp" bench/udppp/udppp.c
	CGO_ENABLED=0 go build -o "$1" ./bench/udprr ./bench/netbench
	carry_debian "$1"
}

# carry_debian DIR: Debian's iperf3 and the perftest tools netbench runs,
# where installed, into DIR/debian/bin, with every library they load and
# the loader that loads them in DIR/debian/lib (the loader as ld.so):
# netbench starts them with that loader, so a machine with another libc or
# none of these packages runs them as they run here. rdma-core's own
# libraries stay behind: the build's clib stands in for each of them.
carry_debian() {
	local d=$1/debian p lib
	mkdir -p "$d/bin" "$d/lib"
	for p in iperf3 ib_send_lat ib_write_lat ib_write_bw; do
		p=$(command -v "$p") || continue
		cp "$p" "$d/bin/"
		for lib in $(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
			case $lib in
			*/libibverbs.so.* | */librdmacm.so.* | */libmlx5.so.* | */libefa.so.*) ;;
			*/ld-linux*) cp -L "$lib" "$d/lib/ld.so" ;;
			*) cp -L "$lib" "$d/lib/" ;;
			esac
		done
	done
	[ -e "$d/lib/ld.so" ] || rm -rf "$d"
}

# build_rev DIR NAME REV: rnicd, rnic and the C library of REV into DIR/NAME.
build_rev() {
	local out=$1/$2 rev=$3 src=$top wt=""
	mkdir -p "$out"
	if [ "$rev" != . ]; then
		wt=$(mktemp -d /tmp/rnicd-bench-XXXXXX)
		git worktree add -q --detach "$wt" "$rev"
		src=$wt
		git -C "$src" rev-parse --short HEAD >"$out/COMMIT"
	else
		{ git rev-parse --short HEAD; [ -z "$(git status --porcelain --untracked-files=no)" ] || echo "(with uncommitted changes)"; } | paste -sd' ' >"$out/COMMIT"
	fi
	(cd "$src" && CGO_ENABLED=0 go build -o "$out" ./cmd/rnicd ./cmd/rnic)
	if command -v make >/dev/null && [ -e /usr/include/infiniband/verbs.h ]; then
		make -s -C "$src/clib" B="$out/clib" >/dev/null
	else
		echo "bench/run.sh: no make or rdma-core headers: $2 has no C library (Debian's perftest rows are skipped)" >&2
	fi
	if [ -n "$wt" ]; then git worktree remove --force "$wt"; fi
}

if [ "${1:-}" = -netbench ]; then
	shift
	[ "$(id -u)" = 0 ] || { echo "bench/run.sh: needs root for network namespaces" >&2; exit 2; }
	bin=$(mktemp -d)
	trap 'rm -rf "$bin"' EXIT
	CGO_ENABLED=0 go build -o "$bin" ./cmd/rnicd ./cmd/rnic ./bench/udprr
	exec go run ./bench/netbench -bin "$bin" "$@"
fi

keep="" runflags=() builds=()
while [ $# -gt 0 ]; do
	case $1 in
	-build) keep=$(realpath -m "$2"); shift 2 ;;
	-t | -rounds | -o | -only) runflags+=("$1" "$2"); shift 2 ;;
	-quick) runflags+=("$1"); shift ;;
	*=*) builds+=("$1"); shift ;;
	*) echo "bench/run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ ${#builds[@]} -gt 0 ] || builds=(this=.)

out=${keep:-$(mktemp -d)}
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
build_anchors "$out/anchors"
args=()
for b in "${builds[@]}"; do
	build_rev "$out" "${b%%=*}" "${b#*=}"
	args+=("${b%%=*}=$out/${b%%=*}")
done
if [ -n "$keep" ]; then
	echo "built into $keep: run $keep/anchors/netbench -compare -anchors $keep/anchors ${args[*]}"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "bench/run.sh: needs root for network namespaces" >&2; exit 2; }
command -v iperf3 >/dev/null || echo "bench/run.sh: no iperf3 on PATH: its anchors are not measured (apt-get install iperf3)" >&2
command -v ib_write_bw >/dev/null || echo "bench/run.sh: no Debian perftest on PATH: its rows are not measured (apt-get install perftest)" >&2
"$out/anchors/netbench" -compare -anchors "$out/anchors" "${runflags[@]}" "${args[@]}"
