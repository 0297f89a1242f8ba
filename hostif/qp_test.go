package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// clientWithPD is a daemon on a loopback address of the test's and a
// client of it holding a PD.
func clientWithPD(t *testing.T) (*nic, *Client, abi.Handle) {
	t.Helper()
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	return n, c, pd
}

// A QP the client destroys sends first what the client wrote into its
// send ring, though no doorbell told the daemon (a client whose posts
// the polling engine spared rings none, and Debian's mckey destroys its
// QP right after posting its multicast datagrams unsignaled): rxe's QP
// cleanup lets its requester drain too.
func TestDestroyQPSendsUnrungWQEs(t *testing.T) {
	n, c, pd := clientWithPD(t)
	q := loopQP(t, n, c, pd.H)
	before := n.dev.Port().Stats().TxPackets
	for id := range uint64(3) {
		q.write(t, &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}},
			RemoteAddr: 0x18000, RKey: q.mr.RKey}, nil)
	}
	call(t, c, abi.KindDestroyQP, &abi.Handle{H: q.h}, nil, &abi.Empty{})
	// The QP WRITEs to itself: an ACK of its own may go out too, if a
	// WRITE comes back before the QP goes.
	if sent := n.dev.Port().Stats().TxPackets - before; sent < 3 {
		t.Fatalf("the destroyed QP's port sent %d packets, want its 3 WRITEs", sent)
	}
}

// A client that destroys a QP whose send ring holds garbage, with no
// doorbell rung, gets its destroy all the same: the WQEs that do not
// decode are counted (hostif_bad_wqe) and completed in error as a
// doorbell would have them, a producer index past the ring breaks it
// (one count) and nothing of it runs, nothing is sent, and the client's
// next QP works.
func TestDestroyQPGarbageRing(t *testing.T) {
	n, c, pd := clientWithPD(t)
	opcode7 := func(s []byte) { s[8] = 7 }
	for _, tc := range []struct {
		name    string
		fill    func(q *rawQP)
		bad     uint64
		cqes    uint32
		statusA ib.WCStatus // the first completion's
	}{
		{"every slot opcode 7", func(q *rawQP) {
			for id := range uint64(8) {
				q.write(t, &ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}},
					RemoteAddr: 0x18000, RKey: q.mr.RKey}, opcode7)
			}
		}, 8, 8, ib.WCLocQPOpErr},
		{"producer far ahead", func(q *rawQP) { q.sq.SetProducer(1 << 30) }, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := loopQP(t, n, c, pd.H)
			tc.fill(q)
			bad, sent := n.srv.badWQEs.Load(), n.dev.Port().Stats().TxPackets
			call(t, c, abi.KindDestroyQP, &abi.Handle{H: q.h}, nil, &abi.Empty{})
			if got := n.srv.badWQEs.Load() - bad; got != tc.bad {
				t.Fatalf("hostif_bad_wqe moved by %d, want %d", got, tc.bad)
			}
			if got := n.dev.Port().Stats().TxPackets - sent; got != 0 {
				t.Fatalf("the port sent %d packets for a ring of garbage", got)
			}
			if got := q.cq.Producer(); got != tc.cqes {
				t.Fatalf("%d completions, want %d", got, tc.cqes)
			}
			for i := range tc.cqes {
				var wc ib.WC
				abi.GetCQE(q.cq.Slot(i), &wc)
				want := ib.WCWRFlushErr
				if i == 0 {
					want = tc.statusA
				}
				if wc.WRID != uint64(i) || wc.Status != want || wc.QPNum != q.qpn {
					t.Fatalf("completion %d: %v, want wr_id %d %v", i, &wc, i, want)
				}
			}
		})
	}
	q := loopQP(t, n, c, pd.H)
	var cons uint32
	q.post(t, c, &ib.SendWR{WRID: 9, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x10000, Length: 8, LKey: q.mr.LKey}}, RemoteAddr: 0x18000, RKey: q.mr.RKey}, nil)
	if wc := poll(t, q.cq, &cons); wc.WRID != 9 || wc.Status != ib.WCSuccess {
		t.Fatalf("the next QP's completion %v, want wr_id 9 SUCCESS", &wc)
	}
}
