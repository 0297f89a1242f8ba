package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// end is one side of a connection: a QP with its memory, on one daemon.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
	gid verbs.GID
}

const memSize = 64 << 10

type endOpts struct {
	typ verbs.QPType
	srq *verbs.SRQ
	ch  *verbs.CompChannel
	pd  *verbs.PD
}

func newEnd(t testing.TB, c *verbs.Context, o endOpts) *end {
	t.Helper()
	e := &end{ctx: c, pd: o.pd}
	if e.pd == nil {
		e.pd = must[*verbs.PD](t)(c.AllocPD())
	}
	mem := must[[]byte](t)(c.Alloc(memSize))
	e.mr = must[*verbs.MR](t)(e.pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|
		verbs.AccessRemoteRead|verbs.AccessRemoteAtomic))
	e.cq = must[*verbs.CQ](t)(c.CreateCQ(64, o.ch))
	e.qp = must[*verbs.QP](t)(e.pd.CreateQP(verbs.QPInitAttr{Type: o.typ, SendCQ: e.cq, RecvCQ: e.cq, SRQ: o.srq,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}))
	pa := must[verbs.PortAttr](t)(c.QueryPort())
	e.gid = pa.GIDs[pa.GIDIndex]
	return e
}

// connect brings e's QP to RTS towards peer, as ibv_rc_pingpong does.
func connect(t testing.TB, e, peer *end, typ verbs.QPType, retry uint8, timeout uint8) {
	t.Helper()
	init := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if typ == verbs.QPTypeUD {
		init.QKey, mask = 0x11111111, mask|verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	if err := e.qp.Modify(&init, mask); err != nil {
		t.Fatal("INIT:", err)
	}
	rtr := verbs.QPAttr{State: verbs.QPSRTR}
	mask = verbs.AttrState
	if typ != verbs.QPTypeUD {
		rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.AH = verbs.MTU1024, peer.qp.QPN, 0x100, verbs.AH{DGID: peer.gid, HopLimit: 64}
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if typ == verbs.QPTypeRC {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 4, 1
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
	}
	if err := e.qp.Modify(&rtr, mask); err != nil {
		t.Fatal("RTR:", err)
	}
	rts := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100}
	mask = verbs.AttrState | verbs.AttrSQPSN
	if typ == verbs.QPTypeRC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = timeout, retry, 7, 4
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	if err := e.qp.Modify(&rts, mask); err != nil {
		t.Fatal("RTS:", err)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

func post(t testing.TB, e *end, wr verbs.SendWR) {
	t.Helper()
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, e *end, id uint64, off, n int) {
	t.Helper()
	if err := e.qp.PostRecv([]verbs.RecvWR{{WRID: id, SGL: []verbs.SGE{e.mr.SGE(off, n)}}}); err != nil {
		t.Fatal(err)
	}
}

// wantWC compares a completion field by field.
func wantWC(t testing.TB, got, want verbs.WC) {
	t.Helper()
	if got != want {
		t.Fatalf("completion\n got %v\nwant %v", &got, &want)
	}
}

// TestRCThroughDaemons runs every RC operation between two rnicd
// processes through verbs.Open: data byte for byte, completions field by
// field.
func TestRCThroughDaemons(t *testing.T) {
	daemons(t)
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeRC})
	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeRC})
	connect(t, a, b, verbs.QPTypeRC, 7, 14)
	connect(t, b, a, verbs.QPTypeRC, 7, 14)
	abuf, bbuf := a.mr.Buf, b.mr.Buf

	// RDMA WRITE WITH IMM, three packets at MTU 1024, consuming a receive.
	data := pattern(3000, 1)
	copy(abuf, data)
	postRecv(t, b, 50, 0, 0)
	post(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xfeedbeef,
		SGL: []verbs.SGE{a.mr.SGE(0, 1000), a.mr.SGE(1000, 2000)}, RemoteAddr: b.mr.Addr + 100, RKey: b.mr.RKey})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: 1, Opcode: 1, ByteLen: 3000, QPNum: a.qp.QPN, WCFlags: 2})
	// RC and UC receive completions carry no source QP: only a DETH
	// does (rxe fills src_qp the same way).
	wantWC(t, pollN(t, b.cq, 1)[0], verbs.WC{WRID: 50, Opcode: 129, ByteLen: 3000, Imm: 0xfeedbeef,
		QPNum: b.qp.QPN, WCFlags: 2})
	if !bytes.Equal(bbuf[100:3100], data) || bbuf[99] != 0 || bbuf[3100] != 0 {
		t.Fatal("WRITE data differs at the peer")
	}

	// RDMA READ of 2000 bytes into offset 8192.
	copy(bbuf[20000:], pattern(2000, 9))
	post(t, a, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(8192, 2000)}, RemoteAddr: b.mr.Addr + 20000, RKey: b.mr.RKey})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: 2, Opcode: 2, ByteLen: 2000, QPNum: a.qp.QPN})
	if !bytes.Equal(abuf[8192:10192], pattern(2000, 9)) {
		t.Fatal("READ data differs")
	}

	// SEND WITH IMM into a posted receive; an inline SEND after it.
	copy(abuf[30000:], pattern(1500, 3))
	postRecv(t, b, 51, 40000, 2048)
	postRecv(t, b, 52, 45000, 64)
	post(t, a, verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 42,
		SGL: []verbs.SGE{a.mr.SGE(30000, 1500)}})
	post(t, a, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		InlineData: []byte("inline hello")})
	got := pollN(t, a.cq, 2)
	wantWC(t, got[0], verbs.WC{WRID: 3, Opcode: 0, ByteLen: 1500, QPNum: a.qp.QPN, WCFlags: 2})
	wantWC(t, got[1], verbs.WC{WRID: 4, Opcode: 0, ByteLen: 12, QPNum: a.qp.QPN})
	got = pollN(t, b.cq, 2)
	wantWC(t, got[0], verbs.WC{WRID: 51, Opcode: 128, ByteLen: 1500, Imm: 42, QPNum: b.qp.QPN, WCFlags: 2})
	wantWC(t, got[1], verbs.WC{WRID: 52, Opcode: 128, ByteLen: 12, QPNum: b.qp.QPN})
	if !bytes.Equal(bbuf[40000:41500], pattern(1500, 3)) || string(bbuf[45000:45012]) != "inline hello" {
		t.Fatal("SEND data differs")
	}

	// Atomics on an 8-byte word of B.
	binary.LittleEndian.PutUint64(bbuf[50000:], 5)
	post(t, a, verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(50000, 8)}, RemoteAddr: b.mr.Addr + 50000, RKey: b.mr.RKey, CompareAdd: 5, Swap: 9})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: 5, Opcode: 3, ByteLen: 8, QPNum: a.qp.QPN})
	post(t, a, verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(50008, 8)}, RemoteAddr: b.mr.Addr + 50000, RKey: b.mr.RKey, CompareAdd: 3})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: 6, Opcode: 4, ByteLen: 8, QPNum: a.qp.QPN})
	if o1, o2, now := binary.LittleEndian.Uint64(abuf[50000:]), binary.LittleEndian.Uint64(abuf[50008:]),
		binary.LittleEndian.Uint64(bbuf[50000:]); o1 != 5 || o2 != 9 || now != 12 {
		t.Fatalf("atomics: cmp_swp returned %d (want 5), fetch_add %d (want 9), word now %d (want 12)", o1, o2, now)
	}

	// An unsignaled WRITE then a signaled one: one completion, and the
	// queue's slots of both come back (40 more posts fit a 32-deep SQ).
	for i := range 40 {
		flags := verbs.SendFlags(0)
		if i%4 == 3 {
			flags = verbs.SendSignaled
		}
		post(t, a, verbs.SendWR{WRID: uint64(100 + i), Opcode: verbs.WRRDMAWrite, Flags: flags,
			SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr + 60000, RKey: b.mr.RKey})
		if flags != 0 {
			wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: uint64(100 + i), Opcode: 1, ByteLen: 64, QPNum: a.qp.QPN})
		}
	}
}

