package qpmgr

import (
	"errors"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

func testRing(t *testing.T, n, size uint32) *abi.Ring {
	t.Helper()
	r, err := abi.NewRing(make([]byte, abi.RingBytes(n, size)), n, size)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testPipe(t *testing.T) (rd, wr int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

// wakes reads what the device wrote into a wake pipe: how many 8-byte
// counts of 1.
func wakes(t *testing.T, fd int) int {
	t.Helper()
	var b [64]byte
	n, err := unix.Read(fd, b[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil || n%8 != 0 {
		t.Fatalf("wake pipe: %d bytes, %v", n, err)
	}
	for i := 0; i < n; i += 8 {
		if b[i] != 1 {
			t.Fatalf("wake pipe holds % x", b[:n])
		}
	}
	return n / 8
}

// The device's side of the host's rings, with no host interface in
// between: a send WQE the client wrote is fetched and decoded into the
// engine's record, retired into the ring's consumer index when done, and
// its completion written into the CQE ring from that record (wr_id and
// every field read back by the client's decoder), the channel woken when
// armed; a full CQE ring counts an overrun and sets its flag; a detached
// ring is written no more; a garbage producer index breaks the send ring
// until Reset.
func TestHostRings(t *testing.T) {
	cqRing := testRing(t, 2, abi.CQESlotBytes)
	waitRd, waitWr := testPipe(t)
	chRd, chWr := testPipe(t)
	var overruns atomic.Uint64
	scq := NewCQ(2)
	scq.AttachRing(cqRing, waitWr, chWr, &overruns)
	qp, err := New(Config{QPN: 0x11, Type: ib.QPTypeRC, SendCQ: scq, RecvCQ: NewCQ(1),
		Caps: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 1, MaxRecvSGE: 1}, PortMTU: 1024,
		Counters: &Counters{}, Kick: func(*QP) {}})
	if err != nil {
		t.Fatal(err)
	}
	sq := testRing(t, 4, abi.SendSlotBytes(1, 0))
	sr := qp.AttachSendRing(sq)

	wrs := []ib.SendWR{
		{WRID: 0xfeedface01, Opcode: ib.WRRDMAWriteWithImm, Flags: ib.SendSignaled, Imm: 7,
			SGL: []ib.SGE{{Addr: 0x1000, Length: 96, LKey: 3}}, RemoteAddr: 0x2000, RKey: 9},
		{WRID: 0xfeedface02, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{{Addr: 0x1000, Length: 5, LKey: 3}}},
	}
	for i := range wrs {
		if err := abi.EncodeSendWQE(sq.Slot(uint32(i)), &wrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	sq.Slot(1)[11] = 2 // has_ah 2: the second WQE does not decode
	sq.SetProducer(2)
	if !sr.Pending() {
		t.Fatal("two new WQEs, not pending")
	}
	wqes, bad, err := sr.Fetch()
	if err != nil || len(wqes) != 2 || bad[0] != nil || bad[1] == nil {
		t.Fatalf("Fetch = %d WQEs, %v, %v; want 2, the second bad", len(wqes), bad, err)
	}
	if wqes[0].WR.WRID != wrs[0].WRID || wqes[1].WR.WRID != wrs[1].WRID || wqes[0].WR.Imm != 7 || wqes[0].WR.SGL[0] != wrs[0].SGL[0] {
		t.Fatalf("fetched %+v", wqes)
	}
	if sr.Pending() {
		t.Fatal("pending after the fetch")
	}

	wqes[0].Len = 96
	qp.Lock()
	if n, err := qp.PostSend(wqes[:1]); n != 1 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	cqRing.SetArmed(abi.ArmAny)
	cqRing.SetWaiting(true)
	qp.CompleteSend(ib.WCSuccess)
	qp.Unlock()
	if got := sq.Consumer(); got != 1 {
		t.Fatalf("send consumer index %d after one completion, want 1", got)
	}
	if got := cqRing.Producer(); got != 1 {
		t.Fatalf("CQ producer index %d, want 1", got)
	}
	var wc ib.WC
	abi.GetCQE(cqRing.Slot(0), &wc)
	want := ib.WC{WRID: 0xfeedface01, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, WCFlags: ib.WCFlagWithImm, ByteLen: 96, QPNum: 0x11}
	if wc != want {
		t.Fatalf("CQE %+v, want %+v", wc, want)
	}
	if cqRing.Armed() != 0 || cqRing.Events() != 1 || wakes(t, chRd) != 1 || wakes(t, waitRd) != 1 {
		t.Fatalf("armed %d, events %d: the arm taken, one event and one wake each wanted", cqRing.Armed(), cqRing.Events())
	}

	// Unarmed, no waiter: the CQE is written and nobody is woken.
	if err := scq.PushSend(3, ib.WCWRFlushErr, ib.WCSend, 0, 0, 0x11); err != nil {
		t.Fatal(err)
	}
	abi.GetCQE(cqRing.Slot(1), &wc)
	if want := (ib.WC{WRID: 3, Status: ib.WCWRFlushErr, Opcode: ib.WCSend, QPNum: 0x11}); wc != want {
		t.Fatalf("CQE %+v, want %+v", wc, want)
	}
	if wakes(t, chRd) != 0 || wakes(t, waitRd) != 0 {
		t.Fatal("a wake with no arm and no waiter")
	}
	// Full (the client consumed nothing): an overrun.
	if err := scq.PushRecv(4, 0x11, &RecvCompletion{Opcode: ib.WCRecv}); !errors.Is(err, ib.ErrCQOverrun) {
		t.Fatalf("push into a full ring: %v", err)
	}
	if overruns.Load() != 1 || !cqRing.Overrun() || cqRing.Producer() != 2 {
		t.Fatalf("overruns %d, flag %v, producer %d; want 1, set, 2", overruns.Load(), cqRing.Overrun(), cqRing.Producer())
	}
	// Detached: the ring's memory may go; nothing is written.
	cqRing.SetConsumer(2)
	scq.DetachRing()
	if err := scq.PushRecv(5, 0x11, &RecvCompletion{Opcode: ib.WCRecv}); err != nil || cqRing.Producer() != 2 || scq.Len() != 0 {
		t.Fatalf("push after DetachRing: %v, producer %d, %d in the CQ's own ring", err, cqRing.Producer(), scq.Len())
	}

	// A producer index past the ring breaks it until Reset.
	sq.SetProducer(100)
	if _, _, err := sr.Fetch(); err == nil || !sr.Broken() || sr.Pending() {
		t.Fatalf("garbage producer index: %v, broken %v", err, sr.Broken())
	}
	sr.Reset()
	if sr.Broken() || sq.Producer() != 0 || sq.Consumer() != 0 {
		t.Fatal("Reset left the ring broken or its indices set")
	}
}
