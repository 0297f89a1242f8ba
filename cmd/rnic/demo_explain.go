package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rnicd/rnicd/verbs"
)

// explainOneMessage sends one RDMA WRITE of one page from A to B and tells
// what each block of both NICs did for it, from the counters of both
// devices before and after and the QPs' PSNs. It is the one place that
// tells the story from counters; the step-by-step trace (package trace,
// rnic trace) tells it with the events themselves.
func explainOneMessage(w io.Writer, a, b *demoSide, cfg demoConfig) error {
	const size = 4096
	if cfg.size < size {
		return nil // too small a buffer to show segmentation
	}
	mtu := cfg.mtu
	snap := func(s *demoSide) (map[string]uint64, verbs.QPInfo, error) {
		c, err := s.ctx.Counters()
		if err != nil {
			return nil, verbs.QPInfo{}, err
		}
		qps, err := s.ctx.QPs()
		if err != nil {
			return nil, verbs.QPInfo{}, err
		}
		for _, q := range qps {
			if q.QPN == s.qp.QPN {
				return c, q, nil
			}
		}
		return nil, verbs.QPInfo{}, fmt.Errorf("NIC %s: QP 0x%06x not listed", s.name, s.qp.QPN)
	}
	ca0, qa0, err := snap(a)
	if err != nil {
		return err
	}
	cb0, _, err := snap(b)
	if err != nil {
		return err
	}
	demoFill(a.area(0)[:size], 4)
	clear(b.area(0)[:size])
	wr := verbs.SendWR{WRID: 42, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, size)},
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
	if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	wcs := make([]verbs.WC, 1)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	for a.cq.Poll(wcs) == 0 {
		if err := a.cq.Wait(ctx); err != nil {
			return fmt.Errorf("the explained WRITE did not complete: %w", err)
		}
	}
	wc := wcs[0]
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("the explained WRITE completed with %v", &wc)
	}
	if err := demoCheckEqual(b.area(0)[:size], a.area(0)[:size]); err != nil {
		return err
	}
	ca1, qa1, err := snap(a)
	if err != nil {
		return err
	}
	cb1, qb1, err := snap(b)
	if err != nil {
		return err
	}
	da := func(k string) uint64 { return ca1[k] - ca0[k] }
	db := func(k string) uint64 { return cb1[k] - cb0[k] }
	pkts := (size + mtu - 1) / mtu
	firstPSN, lastPSN := qa0.SQPSN, (qa1.SQPSN-1)&0xffffff

	fmt.Fprintf(w, "One %d-byte RDMA WRITE from A to B, block by block (path MTU %d):\n\n", size, mtu)
	fmt.Fprintf(w, "A, requester:\n")
	fmt.Fprintf(w, "  verbs      PostSend: the WR (wr_id %d, lkey 0x%x -> rkey 0x%x at 0x%x) is checked and becomes a WQE in QP 0x%06x's send queue\n",
		wr.WRID, a.mr.LKey, b.mr.RKey, b.mr.Addr, a.qp.QPN)
	fmt.Fprintf(w, "  doorbell   the QP is scheduled on the send pipeline (rnic)\n")
	fmt.Fprintf(w, "  wqe        the WQE engine segments %d bytes by the MTU into %d packets, PSN 0x%06x..0x%06x\n",
		size, pkts, firstPSN, lastPSN)
	fmt.Fprintf(w, "             (RDMA WRITE FIRST with the RETH, MIDDLE..., LAST with AckReq)\n")
	fmt.Fprintf(w, "  dma        the DMA engine reads each packet's payload from the registered memory (lkey 0x%x)\n", a.mr.LKey)
	fmt.Fprintf(w, "  bth/ibudp  BTH (+RETH) in front, ICRC over IP+UDP+BTH+payload behind, UDP to %s:4791\n", b.addr)
	fmt.Fprintf(w, "             sent_pkts +%d\n", da("sent_pkts"))
	fmt.Fprintf(w, "B, responder:\n")
	fmt.Fprintf(w, "  ibudp      rcvd_pkts +%d, ICRC checked (icrc_errors +%d)\n", db("rcvd_pkts"), db("icrc_errors"))
	fmt.Fprintf(w, "  rx         PSN check: each packet the expected one (out_of_seq_request +%d, duplicate_request +%d); expected PSN now 0x%06x\n",
		db("out_of_seq_request"), db("duplicate_request"), qb1.RQPSN)
	fmt.Fprintf(w, "  dma        rkey 0x%x checked for REMOTE_WRITE and bounds, %d bytes written at 0x%x\n", b.mr.RKey, size, b.mr.Addr)
	fmt.Fprintf(w, "  rx         the LAST packet asked for an ACK: ACK for PSN 0x%06x sent (sent_pkts +%d)\n", lastPSN, db("sent_pkts"))
	fmt.Fprintf(w, "A, completer:\n")
	fmt.Fprintf(w, "  rx         the ACK arrives (rcvd_pkts +%d), acknowledges every PSN up to 0x%06x, retires the WQE\n", da("rcvd_pkts"), lastPSN)
	fmt.Fprintf(w, "  cq         CQE written: wr_id %d status %v opcode %v qp 0x%06x; the application polls it\n",
		wc.WRID, wc.Status, wc.Opcode, wc.QPNum)
	if r := da("retransmitted_pkts") + da("local_ack_timeout_err") + db("naks_sent"); r != 0 {
		fmt.Fprintf(w, "  (this time the link lost something: retransmitted_pkts +%d, local_ack_timeout_err +%d, naks_sent +%d)\n",
			da("retransmitted_pkts"), da("local_ack_timeout_err"), db("naks_sent"))
	}
	return nil
}
