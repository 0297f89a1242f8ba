package hostif

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// openAsync opens c's event queue and returns the wake pipe's read end.
func openAsync(t *testing.T, c *Client) int {
	t.Helper()
	fds := call(t, c, abi.KindOpenAsync, &abi.Empty{}, nil, &abi.Empty{})
	if len(fds) != 1 {
		t.Fatalf("open_async carried %d descriptors, want 1", len(fds))
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	return fds[0]
}

// readable says whether the wake pipe fd has something to read now.
func readable(t *testing.T, fd int) bool {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1 && p[0].Revents&unix.POLLIN != 0
}

// nextEvent waits for c's next event (the deadline guards a hang).
func nextAsyncEvent(t *testing.T, c *Client) abi.AsyncEvent {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		var e abi.AsyncEvent
		call(t, c, abi.KindGetAsyncEvent, &abi.Empty{}, nil, &e)
		if e.Have {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatal("no asynchronous event")
		}
		time.Sleep(time.Millisecond)
	}
}

func wantEvent(t *testing.T, c *Client, want abi.AsyncEvent) {
	t.Helper()
	want.Have = true
	if got := nextAsyncEvent(t, c); got != want {
		t.Fatalf("event %v on handle %d port %d, want %v on handle %d port %d", got.Type, got.H, got.Port, want.Type, want.H, want.Port)
	}
}

func wantNoEvent(t *testing.T, c *Client) {
	t.Helper()
	var e abi.AsyncEvent
	call(t, c, abi.KindGetAsyncEvent, &abi.Empty{}, nil, &e)
	if e.Have {
		t.Fatalf("unexpected event %v on handle %d", e.Type, e.H)
	}
}

// evQP is a QP with its CQ and a 64 KiB MR at IOVA 0x10000.
type evQP struct {
	h, qpn, cq uint32
	sq         *abi.Ring
	mr         abi.RegMRReply
}

func newEvQP(t *testing.T, c *Client, srq uint32, srqPD uint32) *evQP {
	t.Helper()
	q := &evQP{}
	pd := srqPD
	if pd == 0 {
		var h abi.Handle
		call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &h)
		pd = h.H
	}
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd, Access: 0xf, Length: 1 << 16, IOVA: 0x10000},
		[]int{sealedMemfd(t, 1<<16, true)}, &q.mr)
	var cq abi.RingReply
	mapFD(t, call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 64}, nil, &cq))
	q.cq = cq.H
	caps := ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}
	if srq != 0 {
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
	}
	var r abi.RingReply
	mem := mapFD(t, call(t, c, abi.KindCreateQP, &abi.CreateQPReq{PD: pd, SendCQ: q.cq, RecvCQ: q.cq, SRQ: srq,
		Type: ib.QPTypeRC, Caps: caps}, nil, &r))
	q.h, q.qpn, q.sq = r.H, r.QPN, ringOf(t, mem, r.Send)
	return q
}

// bringUp moves q through INIT and RTR towards destQPN at dest, and on
// to RTS unless rtr.
func (q *evQP) bringUp(t *testing.T, c *Client, destQPN uint32, dest netip.Addr, rtr bool) {
	t.Helper()
	modify := func(a ib.QPAttr, mask ib.AttrMask) {
		call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: mask | ib.AttrState, Attr: a}, nil, &abi.Empty{})
	}
	modify(ib.QPAttr{State: ib.QPSInit, PortNum: 1, AccessFlags: 0xe}, ib.AttrPKeyIndex|ib.AttrPort|ib.AttrAccessFlags)
	modify(ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: destQPN, AH: ib.AH{DGID: dest.As16()},
		MaxDestRdAtomic: 1}, ib.AttrAV|ib.AttrPathMTU|ib.AttrDestQPN|ib.AttrRQPSN|ib.AttrMaxDestRdAtomic|ib.AttrMinRNRTimer)
	if rtr {
		return
	}
	modify(ib.QPAttr{State: ib.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		ib.AttrSQPSN|ib.AttrTimeout|ib.AttrRetryCnt|ib.AttrRNRRetry|ib.AttrMaxQPRdAtomic)
}

