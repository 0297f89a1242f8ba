package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// side is one application: an in-process NIC on an address of its own, an event channel on it and
// the resources of one QP.
type side struct {
	ctx *verbs.Context
	ch  *EventChannel
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
}

func newSide(t *testing.T) *side {
	t.Helper()
	ctx, err := verbs.OpenLocal(verbs.LocalConfig{Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	ch, err := CreateEventChannelOn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Destroy() })
	s := &side{ctx: ctx, ch: ch}
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = ctx.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) qp(t *testing.T, id *ID) {
	t.Helper()
	err := id.CreateQP(s.pd, verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
}

func (s *side) event(t *testing.T, want EventType) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := s.ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if e.Event != want {
		t.Fatalf("event %v (%v), want %v", e.Event, e.Status, want)
	}
	return e
}

func (s *side) wc(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); s.cq.Poll(wc) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
	}
	return wc[0]
}

// The librdmacm sequence of a client and a server, as rping does it:
// resolve, listen, connect with private data (the server sees it without
// the cma_hdr, and the client's address and port from it), accept, a
// SEND over the connection, disconnect on both sides.
func TestConnectAcceptSendDisconnect(t *testing.T) {
	srv, cli := newSide(t), newSide(t)
	srvAddr := netip.AddrPortFrom(srv.ch.devs[0].addr, 7174)
	listen := srv.ch.CreateID()
	if err := listen.BindAddr(srvAddr); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(); err != nil {
		t.Fatal(err)
	}

	id := cli.ch.CreateID()
	if err := id.ResolveAddr(netip.Addr{}, srvAddr); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventAddrResolved)
	if err := id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventRouteResolved)
	cli.qp(t, id)
	if err := id.Connect(&ConnParam{PrivateData: []byte("ping"), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	req := srv.event(t, EventConnectRequest)
	if req.ListenID != listen || req.Remote != id.LocalAddr() || string(req.Param.PrivateData[:4]) != "ping" ||
		req.Param.RetryCount != 7 || req.Param.RNRRetryCount != 7 || req.ID.Verbs != srv.ctx {
		t.Fatalf("connect request: %+v (client at %v)", req, id.LocalAddr())
	}
	conn := req.ID
	srv.qp(t, conn)
	if err := conn.QP.PostRecv([]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{srv.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(&ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if e := cli.event(t, EventEstablished); e.ID != id {
		t.Fatalf("established for %p, want %p", e.ID, id)
	}
	srv.event(t, EventEstablished)

	copy(cli.mr.Buf, "over rdma_cm")
	if err := id.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cli.mr.SGE(0, 12)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := cli.wc(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %+v", wc)
	}
	if wc := srv.wc(t); wc.Status != verbs.WCSuccess || wc.ByteLen != 12 || string(srv.mr.Buf[:12]) != "over rdma_cm" {
		t.Fatalf("receive: %+v, %q", wc, srv.mr.Buf[:12])
	}

	if err := id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventDisconnected)
	srv.event(t, EventDisconnected)
}

// A connect to a port nobody listens on: REJECTED at once, with a status
// that is ECONNREFUSED ("connection refused").
func TestConnectRefused(t *testing.T) {
	srv, cli := newSide(t), newSide(t)
	id := cli.ch.CreateID()
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(srv.ch.devs[0].addr, 7174)); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventAddrResolved)
	id.ResolveRoute()
	cli.event(t, EventRouteResolved)
	cli.qp(t, id)
	if err := id.Connect(&ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e := cli.event(t, EventRejected)
	if !errors.Is(e.Status, syscall.ECONNREFUSED) || e.RejectReason != 8 {
		t.Fatalf("rejected: %v (reason %d)", e.Status, e.RejectReason)
	}
}
