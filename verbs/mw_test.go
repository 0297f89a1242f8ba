package verbs_test

import (
	"bytes"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// mwPair is a connected RC pair whose b side has a region with MW_BIND
// (4 KiB) and a window of type typ.
func mwPair(t *testing.T, typ verbs.MWType) (qa, qb *verbs.QP, ma, mb side, mw *verbs.MW) {
	t.Helper()
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, looptest.Get(t))
	qa, ma = rcQP(t, a)
	qb, mb = newQP(t, b, verbs.QPTypeRC, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)
	mw, err := mb.mr.PD().AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	return qa, qb, ma, mb, mw
}

// A type 1 window bound with QP.BindMW takes a WRITE inside it, byte
// for byte, and refuses one a byte past it with REM_ACCESS_ERR.
func TestMWType1(t *testing.T) {
	qa, qb, ma, mb, mw := mwPair(t, verbs.MWType1)
	old := mw.RKey
	if err := qb.BindMW(mw, 5, verbs.SendSignaled, mb.mr, mb.mr.Addr+1024, 100, verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if mw.RKey != verbs.IncRKey(old) {
		t.Fatalf("rkey %#x after the bind, want %#x", mw.RKey, verbs.IncRKey(old))
	}
	if wc := pollOne(t, mb.cq); wc != (verbs.WC{WRID: 5, Opcode: verbs.WCBindMW, QPNum: qb.QPN}) {
		t.Fatalf("bind completion %v", &wc)
	}
	copy(ma.mr.Buf, bytes.Repeat([]byte{0xEE}, 100))
	post := func(id uint64, off uint64, n int) verbs.WC {
		t.Helper()
		if err := qa.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ma.mr.SGE(0, n)}, RemoteAddr: mb.mr.Addr + off, RKey: mw.RKey}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, ma.cq)
	}
	if wc := post(1, 1024, 100); wc != (verbs.WC{WRID: 1, Opcode: verbs.WCRDMAWrite, ByteLen: 100, QPNum: qa.QPN}) {
		t.Fatalf("WRITE through the window: %v", &wc)
	}
	want := make([]byte, 4096)
	copy(want[1024:], bytes.Repeat([]byte{0xEE}, 100))
	if !bytes.Equal(mb.mr.Buf, want) {
		t.Fatal("the WRITE through the window landed elsewhere than 1024..1123")
	}
	if wc := post(2, 1025, 100); wc != (verbs.WC{WRID: 2, Status: verbs.WCRemAccessErr, Opcode: verbs.WCRDMAWrite, QPNum: qa.QPN}) {
		t.Fatalf("WRITE a byte past the window: %v", &wc)
	}
	if !bytes.Equal(mb.mr.Buf, want) {
		t.Fatal("the refused WRITE changed the region")
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// A type 2 window bound by a WRBindMW work request answers a READ; after
// WRLocalInv a READ through it is REM_ACCESS_ERR; a type 2 window is not
// bound with BindMW.
func TestMWType2(t *testing.T) {
	qa, qb, ma, mb, mw := mwPair(t, verbs.MWType2)
	if err := qb.BindMW(mw, 1, 0, mb.mr, mb.mr.Addr, 8, verbs.AccessRemoteRead); err == nil {
		t.Fatal("BindMW bound a type 2 window")
	}
	key := verbs.IncRKey(mw.RKey)
	bind := verbs.SendWR{WRID: 6, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.MWBind{MWRKey: mw.RKey, RKey: key, MRLKey: mb.mr.LKey, Addr: mb.mr.Addr + 2048, Length: 64,
			Access: verbs.AccessRemoteRead | verbs.AccessZeroBased}}
	if err := qb.PostSend([]verbs.SendWR{bind}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, mb.cq); wc != (verbs.WC{WRID: 6, Opcode: verbs.WCBindMW, QPNum: qb.QPN}) {
		t.Fatalf("bind completion %v", &wc)
	}
	mw.RKey = key
	copy(mb.mr.Buf[2048:], "through the window, zero-based")
	read := func(id uint64) verbs.WC {
		t.Helper()
		if err := qa.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ma.mr.SGE(0, 30)}, RemoteAddr: 0, RKey: key}}); err != nil {
			t.Fatal(err)
		}
		return pollOne(t, ma.cq)
	}
	if wc := read(1); wc != (verbs.WC{WRID: 1, Opcode: verbs.WCRDMARead, ByteLen: 30, QPNum: qa.QPN}) {
		t.Fatalf("READ through the window: %v", &wc)
	}
	if got := string(ma.mr.Buf[:30]); got != "through the window, zero-based" {
		t.Fatalf("READ brought %q", got)
	}
	if err := qb.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvRKey: key}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, mb.cq); wc != (verbs.WC{WRID: 7, Opcode: verbs.WCLocalInv, QPNum: qb.QPN}) {
		t.Fatalf("LOCAL_INV completion %v", &wc)
	}
	if wc := read(2); wc != (verbs.WC{WRID: 2, Status: verbs.WCRemAccessErr, Opcode: verbs.WCRDMARead, QPNum: qa.QPN}) {
		t.Fatalf("READ after the invalidation: %v", &wc)
	}
}
