package wqe_test

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// port is a fake port: it keeps the packets the requester sends.
type port struct{ bufs []*ibudp.Buf }

func (p *port) Alloc() *ibudp.Buf { return ibudp.NewBuf() }
func (p *port) Send(b *ibudp.Buf) { p.bufs = append(p.bufs, b) }

// take returns the packets sent since the last take, parsed.
func (p *port) take(t *testing.T) []bth.Packet {
	t.Helper()
	var out []bth.Packet
	for _, b := range p.bufs {
		pkt, err := bth.Parse(b.RoCE())
		if err != nil {
			t.Fatalf("the requester sent a packet that does not parse: %v", err)
		}
		out = append(out, pkt)
	}
	p.bufs = nil
	return out
}

const (
	memVA    = 0x100000 // the fake DMA's region answers here
	memLen   = 64 << 10
	destQPN  = 0x4242
	remoteVA = 0xabc0000
	rkey     = 0x5151
)

// requester is an RC QP in RTS with its engine over a fake DMA: a region
// of 64 KiB of known bytes at memVA in a dma.Table of the test's own.
type requester struct {
	e        wqe.Engine
	qp       *qpmgr.QP
	cq       *qpmgr.CQ
	mem      []byte
	mr       *dma.MR
	counters *qpmgr.Counters
	port     port
}

