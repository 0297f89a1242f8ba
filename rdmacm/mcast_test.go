package rdmacm

import (
	"bytes"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// mckey's sequence in Go: each side resolves the group's address, makes
// its UD QP and joins; the join's UD param (AH to ::ffff:GROUP, QPN
// 0xFFFFFF, RDMA_UDP_QKEY) sends a datagram that the receiver's attached
// QP takes. Wrong joins are refused with librdmacm's errnos.
func TestJoinMulticast(t *testing.T) {
	recv, send := newSide(t), newSide(t)
	a := recv.ch.devs[0].addr.As4()
	group := netip.AddrFrom4([4]byte{239, a[1], a[2], a[3]})
	var joins [2]*Event
	var ids [2]*ID
	for i, s := range []*side{recv, send} {
		id := s.ch.CreateIDIn(PSUDP)
		if err := id.JoinMulticast(group, false); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("join before a bind: %v", err)
		}
		if err := id.ResolveAddr(s.ch.devs[0].addr, netip.AddrPortFrom(group, 0)); err != nil {
			t.Fatal(err)
		}
		s.event(t, EventAddrResolved)
		s.qp(t, id)
		if i == 0 {
			if err := id.QP.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{recv.mr.SGE(0, 140)}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := id.JoinMulticast(group, i == 1); err != nil {
			t.Fatal(err)
		}
		joins[i], ids[i] = s.event(t, EventMulticastJoin), id
		ud := joins[i].UD
		if joins[i].ID != id || ud == nil || ud.QPN != 0xFFFFFF || ud.QKey != UDPQKey || ud.AH.DGID != verbs.GID(group.As16()) ||
			ud.AH.HopLimit != 64 {
			t.Fatalf("join event %+v, UD %+v", joins[i], ud)
		}
	}
	copy(send.mr.Buf, "hello, group")
	ud := joins[1].UD
	if err := ids[1].QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{send.mr.SGE(0, 12)}, AH: &ud.AH, RemoteQPN: ud.QPN, RemoteQKey: ud.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := send.wc(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %+v", wc)
	}
	if wc := recv.wc(t); wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 52 || wc.SrcQP != ids[1].QP.QPN ||
		!bytes.Equal(recv.mr.Buf[40:52], []byte("hello, group")) {
		t.Fatalf("receive: %+v %q", wc, recv.mr.Buf[40:52])
	}

	id := ids[0]
	for _, c := range []struct {
		g    string
		want syscall.Errno
	}{
		{group.String(), syscall.EADDRINUSE},
		{"10.1.2.3", syscall.EINVAL},
		{"ff0e::1", syscall.EOPNOTSUPP},
	} {
		if err := id.JoinMulticast(netip.MustParseAddr(c.g), false); !errors.Is(err, c.want) {
			t.Errorf("join %s: %v, want %v", c.g, err, c.want)
		}
	}
	if err := id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := id.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("second leave: %v", err)
	}
	// Left: the QP is detached, as the daemon says when asked again.
	if err := id.QP.DetachMcast(verbs.GID(group.As16())); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("detach after the leave: %v", err)
	}
}