func (q *evQP) post(t *testing.T, c *Client, wr *ib.SendWR) {
	t.Helper()
	p := q.sq.Producer()
	if err := abi.EncodeSendWQE(q.sq.Slot(p), wr); err != nil {
		t.Fatal(err)
	}
	q.sq.SetProducer(p + 1)
	if err := c.Send(abi.KindDoorbell, &abi.DoorbellReq{H: q.h, Queue: abi.DoorbellSend}); err != nil {
		t.Fatal(err)
	}
}

// The QP and SRQ events reach their owner only, each once, at the moment
// rxe (and IBTA) raise it: COMM_EST for the first request a QP in RTR
// receives, SRQ_LIMIT_REACHED when the SRQ falls below the limit
// modify_srq armed (then disarmed: query_srq reads 0), QP_ACCESS_ERR for
// a WRITE with a bad R_Key, then LAST_WQE_REACHED as the SRQ's QP enters
// ERR. The requester, whose error its completion reports, gets none, and
// neither can touch the other's SRQ.
func TestAsyncEventsQPAndSRQ(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c1, c2 := n.client(t), n.client(t)
	fd1, fd2 := openAsync(t, c1), openAsync(t, c2)
	if _, err := c1.Call(abi.KindOpenAsync, &abi.Empty{}, nil, &abi.Empty{}); err == nil {
		t.Fatal("a second open_async succeeded")
	} else {
		wantCode(t, "second open_async", err, abi.CodeBusy)
	}
	wantNoEvent(t, c1)

	var pd abi.Handle
	call(t, c1, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var sr abi.RingReply
	smem := mapFD(t, call(t, c1, abi.KindCreateSRQ, &abi.CreateSRQReq{PD: pd.H, MaxWR: 8, MaxSGE: 1}, nil, &sr))
	srq := ringOf(t, smem, sr.Recv)
	b := newEvQP(t, c1, sr.H, pd.H)
	a := newEvQP(t, c2, 0, 0)
	b.bringUp(t, c1, a.qpn, n.addr, true)
	a.bringUp(t, c2, b.qpn, n.addr, false)

	for i := range 4 {
		if err := abi.EncodeRecvWQE(srq.Slot(uint32(i)), &ib.RecvWR{WRID: uint64(100 + i),
			SGL: []ib.SGE{{Addr: 0x10000 + uint64(64*i), Length: 64, LKey: b.mr.LKey}}}); err != nil {
			t.Fatal(err)
		}
	}
	srq.SetProducer(4)
	call(t, c1, abi.KindModifySRQ, &abi.ModifySRQReq{H: sr.H, Mask: abi.SRQLimit, Limit: 3}, nil, &abi.Empty{})
	var sa abi.SRQAttrReply
	call(t, c1, abi.KindQuerySRQ, &abi.Handle{H: sr.H}, nil, &sa)
	if sa != (abi.SRQAttrReply{MaxWR: 8, MaxSGE: 1, Limit: 3}) {
		t.Fatalf("query_srq: %+v, want 8 WRs, 1 SGE, limit 3", sa)
	}
	for _, m := range []abi.ModifySRQReq{{H: sr.H, Mask: abi.SRQLimit, Limit: 9}, {H: sr.H, Mask: abi.SRQMaxWR, MaxWR: 16}, {H: sr.H, Mask: 4}} {
		_, err := c1.Call(abi.KindModifySRQ, &m, nil, &abi.Empty{})
		wantCode(t, "modify_srq", err, abi.CodeInvalid)
	}
	// c2 names c1's SRQ: no such handle for it.
	_, err := c2.Call(abi.KindModifySRQ, &abi.ModifySRQReq{H: sr.H, Mask: abi.SRQLimit, Limit: 1}, nil, &abi.Empty{})
	wantCode(t, "modify_srq of another client's SRQ", err, abi.CodeNoHandle)

	send := &ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: a.mr.LKey}}}
	a.post(t, c2, send)
	wantEvent(t, c1, abi.AsyncEvent{Type: ib.EventCommEst, H: b.h})
	wantNoEvent(t, c1) // 3 WQEs left: not below the limit of 3
	a.post(t, c2, send)
	wantEvent(t, c1, abi.AsyncEvent{Type: ib.EventSRQLimitReached, H: sr.H})
	call(t, c1, abi.KindQuerySRQ, &abi.Handle{H: sr.H}, nil, &sa)
	if sa.Limit != 0 {
		t.Fatalf("query_srq after the limit fired: limit %d, want 0", sa.Limit)
	}
	if !readable(t, fd1) {
		t.Fatal("c1's wake pipe is not readable after its events")
	}
	a.post(t, c2, &ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: a.mr.LKey}}, RemoteAddr: 0x10000, RKey: b.mr.RKey ^ 0x5a5a00})
	wantEvent(t, c1, abi.AsyncEvent{Type: ib.EventQPAccessErr, H: b.h})
	wantEvent(t, c1, abi.AsyncEvent{Type: ib.EventQPLastWQEReached, H: b.h})
	wantNoEvent(t, c1)
	for deadline := time.Now().Add(20 * time.Second); qpState(t, c2, a.h) != ib.QPSErr; {
		if time.Now().After(deadline) {
			t.Fatal("the requester never saw its NAK")
		}
		time.Sleep(time.Millisecond)
	}
	wantNoEvent(t, c2)
	if readable(t, fd2) {
		t.Fatal("c2's wake pipe is readable: it was told of another client's events")
	}
	if got := n.srv.Counters()["hostif_async_event"]; got != 4 {
		t.Fatalf("hostif_async_event %d, want 4", got)
	}
}