// TestUCThroughDaemons: SEND and RDMA WRITE on UC.
func TestUCThroughDaemons(t *testing.T) {
	daemons(t)
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeUC})
	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeUC})
	connect(t, a, b, verbs.QPTypeUC, 0, 0)
	connect(t, b, a, verbs.QPTypeUC, 0, 0)
	copy(a.mr.Buf, pattern(2500, 5))
	postRecv(t, b, 9, 1000, 4000)
	post(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 2500)}})
	post(t, a, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 2500)}, RemoteAddr: b.mr.Addr + 10000, RKey: b.mr.RKey})
	got := pollN(t, a.cq, 2)
	wantWC(t, got[0], verbs.WC{WRID: 1, Opcode: 0, ByteLen: 2500, QPNum: a.qp.QPN})
	wantWC(t, got[1], verbs.WC{WRID: 2, Opcode: 1, ByteLen: 2500, QPNum: a.qp.QPN})
	wantWC(t, pollN(t, b.cq, 1)[0], verbs.WC{WRID: 9, Opcode: 128, ByteLen: 2500, QPNum: b.qp.QPN})
	// The WRITE has no completion at the peer; its data is there once
	// a later SEND is (UC keeps order on one QP).
	postRecv(t, b, 10, 0, 16)
	post(t, a, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("x")})
	pollN(t, a.cq, 1)
	pollN(t, b.cq, 1)
	if !bytes.Equal(b.mr.Buf[1000:3500], pattern(2500, 5)) || !bytes.Equal(b.mr.Buf[10000:12500], pattern(2500, 5)) {
		t.Fatal("UC data differs at the peer")
	}
}

