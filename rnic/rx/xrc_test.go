package rx_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/rx"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// xrcTarget is an XRC target QP in RTS expecting PSN 0x20 from QP 0x77
// at 127.0.0.1, path MTU 1024, in domain dom, which holds srq (on cq,
// PD 1, a region at 0x1000); other is an SRQ of another domain.
type xrcTarget struct {
	h        *rx.Handler
	counters *qpmgr.Counters
	qp       *qpmgr.QP
	dom      *qpmgr.XRCDomain
	srq      *qpmgr.XRCSRQ
	other    *qpmgr.XRCSRQ
	cq       *qpmgr.CQ
	mem      []byte
	mr       *dma.MR
	peer     netip.Addr
}

func newXRCTarget(t *testing.T) *xrcTarget {
	t.Helper()
	x := &xrcTarget{mem: make([]byte, 4096), peer: netip.MustParseAddr("127.0.0.1"), counters: &qpmgr.Counters{}}
	tab := dma.NewTable()
	var err error
	if x.mr, err = tab.Register(1, x.mem, 0x1000, ib.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	qps := qpmgr.NewTable()
	x.h = &rx.Handler{QPs: qps, Counters: x.counters, FC: newFC(t, 0),
		Resp: rx.Responder{DMA: tab, Counters: x.counters, LocalAddr: netip.MustParseAddr("127.0.0.2"),
			Ack: rx.Acker{Counters: x.counters}, XRCSRQs: &qps.XRCSRQs}}
	x.dom, x.cq = &qpmgr.XRCDomain{}, qpmgr.NewCQ(16)
	x.srq = &qpmgr.XRCSRQ{Domain: x.dom, PD: 1, CQ: x.cq, Queue: qpmgr.NewRecvQueue(4, 2)}
	x.other = &qpmgr.XRCSRQ{Domain: &qpmgr.XRCDomain{}, PD: 1, CQ: x.cq, Queue: qpmgr.NewRecvQueue(4, 1)}
	for _, s := range []*qpmgr.XRCSRQ{x.srq, x.other} {
		if err := qps.XRCSRQs.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	if x.srq.Num == 0 || x.srq.Num == x.other.Num || qps.XRCSRQs.Lookup(x.srq.Num) != x.srq {
		t.Fatalf("SRQ numbers %d and %d", x.srq.Num, x.other.Num)
	}
	qpn, _ := qps.Alloc()
	x.qp, err = qpmgr.New(qpmgr.Config{QPN: qpn, Type: ib.QPTypeXRCRecv, XRCD: x.dom, PD: 0xffffffff, PortMTU: 1024,
		Counters: x.counters, Kick: func(*qpmgr.QP) {}})
	if err != nil {
		t.Fatal(err)
	}
	qps.Insert(x.qp)
	// The attributes Debian's ibv_xsrq_pingpong gives its target: RTS
	// without retry counts (IBTA A14.5.2).
	for _, s := range []struct {
		a ib.QPAttr
		m ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1, AccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead},
			ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: 0x77, RQPSN: 0x20, MinRNRTimer: 12,
			AH: ib.AH{DGID: netif.GIDFromAddr(x.peer)}},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPAttr{State: ib.QPSRTS, Timeout: 14, SQPSN: 0x5}, ib.AttrState | ib.AttrTimeout | ib.AttrSQPSN},
	} {
		if err := x.qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// request hands the handler an XRC request for srqn and ends the batch.
func (x *xrcTarget) request(t *testing.T, tx *sent, op bth.Opcode, psn, srqn uint32, payload []byte, ackReq bool) {
	t.Helper()
	buf := make([]byte, bth.PacketLen(op, len(payload)))
	p, err := bth.Build(buf, op, len(payload))
	if err != nil {
		t.Fatal(err)
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(len(payload)), PKey: bth.DefaultPKey,
		DestQP: x.qp.QPN, PSN: psn, AckReq: ackReq})
	p.XRCETH().Encode(srqn)
	if op.Has(bth.HdrImmDt) {
		p.ImmDt().Encode(0xcafef00d)
	}
	copy(p.Payload(), payload)
	b := ibudp.NewBuf()
	if !b.SetRoCE(buf) {
		t.Fatal("request does not parse")
	}
	b.Peer = x.peer
	x.h.Receive(b, tx)
	x.h.Resp.Ack.Flush(tx)
}

// checkAck checks that tx holds one XRC ACKNOWLEDGE to the initiator
// with syndrome syn for psn, and empties it.
func checkAck(t *testing.T, tx *sent, syn bth.Syndrome, psn uint32) {
	t.Helper()
	if len(tx.bufs) != 1 {
		t.Fatalf("%d packets sent, want one ACK", len(tx.bufs))
	}
	p, err := bth.Parse(tx.bufs[0].RoCE())
	if err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != bth.XRCAcknowledge || p.BTH().DestQP() != 0x77 || p.BTH().PSN() != psn || p.AETH().Syndrome() != syn {
		t.Fatalf("sent %v to QP %#x PSN %#x syndrome %#x, want XRC_ACKNOWLEDGE to 0x77 PSN %#x syndrome %#x",
			p.Opcode(), p.BTH().DestQP(), p.BTH().PSN(), p.AETH().Syndrome(), psn, syn)
	}
	tx.bufs = nil
}

