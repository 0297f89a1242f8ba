package wqe

import (
	"fmt"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Engine is the requester of one device.
type Engine struct {
	DMA *dma.Table
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// FC is the device's Flow Control Manager: it says whether a QP may
	// send (the window of unacknowledged PSNs, the pacer) and how data
	// packets are marked (ECT(0) when congestion control runs). Required.
	FC *flowctl.Manager
	// Paced is told, with the QP locked, that the pacer stopped qp with
	// work left, and how long until it may send again; the device runs
	// the QP again then.
	Paced func(qp *qpmgr.QP, wait time.Duration)
	// CopyPayload makes the requester gather every RC payload into its
	// packet's Buf instead of lending the port the registered memory
	// (payload; UC and UD always gather): for measuring one against the
	// other.
	CopyPayload bool
}

// Run sends up to budget packets of qp's send queue and returns how many it
// sent; fewer means the QP has nothing more it may send now. The caller
// holds the QP's lock (rxe: rxe_requester).
func (e *Engine) Run(qp *qpmgr.QP, tx qpmgr.TX, budget int) int {
	if qp.Req.NeedRetry {
		rewind(qp)
		if e.Trace.On() && qp.SQ.Next < qp.SQ.Tail {
			w := qp.SQ.At(qp.SQ.Next)
			e.Trace.Emit(trace.Event{Module: trace.ModWQE, Step: trace.StepRewind, QPN: qp.QPN, PSN: w.PSN, WRID: w.WR.WRID, WROp: w.WR.Opcode})
		}
	}
	sent := 0
	for sent < budget {
		if wait := e.FC.Wait(&qp.FC); wait > 0 {
			if qp.HasSendWork() && e.Paced != nil {
				e.Paced(qp, wait)
			}
			break
		}
		w, ok := e.nextWQE(qp)
		if !ok {
			break
		}
		if w.WR.Opcode.IsLocal() {
			if !e.local(qp) {
				break
			}
			continue
		}
		if err := e.emit(qp, w, tx); err != nil {
			// The local memory behind the WR went away or never
			// was valid: a local protection error (IBTA 10.8.3).
			e.completeSend(qp, ib.WCLocProtErr)
			qp.EnterErrorReported()
			break
		}
		sent++
	}
	return sent
}

// nextWQE returns the WQE whose packet goes next, starting it if new, or
// false when the QP must wait: wrong state, empty queue, RNR wait, a full
// window, a fence or max_rd_atomic.
func (e *Engine) nextWQE(qp *qpmgr.QP) (*qpmgr.SendWQE, bool) {
	sq := &qp.SQ
	if sq.Next == sq.Tail {
		return nil, false
	}
	w := sq.At(sq.Next)
	switch qp.State() {
	case ib.QPSRTS:
	case ib.QPSSQD:
		// SQD: finish the messages already started, start none (IBTA 10.3.1.7).
		if w.State == qpmgr.WQEPosted {
			return nil, false
		}
	default:
		return nil, false
	}
	if !qp.Req.RNRUntil.IsZero() {
		if time.Now().Before(qp.Req.RNRUntil) {
			return nil, false
		}
		qp.Req.RNRUntil = time.Time{}
	}
	if w.WR.Opcode.IsLocal() {
		// A bind or an invalidation runs once every WQE before it has
		// completed, and completes at once: it has no PSN, so the
		// completer, which retires WQEs in order by PSN, could not
		// retire it behind a WQE still awaiting its ACK. rxe runs it
		// at once and lets its completer retire it in order; waiting
		// is what IBV_SEND_FENCE would ask, and keeps the window's
		// state and the CQE's order one.
		return w, sq.Next == sq.Head
	}
	psn := w.PSN
	if w.State == qpmgr.WQEPosted {
		psn = qp.Req.PSN
	}
	if qp.Type == ib.QPTypeRC && !e.FC.WindowOpen(&qp.FC, psn, qp.Comp.PSN) {
		return nil, false
	}
	if w.State == qpmgr.WQEPosted {
		if qp.Type == ib.QPTypeRC {
			out := qp.OutstandingRdAtomic()
			if w.WR.Flags&ib.SendFence != 0 && out > 0 {
				return nil, false
			}
			if w.WR.Opcode.IsReadOrAtomic() && out >= max(int(qp.Attr.MaxRdAtomic), 1) {
				return nil, false
			}
		}
		n := qpmgr.NumPkts(w.WR.Opcode, w.Len, qp.MTU())
		w.FirstPSN, w.PSN = qp.Req.PSN, qp.Req.PSN
		w.LastPSN = bth.PSNAdd(w.FirstPSN, n-1)
		w.Offset = 0
		w.State = qpmgr.WQEStarted
		qp.Req.PSN = bth.PSNAdd(qp.Req.PSN, n)
		if e.Trace.On() {
			e.Trace.Emit(trace.Event{Module: trace.ModWQE, Step: trace.StepFetch, QPN: qp.QPN, PSN: w.FirstPSN,
				WRID: w.WR.WRID, WROp: w.WR.Opcode, Len: uint32(w.Len), Arg: uint32(n)})
		}
	}
	return w, true
}

// local runs the local operation at the head of the send queue (rxe:
// rxe_do_local_ops) and completes it: a failed bind with MW_BIND_ERR, a
// failed invalidation with LOC_QP_OP_ERR, either moving the QP to ERR.
// It reports whether the QP may go on.
func (e *Engine) local(qp *qpmgr.QP) bool {
	w := qp.SQ.At(qp.SQ.Head)
	st := ib.WCSuccess
	var err error
	switch w.WR.Opcode {
	case ib.WRBindMW:
		if err = e.DMA.Bind(qp.PD, qp.QPN, w.WR.Bind); err != nil {
			st = ib.WCMWBindErr
		}
	case ib.WRLocalInv:
		if err = e.DMA.Invalidate(qp.PD, w.WR.InvRKey); err != nil {
			st = ib.WCLocQPOpErr
		}
	}
	if e.Trace.On() {
		e.Trace.Emit(trace.Event{Module: trace.ModWQE, Step: trace.StepFetch, QPN: qp.QPN, WRID: w.WR.WRID, WROp: w.WR.Opcode})
	}
	e.completeSend(qp, st)
	if err != nil {
		qp.EnterError()
		return false
	}
	return true
}

// rewind goes back to the oldest unacknowledged PSN (go-back-N, rxe:
// req_retry): the WQE holding Comp.PSN resumes there, later ones restart.
func rewind(qp *qpmgr.QP) {
	qp.Req.NeedRetry = false
	sq := &qp.SQ
	mtu := qp.MTU()
	first := true
	for i := sq.Head; i < sq.Tail; i++ {
		w := sq.At(i)
		if w.State == qpmgr.WQEPosted {
			break
		}
		if first {
			sq.Next = i
			first = false
		}
		w.State, w.Retried = qpmgr.WQEStarted, true
		w.Offset, w.PSN = 0, w.FirstPSN
		if d := bth.PSNDiff(qp.Comp.PSN, w.FirstPSN); d > 0 && bth.PSNDiff(qp.Comp.PSN, w.LastPSN) <= 0 && !w.WR.Opcode.IsAtomic() {
			w.Offset = min(int(d)*mtu, w.Len)
			w.PSN = qp.Comp.PSN
		}
	}
	qp.Req.NoAckPkts = 0
}

// emit builds and queues the next packet of w.
func (e *Engine) emit(qp *qpmgr.QP, w *qpmgr.SendWQE, tx qpmgr.TX) error {
	mtu := qp.MTU()
	op := w.WR.Opcode
	if op.IsReadOrAtomic() {
		// The response lands in these buffers: check them before asking.
		if _, err := e.DMA.CheckSGL(qp.PD, w.WR.SGL, true); err != nil {
			return err
		}
	}
	var n int // payload bytes
	var last bool
	switch {
	case op == ib.WRRDMARead || op.IsAtomic():
		last = true
	default:
		n = min(mtu, w.Len-w.Offset)
		last = w.Offset+n == w.Len
	}
	opcode := requestOpcode(qp.Type, op, w.Offset == 0, last)
	if qp.XRC != 0 {
		opcode |= bth.TransportXRC // RC's operation, with an XRCETH (IBTA A14, table 1)
	}
	if e.Trace.On() {
		e.Trace.Emit(trace.Event{Module: trace.ModWQE, Step: trace.StepSegment, QPN: qp.QPN, PSN: w.PSN, WRID: w.WR.WRID,
			Opcode: opcode, Len: uint32(n), Arg: uint32(w.Offset), Aux: uint32(w.Len)})
	}
	b := tx.Alloc()
	p, err := bth.Build(b.Room(), opcode, n)
	if err != nil {
		return fmt.Errorf("wqe: build %v: %w", opcode, err)
	}
	f := bth.BTHFields{
		Opcode: opcode, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey,
		DestQP: qp.Attr.DestQPN, PSN: w.PSN,
		SolicitedEvent: last && w.WR.Flags&ib.SendSolicited != 0 && op != ib.WRRDMAWrite,
	}
	b.Peer, b.SrcPort, b.TOS, b.QPN = qp.Dest(), qp.SrcPort(), qp.Attr.AH.TrafficClass, qp.QPN
	if qp.Type == ib.QPTypeUD {
		f.DestQP = w.WR.RemoteQPN
		b.Peer, b.TOS = w.WR.AH.Addr(), w.WR.AH.TrafficClass
		qkey := w.WR.RemoteQKey
		if qkey&0x80000000 != 0 { // IBTA 10.2.5: use the QP's own Q_Key
			qkey = qp.Attr.QKey
		}
		p.DETH().Encode(qkey, qp.QPN)
	}
	if qp.Type == ib.QPTypeRC {
		// AckReq on a message's last packet and every MaxPktsPerAck
		// packets (rxe), and at least twice per window: a window that
		// shrank under loss (flowctl.Window) to fewer PSNs than rxe's
		// ACK interval would otherwise close with no ACK asked for,
		// and wait for the ACK timeout; and a paced QP every
		// flowctl.PacedAckInterval of its sending time.
		win := e.FC.QPWindow(&qp.FC)
		qp.Req.NoAckPkts++
		if last || qp.Req.NoAckPkts > min(qpmgr.MaxPktsPerAck, win/2) ||
			!e.FC.WindowOpen(&qp.FC, bth.PSNAdd(w.PSN, 1), qp.Comp.PSN) ||
			e.FC.AckReqDue(&qp.FC, qp.Req.NoAckPkts, qp.MTU()) {
			f.AckReq = true
			qp.Req.NoAckPkts = 0
			if !w.Retried {
				e.FC.SentNew(&qp.FC, w.PSN)
			}
		}
	}
	p.BTH().Encode(&f)
	if opcode.Has(bth.HdrXRCETH) {
		p.XRCETH().Encode(w.WR.RemoteSRQN)
	}
	switch {
	case opcode.Has(bth.HdrAtomicETH):
		if op == ib.WRAtomicFetchAdd {
			p.AtomicETH().Encode(w.WR.RemoteAddr, w.WR.RKey, w.WR.CompareAdd, 0)
		} else {
			p.AtomicETH().Encode(w.WR.RemoteAddr, w.WR.RKey, w.WR.Swap, w.WR.CompareAdd)
		}
	case op == ib.WRRDMARead:
		// A retried READ asks for the rest only (rxe: req_retry moves iova).
		p.RETH().Encode(w.WR.RemoteAddr+uint64(w.Offset), w.WR.RKey, uint32(w.Len-w.Offset))
	case opcode.Has(bth.HdrRETH):
		p.RETH().Encode(w.WR.RemoteAddr, w.WR.RKey, uint32(w.Len))
	}
	if opcode.Has(bth.HdrImmDt) {
		p.ImmDt().Encode(w.WR.Imm)
	}
	if opcode.Has(bth.HdrIETH) {
		p.IETH().Encode(w.WR.InvRKey)
	}
	if n > 0 {
		dst := p.Payload()
		if w.WR.Flags&ib.SendInline != 0 {
			copy(dst, w.WR.InlineData[w.Offset:w.Offset+n])
		} else if err := e.payload(qp, w, b, p.Len()-len(dst)-bth.PadFor(n)-bth.ICRCLen, dst); err != nil {
			return err
		} else if e.Trace.On() {
			e.Trace.Emit(trace.Event{Module: trace.ModDMA, Step: trace.StepDMARead, QPN: qp.QPN, PSN: w.PSN,
				WRID: w.WR.WRID, Opcode: opcode, Len: uint32(n), Arg: uint32(w.Offset)})
		}
	}
	b.N = p.Len()
	retransmit := w.Retried
	if retransmit {
		qp.Counters.Inc(ib.RetransmittedPkts)
	}
	if e.Trace.On() {
		fl := trace.Flags(0)
		if f.AckReq {
			fl |= trace.FlagAckReq
		}
		if retransmit {
			fl |= trace.FlagRetransmit
		}
		e.Trace.Emit(trace.Event{Module: trace.ModWQE, Step: trace.StepHeaders, QPN: qp.QPN, PSN: w.PSN, WRID: w.WR.WRID,
			Opcode: opcode, Len: uint32(n), Flags: fl})
	}
	if e.FC.ECT() {
		// Requests are data: ECN-capable, so that a switch marks them
		// instead of dropping them (ConnectX sends them so with DCQCN).
		b.SetECN(ibudp.ECT0)
	}
	if qp.FC.Paced() {
		e.FC.Sent(&qp.FC, b.N+envelopeLen(b))
	}
	tx.Send(b)
	qp.Counters.Inc(ib.SentPkts)

	// Advance the cursor.
	if op == ib.WRRDMARead {
		w.PSN = bth.PSNAdd(w.LastPSN, 1)
		w.Offset = w.Len
	} else {
		w.PSN = bth.PSNAdd(w.PSN, 1)
		w.Offset += n
	}
	if last {
		w.State, w.Retried = qpmgr.WQESent, false
		qp.SQ.Next++
		if qp.Type != ib.QPTypeRC {
			// Unreliable services complete once the last packet is out.
			e.completeSend(qp, ib.WCSuccess)
		}
	}
	if qp.Type == ib.QPTypeRC {
		qp.ArmTimer()
	}
	return nil
}

// envelopeLen is the IP and UDP headers the port puts around b: what
// the pacer counts on top of the RoCE part.
func envelopeLen(b *ibudp.Buf) int {
	if b.Peer.Unmap().Is4() {
		return bth.IPv4HeaderLen + bth.UDPHeaderLen
	}
	return bth.IPv6HeaderLen + bth.UDPHeaderLen
}

// requestOpcode picks the opcode of a request packet (IBTA tables 36-38).
func requestOpcode(t ib.QPType, op ib.WROpcode, first, last bool) bth.Opcode {
	var base bth.Opcode
	switch t {
	case ib.QPTypeUC:
		base = bth.TransportUC
	case ib.QPTypeUD:
		if op == ib.WRSendWithImm {
			return bth.UDSendOnlyImm
		}
		return bth.UDSendOnly
	}
	pick := func(only, firstOp, middle, lastOp bth.Opcode) bth.Opcode {
		switch {
		case first && last:
			return base | only
		case first:
			return base | firstOp
		case last:
			return base | lastOp
		}
		return base | middle
	}
	switch op {
	case ib.WRSend:
		return pick(bth.RCSendOnly, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast)
	case ib.WRSendWithImm:
		return pick(bth.RCSendOnlyImm, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastImm)
	case ib.WRSendWithInv:
		return pick(bth.RCSendOnlyInvalidate, bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastInvalidate)
	case ib.WRRDMAWrite:
		return pick(bth.RCRDMAWriteOnly, bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast)
	case ib.WRRDMAWriteWithImm:
		return pick(bth.RCRDMAWriteOnlyImm, bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLastImm)
	case ib.WRRDMARead:
		return bth.RCRDMAReadRequest
	case ib.WRAtomicCmpAndSwp:
		return bth.RCCompareSwap
	case ib.WRAtomicFetchAdd:
		return bth.RCFetchAdd
	}
	return 0
}

// completeSend retires the WQE at the head of qp's send queue with
// status st, telling the trace.
func (e *Engine) completeSend(qp *qpmgr.QP, st ib.WCStatus) {
	if e.Trace.On() {
		e.Trace.Emit(qpmgr.SendCompletionEvent(qp, st))
	}
	qp.CompleteSend(st)
}

// payload reads the n = len(dst) payload bytes of w's next packet from
// registered memory. Where they lie in one SGE, b sends them from there
// (Buf.SetPayloadRef at RoCE offset at): the kernel copies them once on
// the way out, as it does a TCP sender's, instead of a copy into b first.
// A payload that spans SGEs, or one the port refuses by reference, is
// gathered into dst. Either way a retransmission reads the region again.
// Only RC sends by reference: its CQE waits for the ACK, long after the
// packet left. A UC or UD send completes when its last packet is handed
// to the port, before the port's batch goes out, and the program may
// write its buffer the moment it polls that CQE: by reference the packet
// would carry the new bytes (the race detector saw QP1's MAD slot written
// again while the batch still read the last MAD from it).
func (e *Engine) payload(qp *qpmgr.QP, w *qpmgr.SendWQE, b *ibudp.Buf, at int, dst []byte) error {
	if !e.CopyPayload && qp.Type == ib.QPTypeRC {
		mem, ok, err := e.DMA.View(qp.PD, w.WR.SGL, w.Offset, len(dst))
		if err != nil {
			return err
		}
		if ok && b.SetPayloadRef(at, mem) {
			return nil
		}
	}
	return e.DMA.Gather(qp.PD, w.WR.SGL, w.Offset, dst)
}
