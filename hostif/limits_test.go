package hostif

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/internal/syncbuf"
)

// limitedNIC is newNIC with its server under lim.
func limitedNIC(t *testing.T, addr string, lim Limits) *nic {
	t.Helper()
	n := newNIC(t, addr)
	n.srv = NewServer(Config{Device: n.dev, Limits: lim})
	return n
}

// loggedNIC is limitedNIC with the server's log kept for the test.
func loggedNIC(t *testing.T, addr string, lim Limits) (*nic, *syncbuf.Buffer) {
	t.Helper()
	n, log := newNIC(t, addr), &syncbuf.Buffer{}
	n.srv = NewServer(Config{Device: n.dev, Limits: lim, Log: slog.New(slog.NewTextHandler(log, nil))})
	return n, log
}

// wantLimit checks that err is a refusal for the limit flag names.
func wantLimit(t *testing.T, what string, err error, flag string) {
	t.Helper()
	wantCode(t, what, err, abi.CodeLimit)
	if !strings.Contains(err.Error(), "rnicd "+flag+" raises it") {
		t.Fatalf("%s: %v, want the flag %s named", what, err, flag)
	}
}

// held returns the server's hostif_held_* and hostif_over_limit counters.
func held(n *nic) map[string]uint64 {
	m := map[string]uint64{}
	for k, v := range n.srv.Counters() {
		if strings.HasPrefix(k, "hostif_held_") || k == "hostif_over_limit" {
			m[k] = v
		}
	}
	return m
}

// createQP makes a QP; ring is the size of its rings' memfd.
func createQP(c *Client, pd, cq uint32) (h uint32, ring uint64, err error) {
	var r abi.RingReply
	rfds, err := c.Call(abi.KindCreateQP, &abi.CreateQPReq{PD: pd, SendCQ: cq, RecvCQ: cq, Type: ib.QPTypeRC,
		Caps: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}, nil, &r)
	closeAll(rfds)
	return r.H, uint64(r.Send.Size) + uint64(r.Recv.Size), err
}

// A client's requests past its own limits are refused with CodeLimit and
// the flag named, change nothing, and work again once it frees what it
// held; a client that hangs up gives back everything.
func TestClientLimits(t *testing.T) {
	n := limitedNIC(t, looptest.Get(t).String(), Limits{Client: Quota{ResQPs: 2, ResMRBytes: 1 << 20, ResConns: 2, ResRingBytes: 1 << 20}})
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var cq abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16}, nil, &cq))
	rings := uint64(cq.Send.Size)
	var qps []uint32
	for range 2 {
		h, ring, err := createQP(c, pd.H, cq.H)
		if err != nil {
			t.Fatal(err)
		}
		qps, rings = append(qps, h), rings+ring
	}
	_, _, err := createQP(c, pd.H, cq.H)
	wantLimit(t, "third QP", err, "-client-max-qp")
	// A CQ of 2^20 CQEs is a 32 MiB ring of the daemon's memory.
	_, err = c.Call(abi.KindCreateCQ, &abi.CreateCQReq{CQE: 1 << 20}, nil, &abi.RingReply{})
	wantLimit(t, "the deepest CQ", err, "-client-max-ring-bytes")

	// The sparse-memfd attack: a 1 TiB region is refused
	// before the daemon maps anything.
	_, err = c.Call(abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 1 << 40},
		[]int{sealedMemfd(t, 1<<40, true)}, &abi.RegMRReply{})
	wantLimit(t, "1 TiB region", err, "-client-max-mr-bytes")
	var mr abi.RegMRReply
	call(t, c, abi.KindRegMR, &abi.RegMRReq{PD: pd.H, Access: 1, Length: 1 << 20}, []int{sealedMemfd(t, 1<<20, true)}, &mr)

	want := map[string]uint64{"hostif_held_conns": 1, "hostif_held_fds": 2, "hostif_held_pd": 1, "hostif_held_qp": 2,
		"hostif_held_cq": 1, "hostif_held_srq": 0, "hostif_held_mr": 1, "hostif_held_mr_bytes": 1 << 20,
		"hostif_held_maps": 4, "hostif_held_ring_bytes": rings, "hostif_held_mcast": 0, "hostif_held_xrcd": 0, "hostif_held_mw": 0, "hostif_over_limit": 3}
	if got := held(n); !maps.Equal(got, want) {
		t.Fatalf("held %v, want %v", got, want)
	}

	// A second connection of the same process shares its account; a
	// third is over the limit of connections.
	c2 := n.client(t)
	var pd2 abi.Handle
	call(t, c2, abi.KindAllocPD, &abi.Empty{}, nil, &pd2)
	var cq2 abi.RingReply
	closeAll(call(t, c2, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16}, nil, &cq2))
	_, _, err = createQP(c2, pd2.H, cq2.H)
	wantLimit(t, "QP on a second connection", err, "-client-max-qp")
	c3 := n.client(t)
	_, err = c3.Call(abi.KindAllocPD, &abi.Empty{}, nil, &abi.Handle{})
	wantLimit(t, "third connection", err, "-client-max-conns")

	call(t, c, abi.KindDestroyQP, &abi.Handle{H: qps[0]}, nil, &abi.Empty{})
	if _, _, err := createQP(c, pd.H, cq.H); err != nil {
		t.Fatalf("a QP after one was destroyed: %v", err)
	}
	c.Close()
	c2.Close()
	c3.Close()
	eventually(t, "everything given back", func() bool {
		m := held(n)
		return m["hostif_held_qp"] == 0 && m["hostif_held_maps"] == 0 && m["hostif_held_fds"] == 0 &&
			m["hostif_held_mr_bytes"] == 0 && m["hostif_held_conns"] == 0 && m["hostif_held_pd"] == 0 &&
			m["hostif_held_ring_bytes"] == 0 && m["hostif_held_cq"] == 0
	})
}

