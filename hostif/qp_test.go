package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/hostif/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
)

// A QP the client destroys sends first what the client wrote into its
// send ring, though no doorbell told the daemon (a client whose posts
// the polling engine spared rings none, and Debian's mckey destroys its
// QP right after posting its multicast datagrams unsignaled): rxe's QP
// cleanup lets its requester drain too.
func TestDestroyQPSendsUnrungWQEs(t *testing.T) {
	n := newNIC(t, looptest.Get(t).String())
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
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
