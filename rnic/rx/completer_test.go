package rx_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/rx"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// sent keeps the packets a TX is given.
type sent struct{ bufs []*ibudp.Buf }

func (s *sent) Alloc() *ibudp.Buf { return ibudp.NewBuf() }
func (s *sent) Send(b *ibudp.Buf) { s.bufs = append(s.bufs, b) }

// ackFor builds the ACK a responder sends for psn.
func ackFor(qpn, psn, msn uint32) []byte {
	buf := make([]byte, bth.PacketLen(bth.RCAcknowledge, 0))
	p, _ := bth.Build(buf, bth.RCAcknowledge, 0)
	p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCAcknowledge, PKey: bth.DefaultPKey, DestQP: qpn, PSN: psn})
	p.AETH().Encode(bth.SyndromeACK, msn)
	return buf
}

// rcQP is an RC QP in RTS at PSN 0x10, MTU 1024, in a handler's table,
// with an 4 KiB region at 0x1000; kicks counts its doorbells.
type rcQP struct {
	h     *rx.Handler
	qp    *qpmgr.QP
	cq    *qpmgr.CQ
	tab   *dma.Table
	mr    *dma.MR
	peer  netip.Addr
	kicks atomic.Int32 // the retransmission timer kicks from its own goroutine
}

func newRCQP(t *testing.T) *rcQP { t.Helper(); return newRCQPMem(t, make([]byte, 4096)) }

// newRCQPMem is newRCQP with mem as the region at 0x1000.
func newRCQPMem(t *testing.T, mem []byte) *rcQP {
	t.Helper()
	r := &rcQP{}
	tab := dma.NewTable()
	mr, err := tab.Register(1, mem, 0x1000, ib.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var counters qpmgr.Counters
	fc := newFC(t, 0)
	h := &rx.Handler{QPs: qpmgr.NewTable(), Counters: &counters, FC: fc,
		Resp: rx.Responder{DMA: tab, Counters: &counters, LocalAddr: netip.MustParseAddr("127.0.0.2"), Ack: rx.Acker{Counters: &counters}},
		Comp: rx.Completer{DMA: tab, Counters: &counters, FC: fc}}
	cq := qpmgr.NewCQ(64)
	qpn, _ := h.QPs.Alloc()
	qp, err := qpmgr.New(qpmgr.Config{QPN: qpn, Type: ib.QPTypeRC, PD: 1, SendCQ: cq, RecvCQ: cq, PortMTU: 1024,
		Caps: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}, Counters: &counters,
		Kick: func(*qpmgr.QP) { r.kicks.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	h.QPs.Insert(qp)
	peer := netip.MustParseAddr("127.0.0.1")
	for _, s := range []struct {
		a ib.QPAttr
		m ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1}, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: 0x99, AH: ib.AH{DGID: netif.GIDFromAddr(peer)}, MaxDestRdAtomic: 1},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPAttr{State: ib.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1, SQPSN: 0x10},
			ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
	} {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	r.h, r.qp, r.cq, r.tab, r.mr, r.peer = h, qp, cq, tab, mr, peer
	return r
}

// write is a signaled WRITE of n bytes from the region.
func (r *rcQP) write(id uint64, n int) qpmgr.SendWQE {
	return qpmgr.SendWQE{Len: n, WR: ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x1000, Length: uint32(n), LKey: r.mr.LKey}}, RemoteAddr: 0x2000, RKey: 5}}
}

// ack hands the handler an ACK for psn from the peer, and ends the batch.
func (r *rcQP) ack(t *testing.T, tx *sent, psn, msn uint32) {
	t.Helper()
	b := ibudp.NewBuf()
	if !b.SetRoCE(ackFor(r.qp.QPN, psn, msn)) {
		t.Fatal("ACK does not parse")
	}
	b.Peer = r.peer
	r.h.Receive(b, tx)
	r.h.Resp.Ack.Flush(tx)
}

// An ACK wakes the requester only when it has something left to send: on
// a ping-pong, a wake-up for nothing costs the send pipeline a hand-off
// and makes the next post wait for it.
func TestACKKicksOnlyWithSendWork(t *testing.T) {
	r := newRCQP(t)
	qp, cq := r.qp, r.cq
	// A window of one PSN: the second WRITE waits for the first's ACK.
	req := wqe.Engine{DMA: r.tab, FC: newFC(t, 1)}
	if _, err := qp.PostSend([]qpmgr.SendWQE{r.write(1, 8), r.write(2, 8)}); err != nil {
		t.Fatal(err)
	}
	var tx sent
	if n := req.Run(qp, &tx, 16); n != 1 {
		t.Fatalf("requester sent %d packets, want 1 (window)", n)
	}
	r.kicks.Store(0)
	r.ack(t, &tx, 0x10, 1)
	if r.kicks.Load() != 1 {
		t.Fatalf("ACK with a WRITE waiting for the window: %d kicks, want 1", r.kicks.Load())
	}
	if n := req.Run(qp, &tx, 16); n != 1 {
		t.Fatalf("requester sent %d packets after the ACK, want 1", n)
	}
	r.kicks.Store(0)
	r.ack(t, &tx, 0x11, 2)
	if r.kicks.Load() != 0 {
		t.Fatalf("ACK with nothing left to send: %d kicks, want 0", r.kicks.Load())
	}
	for id := uint64(1); id <= 2; id++ {
		var wc [1]ib.WC
		if cq.Poll(wc[:]) != 1 || wc[0].WRID != id || wc[0].Status != ib.WCSuccess || wc[0].Opcode != ib.WCRDMAWrite {
			t.Fatalf("completion %d: %+v", id, wc[0])
		}
	}
}