// A CQ that overruns raises CQ_ERR once, however many completions it
// loses; a QP modified to ERR by its owner raises nothing but, with no
// SRQ, nothing at all.
func TestAsyncEventCQErr(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	openAsync(t, c)
	q := newEvQP(t, c, 0, 0)
	q.bringUp(t, c, q.qpn, n.addr, false)
	for i := range 70 {
		for deadline := time.Now().Add(20 * time.Second); q.sq.Producer()-q.sq.Consumer() == q.sq.Slots; {
			if time.Now().After(deadline) {
				t.Fatal("send queue never drained")
			}
			time.Sleep(time.Millisecond)
		}
		q.post(t, c, &ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey})
	}
	wantEvent(t, c, abi.AsyncEvent{Type: ib.EventCQErr, H: q.cq})
	for deadline := time.Now().Add(20 * time.Second); n.srv.cqOverruns.Load() < 6; {
		if time.Now().After(deadline) {
			t.Fatalf("%d overruns, want 6", n.srv.cqOverruns.Load())
		}
		time.Sleep(time.Millisecond)
	}
	call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: ib.AttrState, Attr: ib.QPAttr{State: ib.QPSErr}}, nil, &abi.Empty{})
	wantNoEvent(t, c)
}

// A client that never reads its events holds at most maxAsyncEvents of
// them: the rest are dropped and counted. Port events reach every client
// with a queue open, in order, naming port 1; a client without one gets
// nothing and costs nothing.
func TestAsyncEventsBounded(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c, quiet := n.client(t), n.client(t)
	fd := openAsync(t, c)
	for i := range 1000 {
		n.srv.PortEvent(i%2 == 1)
	}
	m := n.srv.Counters()
	if m["hostif_async_event"] != maxAsyncEvents || m["hostif_async_event_dropped"] != 1000-maxAsyncEvents {
		t.Fatalf("hostif_async_event %d, _dropped %d; want %d, %d", m["hostif_async_event"],
			m["hostif_async_event_dropped"], maxAsyncEvents, 1000-maxAsyncEvents)
	}
	if !readable(t, fd) {
		t.Fatal("wake pipe not readable")
	}
	for i := range maxAsyncEvents {
		want := ib.EventPortErr
		if i%2 == 1 {
			want = ib.EventPortActive
		}
		wantEvent(t, c, abi.AsyncEvent{Type: want, Port: 1})
	}
	wantNoEvent(t, c)
	wantNoEvent(t, quiet)
}

