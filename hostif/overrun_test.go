package hostif

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// overrunCQ creates a CQ of n entries and maps its ring.
func overrunCQ(t *testing.T, c *Client, n uint32) (uint32, *abi.Ring) {
	t.Helper()
	var r abi.RingReply
	ring := ringOf(t, mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: n}, nil, &r)), r.Send)
	if ring.Slots != n {
		t.Fatalf("a CQ of %d entries has %d slots", n, ring.Slots)
	}
	return r.H, ring
}

// wantCQEs checks that ring holds exactly want, from slot 0, and no more:
// its producer index never passed a completion the ring had no room for.
func wantCQEs(t *testing.T, ring *abi.Ring, want []ib.WC) {
	t.Helper()
	if p := ring.Producer(); p != uint32(len(want)) {
		t.Fatalf("producer %d, want %d", p, len(want))
	}
	for i, w := range want {
		var wc ib.WC
		abi.GetCQE(ring.Slot(uint32(i)), &wc)
		if wc.WRID != w.WRID || wc.Status != w.Status || wc.Opcode != w.Opcode || wc.ByteLen != w.ByteLen || wc.QPNum != w.QPNum {
			t.Fatalf("CQE %d: wr_id %d %v %v %d bytes QP %#x, want wr_id %d %v %v %d bytes QP %#x", i,
				wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.QPNum, w.WRID, w.Status, w.Opcode, w.ByteLen, w.QPNum)
		}
	}
}

func waitOverruns(t *testing.T, n *nic, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); n.srv.cqOverruns.Load() < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d overruns, want %d", n.srv.cqOverruns.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := n.srv.cqOverruns.Load(); got != want {
		t.Fatalf("%d overruns, want %d", got, want)
	}
}

