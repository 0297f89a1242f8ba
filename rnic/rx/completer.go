package rx

import (
	"encoding/binary"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
)

// Completer is the completer of one device (IBTA 9.7.5.1; rxe_comp.c):
// it takes the ACKs, NAKs, READ responses and atomic ACKs that arrive for
// a QP's own requests, retires its send WQEs, and sends its requester
// back (qpmgr.QP.Req.NeedRetry) on a NAK, an implied NAK or a timeout.
// It owns the QP's completer state, qpmgr.QP.Comp, and the
// retransmission timer's expiries (Timeout); it never touches the
// responder's, qpmgr.QP.Resp (roles_test.go holds it to that).
//
// All its methods run with the QP locked: complete on the receive
// pipeline's goroutine, Timeout on the send pipeline's.
type Completer struct {
	DMA      *dma.Table
	Counters *qpmgr.Counters
	// Trace is the device's trace probe, nil when it traces nothing.
	Trace *trace.Probe
	// FC is the device's Flow Control Manager, told of what is
	// acknowledged and lost, and asked for the round trip. Required.
	FC *flowctl.Manager
	// Retry7Forever makes retry_cnt 7 retry forever, as rxe reads it;
	// false (the zero value) gives IBTA's seven retries and then
	// RETRY_EXC_ERR. rnr_retry 7 is forever either way, as IBTA says.
	Retry7Forever bool
	// Recovering, when not nil, is told, with the QP locked, that the
	// QP takes part in a loss recovery: its requester went back and
	// waits for the answer to what it resends; rtt is the requester's
	// smoothed round trip, 0 before the first. A polling NIC keeps
	// polling for the answer instead of going to sleep (rnic:
	// queue.lossSeen). The responder's NAKs are told to
	// Acker.Recovering, which the device sets to the same.
	Recovering func(rtt time.Duration)
}

// complete matches an ACK, NAK, READ response or atomic ACK to the send
// queue (rxe_completer). The QP lock is held.
func (c *Completer) complete(qp *qpmgr.QP, p bth.Packet) {
	psn := p.BTH().PSN()
	// Anything the requester has not sent yet, or older than the oldest
	// unacknowledged PSN, answers nothing outstanding.
	if bth.PSNDiff(psn, qp.Req.PSN) >= 0 {
		c.Counters.Inc(ib.DropUnexpectedResp)
		return
	}
	op := p.Opcode()
	if op.Is(bth.FlagReadResp) {
		// Stale or not, it shows the responder at work (Timeout).
		qp.Comp.ReadResps++
	}
	if bth.PSNDiff(psn, qp.Comp.PSN) < 0 {
		return // a duplicate of what was already acknowledged
	}
	switch {
	case op.Is(bth.FlagReadResp):
		c.readResponse(qp, p)
	case op.Operation() == bth.RCAtomicAcknowledge: // or XRC's
		c.atomicAck(qp, p)
	default:
		c.ack(qp, p)
	}
}