// newRequester makes the QP with path MTU mtu, first PSN psn and the
// engine's window (0: rxe's).
func newRequester(t *testing.T, typ ib.QPType, mtu ib.MTU, psn uint32, window int) *requester {
	t.Helper()
	r := &requester{counters: &qpmgr.Counters{}, cq: qpmgr.NewCQ(256), mem: make([]byte, memLen)}
	for i := range r.mem {
		r.mem[i] = byte(i*31 + i>>8)
	}
	tab := dma.NewTable()
	mr, err := tab.Register(1, r.mem, memVA, ib.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	r.mr = mr
	fc, err := flowctl.New(flowctl.Config{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	r.e = wqe.Engine{DMA: tab, FC: fc}
	qp, err := qpmgr.New(qpmgr.Config{QPN: 0x11, Type: typ, PD: 1, SendCQ: r.cq, RecvCQ: r.cq, PortMTU: 4096,
		Caps: ib.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 2, MaxRecvSGE: 1}, Counters: r.counters,
		Kick: func(*qpmgr.QP) {}})
	if err != nil {
		t.Fatal(err)
	}
	peer := netif.GIDFromAddr(netip.MustParseAddr("127.0.0.9"))
	steps := []struct {
		a ib.QPAttr
		m ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1}, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: mtu, DestQPN: destQPN, AH: ib.AH{DGID: peer}, MaxDestRdAtomic: 1},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		// Timeout 0: no retransmission timer, so nothing runs but the test.
		{ib.QPAttr{State: ib.QPSRTS, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4, SQPSN: psn},
			ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
	}
	if typ == ib.QPTypeUC {
		steps[0].m = ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags
		steps[1].m = ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN
		steps[2].m = ib.AttrState | ib.AttrSQPSN
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	r.qp = qp
	return r
}

// post queues WRs as the device's validator would hand them over.
func (r *requester) post(t *testing.T, wrs ...ib.SendWR) {
	t.Helper()
	var ws []qpmgr.SendWQE
	for _, wr := range wrs {
		w := qpmgr.SendWQE{WR: wr}
		for _, s := range wr.SGL {
			w.Len += int(s.Length)
		}
		ws = append(ws, w)
	}
	r.qp.Lock()
	defer r.qp.Unlock()
	if _, err := r.qp.PostSend(ws); err != nil {
		t.Fatal(err)
	}
}

// run runs the requester with the QP's lock held, as the send pipeline
// does, and returns what it sent.
func (r *requester) run(t *testing.T, budget int) []bth.Packet {
	t.Helper()
	r.qp.Lock()
	n := r.e.Run(r.qp, &r.port, budget)
	r.qp.Unlock()
	pkts := r.port.take(t)
	if n != len(pkts) {
		t.Fatalf("Run says %d packets, the port got %d", n, len(pkts))
	}
	return pkts
}

func (r *requester) write(id uint64, off, n int) ib.SendWR {
	return ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, RemoteAddr: remoteVA, RKey: rkey,
		SGL: []ib.SGE{{Addr: memVA + uint64(off), Length: uint32(n), LKey: r.mr.LKey}}}
}

// want is what one packet must carry, field by field.
type want struct {
	op      bth.Opcode
	psn     uint32
	ackReq  bool
	solicit bool
	payload []byte // nil: none
	reth    *[3]uint64
}

func check(t *testing.T, i int, p bth.Packet, w want) {
	t.Helper()
	got := p.BTH().Fields()
	exp := bth.BTHFields{Opcode: w.op, SolicitedEvent: w.solicit, PadCount: bth.PadFor(len(w.payload)),
		PKey: bth.DefaultPKey, DestQP: destQPN, AckReq: w.ackReq, PSN: w.psn}
	if got != exp {
		t.Fatalf("packet %d: BTH %+v\nwant %+v", i, got, exp)
	}
	if !bytes.Equal(p.Payload(), w.payload) {
		t.Fatalf("packet %d: payload of %d bytes differs from the %d wanted", i, len(p.Payload()), len(w.payload))
	}
	if w.reth != nil {
		reth := p.RETH()
		if got := [3]uint64{reth.VA(), uint64(reth.RKey()), uint64(reth.DMALength())}; got != *w.reth {
			t.Fatalf("packet %d: RETH va %#x rkey %#x len %d, want %#x %#x %d", i, got[0], got[1], got[2], w.reth[0], w.reth[1], w.reth[2])
		}
	} else if w.op.Has(bth.HdrRETH) {
		t.Fatalf("packet %d: test wants no RETH of a %v", i, w.op)
	}
}

func reth(va uint64, n int) *[3]uint64 { return &[3]uint64{va, rkey, uint64(n)} }

// A message is cut into path-MTU packets: FIRST (with the RETH of the
// whole message), MIDDLE, LAST, consecutive PSNs across the 24-bit wrap,
// each payload the region's bytes at its offset, AckReq on the last only;
// a short SEND is one ONLY packet with its pad.
func TestSegmentation(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0xfffffe, 0)
	r.post(t, r.write(1, 100, 2500), ib.SendWR{WRID: 2, Opcode: ib.WRSend, Flags: ib.SendSolicited,
		SGL: []ib.SGE{{Addr: memVA, Length: 3, LKey: r.mr.LKey}, {Addr: memVA + 9000, Length: 2, LKey: r.mr.LKey}}})
	pkts := r.run(t, 100)
	m := r.mem
	wants := []want{
		{op: bth.RCRDMAWriteFirst, psn: 0xfffffe, payload: m[100:1124], reth: reth(remoteVA, 2500)},
		{op: bth.RCRDMAWriteMiddle, psn: 0xffffff, payload: m[1124:2148]},
		{op: bth.RCRDMAWriteLast, psn: 0, ackReq: true, payload: m[2148:2600]},
		{op: bth.RCSendOnly, psn: 1, ackReq: true, solicit: true, payload: append(append([]byte(nil), m[0:3]...), m[9000:9002]...)},
	}
	if len(pkts) != len(wants) {
		t.Fatalf("%d packets, want %d", len(pkts), len(wants))
	}
	for i, w := range wants {
		check(t, i, pkts[i], w)
	}
	if r.qp.Req.PSN != 2 {
		t.Fatalf("next PSN %#x, want 2", r.qp.Req.PSN)
	}
	if got := r.counters.Get(ib.SentPkts); got != 4 {
		t.Fatalf("sent_pkts %d, want 4", got)
	}
	// RC completes on the ACK, not on the wire.
	if r.cq.Len() != 0 {
		t.Fatalf("%d completions before any ACK", r.cq.Len())
	}

	// At MTU 4096 the same WRITE is one packet.
	r = newRequester(t, ib.QPTypeRC, ib.MTU4096, 7, 0)
	r.post(t, r.write(1, 100, 2500))
	pkts = r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("MTU 4096: %d packets, want 1", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteOnly, psn: 7, ackReq: true, payload: r.mem[100:2600], reth: reth(remoteVA, 2500)})
}

// An unreliable QP's WRITE goes as UC packets with no AckReq and completes
// once its last packet is out.
func TestUCCompletesOnTheWire(t *testing.T) {
	r := newRequester(t, ib.QPTypeUC, ib.MTU1024, 5, 0)
	r.post(t, r.write(9, 0, 1500))
	pkts := r.run(t, 100)
	if len(pkts) != 2 {
		t.Fatalf("%d packets, want 2", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.TransportUC | bth.RCRDMAWriteFirst, psn: 5, payload: r.mem[0:1024], reth: reth(remoteVA, 1500)})
	check(t, 1, pkts[1], want{op: bth.TransportUC | bth.RCRDMAWriteLast, psn: 6, payload: r.mem[1024:1500]})
	var wc [2]ib.WC
	if n := r.cq.Poll(wc[:]); n != 1 {
		t.Fatalf("%d completions, want 1", n)
	}
	want := ib.WC{WRID: 9, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 1500, QPNum: r.qp.QPN}
	if wc[0] != want {
		t.Fatalf("completion %+v, want %+v", wc[0], want)
	}
}

