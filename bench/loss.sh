#!/usr/bin/env bash
# ib_write_bw -s 65536 between two rnicd on loopback, with and without a
# drop on the server's port, for binaries in the given directories,
# alternated: bandwidth and the counters loss recovery moves.
#   bench/loss.sh [-n ITERS] [-drop 5%] [-at server|sender] [-rounds 2] [-mtu 1024] [-net 127.A.B] OLD_BIN_DIR NEW_BIN_DIR ...
# -at sender puts the drop on the client's daemon, which sends the WRITEs
# (the target: `rnic inject drop 1%` and `5%` at the sender keep at least
# 50% and 10% of lossless); the default, server, on the server's. Each lossy
# run prints its share of the lossless run just before it.
# The daemons listen on NET.1 and NET.2, by default in a 127.A.B picked at
# random: other daemons on the host (the README's 127.0.9.x, other
# benchmarks) must not make every run fail to bind.
# Each BIN_DIR holds rnicd and rnic (CGO_ENABLED=0 go build -o DIR ./cmd/rnicd ./cmd/rnic).
set -uo pipefail
iters=2000 drop=5% at=server rounds=2 mtu=1024 net=127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
while [ $# -gt 0 ]; do
	case $1 in
	-n) iters=$2; shift 2 ;;
	-drop) drop=$2; shift 2 ;;
	-at) at=$2; shift 2 ;;
	-rounds) rounds=$2; shift 2 ;;
	-mtu) mtu=$2; shift 2 ;;
	-net) net=$2; shift 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "usage: bench/loss.sh [-n ITERS] [-drop P%] [-at server|sender] [-rounds N] [-mtu 1024] [-net 127.A.B] BIN_DIR..." >&2; exit 2; }
counters='sent_pkts|completer_retry_err|rcvd_pkts|retransmitted_pkts|local_ack_timeout_err|naks_sent|naks_repeated|rcvd_seq_err|out_of_seq_request'

one() { # BIN DROP
	local b=$1 d=$2 dir pa pb ps port
	dir=$(mktemp -d)
	export RNICD_DIR=$dir
	"$b/rnicd" -d lossA -addr $net.1 -mtu $mtu >"$dir/a.log" 2>&1 & pa=$!
	"$b/rnicd" -d lossB -addr $net.2 -mtu $mtu >"$dir/b.log" 2>&1 & pb=$!
	sleep 0.5
	local victim=lossA
	[ "$at" = sender ] && victim=lossB
	[ "$d" = 0 ] || "$b/rnic" inject -d $victim drop "$d" >/dev/null
	port=$((20000 + RANDOM % 20000))
	"$b/rnic" ib_write_bw -d lossA -p $port -s 65536 -n "$iters" >"$dir/srv" 2>&1 & ps=$!
	sleep 0.3
	timeout 600 "$b/rnic" ib_write_bw -d lossB -p $port -s 65536 -n "$iters" $net.1 >"$dir/cli" 2>&1
	local rc=$? bw
	bw=$(grep -A1 'BW average' "$dir/cli" | tail -1 | awk '{print $4}')
	if [ "$d" = 0 ]; then lossless=$bw; fi
	echo "$b drop $d at $at: exit $rc, $bw MB/s$([ "$d" = 0 ] || awk -v a="$bw" -v b="${lossless:-0}" 'BEGIN { if (b > 0) printf ", %.1f%% of lossless", 100 * a / b }')"
	for dev in lossA lossB; do
		echo "  $dev: $("$b/rnic" stat -d $dev | head -1 | grep -oE "($counters) [0-9]+" | tr '\n' ' ')"
	done
	kill $ps 2>/dev/null
	kill $pa $pb
	wait $pa $pb 2>/dev/null
	rm -rf "$dir"
}

for ((r = 0; r < rounds; r++)); do
	for b in "$@"; do
		one "$b" 0
		one "$b" "$drop"
	done
done
