package lend

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/ibudp"
)

func newArea(t testing.TB) *Area {
	t.Helper()
	fd, a, err := Create()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Map(fd)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return b
}

// Records put by the borrower come out of the daemon's drain in order,
// field by field, across the ring's end; a full ring counts what it drops.
func TestRing(t *testing.T) {
	a := newArea(t)
	scratch := make([]byte, maxRecord)
	roce := bytes.Repeat([]byte{0xab}, 1000)
	hdr := bytes.Repeat([]byte{0x45}, 28)
	var pkt [packetHdrLen]byte
	putPacketHdr(pkt[:], ibudp.TapSent, ibudp.ICRCUnchecked, hdr, roce)
	want := trace.Event{Time: 42, WRID: 7, QPN: 0x10011, DestQPN: 0x12, PSN: 99, Len: 1000, Arg: 3, Aux: 4,
		Module: trace.ModWQE, Step: trace.StepFetch, Flags: trace.FlagAckReq, WROp: ib.WRRDMAWrite}
	var ev [eventLen]byte
	putEvent(ev[:], &want)
	events, packets := 0, 0
	for round := range 12000 { // about 12 MB through a 4 MiB ring
		if !a.put(recEvent, ev[:]) || !a.put(recPacket, pkt[:], hdr, roce) {
			t.Fatalf("round %d: put failed on a drained ring", round)
		}
		n, err := a.drain(scratch, func(typ uint16, p []byte) {
			switch typ {
			case recEvent:
				if e, ok := decodeEvent(p); !ok || e != want {
					t.Fatalf("event %+v, want %+v", e, want)
				}
				events++
			case recPacket:
				at, _, h, r, ok := decodePacket(p)
				if !ok || at != ibudp.TapSent || !bytes.Equal(h, hdr) || !bytes.Equal(r, roce) {
					t.Fatalf("packet %v %d+%d bytes", at, len(h), len(r))
				}
				packets++
			}
		})
		if err != nil || n != 2 {
			t.Fatalf("round %d: drained %d, %v", round, n, err)
		}
	}
	if le, lp := a.Lost(); events != 12000 || packets != 12000 || le != 0 || lp != 0 {
		t.Fatalf("%d events, %d packets, %d+%d lost", events, packets, le, lp)
	}
	put := 0
	for a.put(recPacket, pkt[:], hdr, roce) {
		put++
	}
	for a.put(recEvent, ev[:]) {
	}
	if le, lp := a.Lost(); put != RingLen/1048 || le != 1 || lp != 1 {
		t.Fatalf("a full ring took %d packets and lost %d events and %d packets; want %d, 1 and 1", put, le, lp, RingLen/1048)
	}
}

// A hostile borrower's ring words end the drain with an error and leave
// nothing behind: never a read out of the ring.
func FuzzDrain(f *testing.F) {
	f.Add(uint64(0), uint64(16), []byte{16, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint64(8), uint64(1<<21), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, head, tail uint64, rec []byte) {
		a := newArea(t)
		a.u64(offRingHead).Store(head)
		a.u64(offRingTail).Store(tail)
		copy(a.mem[offRing+int(head%RingLen):offRing+RingLen], rec)
		scratch := make([]byte, maxRecord)
		a.drain(scratch, func(typ uint16, p []byte) {
			decodeEvent(p)
			decodePacket(p)
		})
		if h, tl := a.u64(offRingHead).Load(), a.u64(offRingTail).Load(); tl-h > RingLen {
			t.Fatalf("after a drain: head %d tail %d", h, tl)
		}
	})
}

// A QP row crosses field by field; one of another block, type or state
// is refused.
func FuzzQPRow(f *testing.F) {
	var b [qpRowLen]byte
	putQPRow(b[:], &QPRow{QPN: 0x10011, Type: ib.QPTypeRC, State: ib.QPSRTS, PathMTU: ib.MTU1024, PathMTUBytes: 1024})
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < qpRowLen {
			return
		}
		r, ok := decodeQPRow(in, 1<<16, 1<<16|0xffff)
		if !ok {
			return
		}
		if r.QPN>>16 != 1 || r.State > ib.QPSErr || r.Type.String() == "" {
			t.Fatalf("accepted %+v", r)
		}
		var out [qpRowLen]byte
		putQPRow(out[:], &r)
		if r2, ok := decodeQPRow(out[:], 1<<16, 1<<16|0xffff); !ok || r2 != r {
			t.Fatalf("round trip %+v -> %+v", r, r2)
		}
	})
}

// Whatever a borrower writes in its snapshot, the daemon reads counters
// with device names only and QPs of its block only, never more than the
// area holds.
func FuzzSnapshot(f *testing.F) {
	f.Add(uint32(2), []byte("sent_pkts\x00"), uint32(1), []byte{0, 0, 1, 0})
	f.Add(uint32(1<<31), []byte{0xff}, uint32(1<<30), []byte{})
	f.Fuzz(func(t *testing.T, nc uint32, counters []byte, nq uint32, qps []byte) {
		a := newArea(t)
		a.u32(offNCounters).Store(nc)
		copy(a.mem[offCounters:offCounters+MaxCounters*counterLen], counters)
		a.u32(offNQPs).Store(nq)
		copy(a.mem[offQPs:], qps)
		l := &Lent{a: a, First: 1 << 16, Last: 1<<16 | 0xffff}
		l.read()
		if len(l.last.Counters) > MaxCounters+2 || len(l.last.QPs) > MaxQPs {
			t.Fatalf("%d counters, %d QPs", len(l.last.Counters), len(l.last.QPs))
		}
		for k := range l.last.Counters {
			if !validName([]byte(k)) {
				t.Fatalf("counter name %q", k)
			}
		}
		for _, q := range l.last.QPs {
			if q.QPN>>16 != 1 {
				t.Fatalf("QP %#x outside the block", q.QPN)
			}
		}
	})
}

// A borrower's capture wants sent payloads only while the daemon captures,
// so that otherwise the port sends them from registered memory without
// copying them in; a packet shown without its payload (TapSentHeaders)
// never reaches the daemon's capture, even while it captures.
func TestCaptureWantsPayload(t *testing.T) {
	a := newArea(t)
	tap := NewBorrower(a, nil).Capture().(ibudp.PayloadTap)
	hdr := bytes.Repeat([]byte{0x45}, 28)
	roce := bytes.Repeat([]byte{0xcd}, 64)
	count := func() (n int) {
		scratch := make([]byte, maxRecord)
		if _, err := a.drain(scratch, func(typ uint16, p []byte) {
			if at, _, h, r, ok := decodePacket(p); !ok || at != ibudp.TapSent || !bytes.Equal(h, hdr) || !bytes.Equal(r, roce) {
				t.Fatalf("drained packet %v %d+%d bytes", at, len(h), len(r))
			}
			n++
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if tap.WantsPayload() {
		t.Fatal("wants payloads while the daemon does not capture")
	}
	tap.Packet(ibudp.TapSent, hdr, roce, ibudp.ICRCUnchecked)
	if n := count(); n != 0 {
		t.Fatalf("%d packets copied while the daemon does not capture", n)
	}
	a.u32(offCapture).Store(1)
	if !tap.WantsPayload() {
		t.Fatal("wants no payloads while the daemon captures")
	}
	tap.Packet(ibudp.TapSentHeaders, hdr, roce, ibudp.ICRCUnchecked)
	tap.Packet(ibudp.TapSent, hdr, roce, ibudp.ICRCUnchecked)
	if n := count(); n != 1 {
		t.Fatalf("%d packets reached the daemon, want the one sent whole", n)
	}
}
