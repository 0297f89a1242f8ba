package tests

import (
	"bytes"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// Deregistering the memory a requester sends from while 64 KiB WRITEs are
// in flight. The requester lends the port views of that memory (it sends
// from registered memory, no copy); the daemon unmaps it only after its
// send pipeline has let go of them (Device.Fence), so it neither crashes
// nor sends freed memory. The WRITEs complete in order: successes, then
// errors; and the daemon carries on serving.
func TestDeregMRWhileSending(t *testing.T) {
	daemons(t)
	for round := range 3 {
		a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeRC})
		b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeRC})
		connect(t, a, b, verbs.QPTypeRC, 3, 14)
		connect(t, b, a, verbs.QPTypeRC, 3, 14)
		const n = 30
		for id := range uint64(n) {
			post(t, a, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(0, memSize)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
		}
		if err := a.mr.Dereg(); err != nil {
			t.Fatalf("round %d: dereg_mr: %v", round, err)
		}
		wcs := pollN(t, a.cq, n)
		ok := 0
		for ok < n && wcs[ok].Status == verbs.WCSuccess {
			ok++
		}
		for i, wc := range wcs {
			if wc.WRID != uint64(i) {
				t.Fatalf("round %d: completion %d is wr_id %d", round, i, wc.WRID)
			}
			if i >= ok && wc.Status == verbs.WCSuccess {
				t.Fatalf("round %d: completion %d succeeded after an error: %v", round, i, &wc)
			}
		}
		t.Logf("round %d: %d of %d WRITEs done before the region went, then %v", round, ok, n, wcs[min(ok, n-1)].Status)
	}

	// Both daemons still move data, byte for byte.
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeRC})
	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeRC})
	connect(t, a, b, verbs.QPTypeRC, 3, 14)
	connect(t, b, a, verbs.QPTypeRC, 3, 14)
	src := a.mr.Buf
	for i := range src {
		src[i] = byte(i * 13)
	}
	post(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, memSize)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	if wc := pollN(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE after the rounds: %v", &wc)
	}
	if !bytes.Equal(b.mr.Buf, src) {
		t.Fatal("WRITE after the rounds: the bytes differ")
	}
}
