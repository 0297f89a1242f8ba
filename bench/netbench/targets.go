package main

import (
	"fmt"
	"io"
	"math"
)

// targets.go: issue 25's targets for a machine with a core for every
// spinning thread, checked against each build's figures of the run, so
// that one run says what holds without anyone working out the ratios.
// On a machine with fewer cores the verdicts are still printed; the table's
// heading says what machine it was.

// target is one of the issue's lines: figure fig of a build against ref,
// the anchor's figure or, with sameBuild, the build's own figure ref.
type target struct {
	what      string
	fig, ref  string
	sameBuild bool
	check     func(ratio float64) bool
	want      string // the bound, as the verdict prints it
}

func atMost(x float64) func(float64) bool  { return func(r float64) bool { return r <= x } }
func atLeast(x float64) func(float64) bool { return func(r float64) bool { return r >= x } }

// within is true for a ratio no further than f from 1, either way.
func within(f float64) func(float64) bool {
	return func(r float64) bool { return math.Abs(r-1) <= f }
}

const idleFig = "rnicd CPU when idle, per daemon (/proc/<pid>/stat over 1 s; 1 tick = 1%)"

func issue25Targets() []target {
	return []target{
		{what: "rnic ib_send_lat -s 2 median, at most 2.0x the busy-polling C ping-pong",
			fig: "rnic ib_send_lat -s 2, median", ref: ppBusy, check: atMost(2), want: "<= 2.0x"},
		{what: "Debian ib_send_lat -s 2 through clib, median, at most 2.0x the busy-polling C ping-pong",
			fig: "Debian ib_send_lat -s 2 (clib), median", ref: ppBusy, check: atMost(2), want: "<= 2.0x"},
		{what: "64 B WRITE message rate, 1 QP, at least 2x iperf3 UDP 108 B",
			fig: "rnic ib_write_bw -s 64, 1 QP, message rate", ref: udp108, check: atLeast(2), want: ">= 2x"},
		{what: "64 B WRITE message rate, 16 QPs at least as much as 1",
			fig: "rnic ib_write_bw -s 64, 16 QPs, message rate", ref: "rnic ib_write_bw -s 64, 1 QP, message rate",
			sameBuild: true, check: atLeast(1), want: ">= 1x"},
		{what: "64 KiB WRITE, 1 QP, at least 1.0x iperf3 TCP one stream",
			fig: "rnic ib_write_bw -s 65536, 1 QP", ref: tcp1, check: atLeast(1), want: ">= 1.0x"},
		{what: "64 KiB WRITE, 8 parallel pairs at least 4x one pair",
			fig: "rnic ib_write_bw -s 65536, 8 parallel pairs, aggregate", ref: "rnic ib_write_bw -s 65536, 1 parallel pairs, aggregate",
			sameBuild: true, check: atLeast(4), want: ">= 4x"},
		{what: "Debian ib_write_bw -s 64 through clib within 15% of the rnic tool",
			fig: "Debian ib_write_bw -s 64 (clib), 1 QP, message rate", ref: "rnic ib_write_bw -s 64, 1 QP, message rate",
			sameBuild: true, check: within(0.15), want: "0.85x-1.15x"},
		{what: "Debian ib_write_lat -s 2 through clib within 15% of the rnic tool",
			fig: "Debian ib_write_lat -s 2 (clib), median", ref: "rnic ib_write_lat -s 2, median",
			sameBuild: true, check: within(0.15), want: "0.85x-1.15x"},
	}
}

// printTargets writes the verdict of every target for every build, and
// the idle CPU's, whose bound (under 1% of a core) is absolute.
func printTargets(w io.Writer, cfg cmpConfig, sb *scoreboard) {
	fmt.Fprint(w, "\nIssue 25's targets, each build against the same run:\n\n")
	tableHead(w, []string{"target"}, cfg.builds, "---")
	for _, t := range issue25Targets() {
		fmt.Fprintf(w, "| %s |", t.what)
		for _, b := range cfg.builds {
			fmt.Fprintf(w, " %s |", verdict(sb, t, b.name))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| the idle daemon's CPU under 1% of a core |")
	for _, b := range cfg.builds {
		v, ok := value(sb, idleFig, b.name)
		switch {
		case !ok:
			fmt.Fprint(w, " not measured |")
		case v < 1:
			fmt.Fprintf(w, " %.3g%%: met |", v)
		default:
			fmt.Fprintf(w, " %.3g%%: NOT met |", v)
		}
	}
	fmt.Fprintln(w)
}

// verdict is one target's cell for build col: the ratio and whether it
// meets the bound.
func verdict(sb *scoreboard, t target, col string) string {
	v, ok := value(sb, t.fig, col)
	if !ok {
		return "not measured"
	}
	refCol := anchorCol
	if t.sameBuild {
		refCol = col
	}
	r, ok := value(sb, t.ref, refCol)
	if !ok || r == 0 {
		return "no reference measured"
	}
	ratio := v / r
	met := "met"
	if !t.check(ratio) {
		met = "NOT met"
	}
	return fmt.Sprintf("%.2fx (%s): %s", ratio, t.want, met)
}

// value is figure what's best value in column col, if one was measured.
func value(sb *scoreboard, what, col string) (float64, bool) {
	f := sb.by[what]
	if f == nil {
		return 0, false
	}
	v, ok := f.vals[col]
	return v, ok
}
