package rdmacm

import (
	"bytes"
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

// A UD "connection" in the UDP port space, as perftest's UD tests make it
// with -R: the client's UD QP is in RTS with RDMA_UDP_QKEY as soon as it
// exists; its connect reaches the server as CONNECT_REQUEST with the
// private data after the cma_hdr; the accept names the server's UD QP;
// ESTABLISHED gives the client the server's QPN, Q_Key and an address
// handle to its GID, and nothing comes on the server's side; a SEND with
// immediate to them lands with the client's QPN as source, from which
// the server can answer.
func TestUDConnect(t *testing.T) {
	srv, cli := newSide(t), newSide(t)
	srvAddr := netip.AddrPortFrom(srv.ch.devs[0].addr, 18515)
	listen := srv.ch.CreateIDIn(PSUDP)
	if err := listen.BindAddr(srvAddr); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(); err != nil {
		t.Fatal(err)
	}

	id := cli.ch.CreateIDIn(PSUDP)
	if id.PS() != PSUDP {
		t.Fatalf("port space %#x", id.PS())
	}
	if err := id.ResolveAddr(netip.Addr{}, srvAddr); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventAddrResolved)
	id.ResolveRoute()
	cli.event(t, EventRouteResolved)
	cli.qp(t, id)
	if a, err := id.QP.Query(); err != nil || a.State != verbs.QPSRTS || a.QKey != 0x01234567 || a.SQPSN != 0 {
		t.Fatalf("client's QP: %+v, %v", a, err)
	}
	if err := id.Connect(&ConnParam{PrivateData: []byte("ud please")}); err != nil {
		t.Fatal(err)
	}

	req := srv.event(t, EventConnectRequest)
	if req.ListenID != listen || req.ID.PS() != PSUDP || req.Remote != id.LocalAddr() || req.UD == nil ||
		!bytes.HasPrefix(req.UD.PrivateData, []byte("ud please")) {
		t.Fatalf("connect request: %+v", req)
	}
	conn := req.ID
	srv.qp(t, conn)
	if err := conn.QP.PostRecv([]verbs.RecvWR{{WRID: 3, SGL: []verbs.SGE{srv.mr.SGE(0, 44)}}}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(&ConnParam{PrivateData: []byte("ud ok")}); err != nil {
		t.Fatal(err)
	}
	est := cli.event(t, EventEstablished)
	if est.ID != id || est.UD == nil || est.UD.QPN != conn.QP.QPN || est.UD.QKey != UDPQKey ||
		est.UD.AH.Addr() != srvAddr.Addr() || !bytes.HasPrefix(est.UD.PrivateData, []byte("ud ok")) {
		t.Fatalf("established: %+v, UD %+v", est, est.UD)
	}

	// perftest's UD latency client tells the server its QPN this way.
	copy(cli.mr.Buf, []byte{1, 2, 3, 4})
	if err := id.QP.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: id.QP.QPN,
		SGL: []verbs.SGE{cli.mr.SGE(0, 4)}, AH: &est.UD.AH, RemoteQPN: est.UD.QPN, RemoteQKey: est.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := cli.wc(t); wc.Status != verbs.WCSuccess || wc.WRID != 4 {
		t.Fatalf("send: %+v", wc)
	}
	wc := srv.wc(t)
	if wc.Status != verbs.WCSuccess || wc.WRID != 3 || wc.ByteLen != 44 || wc.SrcQP != id.QP.QPN || wc.Imm != id.QP.QPN ||
		!bytes.Equal(srv.mr.Buf[40:44], []byte{1, 2, 3, 4}) {
		t.Fatalf("receive: %+v, %x", wc, srv.mr.Buf[40:44])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if e, err := srv.ch.GetEvent(ctx); err == nil {
		t.Fatalf("the server of a UD connect got %v", e.Event)
	}
}

// A UD connect to a port nobody listens on: UNREACHABLE at once (a
// SIDR_REP of status 1), with a status that is ECONNREFUSED.
func TestUDConnectRefused(t *testing.T) {
	srv, cli := newSide(t), newSide(t)
	id := cli.ch.CreateIDIn(PSUDP)
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(srv.ch.devs[0].addr, 18515)); err != nil {
		t.Fatal(err)
	}
	cli.event(t, EventAddrResolved)
	id.ResolveRoute()
	cli.event(t, EventRouteResolved)
	cli.qp(t, id)
	if err := id.Connect(&ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if e := cli.event(t, EventUnreachable); !errors.Is(e.Status, syscall.ECONNREFUSED) || e.RejectReason != 1 {
		t.Fatalf("unreachable: %v (status %d)", e.Status, e.RejectReason)
	}
}
