package rx_test

import (
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/rx"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
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

// An ACK wakes the requester only when it has something left to send: on
// a ping-pong, a wake-up for nothing costs the send pipeline a hand-off
// and makes the next post wait for it.
func TestACKKicksOnlyWithSendWork(t *testing.T) {
	tab := dma.NewTable()
	mem := make([]byte, 4096)
	mr, err := tab.Register(1, mem, 0x1000, dma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var counters qpmgr.Counters
	h := &rx.Handler{DMA: tab, QPs: qpmgr.NewTable(), Counters: &counters, LocalAddr: netip.MustParseAddr("127.0.0.2")}
	kicks := 0
	cq := qpmgr.NewCQ(64)
	qpn, _ := h.QPs.Alloc()
	qp, err := qpmgr.New(qpmgr.Config{QPN: qpn, Type: qpmgr.TypeRC, PD: 1, SendCQ: cq, RecvCQ: cq, PortMTU: 1024,
		Caps: qpmgr.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}, Counters: &counters,
		Kick: func(*qpmgr.QP) { kicks++ }})
	if err != nil {
		t.Fatal(err)
	}
	h.QPs.Insert(qp)
	peer := netip.MustParseAddr("127.0.0.1")
	for _, s := range []struct {
		a qpmgr.Attr
		m qpmgr.AttrMask
	}{
		{qpmgr.Attr{State: qpmgr.StateInit, PortNum: 1}, qpmgr.AttrState | qpmgr.AttrPKeyIndex | qpmgr.AttrPort | qpmgr.AttrAccessFlags},
		{qpmgr.Attr{State: qpmgr.StateRTR, PathMTU: qpmgr.MTU1024, DestQPN: 0x99, AH: qpmgr.AH{DGID: ibudp.GIDFromAddr(peer)}, MaxDestRdAtomic: 1},
			qpmgr.AttrState | qpmgr.AttrAV | qpmgr.AttrPathMTU | qpmgr.AttrDestQPN | qpmgr.AttrRQPSN | qpmgr.AttrMaxDestRdAtomic | qpmgr.AttrMinRNRTimer},
		{qpmgr.Attr{State: qpmgr.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1, SQPSN: 0x10},
			qpmgr.AttrState | qpmgr.AttrTimeout | qpmgr.AttrRetryCnt | qpmgr.AttrRNRRetry | qpmgr.AttrSQPSN | qpmgr.AttrMaxQPRdAtomic},
	} {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	write := func(id uint64) qpmgr.SendWQE {
		return qpmgr.SendWQE{Len: 8, WR: qpmgr.SendWR{WRID: id, Opcode: qpmgr.WRRDMAWrite, Flags: qpmgr.SendSignaled,
			SGL: []qpmgr.SGE{{Addr: 0x1000, Length: 8, LKey: mr.LKey}}, RemoteAddr: 0x2000, RKey: 5}}
	}
	// A window of one PSN: the second WRITE waits for the first's ACK.
	req := wqe.Engine{DMA: tab, Window: 1}
	if _, err := qp.PostSend([]qpmgr.SendWQE{write(1), write(2)}); err != nil {
		t.Fatal(err)
	}
	var tx sent
	if n := req.Run(qp, &tx, 16); n != 1 {
		t.Fatalf("requester sent %d packets, want 1 (window)", n)
	}
	ack := func(psn, msn uint32) {
		t.Helper()
		b := ibudp.NewBuf()
		if !b.SetRoCE(ackFor(qpn, psn, msn)) {
			t.Fatal("ACK does not parse")
		}
		b.Peer = peer
		h.Receive(b, &tx)
		h.Flush(&tx)
	}
	kicks = 0
	ack(0x10, 1)
	if kicks != 1 {
		t.Fatalf("ACK with a WRITE waiting for the window: %d kicks, want 1", kicks)
	}
	if n := req.Run(qp, &tx, 16); n != 1 {
		t.Fatalf("requester sent %d packets after the ACK, want 1", n)
	}
	kicks = 0
	ack(0x11, 2)
	if kicks != 0 {
		t.Fatalf("ACK with nothing left to send: %d kicks, want 0", kicks)
	}
	for id := uint64(1); id <= 2; id++ {
		var wc [1]qpmgr.WC
		if cq.Poll(wc[:]) != 1 || wc[0].WRID != id || wc[0].Status != qpmgr.WCSuccess || wc[0].Opcode != qpmgr.WCRDMAWrite {
			t.Fatalf("completion %d: %+v", id, wc[0])
		}
	}
}