// A CQ overrun as rxe (Linux 6.1) takes it. A receive completion that
// finds its CQ full is lost and its QP goes to ERR (rxe's responder:
// RESPST_ERR_CQ_OVERFLOW): CQ_ERR on the CQ, then QP_FATAL on the QP
// (IBTA's local work queue catastrophic error), the request is not
// acknowledged, the QP's last receive WQE is flushed into the full CQ
// and lost too, and once the program has made room a receive it posts
// completes WR_FLUSH_ERR. A send completion that finds its CQ full is
// lost and its QP goes on (rxe's completer ignores the failed post): a
// later WRITE completes. Each CQ raises CQ_ERR once, and neither ring
// gets a CQE past its room.
func TestCQOverrunQPState(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	openAsync(t, c)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	const slots = 4

	// Receives: S sends slots+1 SENDs to R, whose CQ holds slots.
	rcq, rring := overrunCQ(t, c, slots)
	scq, _ := overrunCQ(t, c, 64)
	r, s := &rawQP{}, &rawQP{}
	for _, q := range []struct {
		q  *rawQP
		cq uint32
	}{{r, rcq}, {s, scq}} {
		var rep abi.RingReply
		mem := mapFD(t, call(t, c, abi.KindCreateQP, &abi.CreateQPReq{PD: pd.H, SendCQ: q.cq, RecvCQ: q.cq, Type: ib.QPTypeRC,
			Caps: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}}, nil, &rep))
		q.q.h, q.q.qpn, q.q.sq, q.q.rq = rep.H, rep.QPN, ringOf(t, mem, rep.Send), ringOf(t, mem, rep.Recv)
	}
	var mr abi.RegMRReply
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &mr)
	(&evQP{h: r.h}).bringUp(t, c, s.qpn, n.addr, false)
	(&evQP{h: s.h}).bringUp(t, c, r.qpn, n.addr, false)
	postRecv := func(wrid uint64) {
		t.Helper()
		p := r.rq.Producer()
		if err := abi.EncodeRecvWQE(r.rq.Slot(p), &ib.RecvWR{WRID: wrid,
			SGL: []ib.SGE{{Addr: 0x14000 + 0x100*(wrid%32), Length: 64, LKey: mr.LKey}}}); err != nil {
			t.Fatal(err)
		}
		r.rq.SetProducer(p + 1)
		if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: r.h, Queue: abi.DoorbellRecv}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range slots + 2 {
		postRecv(uint64(100 + i))
	}
	for i := range slots + 1 {
		s.post(t, c, &ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: mr.LKey}}}, nil)
	}
	wantEvent(t, c, abi.AsyncEvent{Type: ib.EventCQErr, H: rcq})
	wantEvent(t, c, abi.AsyncEvent{Type: ib.EventQPFatal, H: r.h})
	if st := qpState(t, c, r.h); st != ib.QPSErr {
		t.Fatalf("the QP whose receive completion was lost is in %v, want ERR", st)
	}
	// The lost completion and the last receive WQE's flush.
	waitOverruns(t, n, 2)
	var want []ib.WC
	for i := range slots {
		want = append(want, ib.WC{WRID: uint64(100 + i), Opcode: ib.WCRecv, ByteLen: 8, QPNum: r.qpn})
	}
	wantCQEs(t, rring, want)
	if !rring.Overrun() {
		t.Fatal("the receive CQ's overrun flag is clear")
	}
	if st := qpState(t, c, s.h); st != ib.QPSRTS {
		t.Fatalf("the sender is in %v, want RTS (its last SEND is retried, unanswered)", st)
	}
	// Room for one: a receive posted to the QP in ERR is flushed into it.
	rring.SetConsumer(1)
	postRecv(200)
	for deadline := time.Now().Add(20 * time.Second); rring.Producer() == slots; {
		if time.Now().After(deadline) {
			t.Fatal("the receive posted in ERR never completed")
		}
		time.Sleep(time.Millisecond)
	}
	var wc ib.WC
	abi.GetCQE(rring.Slot(slots), &wc)
	if wc.WRID != 200 || wc.Status != ib.WCWRFlushErr || wc.QPNum != r.qpn || rring.Producer() != slots+1 {
		t.Fatalf("after room for one: wr_id %d %v QP %#x, producer %d; want wr_id 200 WR_FLUSH_ERR QP %#x, producer %d",
			wc.WRID, wc.Status, wc.QPNum, rring.Producer(), r.qpn, slots+1)
	}
	wantNoEvent(t, c)

	// Sends: W, a QP connected to itself, completes slots+2 signaled
	// WRITEs into a CQ of slots.
	wcq, wring := overrunCQ(t, c, slots)
	w := &rawQP{}
	w.create(t, c, pd.H, wcq, n.addr)
	write := func(wrid uint64) {
		t.Helper()
		w.post(t, c, &ib.SendWR{WRID: wrid, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: mr.LKey}}, RemoteAddr: 0x18000, RKey: mr.RKey}, nil)
	}
	for i := range slots + 2 {
		write(uint64(i))
	}
	wantEvent(t, c, abi.AsyncEvent{Type: ib.EventCQErr, H: wcq})
	waitOverruns(t, n, 4)
	want = want[:0]
	for i := range slots {
		want = append(want, ib.WC{WRID: uint64(i), Opcode: ib.WCRDMAWrite, ByteLen: 8, QPNum: w.qpn})
	}
	wantCQEs(t, wring, want)
	if st := qpState(t, c, w.h); st != ib.QPSRTS {
		t.Fatalf("the QP whose send completions were lost is in %v, want RTS (as rxe's completer)", st)
	}
	wring.SetConsumer(slots)
	write(99)
	cons := uint32(slots)
	if wc := poll(t, wring, &cons); wc.WRID != 99 || wc.Status != ib.WCSuccess || wc.QPNum != w.qpn {
		t.Fatalf("the WRITE after the overrun: wr_id %d %v QP %#x, want wr_id 99 success QP %#x", wc.WRID, wc.Status, wc.QPNum, w.qpn)
	}
	wantNoEvent(t, c)
}
