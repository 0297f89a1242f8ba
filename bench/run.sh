#!/usr/bin/env bash
# rnicd against the machine's own UDP and TCP, in one run on one veth pair
# (issues 7 and 16): every target of issue 16 beside its anchor of the same
# run; each run goes into BENCHMARKS.md above the earlier ones, with date,
# machine and load average.
# Needs root (network namespaces); installs iperf3 from Debian's packages.
#   bench/run.sh [-quick] [-soak 10m] [-t SECONDS]
#   bench/run.sh -soak-only [-soak 10m]   (only the 1024-QP memory soak, both daemons)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "bench/run.sh: needs root for network namespaces" >&2; exit 2; fi
command -v iperf3 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
CGO_ENABLED=0 go build -o "$bin" ./cmd/rnicd ./cmd/rnic ./bench/udprr
go run ./bench/netbench -bin "$bin" "$@"