// An unreliable send completes when its last packet is handed to the
// port, before the port's batch goes out; the program may then write its
// buffer again, so the packets must hold their own copy of the payload
// (an RC packet may send from the region: its CQE waits for the ACK).
// Here the fake port keeps the packets unsent while the region is
// overwritten after the completion; the packets still carry the bytes
// that were posted.
func TestUnreliableSendOwnsItsPayload(t *testing.T) {
	r := newRequester(t, ib.QPTypeUC, ib.MTU1024, 5, 0)
	posted := slices.Clone(r.mem[:1500])
	r.post(t, r.write(9, 0, 1500))
	r.qp.Lock()
	r.e.Run(r.qp, &r.port, 100)
	r.qp.Unlock()
	var wc [1]ib.WC
	if got := r.cq.Poll(wc[:]); got != 1 || wc[0].Status != ib.WCSuccess {
		t.Fatalf("%d completions (%+v), want 1 successful", got, wc[0])
	}
	for i := range r.mem[:1500] {
		r.mem[i] ^= 0xff // the program reuses its buffer at once
	}
	var sent []byte
	for _, p := range r.port.take(t) {
		sent = append(sent, p.Payload()...)
	}
	if !bytes.Equal(sent, posted) {
		t.Fatalf("the packets carry %d bytes that differ from the 1500 posted: the payload was read after the completion", len(sent))
	}
}

// AckReq goes on the last packet of a message and on the packet that
// follows qpmgr.MaxPktsPerAck packets without one (the 65th; rxe's
// post-increment test puts it on the 66th), so that a long message is
// acknowledged as it goes.
func TestAckReqPlacement(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU256, 0, 200)
	const n = 140
	r.post(t, r.write(1, 0, n*256))
	pkts := r.run(t, 1000)
	if len(pkts) != n {
		t.Fatalf("%d packets, want %d", len(pkts), n)
	}
	var acked []int
	for i, p := range pkts {
		if p.BTH().PSN() != uint32(i) {
			t.Fatalf("packet %d has PSN %d", i, p.BTH().PSN())
		}
		if !bytes.Equal(p.Payload(), r.mem[i*256:(i+1)*256]) {
			t.Fatalf("packet %d: payload is not the region's bytes %d..%d", i, i*256, (i+1)*256)
		}
		if p.BTH().AckReq() {
			acked = append(acked, i+1)
		}
	}
	if want := []int{65, 130, 140}; !slices.Equal(acked, want) {
		t.Fatalf("AckReq on packets %v (1-based), want %v", acked, want)
	}
}

// The window: an RC QP has at most Window PSNs sent and not acknowledged;
// an ACK that moves Comp.PSN lets the requester go on where it stopped.
func TestWindow(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0x100, 4)
	r.post(t, r.write(1, 0, 3*1024), r.write(2, 0, 3*1024))
	pkts := r.run(t, 100)
	if len(pkts) != 4 {
		t.Fatalf("%d packets in a window of 4", len(pkts))
	}
	for i, p := range pkts {
		if p.BTH().PSN() != 0x100+uint32(i) {
			t.Fatalf("packet %d: PSN %#x", i, p.BTH().PSN())
		}
	}
	if got := r.run(t, 100); len(got) != 0 {
		t.Fatalf("%d packets past a full window", len(got))
	}
	// The completer took an ACK for the first two PSNs.
	r.qp.Lock()
	r.qp.Comp.PSN = 0x102
	r.qp.Unlock()
	pkts = r.run(t, 100)
	if len(pkts) != 2 {
		t.Fatalf("after the ACK: %d packets, want 2", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteMiddle, psn: 0x104, payload: r.mem[1024:2048]})
	check(t, 1, pkts[1], want{op: bth.RCRDMAWriteLast, psn: 0x105, ackReq: true, payload: r.mem[2048:3072]})
	// The budget stops the requester too, whatever the window.
	r.qp.Lock()
	r.qp.Comp.PSN = 0x106
	r.qp.Unlock()
	if got := r.run(t, 0); len(got) != 0 {
		t.Fatalf("budget 0: %d packets", len(got))
	}
}

