package rnic_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/netif"
)

// mcastGID is a multicast GID no concurrent test uses: the IPv4-mapped
// 239.x.y.z of the test's own 127.x.y.z, as rdma_cm makes an MGID.
func mcastGID(a netip.Addr) ([16]byte, netip.Addr) {
	b := a.Unmap().As4()
	g := netip.AddrFrom4([4]byte{239, b[1], b[2], b[3]})
	return netif.GIDFromAddr(g), g
}

// A UD SEND to a multicast AH (DQPN 0xFFFFFF) reaches every QP attached
// to the group on the receiving device, a copy each, with the GRH's
// destination the group; a QP of another Q_Key drops it, counted; a QP
// detached gets no more; a destroyed QP leaves its groups.
func TestMulticastUD(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUD, mtu: 1024})
	a, b := p.a, p.b
	gid, group := mcastGID(b.dev.QueryPort().Addr)
	qb2 := b.createQP(pairOpts{typ: ib.QPTypeUD, mtu: 1024, sendWR: 16})
	b.connect(qb2, a, p.qa, pairOpts{typ: ib.QPTypeUD, mtu: 1024}, 0)
	other := b.createQP(pairOpts{typ: ib.QPTypeUD, mtu: 1024, sendWR: 16})
	b.connect(other, a, p.qa, pairOpts{typ: ib.QPTypeUD, mtu: 1024}, 0)
	if err := b.dev.ModifyQP(other, &ib.QPAttr{QKey: qkey + 1}, ib.AttrQKey); err != nil {
		t.Fatal(err)
	}
	for _, qp := range []*rnic.QP{p.qb, qb2, other, p.qb} { // the second attach of qb changes nothing
		if err := b.dev.AttachMcast(qp, gid); err != nil {
			t.Fatal(err)
		}
	}
	if g := b.dev.Observer().McastGroups(); len(g) != 1 || g[0].Group != group || len(g[0].QPNs) != 3 {
		t.Fatalf("groups %+v", g)
	}
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 1, SGL: []ib.SGE{sge(b, 0, 1064)}})
	mustRecv(t, b, qb2, ib.RecvWR{WRID: 2, SGL: []ib.SGE{sge(b, 2048, 1064)}})
	mustRecv(t, b, other, ib.RecvWR{WRID: 3, SGL: []ib.SGE{sge(b, 4096, 1064)}})
	fill(a.mem[:100], 7)
	ah := &ib.AH{DGID: gid, HopLimit: 1}
	send := func(wrid uint64) {
		t.Helper()
		mustPost(t, a, p.qa, ib.SendWR{WRID: wrid, Opcode: ib.WRSendWithImm, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(a, 0, 100)}, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: qkey, Imm: 0x1234})
		checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: wrid, Opcode: ib.WCSend, ByteLen: 100, QPNum: p.qa.QPN, WCFlags: ib.WCFlagWithImm})
	}
	send(10)
	got := map[uint32]ib.WC{}
	for _, wc := range b.poll(2, 5*time.Second) {
		got[wc.QPNum] = wc
	}
	for i, qp := range []*rnic.QP{p.qb, qb2} {
		checkWC(t, got[qp.QPN], ib.WC{WRID: uint64(i + 1), Opcode: ib.WCRecv, ByteLen: 140, QPNum: qp.QPN,
			SrcQP: p.qa.QPN, WCFlags: ib.WCFlagGRH | ib.WCFlagWithImm, Imm: 0x1234})
		off := i * 2048
		sameBytes(t, "multicast payload", b.mem[off+40:off+140], a.mem[:100])
		grh := b.mem[off : off+40]
		if !bytes.Equal(grh[32:36], a.dev.QueryPort().Addr.Unmap().AsSlice()) || !bytes.Equal(grh[36:40], group.AsSlice()) {
			t.Fatalf("GRH area % x: want source %v, destination %v", grh, a.dev.QueryPort().Addr, group)
		}
	}
	b.noMore(50 * time.Millisecond)
	if c := counter(b, "drop_bad_qkey"); c != 1 {
		t.Fatalf("drop_bad_qkey = %d, want 1 (the QP of another Q_Key)", c)
	}

	// qb2 detached: only qb takes the next one.
	if err := b.dev.DetachMcast(qb2, gid); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 4, SGL: []ib.SGE{sge(b, 0, 1064)}})
	send(11)
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 4, Opcode: ib.WCRecv, ByteLen: 140, QPNum: p.qb.QPN,
		SrcQP: p.qa.QPN, WCFlags: ib.WCFlagGRH | ib.WCFlagWithImm, Imm: 0x1234})
	b.noMore(50 * time.Millisecond)
	if err := b.dev.DetachMcast(qb2, gid); !errors.Is(err, rnic.ErrNotAttached) {
		t.Fatalf("second detach: %v", err)
	}

	// Destroying the attached QPs takes them off; the group goes with the last.
	b.dev.DestroyQP(other)
	if g := b.dev.Observer().McastGroups(); len(g) != 1 || len(g[0].QPNs) != 1 || g[0].QPNs[0] != p.qb.QPN {
		t.Fatalf("groups after destroy: %+v", g)
	}
	b.dev.DestroyQP(p.qb)
	if g := b.dev.Observer().McastGroups(); len(g) != 0 {
		t.Fatalf("groups after the last QP went: %+v", g)
	}
	send(12)
	b.noMore(100 * time.Millisecond)
}

