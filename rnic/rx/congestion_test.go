package rx_test

import (
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// stopped is a clock that stands still: the reaction point's state is
// what the CNPs made it, not what its timers made of it since.
type stopped struct{}

func (stopped) Nanotime() int64 { return 1e9 }

// withCC gives the handler a Flow Control Manager running cc.
func (r *rcQP) withCC(t *testing.T, cc string) *flowctl.Manager {
	t.Helper()
	alg, err := flowctl.NewAlgorithm(cc, flowctl.DefaultParams(), 0)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := flowctl.New(flowctl.Config{Algorithm: alg, Clock: stopped{}})
	if err != nil {
		t.Fatal(err)
	}
	r.h.FC = fc
	return fc
}

// receive hands the handler roce from peer with ECN e.
func (r *rcQP) receive(tx *sent, roce []byte, peer netip.Addr, e ibudp.ECN) {
	b := ibudp.NewBuf()
	b.SetRoCE(roce)
	b.Peer = peer
	b.SetECN(e)
	r.h.Receive(b, tx)
	r.h.Resp.Ack.Flush(tx)
}

func cnpTo(qpn uint32) []byte {
	b := make([]byte, bth.CNPPacketLen)
	bth.BuildCNP(b, qpn)
	return b
}

func fcCounters(fc *flowctl.Manager) map[string]uint64 {
	m := map[string]uint64{}
	fc.Counters().Each(func(n string, v uint64) { m[n] = v })
	return m
}

// Notification point: a packet for the QP that arrives CE is answered by
// a CNP to the peer's QP, at the peer, with DSCP 48 and not ECN-capable;
// one that arrives ECT(0) is not.
func TestCEAnsweredByCNP(t *testing.T) {
	r := newRCQP(t)
	fc := r.withCC(t, "dcqcn")
	var tx sent
	r.receive(&tx, ackFor(r.qp.QPN, 0x0f, 0), r.peer, ibudp.ECT0)
	if len(tx.bufs) != 0 {
		t.Fatalf("an ECT(0) packet answered with %d packets", len(tx.bufs))
	}
	r.receive(&tx, ackFor(r.qp.QPN, 0x0f, 0), r.peer, ibudp.CE)
	if len(tx.bufs) != 1 {
		t.Fatalf("a CE packet answered with %d packets", len(tx.bufs))
	}
	b := tx.bufs[0]
	p, err := bth.Parse(b.RoCE())
	if err != nil || !p.IsCNP() || p.Len() != bth.CNPPacketLen || p.BTH().DestQP() != 0x99 || p.BTH().PKey() != 0xffff ||
		p.BTH().PSN() != 0 || b.Peer != r.peer || b.TOS != 48<<2 || b.SrcPort != r.qp.SrcPort() {
		t.Fatalf("answer % x to %v TOS %#x: %v", b.RoCE(), b.Peer, b.TOS, err)
	}
	if c := fcCounters(fc); c["np_ecn_marked_roce_packets"] != 1 || c["np_cnp_sent"] != 1 {
		t.Fatalf("counters %v", c)
	}
	// A CE packet the QP does not take (from another address) is no
	// congestion of this QP's: dropped before the notification point.
	tx.bufs = nil
	r.receive(&tx, ackFor(r.qp.QPN, 0x0f, 0), netip.MustParseAddr("127.0.0.3"), ibudp.CE)
	if len(tx.bufs) != 0 || fcCounters(fc)["np_ecn_marked_roce_packets"] != 1 {
		t.Fatalf("a stranger's CE packet: %d answers, %v", len(tx.bufs), fcCounters(fc))
	}
}

// Reaction point: the peer's CNP paces the QP; a CNP from elsewhere, for
// no QP, or without BECN is counted as ignored and changes nothing.
func TestCNPReceived(t *testing.T) {
	r := newRCQP(t)
	fc := r.withCC(t, "dcqcn")
	var tx sent
	bad := cnpTo(r.qp.QPN)
	bad[4] &^= 0x40 // BECN
	r.receive(&tx, cnpTo(r.qp.QPN), netip.MustParseAddr("127.0.0.3"), ibudp.NotECT)
	r.receive(&tx, cnpTo(r.qp.QPN+1), r.peer, ibudp.NotECT)
	r.receive(&tx, bad, r.peer, ibudp.NotECT)
	if c := fcCounters(fc); c["rp_cnp_ignored"] != 3 || c["rp_cnp_handled"] != 0 || fc.State(&r.qp.FC).Paced {
		t.Fatalf("three CNPs to ignore: %v, %+v", c, fc.State(&r.qp.FC))
	}
	r.receive(&tx, cnpTo(r.qp.QPN), r.peer, ibudp.NotECT)
	st := fc.State(&r.qp.FC)
	if c := fcCounters(fc); c["rp_cnp_handled"] != 1 || !st.Paced || st.Alpha != 1023 || len(tx.bufs) != 0 {
		t.Fatalf("the peer's CNP: %v, %+v, %d answers", c, st, len(tx.bufs))
	}
	if r.qp.Counters.Get(ib.DropMalformed) != 0 || r.qp.Counters.Get(ib.DropUnknownQP) != 0 {
		t.Fatal("a CNP counted as a drop")
	}
	// Without congestion control, every CNP is ignored and a CE packet
	// only counted.
	r = newRCQP(t)
	fc = r.withCC(t, "none")
	r.receive(&tx, cnpTo(r.qp.QPN), r.peer, ibudp.NotECT)
	r.receive(&tx, ackFor(r.qp.QPN, 0x0f, 0), r.peer, ibudp.CE)
	if c := fcCounters(fc); c["rp_cnp_ignored"] != 1 || c["np_ecn_marked_roce_packets"] != 1 || c["np_cnp_sent"] != 0 || len(tx.bufs) != 0 {
		t.Fatalf("-cc none: %v, %d answers", c, len(tx.bufs))
	}
}