// ack handles an ACKNOWLEDGE: ACK, RNR NAK or NAK (IBTA 9.7.5.1.2-4).
func (c *Completer) ack(qp *qpmgr.QP, p bth.Packet) {
	psn := p.BTH().PSN()
	syn := p.AETH().Syndrome()
	if c.Trace.On() {
		c.Trace.Emit(trace.Event{Module: trace.ModCompleter, Step: trace.StepAckRecv, QPN: qp.QPN, PSN: psn,
			Opcode: p.Opcode(), Arg: uint32(syn), Aux: p.AETH().MSN()})
	}
	switch {
	case syn.IsACK():
		c.ackUpTo(qp, psn, true)
	case syn.IsRNRNAK():
		c.Counters.Inc(ib.RcvdRNRErr)
		c.ackUpTo(qp, bth.PSNAdd(psn, -1), false)
		if qp.State() == ib.QPSErr || !qp.Outstanding() {
			return
		}
		if qp.Comp.RNRRetry == 0 {
			c.Counters.Inc(ib.RetryRNRExceededErr)
			c.completeSend(qp, ib.WCRNRRetryExcErr)
			qp.EnterErrorReported()
			return
		}
		if qp.Comp.RNRRetry != 7 {
			qp.Comp.RNRRetry--
		}
		d := time.Duration(bth.RNRTimerMicros(syn.Value())) * time.Microsecond
		qp.Req.RNRUntil = time.Now().Add(d)
		qp.Req.NeedRetry = true
		if c.Trace.On() {
			c.traceRetry(qp, trace.RetryRNR)
		}
		qp.RestartTimer() // the peer answered: the ACK timeout starts over
		qp.KickAfter(d)
	case syn == bth.NAKPSNSeqError:
		c.Counters.Inc(ib.RcvdSeqErr)
		c.ackUpTo(qp, bth.PSNAdd(psn, -1), false)
		if qp.State() == ib.QPSErr || !qp.Outstanding() {
			return
		}
		c.retryNAK(qp, psn)
		if qp.RTO == 0 && qp.State() != ib.QPSErr {
			// The first loss of an episode: the ACK's progress above
			// found the QP lossless and left the timer at the ACK
			// timeout. Lossy now, it probes if the go-back's tail is
			// lost too.
			if c.setRTO(qp); qp.RTO > 0 {
				qp.RestartTimer()
			}
		}
	default:
		// Invalid request, remote access or remote operational error:
		// the WQE at psn failed and the QP goes to ERR (IBTA 9.7.5.1.4).
		c.ackUpTo(qp, bth.PSNAdd(psn, -1), false)
		if qp.State() == ib.QPSErr || !qp.Outstanding() {
			return
		}
		st := ib.WCRemOpErr
		switch syn {
		case bth.NAKInvalidRequest, bth.NAKInvalidRDRequest:
			st = ib.WCRemInvReqErr
		case bth.NAKRemoteAccessError:
			st = ib.WCRemAccessErr
		}
		c.completeSend(qp, st)
		qp.EnterErrorReported()
	}
}

// ackUpTo retires the SEND and WRITE WQEs up to psn and moves Comp.PSN
// past them; it stops at a READ or atomic, which only its response
// completes. With implied set (an ACK), a READ or atomic that psn covers
// lost its response: that is an implied NAK (IBTA 9.7.5.1.4, C9-120), and
// the requester goes back to it. A NAK, or a response, only acknowledges
// what came before it.
func (c *Completer) ackUpTo(qp *qpmgr.QP, psn uint32, implied bool) {
	from := qp.Comp.PSN
	progress := false
	sq := &qp.SQ
	for sq.Head < sq.Tail {
		w := sq.At(sq.Head)
		if w.State == qpmgr.WQEPosted || bth.PSNDiff(psn, w.FirstPSN) < 0 {
			break
		}
		if w.WR.Opcode.IsReadOrAtomic() {
			if implied {
				c.retryOnce(qp)
			}
			break
		}
		// An ACK up to the last PSN completes the WQE even while a retry
		// is sending it again (WQEStarted after a rewind): that ACK answers
		// the first transmission. Moving Comp.PSN past the WQE without
		// completing it would leave it for ever, its later ACKs taken for
		// duplicates.
		if bth.PSNDiff(psn, w.LastPSN) < 0 {
			if d := bth.PSNAdd(psn, 1); bth.PSNDiff(d, qp.Comp.PSN) > 0 {
				qp.Comp.PSN = d
				progress = true
			}
			break
		}
		qp.Comp.PSN = bth.PSNAdd(w.LastPSN, 1)
		c.Counters.Inc(ib.RDMASends) // before the CQE makes the completion visible
		c.completeSend(qp, ib.WCSuccess)
		progress = true
	}
	if progress {
		c.progress(qp, from)
	}
}

// progress resets the retry counters and the timer after forward progress
// (Comp.PSN moved on from from), tells the loss window, and lets the
// requester use the room the ACK made. A requester with nothing left to
// send is not woken: on a ping-pong every ACK would otherwise wake the
// send pipeline for nothing, and the next post would find it busy and
// hand its WQE over instead of sending it at once.
func (c *Completer) progress(qp *qpmgr.QP, from uint32) {
	qp.Comp.RetryCnt, qp.Comp.RNRRetry = qp.Attr.RetryCnt, qp.Attr.RNRRetry
	qp.Comp.Retrying = false
	c.FC.Acked(&qp.FC, qp.Comp.PSN, int(bth.PSNDiff(qp.Comp.PSN, from)))
	c.setRTO(qp)
	qp.Backoff, qp.Probes = 0, 0
	qp.RestartTimer()
	if qp.HasSendWork() {
		qp.Kick()
	}
}