// Attaches that break a rule are refused with the reason; the limits are
// rxe's max_mcast_qp_attach and the port's groups.
func TestMulticastAttachRefused(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUD, mtu: 1024})
	b := p.b
	gid, group := mcastGID(b.dev.QueryPort().Addr)
	rc := b.createQP(pairOpts{typ: ib.QPTypeRC, sendWR: 16})
	for _, c := range []struct {
		qp   *rnic.QP
		gid  [16]byte
		want string
	}{
		{rc, gid, "only UD QPs"},
		{p.qb, netif.GIDFromAddr(b.dev.QueryPort().Addr), "not a multicast GID"},
		{p.qb, netip.MustParseAddr("ff0e::1").As16(), "not of the port's address family"},
	} {
		if err := b.dev.AttachMcast(c.qp, c.gid); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("attach %v: %v, want %q", netip.AddrFrom16(c.gid), err, c.want)
		}
	}
	if err := b.dev.DetachMcast(p.qb, gid); !errors.Is(err, rnic.ErrNotAttached) {
		t.Errorf("detach of a QP never attached: %v", err)
	}

	var qps []*rnic.QP
	for range rnic.MaxMcastQPAttach + 1 {
		qp, err := b.dev.CreateQP(rnic.QPInitAttr{PD: b.pd, Type: ib.QPTypeUD, SendCQ: b.cq, RecvCQ: b.cq,
			Caps: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, qp)
	}
	for i, qp := range qps {
		err := b.dev.AttachMcast(qp, gid)
		if i < rnic.MaxMcastQPAttach && err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		if i == rnic.MaxMcastQPAttach && (!errors.Is(err, rnic.ErrMcastLimit) || !strings.Contains(err.Error(), "max_mcast_qp_attach")) {
			t.Fatalf("attach past max_mcast_qp_attach: %v", err)
		}
	}
	// The other groups: 238.y.z.i, of this test's 127.x.y.z.
	g4 := group.As4()
	g4[0], g4[1], g4[2] = 238, g4[2], g4[3]
	for i := 1; i < rnic.MaxMcastGroups; i++ {
		g4[3] = byte(i)
		if err := b.dev.AttachMcast(p.qb, netif.GIDFromAddr(netip.AddrFrom4(g4))); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	g4[3]++
	if err := b.dev.AttachMcast(p.qb, netif.GIDFromAddr(netip.AddrFrom4(g4))); !errors.Is(err, rnic.ErrMcastLimit) || !strings.Contains(err.Error(), "max_mcast_grp") {
		t.Fatalf("attach past max_mcast_grp: %v", err)
	}
	if n := len(b.dev.Observer().McastGroups()); n != rnic.MaxMcastGroups {
		t.Fatalf("%d groups, want %d", n, rnic.MaxMcastGroups)
	}
}

// A QP destroyed right after its application posted unsignaled
// datagrams sends them first, as rxe's cleanup drains its requester:
// Debian's mckey posts its 10 SENDs and destroys its QP at once. Here the
// send pipeline is busy when the 5 are posted and has not seen them on
// its run list when the destroy comes.
func TestDestroyQPSendsPosted(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUD, mtu: 1024})
	a, b := p.a, p.b
	for i := range 5 {
		mustRecv(t, b, p.qb, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{sge(b, 0, 1064)}})
	}
	ah := &ib.AH{DGID: netif.GIDFromAddr(b.dev.QueryPort().Addr), HopLimit: 64}
	release := a.dev.HoldSend()
	for i := range 5 {
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{sge(a, 0, 16)},
			AH: ah, RemoteQPN: p.qb.QPN, RemoteQKey: qkey})
	}
	a.dev.ForgetRunQueue()
	done := make(chan struct{})
	go func() {
		a.dev.DestroyQP(p.qa)
		close(done)
	}()
	// Without the drain the destroy ends here, before the pipeline is free.
	select {
	case <-done:
		t.Fatal("DestroyQP returned while the send pipeline was busy: it did not wait to send what was posted")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	<-done
	wcs := b.poll(5, 5*time.Second)
	for i, wc := range wcs {
		checkWC(t, wc, ib.WC{WRID: uint64(i), Opcode: ib.WCRecv, ByteLen: 40 + 16, QPNum: p.qb.QPN, SrcQP: p.qa.QPN, WCFlags: ib.WCFlagGRH})
	}
}

// The destroy's drain is bounded whatever the client posted: a UC QP
// whose send queue holds 8 WRITEs of 1 MiB at MTU 256 (32768 packets,
// with no window to stop them) sends at most 257 turns of 64 packets
// before DestroyQP returns.
func TestDestroyQPDrainBounded(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUC, mtu: 256, memLen: 1 << 20})
	a := p.a
	before := a.dev.Observer().Counters()["sent_pkts"]
	release := a.dev.HoldSend()
	for i := range 8 {
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge(a, 0, 1<<20)},
			RemoteAddr: memVA, RKey: p.b.mr.RKey})
	}
	a.dev.ForgetRunQueue()
	release()
	if err := a.dev.DestroyQP(p.qa); err != nil {
		t.Fatal(err)
	}
	const bound = (ib.MaxQPWR/64 + 1) * 64
	if sent := a.dev.Observer().Counters()["sent_pkts"] - before; sent > bound {
		t.Fatalf("the destroy sent %d packets, more than the drain's %d", sent, bound)
	}
	t.Logf("the destroy sent %d packets", a.dev.Observer().Counters()["sent_pkts"]-before)
}