// FuzzDecodeAsync drives the decoders of the event and SRQ requests and
// replies with any bytes: a request the server accepts re-encodes to the
// same bytes; no reply panics its decoder.
func FuzzDecodeAsync(f *testing.F) {
	for _, s := range [][]byte{
		abi.Encode(abi.KindOpenAsync, 0, 1, &abi.Empty{}),
		abi.Encode(abi.KindGetAsyncEvent, 0, 2, &abi.Empty{}),
		abi.Encode(abi.KindModifySRQ, 0, 3, &abi.ModifySRQReq{H: 4, Mask: abi.SRQLimit, Limit: 3}),
		abi.Encode(abi.KindQuerySRQ, 0, 4, &abi.Handle{H: 4}),
		abi.EncodeReply(abi.KindGetAsyncEvent, 5, &abi.AsyncEvent{Have: true, Type: ib.EventQPLastWQEReached, H: 9}),
		abi.EncodeReply(abi.KindQuerySRQ, 6, &abi.SRQAttrReply{MaxWR: 8, MaxSGE: 1, Limit: 3}),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if h, body, err := DecodeRequest(msg, 0); err == nil {
			if got := abi.Encode(h.Kind, h.Flags, h.ID, body); string(got) != string(msg) {
				t.Fatalf("decoded %T %+v re-encodes as %x, was %x", body, body, got, msg)
			}
		}
		if len(msg) >= abi.HeaderLen {
			for _, b := range []abi.Body{&abi.AsyncEvent{}, &abi.SRQAttrReply{}} {
				abi.DecodeReply(abi.KindGetAsyncEvent, msg[abi.HeaderLen:], b)
			}
		}
	})
}

// An event of an object its client destroyed before taking it is
// dropped with the object, as rdma-core's destroy drops it: the handle is
// never another object's, and nothing is raised once it is gone.
func TestAsyncEventOfDestroyedObject(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	openAsync(t, c)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var sr abi.RingReply
	mapFD(t, call(t, c, abi.KindCreateSRQ, &abi.CreateSRQReq{PD: pd.H, MaxWR: 4, MaxSGE: 1}, nil, &sr))
	q := newEvQP(t, c, sr.H, pd.H)
	call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: ib.AttrState, Attr: ib.QPAttr{State: ib.QPSErr}}, nil, &abi.Empty{})
	call(t, c, abi.KindDestroyQP, &abi.Handle{H: q.h}, nil, &abi.Empty{})
	wantNoEvent(t, c)
	q = newEvQP(t, c, sr.H, pd.H)
	call(t, c, abi.KindModifyQP, &abi.ModifyQPReq{H: q.h, Mask: ib.AttrState, Attr: ib.QPAttr{State: ib.QPSErr}}, nil, &abi.Empty{})
	wantEvent(t, c, abi.AsyncEvent{Type: ib.EventQPLastWQEReached, H: q.h})
	if got := n.srv.Counters()["hostif_async_event"]; got != 2 {
		t.Fatalf("hostif_async_event %d, want 2 (one raised for each QP)", got)
	}
}

// The daemon's shutdown moves every QP to ERR without an event: the
// clients are told by the hang-up that follows (DEVICE_FATAL), not by a
// QP_FATAL or LAST_WQE_REACHED per QP.
func TestShutdownRaisesNothing(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	openAsync(t, c)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var sr abi.RingReply
	mapFD(t, call(t, c, abi.KindCreateSRQ, &abi.CreateSRQReq{PD: pd.H, MaxWR: 4, MaxSGE: 1}, nil, &sr))
	q := newEvQP(t, c, sr.H, pd.H)
	q.bringUp(t, c, q.qpn, n.addr, false)
	n.srv.Shutdown()
	if s := qpState(t, c, q.h); s != ib.QPSErr {
		t.Fatalf("QP in %v after Shutdown, want ERR", s)
	}
	wantNoEvent(t, c)
}
