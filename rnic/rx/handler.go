package rx

import (
	"net/netip"

	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Handler is the RX packet handler of one device. It is used by the
// receive pipeline goroutine only.
type Handler struct {
	DMA      *dma.Table
	QPs      *qpmgr.Table
	Counters *qpmgr.Counters
	// LocalAddr is the port's address, the destination in the GRH of UD
	// receives.
	LocalAddr netip.Addr
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe

	acks []*qpmgr.QP // QPs with a coalesced ACK to send at Flush
}

// Receive handles one packet; packets it answers with go to tx.
func (h *Handler) Receive(b *ibudp.Buf, tx qpmgr.TX) {
	h.Counters.Inc(qpmgr.RcvdPkts)
	if b.ICRC == ibudp.ICRCCorrupted {
		h.drop(nil, bth.Packet{}, qpmgr.DropCorrupted)
		return
	}
	p, err := bth.Parse(b.RoCE())
	if err != nil {
		h.drop(nil, bth.Packet{}, qpmgr.DropMalformed)
		return
	}
	op := p.Opcode()
	if op.Transport() == bth.TransportCNP {
		return // congestion control is not built yet; CNPs are informational
	}
	qp := h.QPs.Lookup(p.BTH().DestQP())
	if qp == nil {
		h.drop(nil, p, qpmgr.DropUnknownQP)
		return
	}
	// A port has the one default P_Key; membership bit aside, it must match
	// (IBTA 9.6.1.1).
	if p.BTH().PKey()&0x7fff != bth.DefaultPKey&0x7fff {
		h.drop(qp, p, qpmgr.DropBadPKey)
		return
	}
	qp.Lock()
	defer qp.Unlock()
	if qp.Destroyed() {
		h.drop(qp, p, qpmgr.DropUnknownQP)
		return
	}
	if !sameTransport(qp.Type, op) {
		h.drop(qp, p, qpmgr.DropBadTransport)
		return
	}
	if qp.Type != qpmgr.TypeUD && b.Peer.Unmap() != qp.Dest() {
		// rxe check_addr: a connected QP takes packets from its peer only.
		h.drop(qp, p, qpmgr.DropBadAddress)
		return
	}
	if op.Is(bth.FlagRequest) {
		// IBTA 10.3.1: a QP responds from RTR on, until ERR.
		switch qp.State() {
		case qpmgr.StateRTR, qpmgr.StateRTS, qpmgr.StateSQD, qpmgr.StateSQE:
		default:
			h.drop(qp, p, qpmgr.DropQPState)
			return
		}
		switch qp.Type {
		case qpmgr.TypeRC:
			h.respondRC(qp, p, tx)
		case qpmgr.TypeUC:
			h.respondUC(qp, p)
		case qpmgr.TypeUD:
			h.respondUD(qp, p, b)
		}
		return
	}
	switch qp.State() {
	case qpmgr.StateRTS, qpmgr.StateSQD, qpmgr.StateSQE:
	default:
		h.drop(qp, p, qpmgr.DropQPState)
		return
	}
	h.complete(qp, p)
}

func sameTransport(t qpmgr.Type, op bth.Opcode) bool {
	switch t {
	case qpmgr.TypeRC:
		return op.Transport() == bth.TransportRC
	case qpmgr.TypeUC:
		return op.Transport() == bth.TransportUC
	case qpmgr.TypeUD:
		return op.Transport() == bth.TransportUD
	}
	return false
}

func (h *Handler) drop(qp *qpmgr.QP, p bth.Packet, why qpmgr.Counter) {
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

// completeSend retires the WQE at the head of qp's send queue with status
// st, telling the trace.
func (h *Handler) completeSend(qp *qpmgr.QP, st qpmgr.WCStatus) {
	if h.Trace.On() {
		h.Trace.Emit(trace.SendCompletion(qp, st))
	}
	qp.CompleteSend(st)
}

// completeRecv posts a receive completion, telling the trace.
func (h *Handler) completeRecv(qp *qpmgr.QP, wc qpmgr.WC, solicited bool) {
	if h.Trace.On() {
		h.Trace.Emit(trace.RecvCompletion(qp, &wc))
	}
	qp.CompleteRecv(wc, solicited)
}

// traceDMAWrite tells the trace of n bytes placed at offset off (of the
// receive WQE's buffers when recv is set, else of the region).
func (h *Handler) traceDMAWrite(qp *qpmgr.QP, p bth.Packet, wrID uint64, n, off int, recv bool) {
	e := trace.Event{Module: trace.ModDMA, Step: trace.StepDMAWrite, QPN: qp.QPN, PSN: p.BTH().PSN(),
		Opcode: p.Opcode(), WRID: wrID, Len: uint32(n), Arg: uint32(off)}
	if recv {
		e.Flags = trace.FlagRecv
	}
	h.Trace.Emit(e)
}

// Flush sends the ACKs coalesced over a receive batch: one per QP, for the
// newest PSN that asked for one.
func (h *Handler) Flush(tx qpmgr.TX) {
	for i, qp := range h.acks {
		qp.Lock()
		if qp.Resp.AckPending && !qp.Destroyed() && qp.State() != qpmgr.StateErr {
			h.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), qp.Resp.AckPSN)
		}
		qp.Resp.AckPending = false
		qp.Unlock()
		h.acks[i] = nil
	}
	h.acks = h.acks[:0]
}

// deferAck asks for an ACK of psn at the end of the batch.
func (h *Handler) deferAck(qp *qpmgr.QP, psn uint32) {
	if !qp.Resp.AckPending {
		qp.Resp.AckPending = true
		h.acks = append(h.acks, qp)
	} else {
		h.Counters.Inc(qpmgr.AckDeferred)
	}
	qp.Resp.AckPSN = psn
}

// response builds a responder packet of opcode op with an n-byte payload.
func response(qp *qpmgr.QP, tx qpmgr.TX, op bth.Opcode, n int, psn uint32) (*ibudp.Buf, bth.Packet) {
	b := tx.Alloc()
	p, err := bth.Build(b.Room(), op, n)
	if err != nil {
		panic("rx: response does not fit a buffer: " + err.Error()) // n <= path MTU always
	}
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: qp.Attr.DestQPN, PSN: psn})
	b.N = p.Len()
	b.Peer, b.SrcPort, b.TOS = qp.Dest(), qp.SrcPort(), qp.Attr.AH.TrafficClass
	return b, p
}

// sendAck sends an ACKNOWLEDGE with syndrome s (ACK, RNR NAK or NAK).
func (h *Handler) sendAck(qp *qpmgr.QP, tx qpmgr.TX, s bth.Syndrome, psn uint32) {
	b, p := response(qp, tx, bth.RCAcknowledge, 0, psn)
	p.AETH().Encode(s, qp.Resp.MSN)
	if h.Trace.On() {
		h.Trace.Emit(trace.Event{Module: trace.ModRX, Step: trace.StepAckSent, QPN: qp.QPN, PSN: psn,
			Opcode: bth.RCAcknowledge, Arg: uint32(s), Aux: qp.Resp.MSN})
	}
	if !s.IsACK() {
		qp.Counters.Inc(qpmgr.NAKsSent)
	}
	qp.Counters.Inc(qpmgr.SentPkts)
	tx.Send(b)
}