// retry starts a go-back-N retry from Comp.PSN, or fails the WQE with
// RETRY_EXC_ERR when retry_cnt is used up: retry_cnt N allows N retries
// (IBTA gives 7 no special meaning for retry_cnt, only for rnr_retry;
// ConnectX does the same), so a peer that died is noticed after
// retry_cnt+1 ACK timeouts. Only with Retry7Forever is 7 forever, as in
// rxe.
//
// What a retry costs is counted per retry sequence, as rxe counts it
// (comp.started_retry): the first retry after forward progress costs
// one, and so does every ACK timeout, but the NAKs and implied NAKs that
// come during a sequence are free. Each of them used to cost one: with
// a READ at the head of the send queue whose response went missing, the
// NAKs for gaps further on (a different PSN each, none moving Comp.PSN
// past the READ) used up seven retries within 7 ms, and TestLossRecovery
// failed a READ with RETRY_EXC_ERR after about nine ACK timeouts in the
// whole run, one run in six under -race. The peer that sends NAKs is
// alive; a peer that stops answering is still caught, by the timeouts.
func (c *Completer) retry(qp *qpmgr.QP, why trace.RetryReason) {
	cs := &qp.Comp
	if why == trace.RetryTimeout || !cs.Retrying {
		if cs.RetryCnt == 0 {
			c.Counters.Inc(ib.RetryExceededErr)
			c.completeSend(qp, ib.WCRetryExcErr)
			qp.EnterErrorReported()
			return
		}
		if cs.RetryCnt != 7 || !c.Retry7Forever {
			cs.RetryCnt--
		}
	}
	cs.Retrying = true
	c.goBack(qp, why)
}

// retryNAK answers a PSN sequence error NAK for psn. A NAK for the PSN a
// go-back started from less than a round trip ago is answered already:
// the packet it asks for is on its way, and going back again would
// resend everything after it once more. Such NAKs come from a responder
// that repeats its NAK while the gap lasts (ack.go). Before the round
// trip's first sample it is taken as minRTO, not 0: a requester whose
// receive was delayed 1 ms took the first NAK and its repeat in one
// batch, 7 us apart, and went back twice (TestTraceWriteWithLoss, 1 run
// in 10 under -race).
func (c *Completer) retryNAK(qp *qpmgr.QP, psn uint32) {
	cs := &qp.Comp
	if cs.HaveGoBack && cs.GoBackPSN == cs.PSN {
		rtt := minRTO
		if srtt, _ := c.FC.RTT(&qp.FC); srtt != 0 {
			rtt = time.Duration(srtt)
		}
		if time.Since(cs.GoBackAt) < rtt {
			return
		}
	}
	c.retry(qp, trace.RetryNAK)
}

// goBack has the requester go back to Comp.PSN when it next runs, and
// tells the loss window.
func (c *Completer) goBack(qp *qpmgr.QP, why trace.RetryReason) {
	c.Counters.Inc(ib.CompleterRetryErr)
	cs := &qp.Comp
	cs.HaveGoBack, cs.GoBackPSN, cs.GoBackAt = true, cs.PSN, time.Now()
	c.FC.Lost(&qp.FC, cs.PSN, qp.Req.PSN)
	qp.Req.NeedRetry = true
	if c.Trace.On() {
		c.traceRetry(qp, why)
	}
	if c.Recovering != nil {
		srtt, _ := c.FC.RTT(&qp.FC)
		c.Recovering(time.Duration(srtt))
	}
	qp.Kick()
}

// traceRetry tells the trace that the requester goes back to Comp.PSN.
func (c *Completer) traceRetry(qp *qpmgr.QP, why trace.RetryReason) {
	c.Trace.Emit(trace.Event{Module: trace.ModCompleter, Step: trace.StepRetry, QPN: qp.QPN, PSN: qp.Comp.PSN, Arg: uint32(why)})
}

// retryOnce starts a retry unless one already started at this Comp.PSN
// for a gap or an implied NAK; if that one fails too, the timer catches it.
func (c *Completer) retryOnce(qp *qpmgr.QP) {
	cs := &qp.Comp
	if cs.HaveRetried && cs.RetriedPSN == cs.PSN {
		return
	}
	cs.HaveRetried, cs.RetriedPSN = true, cs.PSN
	c.retry(qp, trace.RetryImpliedNAK)
}