// A two-packet SEND to an XRC target lands in the SRQ its XRCETH names,
// byte for byte, completes on that SRQ's CQ with the target's QPN, and
// is acknowledged with XRC's ACK opcode.
func TestXRCTargetSend(t *testing.T) {
	x := newXRCTarget(t)
	// Two SGEs, to check the scatter: 1000 bytes at 0x1000, 1000 at 0x1800.
	if _, err := x.srq.Queue.Post([]ib.RecvWR{{WRID: 42, SGL: []ib.SGE{
		{Addr: 0x1000, Length: 1000, LKey: x.mr.LKey}, {Addr: 0x1800, Length: 1000, LKey: x.mr.LKey}}}}); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1024+200)
	for i := range msg {
		msg[i] = byte(i*7 + 1)
	}
	var tx sent
	x.request(t, &tx, bth.XRCSendFirst, 0x20, x.srq.Num, msg[:1024], false)
	if len(tx.bufs) != 0 {
		t.Fatalf("%d packets sent for a first packet without AckReq", len(tx.bufs))
	}
	x.request(t, &tx, bth.XRCSendLastImm, 0x21, x.srq.Num, msg[1024:], true)
	checkAck(t, &tx, bth.ACK(bth.CreditsInvalid), 0x21)
	if !bytes.Equal(x.mem[:1000], msg[:1000]) || !bytes.Equal(x.mem[0x800:0x800+224], msg[1000:]) {
		t.Fatal("the message is not where the SGEs put it")
	}
	if bytes.ContainsFunc(x.mem[1000:0x800], func(r rune) bool { return r != 0 }) ||
		bytes.ContainsFunc(x.mem[0x800+224:], func(r rune) bool { return r != 0 }) {
		t.Fatal("bytes written outside the message")
	}
	wcs := make([]ib.WC, 4)
	if n := x.cq.Poll(wcs); n != 1 {
		t.Fatalf("%d completions", n)
	}
	want := ib.WC{WRID: 42, Status: ib.WCSuccess, Opcode: ib.WCRecv, ByteLen: 1224, Imm: 0xcafef00d,
		QPNum: x.qp.QPN, WCFlags: ib.WCFlagWithImm}
	if wcs[0] != want {
		t.Fatalf("completion %v, want %v", &wcs[0], &want)
	}
	if got := x.counters.Get(ib.RDMARecvs); got != 1 {
		t.Fatalf("rdma_recvs %d", got)
	}
}

// A request naming an SRQ of another domain, or none, is a counted
// invalid request: NAKed in sequence, and the target goes to ERR with
// nothing written; out of sequence, dropped without an answer.
func TestXRCTargetBadSRQ(t *testing.T) {
	for _, tc := range []struct {
		name string
		srqn func(*xrcTarget) uint32
	}{
		{"other domain", func(x *xrcTarget) uint32 { return x.other.Num }},
		{"no such SRQ", func(x *xrcTarget) uint32 { return 0xabcdef }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newXRCTarget(t)
			for _, s := range []*qpmgr.XRCSRQ{x.srq, x.other} {
				if _, err := s.Queue.Post([]ib.RecvWR{{WRID: 1, SGL: []ib.SGE{{Addr: 0x1000, Length: 64, LKey: x.mr.LKey}}}}); err != nil {
					t.Fatal(err)
				}
			}
			var tx sent
			x.request(t, &tx, bth.XRCSendOnly, 0x30, tc.srqn(x), []byte("ahead"), true) // a gap: dropped
			if len(tx.bufs) != 0 {
				t.Fatalf("%d packets sent for an out-of-sequence request", len(tx.bufs))
			}
			x.request(t, &tx, bth.XRCSendOnly, 0x20, tc.srqn(x), []byte("forged"), true)
			checkAck(t, &tx, bth.NAKInvalidRequest, 0x20)
			if got := x.counters.Get(ib.DropBadXRCSRQ); got != 2 {
				t.Fatalf("drop_bad_xrc_srq %d, want 2", got)
			}
			x.qp.Lock()
			st := x.qp.State()
			x.qp.Unlock()
			if st != ib.QPSErr {
				t.Fatalf("target in %v", st)
			}
			if bytes.ContainsFunc(x.mem, func(r rune) bool { return r != 0 }) {
				t.Fatal("memory written")
			}
			if n := x.cq.Poll(make([]ib.WC, 4)); n != 0 {
				t.Fatalf("%d completions", n)
			}
			if x.srq.Queue.Len() != 1 || x.other.Queue.Len() != 1 {
				t.Fatal("a receive WQE was taken")
			}
		})
	}
}