// TestUDThroughDaemons: a UD SEND with an address handle lands after the
// 40-byte GRH area with the sender's QPN.
func TestUDThroughDaemons(t *testing.T) {
	da, _ := daemons(t)
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeUD})
	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeUD})
	connect(t, a, b, verbs.QPTypeUD, 0, 0)
	connect(t, b, a, verbs.QPTypeUD, 0, 0)
	copy(a.mr.Buf, pattern(700, 11))
	postRecv(t, b, 77, 0, 40+1024)
	post(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 7,
		SGL: []verbs.SGE{a.mr.SGE(0, 700)}, AH: &verbs.AH{DGID: b.gid, HopLimit: 64},
		RemoteQPN: b.qp.QPN, RemoteQKey: 0x11111111})
	wantWC(t, pollN(t, a.cq, 1)[0], verbs.WC{WRID: 1, Opcode: 0, ByteLen: 700, QPNum: a.qp.QPN, WCFlags: 2})
	t.Cleanup(func() {
		if t.Failed() {
			m, _ := b.ctx.Counters()
			qs, _ := b.ctx.QPs()
			t.Logf("B counters %v\nqps %+v a=%#x b=%#x", m, qs, a.qp.QPN, b.qp.QPN)
		}
	})
	wantWC(t, pollN(t, b.cq, 1)[0], verbs.WC{WRID: 77, Opcode: 128, ByteLen: 740, Imm: 7, QPNum: b.qp.QPN,
		SrcQP: a.qp.QPN, WCFlags: 3})
	if !bytes.Equal(b.mr.Buf[40:740], pattern(700, 11)) {
		t.Fatal("UD payload differs")
	}
	if src, want := b.mr.Buf[20+12:20+16], da.addr.As4(); !bytes.Equal(src, want[:]) {
		t.Fatalf("GRH area's IPv4 source %v, want %v", src, da.addr)
	}
}

// TestSRQAndChannelThroughDaemons: receives from a shared receive queue,
// and a completion event through a channel.
func TestSRQAndChannelThroughDaemons(t *testing.T) {
	daemons(t)
	cb := open(t, "rnicB")
	pd := must[*verbs.PD](t)(cb.AllocPD())
	srq := must[*verbs.SRQ](t)(pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1}))
	ch := must[*verbs.CompChannel](t)(cb.CreateCompChannel())
	a := newEnd(t, open(t, "rnicA"), endOpts{typ: verbs.QPTypeRC})
	b := newEnd(t, cb, endOpts{typ: verbs.QPTypeRC, srq: srq, ch: ch, pd: pd})
	connect(t, a, b, verbs.QPTypeRC, 7, 14)
	connect(t, b, a, verbs.QPTypeRC, 7, 14)
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1}}); err == nil {
		t.Fatal("PostRecv on a QP with an SRQ succeeded")
	}
	if err := srq.PostRecv([]verbs.RecvWR{
		{WRID: 1001, SGL: []verbs.SGE{b.mr.SGE(0, 100)}},
		{WRID: 1002, SGL: []verbs.SGE{b.mr.SGE(100, 100)}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{"first", "second"} {
		post(t, a, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte(s)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evcq, err := ch.GetCQEvent(ctx)
	if err != nil || evcq != b.cq {
		t.Fatalf("GetCQEvent: %v, %v (want b's CQ)", evcq, err)
	}
	got := pollN(t, b.cq, 2)
	wantWC(t, got[0], verbs.WC{WRID: 1001, Opcode: 128, ByteLen: 5, QPNum: b.qp.QPN})
	wantWC(t, got[1], verbs.WC{WRID: 1002, Opcode: 128, ByteLen: 6, QPNum: b.qp.QPN})
	if string(b.mr.Buf[:5]) != "first" || string(b.mr.Buf[100:106]) != "second" {
		t.Fatalf("SRQ buffers %q %q", b.mr.Buf[:5], b.mr.Buf[100:106])
	}
	pollN(t, a.cq, 2)
	// Not re-armed: the next completion sends no event.
	post(t, a, verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	pollN(t, a.cq, 1)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if cq, err := ch.GetCQEvent(short); err == nil {
		t.Fatalf("event for %v without ReqNotify", cq)
	}
}
