package rnic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// mwNode gives b an MR with MW_BIND over its buffer from offset 0x10000
// (64 KiB), and a window of type typ; it returns the MR and the window.
func mwNode(t *testing.T, b *node, typ rnic.MWType, access ib.Access) (*rnic.MR, *rnic.MW) {
	t.Helper()
	mr, err := b.dev.RegMR(b.pd, b.mem[0x10000:0x20000], memVA+0x10000, access)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := b.dev.AllocMW(b.pd, typ)
	if err != nil {
		t.Fatal(err)
	}
	return mr, mw
}

// bind posts a signaled BIND_MW of [memVA+off, +n) on b's QP and returns
// its completion and the window's new rkey.
func bind(t *testing.T, p *pair, mr *rnic.MR, mw *rnic.MW, oldKey uint32, off, n uint64, access ib.Access) (ib.WC, uint32) {
	t.Helper()
	key := oldKey&^0xff | uint32(uint8(oldKey+1)) // ibv_inc_rkey
	mustPost(t, p.b, p.qb, ib.SendWR{WRID: 100, Opcode: ib.WRBindMW, Flags: ib.SendSignaled,
		Bind: &ib.MWBind{MWRKey: oldKey, RKey: key, MRLKey: mr.LKey, Addr: memVA + off, Length: n, Access: access}})
	return p.b.poll(1, 5*time.Second)[0], key
}

const mwRW = ib.AccessRemoteWrite | ib.AccessRemoteRead

// A type 1 window bound on b's QP takes a's WRITE and READ inside its
// range through its rkey, byte for byte, and refuses a WRITE one byte
// past it with REM_ACCESS_ERR, the bytes around the window unchanged.
func TestMWType1WriteReadOutside(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(1), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	wc, key := bind(t, p, mr, mw, mw.RKey, 0x11000, 2048, mwRW)
	checkWC(t, wc, ib.WC{WRID: 100, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})

	fill(a.mem[:4096], 5)
	fill(b.mem[0x10000:0x20000], 9)
	p.a.fence() // the devices' writes and the test's, ordered
	guard := append([]byte(nil), b.mem[0x10000:0x20000]...)
	p.a.fence()
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 1500)}, RemoteAddr: memVA + 0x11000 + 548, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: 1500, QPNum: p.qa.QPN})
	want := append([]byte(nil), guard...)
	copy(want[0x1000+548:], a.mem[:1500])
	p.a.fence() // the devices' writes and the test's, ordered
	sameBytes(t, "after the WRITE through the window", b.mem[0x10000:0x20000], want)

	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 8192, 2048)}, RemoteAddr: memVA + 0x11000, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 2, Opcode: ib.WCRDMARead, ByteLen: 2048, QPNum: p.qa.QPN})
	p.a.fence() // the devices' writes and the test's, ordered
	sameBytes(t, "the READ through the window", a.mem[8192:8192+2048], b.mem[0x11000:0x11000+2048])

	// One byte past the window, inside the MR: refused, nothing written.
	// The NAK is counted (naks_sent), and the QP of b goes to ERR.
	p.a.fence() // the devices' writes and the test's, ordered
	before := append([]byte(nil), b.mem[0x10000:0x20000]...)
	p.a.fence()
	naks := counter(b, "naks_sent")
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, RemoteAddr: memVA + 0x11000 + 2048 - 15, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 3, Status: ib.WCRemAccessErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	p.a.fence() // the devices' writes and the test's, ordered
	sameBytes(t, "after the refused WRITE", b.mem[0x10000:0x20000], before)
	if n := counter(b, "naks_sent") - naks; n != 1 {
		t.Errorf("b sent %d NAKs for the WRITE past the window, want 1", n)
	}
}