// The daemon's limits hold for all clients together.
func TestDaemonLimits(t *testing.T) {
	n := limitedNIC(t, looptest.Get(t).String(), Limits{Daemon: Quota{ResCQs: 1, ResFDs: 3}})
	c := n.client(t)
	var cq abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16}, nil, &cq))
	_, err := c.Call(abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16}, nil, &abi.RingReply{})
	wantLimit(t, "second CQ", err, "-max-cq")
	// Connection and CQ hold 2 of 3 descriptors: a channel takes the last.
	var ch abi.Handle
	call(t, c, abi.KindCreateChannel, &abi.Empty{}, nil, &ch)
	_, err = n.client(t).Call(abi.KindAllocPD, &abi.Empty{}, nil, &abi.Handle{})
	wantLimit(t, "connection past the descriptors", err, "-max-fds")
	call(t, c, abi.KindDestroyChannel, &abi.Handle{H: ch.H}, nil, &abi.Empty{})
	var pd abi.Handle
	call(t, n.client(t), abi.KindAllocPD, &abi.Empty{}, nil, &pd)
}

// eventually polls cond; the deadline only guards against a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// A user's processes share the per-user limits; root and the daemon's
// own uid are not held to them, and a user's share comes back as its
// processes let go.
func TestUserAccounts(t *testing.T) {
	a := accounts{lim: Limits{User: Quota{ResConns: 2}}}
	user := owner{uid: 1000}
	for pid := int32(1); pid <= 2; pid++ {
		if err := a.connect(pid, user, costConn); err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
	}
	err := a.connect(3, user, costConn)
	var ce *codeErr
	if !errors.As(err, &ce) || ce.code != abi.CodeLimit || !strings.Contains(err.Error(), "this user holds 2 connections") || !strings.Contains(err.Error(), "rnicd -user-max-conns raises it") {
		t.Fatalf("third process: %v", err)
	}
	if _, ok := a.owners[3]; ok {
		t.Fatal("a refused connection left its owner behind")
	}
	for pid := int32(10); pid < 15; pid++ {
		if err := a.connect(pid, owner{uid: 0, exempt: true}, costConn); err != nil {
			t.Fatalf("root's pid %d: %v", pid, err)
		}
	}
	if err := a.connect(4, owner{uid: 1001}, costConn); err != nil {
		t.Fatalf("another user: %v", err)
	}
	a.refund(1, costConn)
	if err := a.connect(3, user, costConn); err != nil {
		t.Fatalf("after one left: %v", err)
	}
	if n := a.heldUsers(); n != 2 {
		t.Fatalf("%d users held, want 2", n)
	}
	for _, pid := range []int32{2, 3, 4} {
		a.refund(pid, costConn)
	}
	if n := a.heldUsers(); n != 0 || len(a.owners) != 5 {
		t.Fatalf("after all left: %d users, %d owners (root's 5)", n, len(a.owners))
	}
}

