package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// end is one side of the connection: a NIC, its memory and one RC QP.
type end struct {
	ctx *verbs.Context
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

// newEnd allocates what one side needs, as an ibverbs program does: a
// protection domain, memory the NIC can reach registered as an MR, a
// completion queue and an RC queue pair.
func newEnd(ctx *verbs.Context) *end {
	pd, err := ctx.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	// The NIC reads and writes this memory itself, so it must come from
	// Context.Alloc: memory the NIC shares with this process. A slice
	// from make would be refused (verbs.ErrNotShared).
	buf, err := ctx.Alloc(4096)
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil)
	if err != nil {
		log.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	return &end{ctx: ctx, mr: mr, cq: cq, qp: qp}
}

// connect moves e's QP to RTS towards the peer's QP. A real application
// learns the peer's GID, QP number and first PSN over a channel of its own
// (perftest and the ibv_*_pingpong tools use TCP; rdma_cm does it for
// them); here both ends are in this process.
func (e *end) connect(peer *end) {
	port, err := peer.ctx.QueryPort()
	if err != nil {
		log.Fatal(err)
	}
	const psn = 100 // any 24-bit number, as long as both ends agree
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		// RESET -> INIT: which remote operations the QP accepts.
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		// INIT -> RTR: who the peer is (its GID and QP number) and the
		// PSN its first packet carries. The QP can receive from here on.
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN, RQPSN: psn,
			AH: verbs.AH{DGID: port.GIDs[port.GIDIndex]}, MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		// RTR -> RTS: this side's first PSN and its retry budget.
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			log.Fatalf("modify QP to %v: %v", s.attr.State, err)
		}
	}
}

// next returns e's next completion: Poll takes what is there without
// blocking, Wait sleeps until the NIC writes one.
func (e *end) next() verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for e.cq.Poll(wc) == 0 {
		if err := e.cq.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	return wc[0]
}

// Two NICs in this process, one RC connection between them, an RDMA WRITE
// and a SEND: the smallest complete verbs program. With a running rnicd,
// verbs.Open("rnic0") takes the place of OpenLocal and nothing else
// changes.
func Example() {
	var ends [2]*end
	for i, addr := range []string{"127.3.9.1", "127.3.9.2"} {
		ctx, err := verbs.OpenLocal(verbs.LocalConfig{Addr: netip.MustParseAddr(addr), MTU: 1024})
		if err != nil {
			log.Fatal(err)
		}
		defer ctx.Close()
		ends[i] = newEnd(ctx)
	}
	a, b := ends[0], ends[1]
	a.connect(b)
	b.connect(a)

	// RDMA WRITE: a's bytes land in b's memory, at the address and with
	// the rkey b gave a. b's CPU takes no part: only a gets a completion.
	copy(a.mr.Buf, "hello, rnicd")
	err := a.qp.PostSend([]verbs.SendWR{{
		WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{a.mr.SGE(0, 12)},
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey,
	}})
	if err != nil {
		log.Fatal(err)
	}
	wc := a.next()
	fmt.Println("a:", wc.WRID, wc.Opcode, wc.Status)
	fmt.Printf("b's memory: %q\n", b.mr.Buf[:12])

	// SEND: b first posts a receive WR naming where the message goes;
	// both ends get a completion.
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{b.mr.SGE(1024, 64)}}}); err != nil {
		log.Fatal(err)
	}
	copy(a.mr.Buf[64:], "ping")
	err = a.qp.PostSend([]verbs.SendWR{{
		WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(64, 4)},
	}})
	if err != nil {
		log.Fatal(err)
	}
	wc = a.next()
	fmt.Println("a:", wc.WRID, wc.Opcode, wc.Status)
	wc = b.next()
	fmt.Println("b:", wc.WRID, wc.Opcode, wc.Status, wc.ByteLen, "bytes:", string(b.mr.Buf[1024:1024+wc.ByteLen]))

	// A WRITE with a wrong rkey: b's NIC refuses it, a's completion says
	// why by name, and a's QP goes to ERR, as on any RDMA NIC.
	err = a.qp.PostSend([]verbs.SendWR{{
		WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{a.mr.SGE(0, 12)},
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey + 1,
	}})
	if err != nil {
		log.Fatal(err)
	}
	wc = a.next()
	fmt.Println("a:", wc.WRID, wc.Opcode, wc.Status)

	// Output:
	// a: 1 RDMA_WRITE SUCCESS
	// b's memory: "hello, rnicd"
	// a: 3 SEND SUCCESS
	// b: 2 RECV SUCCESS 4 bytes: ping
	// a: 4 RDMA_WRITE REM_ACCESS_ERR
}