// Go-back-N: after a NAK (the completer sets Comp.PSN to the NAK's PSN
// and asks for a retry), the requester resends from that PSN, inside the
// message where it falls, then everything after it; resent packets count
// as retransmitted_pkts, and a retried READ asks for the rest only.
func TestGoBackN(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0x20, 0)
	read := ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled, RemoteAddr: remoteVA + 0x8000, RKey: rkey,
		SGL: []ib.SGE{{Addr: memVA + 0x8000, Length: 3000, LKey: r.mr.LKey}}}
	r.post(t, r.write(1, 0, 3*1024), r.write(2, 4096, 1024), read)
	first := r.run(t, 100)
	// WRITE 1: 0x20..0x22; WRITE 2: 0x23; READ: one request for 3 PSNs, 0x24..0x26.
	if len(first) != 5 {
		t.Fatalf("%d packets, want 5", len(first))
	}
	check(t, 4, first[4], want{op: bth.RCRDMAReadRequest, psn: 0x24, ackReq: true, reth: reth(remoteVA+0x8000, 3000)})
	if r.qp.Req.PSN != 0x27 {
		t.Fatalf("next PSN %#x, want 0x27", r.qp.Req.PSN)
	}

	// A NAK (PSN sequence error) for 0x21.
	r.qp.Lock()
	r.qp.Comp.PSN, r.qp.Req.NeedRetry = 0x21, true
	r.qp.Unlock()
	again := r.run(t, 100)
	wants := []want{
		{op: bth.RCRDMAWriteMiddle, psn: 0x21, payload: r.mem[1024:2048]},
		{op: bth.RCRDMAWriteLast, psn: 0x22, ackReq: true, payload: r.mem[2048:3072]},
		{op: bth.RCRDMAWriteOnly, psn: 0x23, ackReq: true, payload: r.mem[4096:5120], reth: reth(remoteVA, 1024)},
		{op: bth.RCRDMAReadRequest, psn: 0x24, ackReq: true, reth: reth(remoteVA+0x8000, 3000)},
	}
	if len(again) != len(wants) {
		t.Fatalf("retry: %d packets, want %d", len(again), len(wants))
	}
	for i, w := range wants {
		check(t, i, again[i], w)
	}
	if got := r.counters.Get(ib.RetransmittedPkts); got != 4 {
		t.Fatalf("retransmitted_pkts %d, want 4", got)
	}
	if got := r.counters.Get(ib.SentPkts); got != 9 {
		t.Fatalf("sent_pkts %d, want 9", got)
	}
	// New PSNs are not reused: the next new WQE starts at 0x27.
	if r.qp.Req.PSN != 0x27 {
		t.Fatalf("next PSN after the retry %#x, want 0x27", r.qp.Req.PSN)
	}

	// The WRITEs were acknowledged (the completer retired them) and the
	// READ's first response arrived (0x24, 1024 bytes placed); the rest
	// was lost: the retried request asks for what is left, from the PSN
	// that is missing.
	r.qp.Lock()
	r.qp.CompleteSend(ib.WCSuccess)
	r.qp.CompleteSend(ib.WCSuccess)
	r.qp.Comp.PSN, r.qp.Req.NeedRetry = 0x25, true
	r.qp.Unlock()
	again = r.run(t, 100)
	if len(again) != 1 {
		t.Fatalf("READ retry: %d packets, want 1", len(again))
	}
	check(t, 0, again[0], want{op: bth.RCRDMAReadRequest, psn: 0x25, ackReq: true, reth: reth(remoteVA+0x8000+1024, 3000-1024)})
	if got := r.counters.Get(ib.RetransmittedPkts); got != 5 {
		t.Fatalf("retransmitted_pkts %d, want 5", got)
	}
}

// An RNR NAK's wait (Req.RNRUntil, set by the completer) holds the
// requester back until it has passed; then the WQE goes out, not counted
// as a retransmission since it was never sent.
func TestRNRWait(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0, 0)
	r.post(t, r.write(1, 0, 8))
	r.qp.Lock()
	r.qp.Req.RNRUntil = time.Now().Add(time.Hour)
	r.qp.Unlock()
	if got := r.run(t, 100); len(got) != 0 {
		t.Fatalf("%d packets during the RNR wait", len(got))
	}
	r.qp.Lock()
	r.qp.Req.RNRUntil = time.Now().Add(-time.Millisecond)
	r.qp.Unlock()
	pkts := r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("%d packets after the RNR wait, want 1", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteOnly, psn: 0, ackReq: true, payload: r.mem[0:8], reth: reth(remoteVA, 8)})
	if !r.qp.Req.RNRUntil.IsZero() {
		t.Fatal("the RNR wait was not cleared once over")
	}
	if got := r.counters.Get(ib.RetransmittedPkts); got != 0 {
		t.Fatalf("retransmitted_pkts %d, want 0", got)
	}
}