// minRTO bounds the retransmission timeout that follows the measured
// round trip (RFC 6298's srtt + 4 rttvar) from below: two daemons on
// loopback measure about 110 us on a busy host, whose scheduler stalls a
// daemon for longer now and then; a probe too early resends a window
// for nothing, one too late leaves the QP idle. With 1 ms, about 270
// probes per ib_write_bw run at 5% drop cost 0.3 s of 1.6 s; 300 us
// moved 78-91 MB/s against 77 in the same runs (bench/loss.sh).
const minRTO = 300 * time.Microsecond

// setRTO sets qp's retransmission timeout for probes: 0 (none) unless
// the QP is lossy; srtt + 4 rttvar once a round trip was measured; before
// that an eighth of the ACK timeout, the longest a peer holds an ACK
// (Acker.holdFor). Without a sample there used to be no probe at all:
// under bench/loss.sh the first messages' go-backs are never timed
// (Karn's rule, flowctl.Window), and a lost tail or last ACK in them cost
// the whole 67 ms ACK timeout, 0-2 per run in a third of the runs
// (debug prints: srtt 0, RTO 0, no probe, at every such timeout).
func (c *Completer) setRTO(qp *qpmgr.QP) {
	qp.RTO = 0
	if !c.FC.Lossy(&qp.FC) {
		return
	}
	srtt, rttvar := c.FC.RTT(&qp.FC)
	rto := time.Duration(srtt + 4*rttvar)
	if srtt == 0 {
		rto = qp.ACKTimeout() / 8
	}
	if rto > 0 {
		qp.RTO = max(rto, minRTO, c.FC.ProbeFloor(&qp.FC, qp.MTU()))
	}
}

// Timeout handles an expiry of the retransmission timer: nothing heard for
// the oldest unacknowledged PSN within the local ACK timeout, or, before
// that, within the retransmission timeout the measured round trip gives
// (qpmgr.QP.RTO). The early expiry is a probe: a loss no later packet
// revealed (the window's last packets, the last ACK) costs about a round
// trip instead of the ACK timeout (67 ms with perftest's timeout 14;
// 132 of them in one ib_write_bw run at 5% drop once the window shrank
// under loss). It goes back as a timeout would, but counts neither as a
// local ACK timeout nor against retry_cnt: only the ACK timeout, which
// the QP's timeout attribute sets, does. Probes run only while the QP
// is lossy (flowctl.Manager.Lossy: it lost a packet not long ago): a
// peer may hold an ACK back for its next request (the delayed ACK of
// ackhold.go), and a lossless ping-pong must not resend because of it.
// A probe never asks again for a READ while READ responses are coming,
// nor twice in one silence: each such request costs the responder a
// replay to the READ's end.
func (c *Completer) Timeout(qp *qpmgr.QP) {
	if !qp.Outstanding() {
		return
	}
	switch qp.State() {
	case ib.QPSRTS, ib.QPSSQD:
	default:
		return
	}
	if !qp.AckTimeoutDue() {
		cs := &qp.Comp
		if cs.ReadResps != cs.ReadRespsAtProbe {
			// READ responses came since the last early expiry: the
			// responder is working through the READs asked of it, in
			// order (rxe_resp.c replays a duplicate READ from its PSN
			// to the end), and a probe would queue one more replay of
			// up to the whole READ behind them. Against rxe in qemu
			// (about 19 MB/s) probes every 13 ms asked for 1009 MiB
			// of replays to move 8 MiB, 1,218 of 1,362 READ requests,
			// and rxe, seconds behind, answered the last READ too late:
			// RETRY_EXC_ERR. A gap or the ACK timeout still goes back.
			cs.ReadRespsAtProbe = cs.ReadResps
			qp.ArmTimer()
			return
		}
		if headRead(qp) {
			// A silent responder lost the READ request, or is
			// stalled (a qemu guest on a loaded host, 54 ms without a
			// packet): one probe asks again; more would each queue
			// another replay for when it runs again. Until a response
			// comes, only the ACK timeout asks once more.
			if cs.ReadProbed && cs.ReadRespsProbed == cs.ReadResps {
				qp.ArmTimer()
				return
			}
			cs.ReadProbed, cs.ReadRespsProbed = true, cs.ReadResps
		}
		qp.Probes++
		c.goBack(qp, trace.RetryProbe)
		qp.ArmTimer()
		return
	}
	c.Counters.Inc(ib.LocalAckTimeoutErr)
	qp.Backoff++
	c.retry(qp, trace.RetryTimeout)
	if qp.State() != ib.QPSErr {
		qp.ArmTimer()
	}
}

