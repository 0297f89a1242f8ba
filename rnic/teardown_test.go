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
//
// Once the receiver's QP is destroyed nothing answers a retry, so only
// the ACK of the first transmission can complete the SEND: with the ACK
// missing the SEND ends in RETRY_EXC_ERR however long the timeout. The
// timeout only has to outlast how late a loaded host delivers an ACK
// that did leave: 67 ms with one retry (timeout 14, retry_cnt 1; 201 ms
// with the backoff) was not enough under -race beside a CPU hog at load
// 20 (RETRY_EXC_ERR with the fix in place). Timeout 17 (537 ms) and
// retry_cnt 4, doubled up to 8x (qpmgr.MaxBackoff), give the ACK
// 1+2+4+8+8 = 23 x 537 ms = 12.4 s, and the test still sees a missing
// ACK as RETRY_EXC_ERR well inside the poll's 60 s.
func TestDestroyAfterReceiveStillAcks(t *testing.T) {
	o := pairOpts{typ: ib.QPTypeRC, mtu: 1024, sendWR: 16, timeout: 17, retry: 4}
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
		got := a.poll(1, 60*time.Second)[0]
		if got.WRID != uint64(i) || got.Status != ib.WCSuccess || got.Opcode != ib.WCSend {
			t.Fatalf("round %d: send completion %v, want SUCCESS (counters %v)", i, &got, a.dev.Observer().Counters())
		}
		if err := a.dev.DestroyQP(qa); err != nil {
			t.Fatal(err)
		}
	}
}