// TestLateACKDuringRetry: a WRITE of three packets times out, and while
// the retry is sending it again the ACK of its first transmission
// arrives. The ACK completes the WRITE (TestLossRecovery once stalled for
// a minute here: Comp.PSN moved past a WQE that stayed outstanding, and
// every later ACK of it looked like a duplicate).
func TestLateACKDuringRetry(t *testing.T) {
	r := newRCQP(t)
	qp := r.qp
	req := wqe.Engine{DMA: r.tab, FC: newFC(t, 0)}
	var tx sent
	r.sendWrite(t, &req, &tx, 7)
	r.h.Comp.Timeout(qp)
	if n := req.Run(qp, &tx, 1); n != 1 {
		t.Fatalf("retry sent %d packets with a budget of 1", n)
	}
	r.ack(t, &tx, 0x12, 1)
	var wc [2]ib.WC
	if n := r.cq.Poll(wc[:]); n != 1 || wc[0] != (ib.WC{WRID: 7, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 3000, QPNum: qp.QPN}) {
		t.Fatalf("after the late ACK: %d completions, first %+v", n, wc[0])
	}
	if qp.Outstanding() || qp.Comp.PSN != 0x13 {
		t.Fatalf("after the late ACK: outstanding %v, Comp.PSN %#x, want false, 0x13", qp.Outstanding(), qp.Comp.PSN)
	}
	if n := req.Run(qp, &tx, 16); n != 0 {
		t.Fatalf("requester sent %d more packets of a completed WRITE", n)
	}
}

// sendWrite posts WRITE id of 3000 bytes, three packets at MTU 1024,
// and has req send it whole.
func (r *rcQP) sendWrite(t *testing.T, req *wqe.Engine, tx *sent, id uint64) {
	t.Helper()
	if _, err := r.qp.PostSend([]qpmgr.SendWQE{r.write(id, 3000)}); err != nil {
		t.Fatal(err)
	}
	if n := req.Run(r.qp, tx, 16); n != 3 {
		t.Fatalf("requester sent %d packets, want 3", n)
	}
}

// newFC is a Flow Control Manager without congestion control and with a
// window of window PSNs (0: rxe's).
func newFC(t testing.TB, window int) *flowctl.Manager {
	t.Helper()
	fc, err := flowctl.New(flowctl.Config{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	return fc
}

// nakFor builds a PSN sequence error NAK for psn.
func nakFor(qpn, psn, msn uint32) []byte {
	buf := ackFor(qpn, psn, msn)
	p, _ := bth.Parse(buf)
	p.AETH().Encode(bth.NAKPSNSeqError, msn)
	return buf
}

// TestRepeatedNAKCostsOneRetry: a responder repeats its NAK while the gap
// lasts (ack.go). With retry_cnt 1, three NAKs for the same PSN within
// the ACK timeout each send the requester back but cost one retry in all:
// the QP stays in RTS and completes the WRITE once ACKed. A NAK for
// another PSN costs the next retry, and with none left fails the WRITE.
func TestRepeatedNAKCostsOneRetry(t *testing.T) {
	r := newRCQP(t)
	qp := r.qp
	qp.Attr.RetryCnt, qp.Comp.RetryCnt = 1, 1
	req := wqe.Engine{DMA: r.tab, FC: newFC(t, 0)}
	var tx sent
	r.sendWrite(t, &req, &tx, 1)
	for i := 1; i <= 3; i++ {
		nak := ibudp.NewBuf()
		if !nak.SetRoCE(nakFor(qp.QPN, 0x11, 0)) {
			t.Fatal("NAK does not parse")
		}
		nak.Peer = r.peer
		// A repeat within a round trip (at least minRTO) of the go-back
		// it repeats is answered already (retryNAK); these come later.
		qp.Comp.GoBackAt = qp.Comp.GoBackAt.Add(-time.Second)
		r.h.Receive(nak, &tx)
		r.h.Resp.Ack.Flush(&tx)
		if st := qp.State(); st != ib.QPSRTS || qp.Comp.RetryCnt != 0 || !qp.Req.NeedRetry {
			t.Fatalf("after NAK %d: state %v, retries left %d, retry pending %v; want RTS, 0, true", i, st, qp.Comp.RetryCnt, qp.Req.NeedRetry)
		}
		if n := req.Run(qp, &tx, 16); n != 2 {
			t.Fatalf("after NAK %d the requester resent %d packets, want 2 (from PSN 0x11)", i, n)
		}
	}
	if c := r.h.Counters.Get(ib.RcvdSeqErr); c != 3 {
		t.Fatalf("rcvd_seq_err = %d, want 3", c)
	}
	r.ack(t, &tx, 0x12, 1)
	var wc [1]ib.WC
	if r.cq.Poll(wc[:]) != 1 || wc[0] != (ib.WC{WRID: 1, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 3000, QPNum: qp.QPN}) {
		t.Fatalf("completion %+v", wc[0])
	}
	// A new gap with no retry left: the first NAK for it fails the WRITE.
	qp.Comp.RetryCnt = 0
	r.sendWrite(t, &req, &tx, 2)
	nak := ibudp.NewBuf()
	nak.SetRoCE(nakFor(qp.QPN, 0x13, 1)) // the first PSN: no progress
	nak.Peer = r.peer
	r.h.Receive(nak, &tx)
	r.h.Resp.Ack.Flush(&tx)
	if r.cq.Poll(wc[:]) != 1 || wc[0] != (ib.WC{WRID: 2, Status: ib.WCRetryExcErr, Opcode: ib.WCRDMAWrite, QPNum: qp.QPN}) {
		t.Fatalf("completion after a NAK with no retry left: %+v", wc[0])
	}
}
