package rx

import (
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Handler is the RX packet handler of one device. It is used by the
// receive pipeline goroutine only, but for the Acker's Release, Expire
// and SendHeld.
type Handler struct {
	DMA      *dma.Table
	QPs      *qpmgr.Table
	Counters *qpmgr.Counters
	// LocalAddr is the port's address, the destination in the GRH of UD
	// receives.
	LocalAddr netip.Addr
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// Ack is the responder's ACK: every ACK and NAK leaves by it.
	Ack Acker
	// FC is the device's Flow Control Manager, told of the CNPs that
	// arrive (reaction point) and of the packets marked CE, which it may
	// answer with a CNP (notification point; congestion.go). Required.
	FC *flowctl.Manager
	// Retry7Forever makes retry_cnt 7 retry forever, as rxe reads it;
	// false (the zero value) gives IBTA's seven retries and then
	// RETRY_EXC_ERR. rnr_retry 7 is forever either way, as IBTA says.
	Retry7Forever bool
	// Recovering, when not nil, is told, with the QP locked, that the
	// QP takes part in a loss recovery: its responder NAKed a gap and
	// waits for the go-back, or its requester went back and waits for
	// the answer to what it resends; rtt is the round trip the QP
	// measured for that answer (the requester's smoothed round trip, the
	// responder's NAK to go-back), 0 before the first. A polling NIC
	// keeps polling for the answer instead of going to sleep (rnic:
	// queue.lossSeen). The completer tells it of go-backs; the
	// responder's NAKs are told to Ack.Recovering, which the device sets
	// to the same.
	Recovering func(rtt time.Duration)
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
	if !sameTransport(qp.Type, op) {
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
		switch qp.Type {
		case ib.QPTypeRC:
			h.respondRC(qp, p, tx)
		case ib.QPTypeUC:
			h.respondUC(qp, p)
		case ib.QPTypeUD:
			h.respondUD(qp, p, b)
		}
		return
	}
	switch qp.State() {
	case ib.QPSRTS, ib.QPSSQD, ib.QPSSQE:
	default:
		h.drop(qp, p, ib.DropQPState)
		return
	}
	h.complete(qp, p)
}

func sameTransport(t ib.QPType, op bth.Opcode) bool {
	switch t {
	case ib.QPTypeRC:
		return op.Transport() == bth.TransportRC
	case ib.QPTypeUC:
		return op.Transport() == bth.TransportUC
	case ib.QPTypeUD:
		return op.Transport() == bth.TransportUD
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

// completeSend retires the WQE at the head of qp's send queue with status
// st, telling the trace.
func (h *Handler) completeSend(qp *qpmgr.QP, st ib.WCStatus) {
	if h.Trace.On() {
		h.Trace.Emit(qpmgr.SendCompletionEvent(qp, st))
	}
	qp.CompleteSend(st)
}

// completeRecv posts a receive completion, telling the trace.
func (h *Handler) completeRecv(qp *qpmgr.QP, wc ib.WC, solicited bool) {
	if h.Trace.On() {
		h.Trace.Emit(qpmgr.RecvCompletionEvent(qp, &wc))
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
