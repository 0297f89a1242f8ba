package rnic_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// recvMAD waits for a MAD on n's QP1.
func recvMAD(t *testing.T, n *node, timeout time.Duration) (mad []byte, from string, srcQP uint32, got int) {
	t.Helper()
	g := n.dev.GSI()
	mad = make([]byte, rnic.MADLen)
	deadline := time.After(timeout)
	for {
		if a, qp, k, ok := g.RecvMAD(mad); ok {
			return mad, a.String(), qp, k
		}
		select {
		case <-g.Ready():
		case <-deadline:
			return nil, "", 0, 0
		}
	}
}

// QP1 carries a 256-byte MAD from one device's GSI to the other's as a UD
// SEND with the GSI Q_Key from source QP 1; a UD datagram to QP1 with any
// other Q_Key is dropped and counted, as rxe's check_keys drops it.
func TestGSISendsAndReceivesMADs(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUD, mtu: 1024})
	a, b := p.a, p.b
	mad := make([]byte, rnic.MADLen)
	fill(mad, 7)
	for i := range 3 { // more than once: the receive slots are reposted
		mad[0] = byte(i)
		if err := a.dev.GSI().SendMAD(b.dev.QueryPort().Addr, mad); err != nil {
			t.Fatal(err)
		}
		got, from, srcQP, n := recvMAD(t, b, 5*time.Second)
		if got == nil {
			t.Fatalf("MAD %d never arrived", i)
		}
		if !bytes.Equal(got, mad) || from != a.dev.QueryPort().Addr.String() || srcQP != rnic.GSIQPN || n != rnic.MADLen {
			t.Fatalf("MAD %d from %s QP %d, %d bytes, equal %v", i, from, srcQP, n, bytes.Equal(got, mad))
		}
	}
	if err := a.dev.GSI().SendMAD(b.dev.QueryPort().Addr, mad[:100]); err == nil {
		t.Error("a 100-byte MAD was sent")
	}

	// An application's UD QP sends to QP1 with its own Q_Key: dropped.
	ah := &ib.AH{DGID: netif.GIDFromAddr(b.dev.QueryPort().Addr), HopLimit: 64}
	before := counter(b, "drop_bad_qkey")
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, rnic.MADLen)}, AH: ah, RemoteQPN: rnic.GSIQPN, RemoteQKey: qkey})
	a.poll(1, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for counter(b, "drop_bad_qkey") == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c := counter(b, "drop_bad_qkey"); c != before+1 {
		t.Errorf("drop_bad_qkey %d, want %d", c, before+1)
	}
	if got, _, _, _ := recvMAD(t, b, 50*time.Millisecond); got != nil {
		t.Error("QP1 received a datagram with an application's Q_Key")
	}
	// Nor with the GSI Q_Key: it is a controlled Q_Key (high bit set), so
	// the requester sends the QP's own instead (IBTA 10.2.5, as rxe does),
	// and no application can pass itself off as a CM.
	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, rnic.MADLen)}, AH: ah, RemoteQPN: rnic.GSIQPN, RemoteQKey: rnic.GSIQKey})
	a.poll(1, 5*time.Second)
	for counter(b, "drop_bad_qkey") == before+1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c := counter(b, "drop_bad_qkey"); c != before+2 {
		t.Errorf("drop_bad_qkey %d, want %d", c, before+2)
	}
	if got, _, _, _ := recvMAD(t, b, 50*time.Millisecond); got != nil {
		t.Error("QP1 received an application's datagram sent with the GSI Q_Key")
	}
}

