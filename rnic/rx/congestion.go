package rx

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// The RX handler's two parts in DCQCN (rnic/flowctl decides, this file
// moves the packets): the notification point, which answers a packet that
// arrived ECN-marked CE with a CNP to the QP that sent it, and the
// reaction point's input, the CNPs that arrive.

// notify is the notification point: p, for qp (locked), arrived with
// ECN = CE. flowctl says whether a CNP goes (at most one per QP per
// np_min_time_between_cnps); it goes to the peer's QP, not ECN-capable,
// with DSCP np_cnp_dscp.
func (h *Handler) notify(qp *qpmgr.QP, p bth.Packet, b *ibudp.Buf, tx qpmgr.TX) {
	send := h.FC.CEReceived(&qp.FC)
	if h.Trace.On() {
		var arg uint32
		if send {
			arg = 1
		}
		h.Trace.Emit(trace.Event{Module: trace.ModFlowCtl, Step: trace.StepCERecv, QPN: qp.QPN, PSN: p.BTH().PSN(),
			Opcode: p.Opcode(), Arg: arg})
	}
	if !send {
		return
	}
	dest, peer := qp.Attr.DestQPN, qp.Dest()
	if qp.Type == ib.QPTypeUD {
		// A UD sender is whoever sent this datagram, from its DETH.
		dest, peer = p.DETH().SrcQP(), b.Peer
	}
	out := tx.Alloc()
	c, err := bth.BuildCNP(out.Room(), dest)
	if err != nil {
		panic("rx: a CNP does not fit a buffer: " + err.Error()) // 32 bytes
	}
	out.N = c.Len()
	out.Peer, out.SrcPort, out.TOS, out.QPN = peer, qp.SrcPort(), h.FC.CNPTOS(), qp.QPN
	if h.Trace.On() {
		h.Trace.Emit(trace.Event{Module: trace.ModFlowCtl, Step: trace.StepCNPSent, QPN: qp.QPN, DestQPN: dest, Opcode: bth.CNP})
	}
	qp.Counters.Inc(ib.SentPkts)
	tx.Send(out)
}

// reactCNP hands a CNP to its QP's reaction point. A CNP for no QP, from
// another address than a connected QP's peer, or without BECN is counted
// as ignored (rp_cnp_ignored), as is every CNP when no congestion control
// runs.
func (h *Handler) reactCNP(p bth.Packet, b *ibudp.Buf) {
	qp := h.QPs.Lookup(p.BTH().DestQP())
	if qp == nil || !p.IsCNP() {
		h.FC.CNPIgnored()
		return
	}
	qp.Lock()
	defer qp.Unlock()
	if qp.Destroyed() || (qp.Type != ib.QPTypeUD && b.Peer.Unmap() != qp.Dest()) {
		h.FC.CNPIgnored()
		return
	}
	if h.Trace.On() {
		h.Trace.Emit(trace.Event{Module: trace.ModFlowCtl, Step: trace.StepCNPRecv, QPN: qp.QPN, Opcode: bth.CNP})
	}
	h.FC.CNPReceived(&qp.FC)
}
