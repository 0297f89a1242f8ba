#!/usr/bin/env bash
# Where a 2-byte message's time goes between two rnicd on this machine's
# loopback, for a lent machine's one call (BENCHMARKS.md, "The first
# 16-core run"): the busy-polling C ping-pong for scale; rnic ib_send_lat
# -s 2 untraced, with the held ACK and with -ack-hold 0; the same traced,
# cut into hops by netbench -latpath (the trace's own cost inflates every
# hop: read their shape). Runs from a bench/run.sh -build folder alone:
#
#   bench/latpath.sh DIR/NAME DIR/anchors [OUT]
#
# OUT (default: a new temporary folder) keeps the tools' outputs and the
# traces; the summary goes to standard output.
set -euo pipefail
build=$1 anchors=$2 out=${3:-$(mktemp -d /tmp/latpath-XXXXXX)}
mkdir -p "$out"
a=127.0.0.61 z=127.0.0.62

if [ -x "$anchors/udppp" ]; then
	"$anchors/udppp" -s $z 18700 -busy & pp=$!
	sleep 0.3
	printf '%-34s %s\n' "C UDP ping-pong, busy-polling:" \
		"$("$anchors/udppp" $z 18700 -busy -n 100000 | awk 'END {print "t_min " $3 " us, median " $4 " us, 99% " $5 " us"}')"
	kill $pp; wait $pp 2>/dev/null || true
fi

# run TAG N [rnicd flags]: two daemons, one ib_send_lat pair of N
# iterations; prints the client's figures. With TRACE set each daemon
# writes its trace to OUT/TAG.A.json and OUT/TAG.B.json.
run() {
	local tag=$1 n=$2; shift 2
	local da=$out/$tag.A db=$out/$tag.B ta=() tb=()
	if [ -n "${TRACE:-}" ]; then
		ta=(-trace "$out/$tag.A.json") tb=(-trace "$out/$tag.B.json")
	fi
	rm -rf "$da" "$db"; mkdir -p "$da" "$db"
	RNICD_DIR=$da "$build/rnicd" -d latA -addr $a "${ta[@]}" "$@" > "$da/log" 2>&1 & local pa=$!
	RNICD_DIR=$db "$build/rnicd" -d latB -addr $z "${tb[@]}" "$@" > "$db/log" 2>&1 & local pb=$!
	for _ in $(seq 100); do
		[ -S "$da/latA.sock" ] && [ -S "$db/latB.sock" ] && break
		sleep 0.1
	done
	RNICD_DIR=$db timeout 120 "$build/rnic" ib_send_lat -d latB -s 2 -n "$n" -p 18600 > "$out/$tag.srv" 2>&1 & local ps=$!
	sleep 0.5
	RNICD_DIR=$da timeout 120 "$build/rnic" ib_send_lat -d latA -s 2 -n "$n" -p 18600 $z > "$out/$tag.cli" 2>&1 || true
	wait $ps || true
	kill -INT $pa $pb; wait $pa $pb 2>/dev/null || true
	printf '%-34s %s\n' "$tag:" "$(awk '$1 == 2 {print "t_min " $3 " us, t_typical " $5 " us, 99% " $8 " us"}' "$out/$tag.cli")"
}

echo "rnic ib_send_lat -s 2 between two rnicd (loopback):"
run held 20000
run ack0 20000 -ack-hold 0
TRACE=1 run traced 2000
TRACE=1 run traced-ack0 2000 -ack-hold 0
for tag in traced traced-ack0; do
	echo
	echo "$tag, cut into hops (netbench -latpath):"
	"$anchors/netbench" -latpath "$out/$tag.A.json" "$out/$tag.B.json"
done
echo
echo "(outputs and traces in $out)"
