package rnic_test

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
)

// The responder owes an ACK for a message whose completion the
// application may already have polled: ACKs leave at the end of the
// receive batch, after its completions. A QP destroyed the moment its
// last receive completes (ibv_rc_pingpong's server, done) must still
// send that ACK, or the requester retries against nobody and its last
// SEND never completes.
func TestDestroyAfterReceiveStillAcks(t *testing.T) {
	o := pairOpts{typ: ib.QPTypeRC, mtu: 1024, sendWR: 16, timeout: 14, retry: 1} // 67 ms, one retry: a lost ACK is RETRY_EXC_ERR
	p := newPair(t, o)
	a, b := p.a, p.b
	for i := range 40 {
		qa, qb := a.createQP(o), b.createQP(o)
		a.connect(qa, b, qb, o, 0)
		b.connect(qb, a, qa, o, 0)
		mustRecv(t, b, qb, ib.RecvWR{WRID: 7, SGL: []ib.SGE{sge(b, 0, 64)}})
		mustPost(t, a, qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(a, 0, 64)}})
		// Spin, so as to destroy as early as an application could.
		var wc [1]ib.WC
		for deadline := time.Now().Add(10 * time.Second); b.cq.Poll(wc[:]) == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no receive completion", i)
			}
		}
		if err := b.dev.DestroyQP(qb); err != nil {
			t.Fatal(err)
		}
		if wc[0].WRID != 7 || wc[0].Status != ib.WCSuccess {
			t.Fatalf("round %d: receive completion %v", i, &wc[0])
		}
		got := a.poll(1, 10*time.Second)[0]
		if got.WRID != uint64(i) || got.Status != ib.WCSuccess || got.Opcode != ib.WCSend {
			t.Fatalf("round %d: send completion %v, want SUCCESS (counters %v)", i, &got, a.dev.Counters())
		}
		if err := a.dev.DestroyQP(qa); err != nil {
			t.Fatal(err)
		}
	}
}