// A type 2 window: bound on b's QP, written through, invalidated by a's
// SEND_WITH_INV naming its rkey (b's receive says so), after which a
// WRITE is REM_ACCESS_ERR and writes nothing.
func TestMWType2RemoteInvalidate(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(2), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	wc, key := bind(t, p, mr, mw, mw.RKey, 0x12000, 256, mwRW|ib.AccessZeroBased)
	checkWC(t, wc, ib.WC{WRID: 100, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
	fill(a.mem[:256], 7)
	p.a.fence()
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 200)}, RemoteAddr: 56, RKey: key}) // zero-based: offset 56 of the window
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: 200, QPNum: p.qa.QPN})
	p.a.fence() // the devices' writes and the test's, ordered
	sameBytes(t, "zero-based WRITE", b.mem[0x12000+56:0x12000+256], a.mem[:200])

	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 7, SGL: []ib.SGE{sge(b, 0, 64)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRSendWithInv, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, InvRKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 2, Opcode: ib.WCSend, ByteLen: 16, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 7, Opcode: ib.WCRecv, ByteLen: 16, QPNum: p.qb.QPN,
		WCFlags: ib.WCFlagWithInv, Imm: key})
	p.a.fence() // the devices' writes and the test's, ordered
	before := append([]byte(nil), b.mem[0x10000:0x20000]...)
	p.a.fence()
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, RemoteAddr: 0, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 3, Status: ib.WCRemAccessErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	p.a.fence() // the devices' writes and the test's, ordered
	sameBytes(t, "after the WRITE to the invalidated window", b.mem[0x10000:0x20000], before)
}

// LOCAL_INV of a bound type 2 window completes as LOCAL_INV; binding it
// again (after the invalidation) works, and a READ through the new key
// does; a bind of a bound one is MW_BIND_ERR and the QP's next WR is
// flushed.
func TestMWType2LocalInvalidateAndRebind(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(2), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	_, key := bind(t, p, mr, mw, mw.RKey, 0x13000, 64, ib.AccessRemoteRead)
	mustPost(t, b, p.qb, ib.SendWR{WRID: 5, Opcode: ib.WRLocalInv, Flags: ib.SendSignaled, InvRKey: key})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 5, Opcode: ib.WCLocalInv, QPNum: p.qb.QPN})
	wc, key2 := bind(t, p, mr, mw, key, 0x13000, 64, ib.AccessRemoteRead)
	checkWC(t, wc, ib.WC{WRID: 100, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 64)}, RemoteAddr: memVA + 0x13000, RKey: key2})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMARead, ByteLen: 64, QPNum: p.qa.QPN})
	wc, _ = bind(t, p, mr, mw, key2, 0x13000, 64, ib.AccessRemoteRead)
	checkWC(t, wc, ib.WC{WRID: 100, Status: ib.WCMWBindErr, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
	mustPost(t, b, p.qb, ib.SendWR{WRID: 6, Opcode: ib.WRLocalInv, Flags: ib.SendSignaled, InvRKey: key2})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 6, Status: ib.WCWRFlushErr, Opcode: ib.WCLocalInv, QPNum: p.qb.QPN})
}

// Binds the device refuses complete with MW_BIND_ERR: an MR without
// MW_BIND, another PD's window, a type 1 window zero-based. Each on a
// pair of its own: the failed bind leaves the QP in ERR.
func TestMWBindErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		access  ib.Access // the MR's
		typ     rnic.MWType
		otherPD bool
		bindAcc ib.Access
	}{
		{"no MW_BIND", ib.AccessLocalWrite | mwRW, 1, false, ib.AccessRemoteWrite},
		{"other PD", ib.AccessLocalWrite | mwRW | ib.AccessMWBind, 2, true, ib.AccessRemoteWrite},
		{"zero-based type 1", ib.AccessLocalWrite | mwRW | ib.AccessMWBind, 1, false, ib.AccessRemoteWrite | ib.AccessZeroBased},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			b := p.b
			mr, mw := mwNode(t, b, c.typ, c.access)
			if c.otherPD {
				var err error
				if mw, err = b.dev.AllocMW(b.dev.AllocPD(), c.typ); err != nil {
					t.Fatal(err)
				}
			}
			before := b.dev.MWState(mw)
			wc, _ := bind(t, p, mr, mw, mw.RKey, 0x10000, 64, c.bindAcc)
			checkWC(t, wc, ib.WC{WRID: 100, Status: ib.WCMWBindErr, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
			if after := b.dev.MWState(mw); after != before {
				t.Errorf("the window changed: %+v, was %+v", after, before)
			}
		})
	}
}

