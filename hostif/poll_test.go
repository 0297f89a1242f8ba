package hostif

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// With the daemon's polling engine, a client sends a doorbell only when
// its ring's asleep word says the engine sleeps: a new ring reads asleep,
// an idle engine comes back to asleep, and WQEs posted by that rule (no
// doorbell while the word reads awake) all complete, in order; one the
// engine fetches and refuses completes LOC_QP_OP_ERR, takes the QP to
// ERR and is counted, as at a doorbell. Without an engine the word never
// reads awake.
func TestEngineAsleepWord(t *testing.T) {
	plain := newNIC(t, looptest.Get(t).String())
	pc := plain.client(t)
	var ppd abi.Handle
	call(t, pc, abi.KindAllocPD, &abi.Empty{}, nil, &ppd)
	pq := loopQP(t, plain, pc, ppd.H)
	if !pq.sq.EngineAsleep() || !pq.rq.EngineAsleep() {
		t.Fatal("a daemon without an engine says its rings are polled")
	}

	n := newNICPolling(t, looptest.Get(t).String(), 100*time.Microsecond)
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	q := loopQP(t, n, c, pd.H)
	waitAsleep := func() {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !q.sq.EngineAsleep(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the engine never went to sleep")
			}
		}
	}
	waitAsleep()
	write := func(id uint64) *ib.SendWR {
		return &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000 + id*8, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000 + id*8, RKey: q.mr.RKey}
	}
	// post is verbs' PostSend: the slot, the producer index, then the
	// asleep word, and the doorbell only if it reads asleep.
	post := func(wr *ib.SendWR, mangle func([]byte)) {
		t.Helper()
		q.write(t, wr, mangle)
		if q.sq.EngineAsleep() && q.sq.RingBell() {
			if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var cons uint32
	for round := range uint64(4) {
		for i := range uint64(6) {
			post(write(round*6+i), nil)
		}
		for i := range uint64(6) {
			id := round*6 + i
			if wc := poll(t, q.cq, &cons); wc.WRID != id || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRDMAWrite {
				t.Fatalf("completion %v, want wr_id %d RDMA_WRITE SUCCESS", &wc, id)
			}
		}
		if round == 1 {
			waitAsleep()
		}
	}
	before := n.srv.badWQEs.Load()
	post(write(100), func(s []byte) { s[8] = 7 }) // opcode 7
	if wc := poll(t, q.cq, &cons); wc.WRID != 100 || wc.Status != ib.WCLocQPOpErr {
		t.Fatalf("completion %v, want wr_id 100 LOC_QP_OP_ERR", &wc)
	}
	if st := qpState(t, c, q.h); st != ib.QPSErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
	if got := n.srv.badWQEs.Load() - before; got != 1 {
		t.Fatalf("hostif_bad_wqe moved by %d, want 1", got)
	}
	waitAsleep()
}
