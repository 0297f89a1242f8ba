package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// netbench -latpath A.json B.json: where the time of a 2-byte SEND
// ping-pong goes (rnic ib_send_lat between two rnicd on one machine, each
// writing its trace with -trace; bench/latpath.sh runs it). Both daemons
// stamp their events with the same clock, so a packet's transmit in one
// file and its receive in the other give the crossing between them. Each
// message of each direction is cut into five hops:
//
//	post -> fetch       the client's post until the engine fetches it
//	fetch -> transmit   building the packet, until the port sends it
//	transmit -> receive the kernel's crossing and the peer engine's look
//	receive -> CQE      the peer's RX handler, up to its receive CQE
//	CQE -> next post    the peer client seeing it and posting its reply
//
// The trace costs time of its own at every event (about 8 us a message on
// a 16-core machine, 2026-11-28), so the hops' shape counts, not their sum.

// latEvent is the part of a trace line (rnic/trace's JSON) the cut needs.
type latEvent struct {
	Step   string `json:"step"`
	Opcode string `json:"opcode"`
	WROp   string `json:"wr_opcode"`
	PSN    uint32 `json:"psn"`
	Flags  uint8  `json:"flags"`
	T      int64  `json:"time_ns"`
}

// The trace's flag of a receive completion (rnic/trace.FlagRecv).
const latFlagRecv = 1 << 2

var latHops = []string{"post -> fetch", "fetch -> transmit", "transmit -> peer's receive", "peer's receive -> its CQE", "its CQE -> its next post", "one way (post to the peer's next post)"}

func latpathMain(args []string, w io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("-latpath takes two trace files, the two daemons'")
	}
	var evs [2][]latEvent
	for i, p := range args {
		e, err := readLatTrace(p)
		if err != nil {
			return err
		}
		evs[i] = e
	}
	hops := latpath(evs[0], evs[1])
	if len(hops[0]) == 0 {
		return fmt.Errorf("no SEND found whole in both traces (post, fetch, transmit, the peer's receive and CQE, its next post): were they written by the two daemons of one ib_send_lat run?")
	}
	fmt.Fprintf(w, "| hop | messages | median | p10 | p90 |\n|---|---:|---:|---:|---:|\n")
	for i, name := range latHops {
		v := hops[i]
		fmt.Fprintf(w, "| %s | %d | %.2f us | %.2f us | %.2f us |\n", name, len(v),
			us(pct(v, 50)), us(pct(v, 10)), us(pct(v, 90)))
	}
	return nil
}

func us(ns int64) float64 { return float64(ns) / 1000 }

// pct returns the p-th percentile of sorted v, v[len*p/100] (the
// medians in BENCHMARKS.md were taken so).
func pct(v []int64, p int) int64 { return v[min(len(v)-1, len(v)*p/100)] }

// readLatTrace reads a trace file; a line that is not an event (a torn
// last line of a killed daemon's file) is skipped.
func readLatTrace(path string) ([]latEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []latEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e latEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Step != "" {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// latpath cuts both directions' messages into the hops of latHops; each
// of the six slices comes back sorted, the same messages in each.
func latpath(a, b []latEvent) [6][]int64 {
	var hops [6][]int64
	for _, dir := range [][2][]latEvent{{a, b}, {b, a}} {
		s, r := dir[0], dir[1]
		txAt := map[uint32]int64{}
		for _, e := range s {
			if e.Step == "transmit" && e.Opcode == "RC_SEND_ONLY" {
				txAt[e.PSN] = e.T
			}
		}
		type arrival struct{ rx, cqe int64 }
		rxAt := map[uint32]*arrival{}
		var last *arrival
		var posts []int64
		for _, e := range r {
			switch {
			case e.Step == "receive" && e.Opcode == "RC_SEND_ONLY":
				last = &arrival{rx: e.T}
				rxAt[e.PSN] = last
			case e.Step == "complete" && e.Flags&latFlagRecv != 0 && last != nil && last.cqe == 0:
				last.cqe = e.T
			case e.Step == "post" && e.WROp == "SEND":
				posts = append(posts, e.T)
			}
		}
		slices.Sort(posts)
		post := int64(-1)
		for _, e := range s {
			switch {
			case e.Step == "post" && e.WROp == "SEND":
				post = e.T
			case e.Step == "fetch" && post >= 0:
				tx, ok := txAt[e.PSN]
				in := rxAt[e.PSN]
				if ok && in != nil && in.cqe != 0 {
					i := sort.Search(len(posts), func(i int) bool { return posts[i] >= in.cqe })
					if i < len(posts) {
						next := posts[i]
						for k, d := range []int64{e.T - post, tx - e.T, in.rx - tx, in.cqe - in.rx, next - in.cqe, next - post} {
							hops[k] = append(hops[k], d)
						}
					}
				}
				post = -1
			}
		}
	}
	for i := range hops {
		slices.Sort(hops[i])
	}
	return hops
}