// A WQE whose local memory is not the QP's completes with
// LOC_PROT_ERR and takes the QP to ERR (IBTA 10.8.3); nothing is sent.
func TestLocalProtectionError(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0, 0)
	bad := r.write(4, 0, 8)
	bad.SGL[0].LKey ^= 0xff00
	r.post(t, bad, r.write(5, 0, 8))
	if got := r.run(t, 100); len(got) != 0 {
		t.Fatalf("%d packets sent for a WQE with a bad lkey", len(got))
	}
	var wc [3]ib.WC
	n := r.cq.Poll(wc[:])
	if n != 2 {
		t.Fatalf("%d completions, want 2", n)
	}
	if w := (ib.WC{WRID: 4, Status: ib.WCLocProtErr, Opcode: ib.WCRDMAWrite, QPNum: r.qp.QPN}); wc[0] != w {
		t.Fatalf("completion %+v, want %+v", wc[0], w)
	}
	if w := (ib.WC{WRID: 5, Status: ib.WCWRFlushErr, Opcode: ib.WCRDMAWrite, QPNum: r.qp.QPN}); wc[1] != w {
		t.Fatalf("completion %+v, want %+v", wc[1], w)
	}
	r.qp.Lock()
	st := r.qp.State()
	r.qp.Unlock()
	if st != ib.QPSErr {
		t.Fatalf("QP in %v, want ERR", st)
	}
}

// max_rd_atomic bounds the READs and atomics outstanding, and a fenced
// WR waits for every READ and atomic before it (IBTA 10.8.3.3); both wait
// for the completer, not for the window.
func TestReadAtomicLimitAndFence(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0, 0)
	r.qp.Lock()
	r.qp.Attr.MaxRdAtomic = 1
	r.qp.Unlock()
	read := func(id uint64, off int) ib.SendWR {
		return ib.SendWR{WRID: id, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled, RemoteAddr: remoteVA + uint64(off), RKey: rkey,
			SGL: []ib.SGE{{Addr: memVA + uint64(off), Length: 8, LKey: r.mr.LKey}}}
	}
	fenced := r.write(3, 0, 8)
	fenced.Flags |= ib.SendFence
	r.post(t, read(1, 0), read(2, 64), fenced)
	pkts := r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("%d packets with max_rd_atomic 1, want 1", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAReadRequest, psn: 0, ackReq: true, reth: reth(remoteVA, 8)})

	// READ 1's response came: the completer retired it.
	r.qp.Lock()
	r.qp.CompleteSend(ib.WCSuccess)
	r.qp.Comp.PSN = 1
	r.qp.Unlock()
	pkts = r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("after READ 1: %d packets, want READ 2 alone (the fenced WRITE waits)", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAReadRequest, psn: 1, ackReq: true, reth: reth(remoteVA+64, 8)})

	r.qp.Lock()
	r.qp.CompleteSend(ib.WCSuccess)
	r.qp.Comp.PSN = 2
	r.qp.Unlock()
	pkts = r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("after READ 2: %d packets, want the fenced WRITE", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteOnly, psn: 2, ackReq: true, payload: r.mem[0:8], reth: reth(remoteVA, 8)})
}

// In SQD the requester finishes the message it has started and starts
// no other (IBTA 10.3.1.7); back in RTS it goes on.
func TestSQDFinishesStartedMessages(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0x50, 0)
	r.post(t, r.write(1, 0, 3*1024), r.write(2, 0, 8))
	if got := r.run(t, 1); len(got) != 1 {
		t.Fatalf("budget 1: %d packets", len(got))
	}
	if err := r.qp.Modify(&ib.QPAttr{State: ib.QPSSQD}, ib.AttrState); err != nil {
		t.Fatal(err)
	}
	pkts := r.run(t, 100)
	if len(pkts) != 2 {
		t.Fatalf("in SQD: %d packets, want the started WRITE's last 2", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteMiddle, psn: 0x51, payload: r.mem[1024:2048]})
	check(t, 1, pkts[1], want{op: bth.RCRDMAWriteLast, psn: 0x52, ackReq: true, payload: r.mem[2048:3072]})
	if err := r.qp.Modify(&ib.QPAttr{State: ib.QPSRTS}, ib.AttrState); err != nil {
		t.Fatal(err)
	}
	pkts = r.run(t, 100)
	if len(pkts) != 1 {
		t.Fatalf("back in RTS: %d packets, want WRITE 2", len(pkts))
	}
	check(t, 0, pkts[0], want{op: bth.RCRDMAWriteOnly, psn: 0x53, ackReq: true, payload: r.mem[0:8], reth: reth(remoteVA, 8)})
}
