package rnic_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/steer"
)

// Each engine of a multi-queue device gets its own QPs' packets and no
// other: with 2 and 4 engines a side, QPs on every engine but the last
// each take the same number of one-packet WRITEs, and per engine, by
// value, the responder's engine received exactly its QPs' requests, the
// requester's sent exactly its QPs' packets, and the last engine, whose
// QPs are idle, neither received nor sent a packet. The bytes land as
// sent.
func TestEnginesOwnTheirQPs(t *testing.T) {
	for _, engines := range []int{2, 4} {
		t.Run(fmt.Sprintf("engines=%d", engines), func(t *testing.T) { testEnginesOwnTheirQPs(t, engines) })
	}
}

func testEnginesOwnTheirQPs(t *testing.T, engines int) {
	// Timeout 20 (4.3 s): a retransmission would make the counts depend
	// on the host's load.
	o := pairOpts{typ: ib.QPTypeRC, retry: 7, sendWR: 1024, pollIdle: 50 * time.Microsecond, timeout: 20, mtu: 1024, engines: engines}
	p := newPair(t, o)
	a, b := p.a, p.b
	if a.dev.Observer().Engines() != engines || b.dev.Observer().Engines() != engines {
		t.Fatalf("devices run %d and %d engines, want %d", a.dev.Observer().Engines(), b.dev.Observer().Engines(), engines)
	}
	// About four QP pairs on every engine, the pair of newPair among
	// them; a pair whose QP on either side is on the last engine stays
	// idle.
	type qpPair struct{ qa, qb *rnic.QP }
	pairs := []qpPair{{p.qa, p.qb}}
	perEngine := make([]int, engines)
	perEngine[a.dev.EngineOf(p.qa.QPN)]++
	for i := 0; i < 4*engines; i++ {
		qa, qb := a.createQP(o), b.createQP(o)
		a.connect(qa, b, qb, o, 0)
		b.connect(qb, a, qa, o, 0)
		pairs = append(pairs, qpPair{qa, qb})
		perEngine[a.dev.EngineOf(qa.QPN)]++
	}
	for e, n := range perEngine {
		if n == 0 {
			t.Fatalf("engine %d of a has no QP among %d: %v", e, len(pairs), perEngine)
		}
	}
	for _, qp := range pairs {
		if ea, eb := a.dev.EngineOf(qp.qa.QPN), steer.QueueOf(qp.qa.QPN, engines); ea != eb {
			t.Fatalf("QP %#x: device says engine %d, the port's steering %d", qp.qa.QPN, ea, eb)
		}
	}
	idle := engines - 1
	const writes = 20
	const size = 512
	fill(a.mem, 9)
	wantA, wantB := make([]uint64, engines), make([]uint64, engines)
	posted := 0
	for i, qp := range pairs {
		ea, eb := a.dev.EngineOf(qp.qa.QPN), b.dev.EngineOf(qp.qb.QPN)
		if ea == idle || eb == idle {
			continue
		}
		for j := range writes {
			off := (i*writes + j) * size
			mustPost(t, a, qp.qa, ib.SendWR{WRID: uint64(off), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
				SGL: []ib.SGE{sge(a, off, size)}, RemoteAddr: memVA + uint64(off), RKey: b.mr.RKey})
		}
		wantA[ea] += writes
		wantB[eb] += writes
		posted += writes
	}
	for _, wc := range a.poll(posted, 30*time.Second) {
		if wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRDMAWrite || wc.ByteLen != size {
			t.Fatalf("completion %+v", wc)
		}
	}
	b.fence()
	for i, qp := range pairs {
		if a.dev.EngineOf(qp.qa.QPN) == idle || b.dev.EngineOf(qp.qb.QPN) == idle {
			continue
		}
		lo, hi := i*writes*size, (i+1)*writes*size
		sameBytes(t, fmt.Sprintf("QP %#x's WRITEs", qp.qb.QPN), b.mem[lo:hi], a.mem[lo:hi])
	}
	// The last ACK may still be on its way to a's engine: what a's
	// engines received is checked once every completion is in, and is
	// not counted by value (ACKs are coalesced per batch).
	sa, sb := a.dev.Observer().EngineStats(), b.dev.Observer().EngineStats()
	for e := range engines {
		if sb[e].RxPackets != wantB[e] {
			t.Errorf("b's engine %d received %d packets, want its QPs' %d (all: %+v)", e, sb[e].RxPackets, wantB[e], sb)
		}
		if sa[e].TxPackets != wantA[e] {
			t.Errorf("a's engine %d sent %d packets, want its QPs' %d (all: %+v)", e, sa[e].TxPackets, wantA[e], sa)
		}
		if busy := wantA[e] > 0; (sa[e].RxPackets > 0) != busy {
			t.Errorf("a's engine %d received %d ACKs; its QPs sent %d packets", e, sa[e].RxPackets, wantA[e])
		}
		if busy := wantB[e] > 0; (sb[e].TxPackets > 0) != busy {
			t.Errorf("b's engine %d sent %d ACKs; its QPs received %d packets", e, sb[e].TxPackets, wantB[e])
		}
	}
	if got := counter(b, "rcvd_pkts"); got != uint64(posted) {
		t.Errorf("b's rcvd_pkts %d, want %d", got, posted)
	}
}
