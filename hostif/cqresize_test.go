package hostif

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
)

// resizeRing asks for CQ h to hold cqe entries and maps the new ring.
func resizeRing(t *testing.T, c *Client, h, cqe uint32) (*abi.Ring, error) {
	t.Helper()
	var r abi.RingReply
	fds, err := c.Call(abi.KindResizeCQ, &abi.ResizeCQReq{H: h, CQE: cqe}, nil, &r)
	if err != nil {
		return nil, err
	}
	if r.H != h || r.Caps.MaxSendWR != int(cqe) || r.Send.Slots != cqe {
		t.Fatalf("resize_cq to %d: reply %+v", cqe, r)
	}
	return ringOf(t, mapFD(t, fds), r.Send), nil
}

// A CQ resized again and again, grown and shrunk, while the engine
// completes WRITEs into it: every completion arrives once, in order,
// field by field, across each swap of rings, and each resize charges
// the ring bytes it adds or refunds those it frees.
func TestResizeCQWhileCompleting(t *testing.T) {
	n := newNICPolling(t, looptest.Get(t).String(), 100*time.Microsecond)
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var cqr abi.RingReply
	cq := ringOf(t, mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cqr)), cqr.Send)
	q := &rawQP{}
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &q.mr)
	q.create(t, c, pd.H, cqr.H, n.addr)

	const total = 1500
	length := func(i int) uint32 { return uint32(1 + i%61) }
	var polled atomic.Uint32
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// A failure below stops the poster before the rings are unmapped.
	defer func() { close(stop); wg.Wait() }()
	wg.Add(1)
	// The poster writes its WQEs without asking the daemon, so that
	// its posts race the resizes; the doorbell is a second client's
	// request on the same socket, serialized with the resizes as a
	// program's own thread's would be.
	go func() {
		defer wg.Done()
		for i := range total {
			select {
			case <-stop:
				return
			default:
			}
			// At most 8 WQEs posted and not polled, as a program
			// keeps its CQ from overrunning: the CQ never has fewer
			// entries.
			for deadline := time.Now().Add(20 * time.Second); i-int(polled.Load()) >= 8; {
				if time.Now().After(deadline) {
					t.Error("send queue never drained")
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
			wr := &ib.SendWR{WRID: uint64(0xabc0000 + i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
				SGL:        []ib.SGE{{Addr: 0x10000 + uint64(i%64)*64, Length: length(i), LKey: q.mr.LKey}},
				RemoteAddr: 0x18000 + uint64(i%64)*64, RKey: q.mr.RKey}
			if err := abi.EncodeSendWQE(q.sq.Slot(q.sq.Producer()), wr); err != nil {
				t.Error(err)
				return
			}
			q.sq.SetProducer(q.sq.Producer() + 1)
			if q.sq.EngineAsleep() && q.sq.RingBell() {
				if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()

	// No size below the 8 completions that may wait in the CQ: a
	// smaller one would be refused, which TestResizeCQHostile covers.
	sizes := []uint32{8, 9, 200, 8, 64, 17, 4096, 12}
	var cons uint32
	resized := 0
	for i := range total {
		if i%7 == 0 {
			want := sizes[(i/7)%len(sizes)]
			held := n.srv.acct.held()[ResRingBytes]
			oldSlots := cq.Slots
			r, err := resizeRing(t, c, cqr.H, want)
			if err != nil {
				t.Fatalf("resize from %d to %d entries: %v", oldSlots, want, err)
			}
			resized++
			cq = r
			if d := int64(n.srv.acct.held()[ResRingBytes]) - int64(held); d != (int64(want)-int64(oldSlots))*abi.CQESlotBytes {
				t.Fatalf("resize from %d to %d entries changed the charged ring bytes by %d", oldSlots, want, d)
			}
			if cq.Consumer() != cons {
				t.Fatalf("new ring's consumer %d, want %d", cq.Consumer(), cons)
			}
		}
		wc := poll(t, cq, &cons)
		polled.Store(cons)
		want := ib.WC{WRID: uint64(0xabc0000 + i), Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: length(i), QPNum: q.qpn}
		if wc != want {
			t.Fatalf("completion %d: %+v, want %+v", i, wc, want)
		}
	}
	if cq.Producer() != cons {
		t.Fatalf("%d completions past the %d posted", cq.Producer()-cons, total)
	}
	if cq.Overrun() {
		t.Fatal("a resize overran the CQ")
	}
	if resized != (total+6)/7 {
		t.Fatalf("%d resizes", resized)
	}
}

// Hostile resizes: 0 entries, more than the device's CQs hold, another
// client's CQ, a PD's handle, fewer entries than wait in the CQ, and a
// consumer index the client spoiled are refused, and the CQ goes on.
func TestResizeCQHostile(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c, other := n.client(t), n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	q := &rawQP{}
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &q.mr)
	var cqr abi.RingReply
	q.cq = ringOf(t, mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cqr)), cqr.Send)
	q.create(t, c, pd.H, cqr.H, n.addr)

	_, err := resizeRing(t, c, cqr.H, 0)
	wantCode(t, "resize to 0", err, abi.CodeInvalid)
	_, err = resizeRing(t, c, cqr.H, rnic.MaxCQE+1)
	wantCode(t, "resize past the device's CQs", err, abi.CodeInvalid)
	_, err = resizeRing(t, other, cqr.H, 16)
	wantCode(t, "resize another client's CQ", err, abi.CodeNoHandle)
	_, err = resizeRing(t, c, pd.H, 16)
	wantCode(t, "resize a PD", err, abi.CodeNoHandle)

	// Five completions waiting: four entries are too few, five hold
	// them.
	write := func(id uint64) *ib.SendWR {
		return &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey}
	}
	for i := range 5 {
		q.post(t, c, write(uint64(i)), nil)
	}
	for deadline := time.Now().Add(20 * time.Second); q.cq.Producer() != 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no completions")
		}
	}
	_, err = resizeRing(t, c, cqr.H, 4)
	wantCode(t, "resize below the five waiting", err, abi.CodeInvalid)
	// A consumer index past the producer claims 2^32-1 waiting.
	q.cq.SetConsumer(6)
	_, err = resizeRing(t, c, cqr.H, 64)
	wantCode(t, "resize with a spoiled consumer index", err, abi.CodeInvalid)
	q.cq.SetConsumer(0)
	q.cq.SetArmed(abi.ArmAny)
	r, err := resizeRing(t, c, cqr.H, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Armed() != abi.ArmAny || r.Producer() != 5 || r.Consumer() != 0 {
		t.Fatalf("new ring armed %d producer %d consumer %d, want %d 5 0", r.Armed(), r.Producer(), r.Consumer(), abi.ArmAny)
	}
	var cons uint32
	for i := range 5 {
		if wc := poll(t, r, &cons); wc.WRID != uint64(i) || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRDMAWrite ||
			wc.ByteLen != 8 || wc.QPNum != q.qpn {
			t.Fatalf("completion %d after the resize: %+v", i, wc)
		}
	}
	// The CQ goes on into its new ring, and its arm with it.
	q.post(t, c, write(5), nil)
	if wc := poll(t, r, &cons); wc.WRID != 5 || wc.Status != ib.WCSuccess {
		t.Fatalf("completion after the resize: %+v", wc)
	}
	if r.Events() != 1 || r.Armed() != 0 {
		t.Fatalf("new ring: %d events, armed %d; want the arm taken", r.Events(), r.Armed())
	}
	// A destroyed CQ (the same client's destroy, which its socket
	// serializes with the resize) is no CQ.
	call(t, c, abi.KindDestroyQP, &abi.Handle{H: q.h}, nil, &abi.Empty{})
	call(t, c, abi.KindDestroyCQ, &abi.Handle{H: cqr.H}, nil, &abi.Empty{})
	_, err = resizeRing(t, c, cqr.H, 16)
	wantCode(t, "resize a destroyed CQ", err, abi.CodeNoHandle)
	if held := n.srv.acct.held()[ResRingBytes]; held != 0 {
		t.Fatalf("%d ring bytes charged after the CQ went", held)
	}
}