// headRead reports whether the oldest outstanding WQE is a READ.
func headRead(qp *qpmgr.QP) bool {
	if !qp.Outstanding() {
		return false
	}
	w := qp.SQ.At(qp.SQ.Head)
	return w.WR.Opcode == ib.WRRDMARead && w.State != qpmgr.WQEPosted
}

// headReadOrAtomic retires what a response at psn implies was received
// and returns the READ or atomic WQE the response belongs to.
func (c *Completer) headReadOrAtomic(qp *qpmgr.QP, psn uint32) *qpmgr.SendWQE {
	// A response to a later request acknowledges everything before it.
	c.ackUpTo(qp, bth.PSNAdd(psn, -1), false)
	if !qp.Outstanding() {
		return nil
	}
	w := qp.SQ.At(qp.SQ.Head)
	if !w.WR.Opcode.IsReadOrAtomic() || w.State == qpmgr.WQEPosted ||
		bth.PSNDiff(psn, w.FirstPSN) < 0 || bth.PSNDiff(psn, w.LastPSN) > 0 {
		return nil
	}
	return w
}

// readResponse places one READ response packet into the requester's
// buffers. Responses must come in PSN order; a gap sends the requester back
// to the first missing PSN (IBTA 9.7.5.1.5).
func (c *Completer) readResponse(qp *qpmgr.QP, p bth.Packet) {
	psn := p.BTH().PSN()
	w := c.headReadOrAtomic(qp, psn)
	if w == nil || w.WR.Opcode != ib.WRRDMARead {
		c.Counters.Inc(ib.DropUnexpectedResp)
		return
	}
	if bth.PSNDiff(psn, qp.Comp.PSN) > 0 {
		c.retryOnce(qp)
		return
	}
	mtu := qp.MTU()
	off := int(bth.PSNDiff(psn, w.FirstPSN)) * mtu
	n := p.PayloadLen()
	op := p.Opcode()
	last := op.Is(bth.FlagLast) || op.Is(bth.FlagOnly)
	if off+n > w.Len || (!last && n != mtu) || (last && off+n != w.Len) {
		c.Counters.Inc(ib.DropUnexpectedResp)
		return
	}
	if err := c.DMA.Scatter(qp.PD, w.WR.SGL, off, p.Payload()); err != nil {
		c.completeSend(qp, ib.WCLocProtErr)
		qp.EnterErrorReported()
		return
	}
	if c.Trace.On() {
		traceDMAWrite(c.Trace, qp, p, w.WR.WRID, n, off, false)
	}
	from := qp.Comp.PSN
	qp.Comp.PSN = bth.PSNAdd(psn, 1)
	if last {
		c.Counters.Inc(ib.RDMASends) // before the CQE makes the completion visible
		c.completeSend(qp, ib.WCSuccess)
	}
	c.progress(qp, from)
}

// atomicAck writes the original value an atomic returned into the
// requester's 8-byte buffer, in host order as rxe does.
func (c *Completer) atomicAck(qp *qpmgr.QP, p bth.Packet) {
	psn := p.BTH().PSN()
	w := c.headReadOrAtomic(qp, psn)
	if w == nil || !w.WR.Opcode.IsAtomic() || psn != qp.Comp.PSN {
		c.Counters.Inc(ib.DropUnexpectedResp)
		return
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH().OrigData())
	if err := c.DMA.Scatter(qp.PD, w.WR.SGL, 0, orig[:]); err != nil {
		c.completeSend(qp, ib.WCLocProtErr)
		qp.EnterErrorReported()
		return
	}
	from := qp.Comp.PSN
	qp.Comp.PSN = bth.PSNAdd(psn, 1)
	c.Counters.Inc(ib.RDMASends)
	c.completeSend(qp, ib.WCSuccess)
	c.progress(qp, from)
}

// completeSend retires the WQE at the head of qp's send queue with status
// st, telling the trace.
func (c *Completer) completeSend(qp *qpmgr.QP, st ib.WCStatus) {
	if c.Trace.On() {
		c.Trace.Emit(qpmgr.SendCompletionEvent(qp, st))
	}
	qp.CompleteSend(st)
}
