package rnic_test

import (
	"testing"

	"github.com/rnicd/rnicd/internal/rnictest"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
)

// The injector's bottleneck link shows in the trace: every tail drop its
// counters count is a link_drop event of the fault module, with the depth
// of the full queue the packet met, and the WRITE still completes (the
// responder NAKs the gap, the requester goes back).
func TestLinkDropTraced(t *testing.T) {
	tr := trace.New(1 << 16)
	sub := tr.Subscribe(trace.Filter{})
	defer sub.Close()
	a, b := rnictest.NewEnds(t, tr)
	const queue = 32 << 10
	a.Faulty.SetTX(fault.Faults{Link: fault.Link{Rate: 1e9, Queue: queue}})
	rnictest.Write(t, a, b, 1, 256<<10)
	st := a.Faulty.FaultStats().TX
	if st.LinkDropped == 0 || st.Marked != 0 {
		t.Fatalf("a 256 KB WRITE into a 32 KB queue: %+v", st)
	}
	buf := make([]trace.Event, 1<<16)
	n := sub.TryRead(buf)
	if sub.Lost() != 0 {
		t.Fatalf("%d events lost", sub.Lost())
	}
	var drops uint64
	for _, e := range buf[:n] {
		if e.Step != trace.StepLinkDrop {
			continue
		}
		drops++
		const frame = 12 + 16 + 1024 + 4 + 28 + 18 // the largest packet: RETH, a full MTU, IP, UDP, Ethernet
		if e.Module != trace.ModFault || e.Arg != 0 || e.Aux > queue || e.Aux+frame <= queue || e.NIC != "rnic0" {
			t.Fatalf("link drop event %+v: %s", e, e.Detail())
		}
	}
	if drops != st.LinkDropped {
		t.Fatalf("%d link_drop events, the counter says %d", drops, st.LinkDropped)
	}
}