// A resize is charged the ring bytes it adds, as create_cq is charged
// its ring: past the client's limit it is refused with CodeLimit and
// changes nothing; a smaller ring refunds the difference.
func TestResizeCQLimit(t *testing.T) {
	n := limitedNIC(t, looptest.Get(t).String(), Limits{Client: Quota{ResRingBytes: 64 << 10}})
	c := n.client(t)
	var cqr abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cqr))
	ring := func(cqe uint64) uint64 { return abi.RingHeader + cqe*abi.CQESlotBytes }
	if h := held(n)["hostif_held_ring_bytes"]; h != ring(64) {
		t.Fatalf("%d ring bytes held, want %d", h, ring(64))
	}
	_, err := resizeRing(t, c, cqr.H, 4096)
	wantLimit(t, "resize past the client's ring bytes", err, "-client-"+ResRingBytes.Flag())
	if h := held(n); h["hostif_held_ring_bytes"] != ring(64) || h["hostif_over_limit"] != 1 {
		t.Fatalf("after a refused resize: %v", h)
	}
	for _, cqe := range []uint64{1000, 3, 2000} {
		if _, err := resizeRing(t, c, cqr.H, uint32(cqe)); err != nil {
			t.Fatal(err)
		}
		if h := held(n)["hostif_held_ring_bytes"]; h != ring(cqe) {
			t.Fatalf("%d ring bytes held with %d entries, want %d", h, cqe, ring(cqe))
		}
	}
	call(t, c, abi.KindDestroyCQ, &abi.Handle{H: cqr.H}, nil, &abi.Empty{})
	if h := held(n)["hostif_held_ring_bytes"]; h != 0 {
		t.Fatalf("%d ring bytes held after the CQ went", h)
	}
}
