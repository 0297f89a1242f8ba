package rx

import (
	"bytes"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// sink is a TX that keeps what it is given.
type sink struct{ n int }

func (s *sink) Alloc() *ibudp.Buf { return ibudp.NewBuf() }
func (s *sink) Send(b *ibudp.Buf) { s.n++ }

const (
	fuzzVA    = 0x10000
	fuzzLen   = 8192
	guardLen  = 4096
	guardByte = 0xa5
)

// groupAddr is the multicast group the rig's group datagrams are for.
var groupAddr = netip.MustParseAddr("239.1.2.3")

// fuzzRig is a handler with one RC, one UC and one UD QP, an XRC
// target and an XRC initiator in RTS whose region sits between two guard
// areas that no packet may touch; two XRC SRQs, the first in the
// target's domain, the second in another.
type fuzzRig struct {
	h     *Handler
	mem   []byte // guard | region | guard
	qps   []*qpmgr.QP
	srqs  []*qpmgr.XRCSRQ
	peer  netip.Addr
	rkey  uint32
	recvs int
	mcast bool // feed hands packets to ReceiveMulticast, for every QP
}

func newFuzzRig(t testing.TB) *fuzzRig {
	r := &fuzzRig{peer: netip.MustParseAddr("127.0.0.1")}
	tab := dma.NewTable()
	r.mem = bytes.Repeat([]byte{guardByte}, guardLen+fuzzLen+guardLen)
	mr, err := tab.Register(1, r.mem[guardLen:guardLen+fuzzLen:guardLen+fuzzLen], fuzzVA,
		ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	r.rkey = mr.RKey
	var counters qpmgr.Counters
	fc, err := flowctl.New(flowctl.Config{Algorithm: dcqcn(t)})
	if err != nil {
		t.Fatal(err)
	}
	r.h = &Handler{QPs: qpmgr.NewTable(), Counters: &counters, FC: fc,
		Resp: Responder{DMA: tab, Counters: &counters, LocalAddr: netip.MustParseAddr("127.0.0.2"), Ack: Acker{Counters: &counters}},
		Comp: Completer{DMA: tab, Counters: &counters, FC: fc}}
	cq := qpmgr.NewCQ(1 << 16)
	r.h.Resp.XRCSRQs = &r.h.QPs.XRCSRQs
	dom := &qpmgr.XRCDomain{}
	for _, d := range []*qpmgr.XRCDomain{dom, {}} {
		s := &qpmgr.XRCSRQ{Domain: d, PD: 1, CQ: cq, Queue: qpmgr.NewRecvQueue(1024, 2)}
		if err := r.h.QPs.XRCSRQs.Add(s); err != nil {
			t.Fatal(err)
		}
		r.srqs = append(r.srqs, s)
	}
	for _, typ := range []ib.QPType{ib.QPTypeRC, ib.QPTypeUC, ib.QPTypeUD, ib.QPTypeXRCRecv, ib.QPTypeXRCSend} {
		qpn, _ := r.h.QPs.Alloc()
		var xrcd *qpmgr.XRCDomain
		if typ == ib.QPTypeXRCRecv {
			xrcd = dom
		}
		qp, err := qpmgr.New(qpmgr.Config{QPN: qpn, Type: typ, XRCD: xrcd, PD: 1, SendCQ: cq, RecvCQ: cq, PortMTU: 1024,
			Caps: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 1024, MaxSendSGE: 2, MaxRecvSGE: 2}, Counters: &counters, Kick: func(*qpmgr.QP) {}})
		if err != nil {
			t.Fatal(err)
		}
		r.h.QPs.Insert(qp)
		gid := netif.GIDFromAddr(r.peer)
		steps := []struct {
			a ib.QPAttr
			m ib.AttrMask
		}{
			{ib.QPAttr{State: ib.QPSInit, PortNum: 1, QKey: 7, AccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic},
				ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
			{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU256, DestQPN: 0x99, AH: ib.AH{DGID: gid}, MaxDestRdAtomic: 4},
				ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
			{ib.QPAttr{State: ib.QPSRTS, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
		}
		switch typ {
		case ib.QPTypeUC:
			steps[1].m &^= ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
			steps[2].m = ib.AttrState | ib.AttrSQPSN
		case ib.QPTypeUD:
			steps[0].m = ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey
			steps[1].m = ib.AttrState
			steps[2].m = ib.AttrState | ib.AttrSQPSN
		}
		for _, s := range steps {
			if err := qp.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
		r.qps = append(r.qps, qp)
	}
	return r
}

// feed runs one packet through the handler, keeping a receive WQE posted
// on each QP, and checks the guards.
func (r *fuzzRig) feed(t *testing.T, pkt []byte) {
	for _, s := range r.srqs {
		if s.Queue.Len() == 0 {
			s.Queue.Post([]ib.RecvWR{{WRID: uint64(r.recvs), SGL: []ib.SGE{{Addr: fuzzVA, Length: 600, LKey: r.rkey}, {Addr: fuzzVA + 4096, Length: 3000, LKey: r.rkey}}}})
			r.recvs++
		}
	}
	for _, qp := range r.qps {
		if qp.XRC == 0 && qp.RQ.Len() == 0 {
			qp.RQ.Post([]ib.RecvWR{{WRID: uint64(r.recvs), SGL: []ib.SGE{{Addr: fuzzVA, Length: 600, LKey: r.rkey}, {Addr: fuzzVA + 4096, Length: 3000, LKey: r.rkey}}}})
			r.recvs++
		}
	}
	b := ibudp.NewBuf()
	if !b.SetRoCE(pkt) {
		return
	}
	b.Peer = r.peer
	if len(pkt) > 0 {
		// The ECN codepoint from the ICRC's last byte, which nothing
		// checks here: a quarter of the packets arrive marked CE.
		b.SetECN(ibudp.ECN(pkt[len(pkt)-1]))
	}
	var tx sink
	if r.mcast {
		// A group's datagram: a copy to each QP, as the device's
		// multicast pipeline hands it.
		b.Dst = groupAddr
		for _, qp := range r.qps {
			c := ibudp.NewBuf()
			c.CopyFrom(b)
			r.h.ReceiveMulticast(c, qp, &tx)
		}
	} else {
		r.h.Receive(b, &tx)
	}
	r.h.Resp.Ack.Flush(&tx)
	for i, v := range r.mem[:guardLen] {
		if v != guardByte {
			t.Fatalf("byte %d before the region changed", i)
		}
	}
	for i, v := range r.mem[guardLen+fuzzLen:] {
		if v != guardByte {
			t.Fatalf("byte %d after the region changed", i)
		}
	}
}

// seedPacket builds a valid request for the rig's QP of index qi.
func (r *fuzzRig) seedPacket(op bth.Opcode, qi int, psn uint32, n int, va uint64, dmaLen uint32) []byte {
	buf := make([]byte, bth.PacketLen(op, n))
	p, _ := bth.Build(buf, op, n)
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: r.qps[qi].QPN, PSN: psn, AckReq: true})
	if op.Has(bth.HdrRETH) {
		p.RETH().Encode(va, r.rkey, dmaLen)
	}
	if op.Has(bth.HdrAtomicETH) {
		p.AtomicETH().Encode(va, r.rkey, 1, 0)
	}
	if op.Has(bth.HdrDETH) {
		p.DETH().Encode(7, 0x55)
	}
	if op.Has(bth.HdrXRCETH) {
		p.XRCETH().Encode(r.srqs[0].Num)
	}
	for i := range p.Payload() {
		p.Payload()[i] = byte(i)
	}
	return buf
}

// FuzzReceive throws arbitrary packets at the RX packet handler: no panic,
// and no byte outside the registered region ever changes.
func FuzzReceive(f *testing.F) {
	seed := newFuzzRig(f)
	f.Add(seed.seedPacket(bth.RCRDMAWriteOnly, 0, 0, 100, fuzzVA, 100))
	f.Add(seed.seedPacket(bth.RCRDMAWriteFirst, 0, 0, 256, fuzzVA+fuzzLen-256, 512))
	f.Add(seed.seedPacket(bth.RCSendOnly, 0, 0, 200, 0, 0))
	f.Add(seed.seedPacket(bth.RCSendFirst, 0, 0, 256, 0, 0))
	f.Add(seed.seedPacket(bth.RCRDMAReadRequest, 0, 0, 0, fuzzVA, 4096))
	f.Add(seed.seedPacket(bth.RCFetchAdd, 0, 0, 0, fuzzVA+8, 0))
	f.Add(seed.seedPacket(bth.UCRDMAWriteOnly, 1, 0, 64, fuzzVA+fuzzLen-64, 64))
	f.Add(seed.seedPacket(bth.UCSendOnly, 1, 0, 64, 0, 0))
	f.Add(seed.seedPacket(bth.UDSendOnly, 2, 0, 600, 0, 0))
	f.Add(seed.seedPacket(bth.RCAcknowledge, 0, 0, 0, 0, 0))
	f.Add(seed.seedPacket(bth.XRCSendFirst, 3, 0, 256, 0, 0))
	f.Add(seed.seedPacket(bth.XRCRDMAWriteOnlyImm, 3, 0, 100, fuzzVA, 100))
	f.Add(seed.seedPacket(bth.XRCRDMAReadRequest, 3, 0, 0, fuzzVA, 4096))
	f.Add(seed.seedPacket(bth.XRCCompareSwap, 3, 0, 0, fuzzVA+8, 0))
	f.Add(seed.seedPacket(bth.XRCAcknowledge, 4, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		r := newFuzzRig(t)
		// Aim most inputs at a real QP so they get past the lookup.
		if len(pkt) >= bth.BTHLen && len(r.qps) > 0 {
			qi := int(pkt[0]) % len(r.qps)
			if op := bth.Opcode(pkt[0]); op.Transport() == bth.TransportXRC {
				qi = 4 // XRC's: requests to the target, the rest to the initiator
				if op.Is(bth.FlagRequest) {
					qi = 3
				}
			}
			qpn := r.qps[qi].QPN
			pkt[5], pkt[6], pkt[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
		}
		r.feed(t, pkt)
		r.feed(t, pkt) // and again, as a duplicate
	})
}

// FuzzReceiveMulticast throws arbitrary packets at every QP as a
// multicast group's datagrams (Handler.ReceiveMulticast): no panic, and
// no byte outside the registered region ever changes.
func FuzzReceiveMulticast(f *testing.F) {
	seed := newFuzzRig(f)
	ud := seed.seedPacket(bth.UDSendOnly, 2, 0, 100, 0, 0)
	ud[5], ud[6], ud[7] = 0xff, 0xff, 0xff
	f.Add(ud)
	f.Add(seed.seedPacket(bth.UDSendOnly, 2, 0, 600, 0, 0))
	f.Add(seed.seedPacket(bth.RCSendOnly, 0, 0, 200, 0, 0))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		r := newFuzzRig(t)
		r.mcast = true
		// Most inputs to the multicast QPN, so that they get past it.
		if len(pkt) >= bth.BTHLen && pkt[0]&3 != 0 {
			pkt[5], pkt[6], pkt[7] = 0xff, 0xff, 0xff
		}
		r.feed(t, pkt)
	})
}

// TestHostileWrites sends WRITEs whose RETH points at and around the edges
// of the region: every one outside it is refused and nothing outside the
// region changes; the ones inside land.
func TestHostileWrites(t *testing.T) {
	for _, c := range []struct {
		va   uint64
		n    uint32
		land bool
	}{
		{fuzzVA, 64, true},
		{fuzzVA + fuzzLen - 64, 64, true},
		{fuzzVA + fuzzLen - 63, 64, false},
		{fuzzVA - 1, 64, false},
		{^uint64(0) - 10, 64, false},
		{fuzzVA, 1 << 31, false},
	} {
		r := newFuzzRig(t)
		n := int(min(c.n, 64))
		r.feed(t, r.seedPacket(bth.RCRDMAWriteOnly, 0, 0, n, c.va, c.n))
		landed := c.va >= fuzzVA && c.va <= fuzzVA+fuzzLen-64 &&
			bytes.Equal(r.mem[guardLen+int(c.va-fuzzVA):guardLen+int(c.va-fuzzVA)+64], r.seedPacket(bth.RCRDMAWriteOnly, 0, 0, 64, 0, 0)[bth.BTHLen+bth.RETHLen:][:64])
		if landed != c.land {
			t.Errorf("WRITE of %d at %#x: landed %v, want %v", c.n, c.va, landed, c.land)
		}
		if got := r.h.Counters.Get(ib.NAKsSent); got != map[bool]uint64{true: 0, false: 1}[c.land] {
			t.Errorf("WRITE of %d at %#x: %d NAKs", c.n, c.va, got)
		}
	}
}

// dcqcn is DCQCN with mlx5's defaults: the fuzzer's CNPs and CE marks
// reach a live reaction and notification point.
func dcqcn(t testing.TB) flowctl.Algorithm {
	a, err := flowctl.NewAlgorithm("dcqcn", flowctl.DefaultParams(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