// Multicast attachments are charged to the client (-client-max-mcast):
// past its share it is refused and nothing changes; attaching a QP to a
// group it is attached to already costs nothing; a detach and a destroy
// give the charges back, and the destroyed QP's groups are left.
func TestMcastLimit(t *testing.T) {
	ip := looptest.Get(t)
	n, log := loggedNIC(t, ip.String(), Limits{Client: Quota{ResMcast: 2}})
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	var cq abi.RingReply
	closeAll(call(t, c, abi.KindCreateCQ, &abi.CreateCQReq{CQE: 16}, nil, &cq))
	var qp abi.RingReply
	closeAll(call(t, c, abi.KindCreateQP, &abi.CreateQPReq{PD: pd.H, SendCQ: cq.H, RecvCQ: cq.H, Type: ib.QPTypeUD,
		Caps: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}, nil, &qp))
	b := ip.As4()
	gid := func(i byte) [16]byte { return netip.AddrFrom4([4]byte{239, b[1], b[2], b[3] + i}).As16() }
	attach := func(i byte) error {
		_, err := c.Call(abi.KindAttachMcast, &abi.McastReq{H: qp.H, GID: gid(i)}, nil, &abi.Empty{})
		return err
	}
	for i := range byte(2) {
		if err := attach(i); err != nil {
			t.Fatal(err)
		}
	}
	wantLimit(t, "a third group", attach(2), "-client-max-mcast")
	logged := log.String()
	if h := held(n); h["hostif_over_limit"] != 1 || !strings.Contains(logged, "client over a limit") ||
		!strings.Contains(logged, "-client-max-mcast") {
		t.Fatalf("the refused attach: %v, and the log\n%s\nwants hostif_over_limit 1 and the warning", h, logged)
	}
	if err := attach(0); err != nil {
		t.Fatalf("attaching an attached QP again: %v", err)
	}
	if h := held(n); h["hostif_held_mcast"] != 2 || len(n.dev.Observer().McastGroups()) != 2 {
		t.Fatalf("held %v, groups %v", h, n.dev.Observer().McastGroups())
	}
	// What the client does not hold it cannot detach, nor get a charge
	// back for: a group never attached, a unicast GID, a group twice.
	detach := func(g [16]byte) error {
		_, err := c.Call(abi.KindDetachMcast, &abi.McastReq{H: qp.H, GID: g}, nil, &abi.Empty{})
		return err
	}
	wantCode(t, "detach of a group not attached", detach(gid(5)), abi.CodeInvalid)
	wantCode(t, "detach of a unicast GID", detach(ip.As16()), abi.CodeInvalid)
	_, err := c.Call(abi.KindAttachMcast, &abi.McastReq{H: qp.H, GID: ip.As16()}, nil, &abi.Empty{})
	wantCode(t, "attach of a unicast GID", err, abi.CodeInvalid)
	if h := held(n); h["hostif_held_mcast"] != 2 {
		t.Fatalf("after refused calls: held %v", h)
	}
	if err := detach(gid(0)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "second detach", detach(gid(0)), abi.CodeInvalid)
	if h := held(n); h["hostif_held_mcast"] != 1 {
		t.Fatalf("after a detach and a second: held %v, want 1", h)
	}
	if err := attach(2); err != nil {
		t.Fatalf("after a detach: %v", err)
	}
	call(t, c, abi.KindDestroyQP, &abi.Handle{H: qp.H}, nil, &abi.Empty{})
	if h := held(n); h["hostif_held_mcast"] != 0 || len(n.dev.Observer().McastGroups()) != 0 {
		t.Fatalf("after the destroy: held %v, groups %v", h, n.dev.Observer().McastGroups())
	}
}

// A client at its descriptor limit that opens its event queue (clib
// does at ibv_open_device) is refused as every creating request is: the
// limit's flag named, hostif_over_limit counted, the daemon's warning
// logged once, nothing held; once a descriptor is free the queue opens.
func TestOpenAsyncOverLimit(t *testing.T) {
	n, log := loggedNIC(t, looptest.Get(t).String(), Limits{Client: Quota{ResFDs: 2}})
	c := n.client(t)
	var ch abi.Handle
	fds := call(t, c, abi.KindCreateChannel, &abi.Empty{}, nil, &ch) // the second descriptor
	closeAll(fds)
	_, err := c.Call(abi.KindOpenAsync, &abi.Empty{}, nil, &abi.Empty{})
	wantLimit(t, "open_async at the descriptor limit", err, "-client-max-fds")
	if !strings.Contains(err.Error(), "open_async: ") {
		t.Fatalf("the refusal %q does not name open_async", err)
	}
	if m := held(n); m["hostif_over_limit"] != 1 || m["hostif_held_fds"] != 2 {
		t.Fatalf("after the refusal: %v, want hostif_over_limit 1, hostif_held_fds 2", m)
	}
	logged := log.String()
	if !strings.Contains(logged, "client over a limit") || !strings.Contains(logged, "-client-max-fds") {
		t.Fatalf("the daemon's log does not tell the refusal:\n%s", logged)
	}
	call(t, c, abi.KindDestroyChannel, &abi.Handle{H: ch.H}, nil, &abi.Empty{})
	openAsync(t, c)
	if m := held(n); m["hostif_over_limit"] != 1 || m["hostif_held_fds"] != 2 {
		t.Fatalf("with the queue open: %v, want hostif_over_limit 1, hostif_held_fds 2", m)
	}
}
