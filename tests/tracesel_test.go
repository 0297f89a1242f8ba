package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// TestTraceFileSelects: rnicd -trace-packets writes only the packets to
// its trace file, and -trace-qp N only QP N's events, while WRITEs on
// another QP go through the same daemons. A bulk run traced whole loses
// events and most of its bandwidth (BENCHMARKS.md); these keep the part
// a reader wants.
func TestTraceFileSelects(t *testing.T) {
	dir := t.TempDir()
	trC, trD := filepath.Join(dir, "rnicC.trace.json"), filepath.Join(dir, "rnicD.trace.json")
	addrC, addrD := ownAddr(t), ownAddr(t)
	dc, err := startDaemon(dir, "rnicC", addrC, "-trace", trC, "-trace-packets")
	if err != nil {
		t.Fatal(err)
	}
	// One engine, so that QPNs are handed out in order from rxe's first
	// (0x11): the second QP is 0x12.
	dd, err := startDaemon(dir, "rnicD", addrD, "-engines", "1", "-trace", trD, "-trace-qp", "0x12")
	if err != nil {
		dc.stop()
		t.Fatal(err)
	}
	stopper(t, dc, dd)
	t.Setenv("RNICD_DIR", dir)

	ctxC, ctxD := open(t, "rnicC"), open(t, "rnicD")
	// A QP on rnicC first, so that the QPNs of the two ends differ: QP
	// 0x12 of rnicD must not take in the packets rnicD's QP 0x11 sends
	// to rnicC's 0x12.
	newEnd(t, ctxC, endOpts{typ: verbs.QPTypeRC})
	a1 := newEnd(t, ctxC, endOpts{typ: verbs.QPTypeRC})
	a2 := newEnd(t, ctxC, endOpts{typ: verbs.QPTypeRC})
	b1 := newEnd(t, ctxD, endOpts{typ: verbs.QPTypeRC})
	b2 := newEnd(t, ctxD, endOpts{typ: verbs.QPTypeRC})
	if b1.qp.QPN != 0x11 || b2.qp.QPN != 0x12 || a1.qp.QPN != 0x12 {
		t.Fatalf("QPNs: rnicD %#x and %#x, rnicC's second %#x; want 0x11, 0x12 and 0x12", b1.qp.QPN, b2.qp.QPN, a1.qp.QPN)
	}
	// Timeout 18 (1.07 s): the events below are those of a lossless
	// exchange, which an ACK timeout run out on a stalled host would
	// change.
	for _, p := range [][2]*end{{a1, b1}, {a2, b2}} {
		connect(t, p[0], p[1], verbs.QPTypeRC, 7, 18)
		connect(t, p[1], p[0], verbs.QPTypeRC, 7, 18)
	}
	// The untraced QP's WRITE first: had the filter let its events
	// through, they would be in the file before the traced QP's last.
	writeAndCheck(t, a1, b1, 0x61, 3000, 0, 1, "WRITE on QP 0x11")
	writeAndCheck(t, a2, b2, 0x62, 3000, 0, 2, "WRITE on QP 0x12")

	// rnicD: QP 0x12's steps only: its three packets received and
	// written, its ACK built and sent to rnicC's QP.
	ack := traceEvent{Module: "port", Step: "transmit", QPN: 0x12, DestQPN: a2.qp.QPN, Opcode: "RC_ACKNOWLEDGE"}
	d := readTrace(t, trD, ack)
	for _, e := range d {
		if e.QPN != 0x12 {
			t.Errorf("rnicD -trace-qp 0x12 wrote %v", e)
		}
	}
	inOrder(t, "rnicD", d,
		traceEvent{Module: "port", Step: "receive", QPN: 0x12, DestQPN: 0x12, Opcode: "RC_RDMA_WRITE_FIRST"},
		traceEvent{Module: "port", Step: "receive", QPN: 0x12, DestQPN: 0x12, Opcode: "RC_RDMA_WRITE_MIDDLE"},
		traceEvent{Module: "port", Step: "receive", QPN: 0x12, DestQPN: 0x12, Opcode: "RC_RDMA_WRITE_LAST"},
		traceEvent{Module: "dma", Step: "dma_write", QPN: 0x12},
		traceEvent{Module: "rx", Step: "ack_sent", QPN: 0x12},
		ack)

	// rnicC: the packets of both QPs, nothing else: three WRITE packets
	// out from each QP and an ACK in for each.
	c := readTrace(t, trC, traceEvent{Module: "port", Step: "receive", DestQPN: a2.qp.QPN, Opcode: "RC_ACKNOWLEDGE"})
	got := map[string]int{}
	for _, e := range c {
		if e.Module != "port" || (e.Step != "transmit" && e.Step != "receive") {
			t.Errorf("rnicC -trace-packets wrote %v", e)
			continue
		}
		got[fmt.Sprintf("%s %s %#x to %#x", e.Step, strings.TrimPrefix(e.Opcode, "RC_"), e.QPN, e.DestQPN)]++
	}
	want := map[string]int{}
	for _, p := range [][2]*end{{a1, b1}, {a2, b2}} {
		for _, op := range []string{"FIRST", "MIDDLE", "LAST"} {
			want[fmt.Sprintf("transmit RDMA_WRITE_%s %#x to %#x", op, p[0].qp.QPN, p[1].qp.QPN)] = 1
		}
		want[fmt.Sprintf("receive ACKNOWLEDGE %#x to %#x", p[0].qp.QPN, p[0].qp.QPN)] = 1
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rnicC -trace-packets wrote the packets %v, want %v", got, want)
	}
}
