package rx

import (
	"net/netip"
	"sync/atomic"
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
// receive pipeline goroutine only, but for ReleaseAck and ExpireAck.
type Handler struct {
	DMA      *dma.Table
	QPs      *qpmgr.Table
	Counters *qpmgr.Counters
	// LocalAddr is the port's address, the destination in the GRH of UD
	// receives.
	LocalAddr netip.Addr
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// AckHold turns on delayed ACKs for QPs that answer what they receive
	// (ping-pong QPs, see Flush); 0 sends every ACK at the end of its batch.
	AckHold time.Duration
	// Hold is told, with the QP locked, of each ACK Flush holds back and
	// the time by which it must go; the device sends it with ReleaseAck
	// or, from that time on, ExpireAck.
	Hold func(qp *qpmgr.QP, until time.Time)
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
	// queue.lossSeen).
	Recovering func(rtt time.Duration)

	acks []*qpmgr.QP // QPs with a coalesced ACK to send at Flush
	// sent counts the receive pipeline's batches that went out (Sent);
	// the one being filled is number sent+1.
	sent atomic.Uint64
}

// Sent tells the Handler that the batch Receive and Flush filled went
// out: the ACKs in it can no longer be overtaken by a request.
func (h *Handler) Sent() { h.sent.Add(1) }

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

// Flush sends the ACKs coalesced over a receive batch: one per QP, for the
// newest PSN that asked for one.
//
// A ping-pong QP's ACK is held back instead, to go out just before the
// QP's next request (ReleaseAck), as TCP delays the ACK of an interactive
// connection (RFC 1122 4.2.3.2; the IBTA lets a responder coalesce ACKs,
// 9.7.5.1.1). On a SEND ping-pong this spares the peer wake-ups: its NIC
// takes the ACK and the reply in one receive, and its application finds
// both completions at once. A hold that runs out (ExpireAck) sends the
// ACK alone and ends the QP's ping-pong mode. The hold is at most an
// eighth of the QP's own ACK timeout: the peer's requester, which must
// not time out waiting, most likely uses the same.
func (h *Handler) Flush(tx qpmgr.TX) {
	for i, qp := range h.acks {
		qp.Lock()
		r := &qp.Resp
		if r.AckPending && answers(qp) {
			switch {
			case r.AckHeld:
				// Still held: the newer AckPSN goes with the request.
			case r.PingPong && h.Hold != nil:
				r.AckHeld, r.AckHoldUntil = true, time.Now().Add(h.holdFor(qp))
				h.Hold(qp, r.AckHoldUntil)
			default:
				h.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), r.AckPSN)
				r.AckBatch = h.sent.Load() + 1
				if h.AckHold > 0 {
					r.AckSentAt = time.Now()
				}
			}
		}
		r.AckPending = false
		qp.Unlock()
		h.acks[i] = nil
	}
	h.acks = h.acks[:0]
}

// ReleaseAck is called, with qp locked, before qp's requester sends: an ACK
// held for it goes first, into the same batch. A request that follows an
// ACK within the hold time marks the QP ping-pong. It reports whether qp
// held an ACK. Unlike the rest of the Handler it may run on any goroutine.
func (h *Handler) ReleaseAck(qp *qpmgr.QP, tx qpmgr.TX) bool {
	r := &qp.Resp
	if r.AckHeld {
		h.sendHeld(qp, tx, ib.AckHeld)
		return true
	}
	// The application may answer a message before the ACK of it left:
	// before the receive batch that carried the message ended (Flush), or
	// after Flush put the ACK into a batch that has not gone out yet. The
	// ACK goes first all the same, as rxe's and a NIC's do (they send it
	// before the application can see the message); in the second case
	// the batch's copy then comes second and is taken for a duplicate.
	// A reply that overtook the ACK completed at the peer before the send
	// it answers, and Debian's ib_send_lat -e (one channel for both CQs,
	// one poll per event) hung in 9 runs of 25 (21 of 25 with -ack-hold 0).
	if answers(qp) && (r.AckPending || (r.AckBatch != 0 && r.AckBatch > h.sent.Load())) {
		r.AckPending, r.AckBatch = false, 0
		h.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), r.AckPSN)
		if h.AckHold > 0 {
			r.AckSentAt = time.Now()
		}
	}
	if h.AckHold > 0 && !r.PingPong && !r.AckSentAt.IsZero() && time.Since(r.AckSentAt) < h.holdFor(qp) {
		r.PingPong = true
	}
	return false
}

// SendHeldAck sends qp's held ACK alone now, if it holds one, and reports
// whether it did: the QP is about to be destroyed or modified. Call with
// qp locked; it may run on any goroutine.
func (h *Handler) SendHeldAck(qp *qpmgr.QP, tx qpmgr.TX) bool {
	if !qp.Resp.AckHeld {
		return false
	}
	h.sendHeld(qp, tx, ib.AckHoldExpired)
	return true
}

// ExpireAck is called, with qp locked, when an ACK may have been held for
// as long as it may: if so, it goes alone and the QP leaves ping-pong
// mode. A NAK whose gap persists goes again (nak.go). It reports whether
// qp still holds an ACK or a NAK to repeat (see Deadline). It may run on
// any goroutine.
func (h *Handler) ExpireAck(qp *qpmgr.QP, tx qpmgr.TX, now time.Time) bool {
	nak := h.expireNAK(qp, tx, now)
	r := &qp.Resp
	if !r.AckHeld {
		return nak
	}
	if now.Before(r.AckHoldUntil) {
		return true
	}
	r.PingPong = false
	h.sendHeld(qp, tx, ib.AckHoldExpired)
	return nak
}

// sendHeld sends qp's held ACK, counted as c, unless the QP answers no
// more.
func (h *Handler) sendHeld(qp *qpmgr.QP, tx qpmgr.TX, c ib.Counter) {
	r := &qp.Resp
	r.AckHeld = false
	if !answers(qp) {
		return
	}
	h.Counters.Inc(c)
	h.sendAck(qp, tx, bth.ACK(bth.CreditsInvalid), r.AckPSN)
	r.AckSentAt = time.Now()
}

// answers reports whether qp still sends the ACKs it owes.
func answers(qp *qpmgr.QP) bool { return !qp.Destroyed() && qp.State() != ib.QPSErr }

// holdFor is how long qp's ACK may be held: AckHold, at most an eighth of
// the QP's ACK timeout.
func (h *Handler) holdFor(qp *qpmgr.QP) time.Duration {
	if t := qp.ACKTimeout(); t > 0 {
		return min(h.AckHold, t/8)
	}
	return h.AckHold
}

// deferAck asks for an ACK of psn at the end of the batch.
func (h *Handler) deferAck(qp *qpmgr.QP, psn uint32) {
	if !qp.Resp.AckPending {
		qp.Resp.AckPending = true
		h.acks = append(h.acks, qp)
	} else {
		h.Counters.Inc(ib.AckDeferred)
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
		qp.Counters.Inc(ib.NAKsSent)
	}
	qp.Counters.Inc(ib.SentPkts)
	tx.Send(b)
}
