package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pingPong returns two daemons' traces of n round trips of a SEND
// ping-pong in which every hop takes the given nanoseconds: A sends PSN
// 100+i, B answers with PSN 500+i. Each side's events are in time order,
// with an ACK and a send CQE among them, as a real trace has.
func pingPong(n int, hop [5]int64) (a, b []latEvent) {
	t := int64(1_000_000)
	side := func(s, r *[]latEvent, psn uint32) {
		*s = append(*s, latEvent{Step: "post", WROp: "SEND", T: t})
		t += hop[0]
		*s = append(*s, latEvent{Step: "fetch", WROp: "SEND", PSN: psn, T: t})
		t += hop[1]
		*s = append(*s, latEvent{Step: "transmit", Opcode: "RC_SEND_ONLY", PSN: psn, T: t})
		t += hop[2]
		*r = append(*r, latEvent{Step: "receive", Opcode: "RC_ACKNOWLEDGE", PSN: psn, T: t - 1})
		*r = append(*r, latEvent{Step: "receive", Opcode: "RC_SEND_ONLY", PSN: psn, T: t})
		t += hop[3]
		*r = append(*r, latEvent{Step: "complete", Flags: 8, T: t - 1}) // its own send's CQE
		*r = append(*r, latEvent{Step: "complete", Flags: latFlagRecv | 8, T: t})
		t += hop[4]
	}
	for i := range n {
		side(&a, &b, uint32(100+i))
		side(&b, &a, uint32(500+i))
	}
	// The last message's receiver posts nothing after it: that message
	// is not whole and is left out.
	return a, b
}

func TestLatpathCutsEveryHop(t *testing.T) {
	hop := [5]int64{1000, 2000, 7000, 1500, 4000}
	a, b := pingPong(10, hop)
	h := latpath(a, b)
	// 10 round trips: 20 messages, less the last, whose reply never came.
	if len(h[0]) != 19 {
		t.Fatalf("messages cut: %d, want 19", len(h[0]))
	}
	var sum int64
	for i, want := range hop {
		sum += want
		for _, got := range h[i] {
			if got != want {
				t.Fatalf("hop %q: %d ns, want %d in every message (%v)", latHops[i], got, want, h[i])
			}
		}
	}
	if got := h[5][9]; got != sum {
		t.Fatalf("one way: %d ns, want %d", got, sum)
	}
}

func TestLatpathMainPrintsTheTable(t *testing.T) {
	a, b := pingPong(5, [5]int64{1000, 2000, 7000, 1500, 4000})
	dir := t.TempDir()
	write := func(name string, evs []latEvent) string {
		var buf bytes.Buffer
		for _, e := range evs {
			line, _ := json.Marshal(e)
			buf.Write(line)
			buf.WriteByte('\n')
		}
		buf.WriteString(`{"seq":9,"time":"2026-11-28T0`) // a torn last line
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pa, pb := write("a.json", a), write("b.json", b)
	var out bytes.Buffer
	if err := latpathMain([]string{pa, pb}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| post -> fetch | 9 | 1.00 us | 1.00 us | 1.00 us |",
		"| transmit -> peer's receive | 9 | 7.00 us | 7.00 us | 7.00 us |",
		"| one way (post to the peer's next post) | 9 | 15.50 us |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if err := latpathMain([]string{pa, pa}, &out); err == nil {
		t.Error("one daemon's trace given twice: no error")
	}
	if err := latpathMain([]string{pa}, &out); err == nil {
		t.Error("one file: no error")
	}
}
