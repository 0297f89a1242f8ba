package verbs_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// udQP makes a UD QP in RTS with qkey, a CQ and 4 KiB registered.
func udQP(t testing.TB, c *verbs.Context, qkey uint32) (*verbs.QP, side) {
	qp, sd := newQP(t, c, verbs.QPTypeUD, verbs.AccessLocalWrite)
	for _, s := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: qkey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	return qp, sd
}

// Through the host interface: a QP attached to a group (ibv_attach_mcast)
// takes a datagram sent to the group's AH with QPN 0xFFFFFF; wrong
// attaches are refused with the errno libibverbs gives.
func TestLocalMulticast(t *testing.T) {
	ipB := looptest.Get(t)
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, ipB)
	b4 := ipB.As4()
	gid := verbs.GID(netip.AddrFrom4([4]byte{239, b4[1], b4[2], b4[3]}).As16()) // IPv4-mapped, as rdma_cm's MGID
	qa, sa := udQP(t, a, 0x1234)
	qb, sb := udQP(t, b, 0x1234)
	if err := qb.AttachMcast(gid); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: []verbs.SGE{sb.mr.SGE(0, 1064)}}}); err != nil {
		t.Fatal(err)
	}
	copy(sa.mr.Buf, "to the group")
	wr := verbs.SendWR{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sa.mr.SGE(0, 12)},
		AH: &verbs.AH{DGID: gid, HopLimit: 1}, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x1234}
	if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, sa.cq); wc.Status != verbs.WCSuccess || wc.WRID != 9 {
		t.Fatalf("send completion %v", &wc)
	}
	wc := pollOne(t, sb.cq)
	if wc.Status != verbs.WCSuccess || wc.WRID != 5 || wc.ByteLen != 40+12 || wc.SrcQP != qa.QPN || wc.QPNum != qb.QPN {
		t.Fatalf("receive completion %v", &wc)
	}
	if got := sb.mr.Buf[40:52]; !bytes.Equal(got, []byte("to the group")) {
		t.Fatalf("received %q", got)
	}

	rc, _ := rcQP(t, b)
	for _, c := range []struct {
		qp    *verbs.QP
		gid   verbs.GID
		errno syscall.Errno
		want  string
	}{
		{rc, gid, syscall.EINVAL, "only UD QPs"},
		{qb, verbs.GID(netip.MustParseAddr("::ffff:10.1.2.3").As16()), syscall.EINVAL, "not a multicast GID"},
	} {
		err := c.qp.AttachMcast(c.gid)
		if !errors.Is(err, c.errno) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("attach %v: %v, want %v %q", netip.AddrFrom16(c.gid), err, c.errno, c.want)
		}
	}
	if err := qb.DetachMcast(gid); err != nil {
		t.Fatal(err)
	}
	if err := qb.DetachMcast(gid); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "not attached") {
		t.Fatalf("second detach: %v", err)
	}
}
