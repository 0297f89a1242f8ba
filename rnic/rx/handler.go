package rx

import (
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Handler is the RX packet handler of one device (rxe_recv.c): it checks
// every packet that arrives (rxe_rcv) and hands a request to the
// responder, an ACK or a response to the completer, by its opcode, as
// rxe_rcv queues a packet to a QP's responder or completer task. It
// answers ECN-marked packets (congestion.go) itself and keeps no QP
// state. It is used by the receive pipeline goroutine only; its Resp and
// Comp say which of their methods run elsewhere.
type Handler struct {
	QPs      *qpmgr.Table
	Counters *qpmgr.Counters
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// FC is the device's Flow Control Manager, told of the CNPs that
	// arrive (reaction point) and of the packets marked CE, which it may
	// answer with a CNP (notification point; congestion.go). Required.
	FC *flowctl.Manager
	// Resp takes the requests, for which the QP is the responder.
	Resp Responder
	// Comp takes the ACKs and responses to the QP's own requests.
	Comp Completer
}

// Receive handles one packet; packets it answers with go to tx.
func (h *Handler) Receive(b *ibudp.Buf, tx qpmgr.TX) {
	h.Counters.Inc(ib.RcvdPkts)
	if b.ICRC == ibudp.ICRCCorrupted {
		h.drop(nil, bth.Packet{}, ib.DropCorrupted)
		return
	}
	p, err := bth.Parse(b.RoCE())
	if err != nil {
		h.drop(nil, bth.Packet{}, ib.DropMalformed)
		return
	}
	op := p.Opcode()
	if op.Transport() == bth.TransportCNP {
		h.reactCNP(p, b)
		return
	}
	qp := h.QPs.Lookup(p.BTH().DestQP())
	if qp == nil {
		h.drop(nil, p, ib.DropUnknownQP)
		return
	}
	h.deliver(qp, p, b, tx)
}

// MulticastQPN is the destination QPN of every multicast datagram
// (IBTA 10.5.2.5, rxe's IB_MULTICAST_QPN).
const MulticastQPN = 0xFFFFFF

// ReceiveMulticast hands a copy of a datagram that arrived for a
// multicast group to qp, one of the QPs attached to the group, as
// rxe_rcv_mcast_pkt hands a clone to each: checked as Receive checks a
// packet for its own QP, then the UD responder's Q_Key check. A
// datagram that is not a UD SEND to QPN 0xFFFFFF is dropped
// (DropBadTransport, DropUnknownQP). It runs with qp's engine's receive
// lock held; nothing it does sends.
func (h *Handler) ReceiveMulticast(b *ibudp.Buf, qp *qpmgr.QP, tx qpmgr.TX) {
	h.Counters.Inc(ib.RcvdPkts)
	p, err := bth.Parse(b.RoCE())
	if err != nil {
		h.drop(nil, bth.Packet{}, ib.DropMalformed)
		return
	}
	if p.Opcode().Transport() != bth.TransportUD {
		h.drop(qp, p, ib.DropBadTransport)
		return
	}
	if p.BTH().DestQP() != MulticastQPN {
		h.drop(qp, p, ib.DropUnknownQP)
		return
	}
	h.deliver(qp, p, b, tx)
}

// deliver runs the checks of a packet for qp and hands it to the
// responder or the completer.
func (h *Handler) deliver(qp *qpmgr.QP, p bth.Packet, b *ibudp.Buf, tx qpmgr.TX) {
	op := p.Opcode()
	// A port has the one default P_Key; membership bit aside, it must match
	// (IBTA 9.6.1.1).
	if p.BTH().PKey()&0x7fff != bth.DefaultPKey&0x7fff {
		h.drop(qp, p, ib.DropBadPKey)
		return
	}
	qp.Lock()
	defer qp.Unlock()
	if qp.Destroyed() {
		h.drop(qp, p, ib.DropUnknownQP)
		return
	}
	if !sameTransport(qp.VerbsType(), op) {
		h.drop(qp, p, ib.DropBadTransport)
		return
	}
	if qp.Type != ib.QPTypeUD && b.Peer.Unmap() != qp.Dest() {
		// rxe check_addr: a connected QP takes packets from its peer only.
		h.drop(qp, p, ib.DropBadAddress)
		return
	}
	if b.ECN() == ibudp.CE {
		h.notify(qp, p, b, tx)
	}
	if op.Is(bth.FlagRequest) {
		// IBTA 10.3.1: a QP responds from RTR on, until ERR.
		switch qp.State() {
		case ib.QPSRTR, ib.QPSRTS, ib.QPSSQD, ib.QPSSQE:
		default:
			h.drop(qp, p, ib.DropQPState)
			return
		}
		qp.RequestArrived()
		h.Resp.respond(qp, p, b, tx)
		return
	}
	switch qp.State() {
	case ib.QPSRTS, ib.QPSSQD, ib.QPSSQE:
	default:
		h.drop(qp, p, ib.DropQPState)
		return
	}
	h.Comp.complete(qp, p)
}

func sameTransport(t ib.QPType, op bth.Opcode) bool {
	switch t {
	case ib.QPTypeRC:
		return op.Transport() == bth.TransportRC
	case ib.QPTypeUC:
		return op.Transport() == bth.TransportUC
	case ib.QPTypeUD:
		return op.Transport() == bth.TransportUD
	case ib.QPTypeXRCSend: // an initiator takes responses only
		return op.Transport() == bth.TransportXRC && !op.Is(bth.FlagRequest)
	case ib.QPTypeXRCRecv: // a target requests only
		return op.Transport() == bth.TransportXRC && op.Is(bth.FlagRequest)
	}
	return false
}

func (h *Handler) drop(qp *qpmgr.QP, p bth.Packet, why ib.Counter) {
	h.Counters.Inc(why)
	if h.Trace.On() {
		e := trace.Event{Module: trace.ModRX, Step: trace.StepDrop, Arg: uint32(why)}
		if qp != nil {
			e.QPN = qp.QPN
		}
		if p.Len() > 0 {
			e.Opcode, e.PSN, e.DestQPN = p.Opcode(), p.BTH().PSN(), p.BTH().DestQP()
		}
		h.Trace.Emit(e)
	}
}

// traceDMAWrite tells t of n bytes placed at offset off (of the receive
// WQE's buffers when recv is set, else of the region): the responder's
// SENDs and WRITEs, the completer's READ responses.
func traceDMAWrite(t *trace.Probe, qp *qpmgr.QP, p bth.Packet, wrID uint64, n, off int, recv bool) {
	e := trace.Event{Module: trace.ModDMA, Step: trace.StepDMAWrite, QPN: qp.QPN, PSN: p.BTH().PSN(),
		Opcode: p.Opcode(), WRID: wrID, Len: uint32(n), Arg: uint32(off)}
	if recv {
		e.Flags = trace.FlagRecv
	}
	t.Emit(e)
}