// A bind posted behind a READ and a WRITE in one post runs once they
// have completed, and completes after them, in order; then a peer's
// WRITE through it lands.
func TestMWBindBehindOutstanding(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(2), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	fill(a.mem[:8192], 3)
	p.a.fence()
	key := mw.RKey&^0xff | uint32(uint8(mw.RKey+1))
	mustPost(t, b, p.qb,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(b, 0, 4096)},
			RemoteAddr: memVA, RKey: a.mr.RKey},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(b, 0, 3000)},
			RemoteAddr: memVA + 4096, RKey: a.mr.RKey},
		ib.SendWR{WRID: 3, Opcode: ib.WRBindMW, Flags: ib.SendSignaled,
			Bind: &ib.MWBind{MWRKey: mw.RKey, RKey: key, MRLKey: mr.LKey, Addr: memVA + 0x14000, Length: 512, Access: mwRW}})
	wcs := b.poll(3, 5*time.Second)
	checkWC(t, wcs[0], ib.WC{WRID: 1, Opcode: ib.WCRDMARead, ByteLen: 4096, QPNum: p.qb.QPN})
	checkWC(t, wcs[1], ib.WC{WRID: 2, Opcode: ib.WCRDMAWrite, ByteLen: 3000, QPNum: p.qb.QPN})
	checkWC(t, wcs[2], ib.WC{WRID: 3, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 4, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 512)}, RemoteAddr: memVA + 0x14000, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 4, Opcode: ib.WCRDMAWrite, ByteLen: 512, QPNum: p.qa.QPN})
	p.a.fence()
	sameBytes(t, "the WRITE through the window bound behind the READ", b.mem[0x14000:0x14000+512], a.mem[:512])
}

// On UC a type 2 window is bound as on RC and takes a WRITE.
func TestMWBindUC(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUC})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(2), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	wc, key := bind(t, p, mr, mw, mw.RKey, 0x15000, 128, ib.AccessRemoteWrite)
	checkWC(t, wc, ib.WC{WRID: 100, Opcode: ib.WCBindMW, QPNum: p.qb.QPN})
	fill(a.mem[:128], 11)
	p.a.fence()
	// WRITE with immediate: b's receive completion says it landed (UC
	// completes at the sender when the packet leaves).
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 9})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWriteWithImm, Flags: ib.SendSignaled, Imm: 0x1234,
		SGL: []ib.SGE{sge(a, 0, 128)}, RemoteAddr: memVA + 0x15000, RKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRDMAWrite, ByteLen: 128, QPNum: p.qa.QPN,
		WCFlags: ib.WCFlagWithImm})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 9, Opcode: ib.WCRecvRDMAWithImm, ByteLen: 128, Imm: 0x1234,
		WCFlags: ib.WCFlagWithImm, QPNum: p.qb.QPN})
	p.a.fence()
	sameBytes(t, "the UC WRITE through the window", b.mem[0x15000:0x15000+128], a.mem[:128])
}

// A peer's SEND_WITH_INV naming a type 1 window's rkey is an invalid
// request (o10-37.2.26: a type 1 window is not invalidated): the sender
// sees REM_INV_REQ_ERR, the receive completes with it, and the window
// stays bound.
func TestMWType1NotInvalidatedRemotely(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	mr, mw := mwNode(t, b, rnic.MWType(1), ib.AccessLocalWrite|mwRW|ib.AccessMWBind)
	_, key := bind(t, p, mr, mw, mw.RKey, 0x16000, 64, ib.AccessRemoteWrite)
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 8, SGL: []ib.SGE{sge(b, 0, 64)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSendWithInv, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, InvRKey: key})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Status: ib.WCRemInvReqErr, Opcode: ib.WCSend, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 8, Status: ib.WCRemInvReqErr, Opcode: ib.WCRecv, QPNum: p.qb.QPN})
	if st := b.dev.MWState(mw); !st.Bound || st.RKey != key {
		t.Fatalf("window after the refused invalidation: %+v", st)
	}
}

// A BIND_MW posted through the Go API without its bind (SendWR.Bind
// nil) is refused by the post, as any WR it cannot carry out: the
// requester dereferenced it and took the whole process down.
func TestMWBindWithoutBind(t *testing.T) {
	p := newPair(t, pairOpts{})
	err := p.b.dev.PostSend(p.qb, []ib.SendWR{{WRID: 7, Opcode: ib.WRBindMW, Flags: ib.SendSignaled}})
	var we *ib.WRError
	if !errors.As(err, &we) || we.Index != 0 || we.WRID != 7 {
		t.Fatalf("PostSend of a BIND_MW without a bind: %v, want a WRError for WR 7", err)
	}
}