// Applications cannot create, post to, modify or destroy QP1, nor see it
// among their QPs.
func TestGSIIsNotTheApplications(t *testing.T) {
	addr, _ := nextPair(t)
	n := newNode(t, addr, 1024, 1<<16, false, 1)
	gsi := n.dev.GSI().QP()
	if gsi.QPN != rnic.GSIQPN || gsi.Type != ib.QPTypeUD || n.dev.QueryQP(gsi).QKey != rnic.GSIQKey ||
		gsi.State() != ib.QPSRTS {
		t.Fatalf("QP1: QPN %d type %v Q_Key %#x state %v", gsi.QPN, gsi.Type, n.dev.QueryQP(gsi).QKey, gsi.State())
	}
	for i := 0; i < 40; i++ {
		qp, err := n.dev.CreateQP(rnic.QPInitAttr{PD: n.pd, Type: ib.QPTypeUD, SendCQ: n.cq, RecvCQ: n.cq,
			Caps: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if qp.QPN < 0x11 {
			t.Fatalf("an application got QPN %#x", qp.QPN)
		}
	}
	for _, qp := range n.dev.QPs() {
		if qp.QPN == rnic.GSIQPN {
			t.Fatal("QPs lists QP1")
		}
	}
	wr := ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{sge(n, 0, 8)},
		AH: &ib.AH{DGID: netif.GIDFromAddr(n.dev.QueryPort().Addr)}, RemoteQPN: 1, RemoteQKey: rnic.GSIQKey}
	for what, err := range map[string]error{
		"PostSend":  n.dev.PostSend(gsi, []ib.SendWR{wr}),
		"PostRecv":  n.dev.PostRecv(gsi, []ib.RecvWR{{SGL: []ib.SGE{sge(n, 0, 296)}}}),
		"ModifyQP":  n.dev.ModifyQP(gsi, &ib.QPAttr{State: ib.QPSErr}, ib.AttrState),
		"DestroyQP": n.dev.DestroyQP(gsi),
	} {
		if !errors.Is(err, rnic.ErrGSI) {
			t.Errorf("%s on QP1: %v, want ErrGSI", what, err)
		}
	}
	if gsi.State() != ib.QPSRTS {
		t.Errorf("QP1 in %v after the refused verbs", gsi.State())
	}
}

// Datagrams to QP1 that are not MADs, from a bare port that forges them
// with the GSI Q_Key: one longer than a MAD is skipped and counted, one
// shorter comes with its true length for the CM to refuse, and the MAD
// behind them still arrives.
func TestGSIOddDatagrams(t *testing.T) {
	aa, ab := nextPair(t)
	b := newNode(t, ab, 1024, 1<<16, false, 1)
	forger, err := ibudp.Open(ibudp.Config{Addr: aa, MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	send := func(payload int, first byte) {
		t.Helper()
		buf := ibudp.NewBuf()
		p, err := bth.Build(buf.Room(), bth.UDSendOnly, payload)
		if err != nil {
			t.Fatal(err)
		}
		p.BTH().Encode(&bth.BTHFields{Opcode: bth.UDSendOnly, PadCount: bth.PadFor(payload), PKey: bth.DefaultPKey, DestQP: rnic.GSIQPN})
		p.DETH().Encode(rnic.GSIQKey, rnic.GSIQPN)
		pl := p.Payload()
		for i := range pl {
			pl[i] = first + byte(i)
		}
		buf.N, buf.Peer = p.Len(), ab
		if err := forger.Send([]*ibudp.Buf{buf}); err != nil {
			t.Fatal(err)
		}
	}
	send(300, 1)
	send(100, 2)
	send(rnic.MADLen, 3)
	got, _, srcQP, n := recvMAD(t, b, 5*time.Second)
	if got == nil || n != 100 || got[0] != 2 || got[99] != 101 || got[100] != 0 || srcQP != rnic.GSIQPN {
		t.Fatalf("short datagram: n %d, first bytes % x", n, got[:4])
	}
	got, _, _, n = recvMAD(t, b, 5*time.Second)
	if got == nil || n != rnic.MADLen || got[0] != 3 || got[255] != 2 {
		t.Fatalf("MAD after the odd ones: n %d", n)
	}
	if e := b.dev.GSI().RecvErrors.Load(); e != 1 {
		t.Errorf("RecvErrors %d, want 1 (the 300-byte datagram)", e)
	}
}
