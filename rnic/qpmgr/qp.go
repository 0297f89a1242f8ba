package qpmgr

import (
	"fmt"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Limits of the requester, as rxe sets them (the device's limits an
// application sees are in package ib).
const (
	MaxUnackedPSNs = flowctl.DefaultWindow // rxe: RXE_MAX_UNACKED_PSNS; the window is flowctl's
	MaxPktsPerAck  = 64                    // rxe: RXE_MAX_PKT_PER_ACK
)

// Config is what CreateQP needs (ibv_qp_init_attr).
type Config struct {
	QPN    uint32
	Type   ib.QPType
	PD     dma.PD
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *RecvQueue // nil: the QP has its own RQ
	// XRCD is an XRC target's domain (Type ib.QPTypeXRCRecv).
	XRCD *XRCDomain
	Caps ib.QPCap
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
	// PortMTU is the port's active MTU in bytes: a UD QP's MTU, and the
	// limit of a connected QP's path MTU.
	PortMTU int
	// Counters are the device's counters; the QP counts into them.
	Counters *Counters
	// Kick schedules the QP on the send pipeline (the doorbell). It must
	// not block.
	Kick func(*QP)
}

// WQEState is where a send WQE is in the requester.
type WQEState uint8

const (
	WQEPosted  WQEState = iota // not started: no PSN yet
	WQEStarted                 // PSNs assigned, some packets sent (or to resend)
	WQESent                    // every packet sent, waiting for ACK or response
	WQEDone                    // completed
)

// SendWQE is a send work request as the NIC holds it.
type SendWQE struct {
	WR     ib.SendWR
	Len    int // message length in bytes
	State  WQEState
	Status ib.WCStatus

	FirstPSN, LastPSN uint32
	// Offset is the message offset of the next byte to send, PSN the PSN
	// of the next packet (the requester's cursor inside the WQE).
	Offset int
	PSN    uint32
	// Retried marks a WQE being sent again, for the retransmission counter.
	Retried bool
}

// NumPkts is the number of PSNs the message takes at path MTU mtu.
func NumPkts(op ib.WROpcode, length, mtu int) int {
	if op.IsAtomic() || length == 0 {
		return 1
	}
	return (length + mtu - 1) / mtu
}

// SendQueue is a ring of send WQEs. Head is the oldest WQE not yet
// completed, Next the next one the requester starts or continues, Tail the
// end: Head <= Next <= Tail, counted from creation.
type SendQueue struct {
	ring             []SendWQE
	Head, Next, Tail uint64
}

// At returns the WQE at position i (Head <= i < Tail).
func (q *SendQueue) At(i uint64) *SendWQE { return &q.ring[i%uint64(len(q.ring))] }

// Len is the number of WQEs not yet completed.
func (q *SendQueue) Len() int { return int(q.Tail - q.Head) }

// Cap is the number of WQEs the queue holds.
func (q *SendQueue) Cap() int { return len(q.ring) }

// ReqState is the requester's state (rxe: qp->req).
type ReqState struct {
	PSN       uint32 // next new PSN
	NoAckPkts int    // packets since the last AckReq
	NeedRetry bool   // go back to Comp.PSN when the requester next runs
	RNRUntil  time.Time
}

// CompState is the completer's state (rxe: qp->comp).
type CompState struct {
	PSN      uint32 // oldest PSN not yet acknowledged
	RetryCnt uint8  // retries left
	RNRRetry uint8  // RNR retries left
	// RetriedPSN is the Comp.PSN of the last retry a response gap or an
	// implied NAK started (HaveRetried set), so that the stream of
	// responses still in flight from before the retry does not start
	// another one each.
	RetriedPSN  uint32
	HaveRetried bool
	// Retrying is set by a retry and cleared by forward progress: the
	// NAKs and implied NAKs that come while it is set belong to the same
	// retry sequence and cost no retry_cnt, only ACK timeouts do (rxe:
	// comp.started_retry).
	Retrying bool
	// GoBackPSN is where the last go-back started, at GoBackAt
	// (HaveGoBack set): a NAK for it within a round trip is answered by
	// the go-back already under way (rx.Handler.retryNAK).
	GoBackPSN  uint32
	GoBackAt   time.Time
	HaveGoBack bool
	// ReadResps counts the READ response packets that came for what is
	// outstanding, ReadRespsAtProbe its value when the retransmission
	// timer last came early: a responder that sent READ responses since
	// then is busy answering, and a probe would only queue one more
	// replay behind that work (rx.Handler.Timeout). ReadProbed is set
	// when a probe asked again for a READ, at ReadResps ReadRespsProbed:
	// while no response comes after it, no other probe asks again.
	ReadResps, ReadRespsAtProbe, ReadRespsProbed uint64
	ReadProbed                                   bool
}

// RespResource is an RDMA READ or atomic a responder keeps to serve again
// when the request is retried (IBTA 9.7.5.1.3; rxe: resp_res).
type RespResource struct {
	Valid    bool
	Atomic   bool
	PSN      uint32 // first PSN
	LastPSN  uint32
	VA       uint64 // READ
	RKey     uint32
	Len      uint32
	OrigData uint64 // atomic result
	MSN      uint32 // MSN the response carried
}

// AckState is what a QP's responder owes the requester in ACKs and NAKs.
// rx.Acker (rnic/rx/ack.go) alone writes it, with the QP's lock held:
// every way an ACK or a NAK leaves is one of its methods.
type AckState struct {
	// Pending asks the receive pipeline to send an ACK for PSN at the end
	// of the batch (ACK coalescing).
	Pending bool
	PSN     uint32
	// Batch is the receive batch whose packets hold the last ACK Flush
	// sent (rx.Acker.Sent counts the batches that went out): until that
	// batch goes, a request of this QP would overtake the ACK.
	Batch uint64
	// Delayed ACK (see rx.Acker.AckHold). PingPong is set when the QP's
	// requester sent within the hold time of an ACK going out, and cleared
	// when a held ACK had to go alone; Held says the ACK for PSN is kept
	// back until HoldUntil at the latest; SentAt is when the last ACK went
	// alone.
	PingPong  bool
	Held      bool
	HoldUntil time.Time
	SentAt    time.Time
	NAKSent   bool // a NAK (sequence error or RNR) for the current gap was sent
	// A sequence-error NAK is sent again while its gap persists
	// (rx.Acker.nakAgain): NAKAgain is when (zero: never, as after an
	// RNR NAK), NAKAt when the last one went, NAKs how many went for this
	// gap, and NAKRTT the smoothed time from a gap's only NAK to the
	// expected PSN arriving: the round trip the requester takes to resend.
	NAKAgain time.Time
	NAKAt    time.Time
	NAKs     int
	NAKRTT   time.Duration
}

// RespState is the responder's state (rxe: qp->resp).
type RespState struct {
	EPSN uint32 // expected PSN
	MSN  uint32 // message sequence number
	// The message being received.
	InMsg     bth.Flags // FlagSend or FlagWrite while a multi-packet message is open
	HaveWQE   bool
	WQE       ib.RecvWR
	Offset    int // bytes received
	WriteVA   uint64
	WriteRKey uint32
	WriteLen  uint32
	// Ack is the state of the ACKs and NAKs the responder owes.
	Ack AckState
	// Resources is the READ/atomic replay ring, max_dest_rd_atomic long.
	Resources []RespResource
	NextRes   int
	// UCDrop discards the rest of a UC message whose start was lost.
	UCDrop bool
	// CommEst is set once COMM_EST was raised (QP.RequestArrived).
	CommEst bool
	// XRC is the SRQ of the request an XRC target serves (SetXRCTarget).
	XRC *XRCSRQ
}

// QP is a queue pair.
type QP struct {
	mu sync.Mutex

	QPN  uint32
	Type ib.QPType
	// XRC is ib.QPTypeXRCSend or ib.QPTypeXRCRecv for the ends of XRC,
	// whose Type is RC (xrc.go), 0 for every other QP.
	XRC ib.QPType
	// XRCD is an XRC target's XRC domain: the SRQs its requests may
	// name.
	XRCD *XRCDomain
	// PD is the QP's; an XRC target's is that of the SRQ its request
	// named (SetXRCTarget).
	PD       dma.PD
	SendCQ   *CQ
	RecvCQ   *CQ
	SRQ      *RecvQueue
	RQ       *RecvQueue // the QP's own receive queue, nil with an SRQ
	Caps     ib.QPCap
	SigAll   bool
	Counters *Counters
	PortMTU  int

	state ib.QPState
	Attr  ib.QPAttr
	SQ    SendQueue
	Req   ReqState
	Comp  CompState
	Resp  RespState
	// FC is the QP's flow-control state (rnic/flowctl: window, pacer,
	// reaction and notification points), used under the QP's lock.
	FC flowctl.QP

	kick func(*QP)
	// Scheduled is set while the QP is on the send pipeline's run list.
	Scheduled atomic.Bool
	// Coalesced is set while the QP is on the device's list of QPs whose
	// posts wait for an ACK or the application's next poll (rnic's post
	// coalescing).
	Coalesced atomic.Bool
	// TimerFired is set by the retransmission timer; the send pipeline
	// hands it to the completer.
	TimerFired atomic.Bool
	timer      *time.Timer
	timerArmed bool
	// timerAt is when the armed timer is due: an expiry taken before it
	// is a stale one (TimerExpired).
	timerAt time.Time
	// Backoff doubles the timeout per timeout in a row without progress,
	// at most MaxBackoff times, so that retransmissions on a starved host
	// do not feed on themselves; progress resets it. rxe and the IBTA use
	// a fixed timeout; a large cap would let a message that is unlucky a
	// few times in a row (likely at 5% loss) wait seconds for its retry.
	Backoff uint8
	// RTO, when not zero, is a retransmission timeout shorter than the
	// ACK timeout, from the round trip the completer measured (rx): the
	// timer fires after it, doubled per Probes, before the ACK timeout
	// of the period (ackDue) runs out, and such an early expiry is a
	// probe, not a timeout (AckTimeoutDue).
	RTO       time.Duration
	Probes    uint8
	ackDue    time.Time
	destroyed bool
	// sendSrc, if set, is told of every send WQE retired.
	sendSrc SendSource
	// onEvent gets the QP's asynchronous events (asyncev.go).
	onEvent func(ib.EventType)
}

// SendSource is a send queue in memory the host shares with the NIC: the
// host's ring (SendRing), or a test's stand-in. At a doorbell the device
// fetches the WQEs the host posted since the last fetch (Fetch, without
// the QP's lock), and the QP retires each WQE to it, with the QP's lock
// held, once the WQE is done with (completed, signaled or not, or
// flushed) and before its completion is visible, so that its slot is free
// by the time the application polls the completion (rxe's completer
// retires unsignaled WQEs the same way). Neither method calls out of the
// device: the host interface hands the ring over and is not called back.
type SendSource interface {
	// Fetch returns the WQEs posted since the last fetch, in order, as
	// the engine's records. A WQE that does not decode comes with its
	// error at the same index of bad (its WR holds what could be read:
	// wr_id, opcode). An error says the queue itself is garbage (its
	// producer index): nothing was fetched.
	Fetch() (wqes []SendWQE, bad []error, err error)
	Retire(n int)
}

// SetSendSource makes src the QP's send source (nil: none).
func (qp *QP) SetSendSource(src SendSource) {
	qp.mu.Lock()
	qp.sendSrc = src
	qp.mu.Unlock()
}

// SendSource returns the QP's send source, nil if it has none. Call with
// the lock held.
func (qp *QP) SendSource() SendSource { return qp.sendSrc }

// New makes a QP in RESET.
func New(cfg Config) (*QP, error) {
	var xrc ib.QPType
	switch cfg.Type {
	case ib.QPTypeRC, ib.QPTypeUC, ib.QPTypeUD:
	case ib.QPTypeXRCSend, ib.QPTypeXRCRecv:
		if (cfg.Type == ib.QPTypeXRCRecv) != (cfg.XRCD != nil) || cfg.SRQ != nil {
			return nil, fmt.Errorf("qpmgr: an XRC_RECV QP needs an XRC domain and no SRQ, an XRC_SEND QP neither")
		}
		xrc, cfg.Type = cfg.Type, ib.QPTypeRC
	default:
		return nil, fmt.Errorf("qpmgr: QP type %d not supported", cfg.Type)
	}
	c := cfg.Caps
	// A queue of 0 WRs is allowed, as rxe and mlx5 allow it: a QP that
	// only sends (qperf's bandwidth tests) or only receives asks for no
	// room on the other side. Posting to it fails (ib.ErrQueueFull), and a
	// SEND that finds no receive is answered with an RNR NAK.
	if c.MaxSendWR < 0 || c.MaxSendWR > ib.MaxQPWR || c.MaxSendSGE < 0 || c.MaxSendSGE > ib.MaxSGE ||
		c.MaxRecvSGE < 0 || c.MaxRecvSGE > ib.MaxSGE || c.MaxInlineData < 0 || c.MaxInlineData > ib.MaxInlineData ||
		(cfg.SRQ == nil && (c.MaxRecvWR < 0 || c.MaxRecvWR > ib.MaxQPWR)) {
		return nil, fmt.Errorf("qpmgr: QP caps %+v outside the device limits", c)
	}
	// A send WQE holds its SGEs or its inline data, so the inline room
	// is at least the SGEs' (16 bytes each), and the QP says so, as
	// rxe's rxe_qp_init_req does: Debian's rdma_xclient posts 16 bytes
	// inline on a QP made with one SGE and max_inline_data 0.
	c.MaxInlineData = max(c.MaxInlineData, c.MaxSendSGE*16)
	if ib.MTUFromBytes(cfg.PortMTU) == 0 {
		return nil, fmt.Errorf("qpmgr: port MTU %d is not an IB MTU", cfg.PortMTU)
	}
	// An XRC send QP has no receive CQ, a target no CQ at all: its
	// completions go to its SRQs' CQs.
	if (cfg.SendCQ == nil && xrc != ib.QPTypeXRCRecv) || (cfg.RecvCQ == nil && xrc == 0) || cfg.Counters == nil || cfg.Kick == nil {
		return nil, fmt.Errorf("qpmgr: QP needs send and receive CQs, counters and a doorbell")
	}
	qp := &QP{
		QPN: cfg.QPN, Type: cfg.Type, XRC: xrc, XRCD: cfg.XRCD, PD: cfg.PD, SendCQ: cfg.SendCQ, RecvCQ: cfg.RecvCQ,
		SRQ: cfg.SRQ, Caps: c, SigAll: cfg.SigAll, Counters: cfg.Counters, kick: cfg.Kick,
		PortMTU: cfg.PortMTU,
	}
	qp.FC.QPN = cfg.QPN
	qp.SQ.ring = make([]SendWQE, c.MaxSendWR)
	if cfg.SRQ == nil {
		qp.RQ = NewRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	qp.reset()
	return qp, nil
}

// Lock and Unlock guard the QP's state.
func (qp *QP) Lock()   { qp.mu.Lock() }
func (qp *QP) Unlock() { qp.mu.Unlock() }

// State is the QP's state; call with the lock held.
func (qp *QP) State() ib.QPState { return qp.state }

// MTU is the path MTU in bytes; UD datagrams go at the port's MTU.
func (qp *QP) MTU() int {
	if qp.Type == ib.QPTypeUD || qp.Attr.PathMTU == 0 {
		return qp.PortMTU
	}
	return qp.Attr.PathMTU.Bytes()
}

// Kick rings the QP's doorbell: the send pipeline will run it.
func (qp *QP) Kick() { qp.kick(qp) }

// HasSendWork reports whether the requester has packets to send: a WQE
// not yet sent whole, or a retry to start.
func (qp *QP) HasSendWork() bool { return qp.SQ.Next < qp.SQ.Tail || qp.Req.NeedRetry }

// Recv returns the queue the QP's receive WQEs come from. An XRC
// target's is the SRQ of its request (SetXRCTarget): call it with the
// lock held.
func (qp *QP) Recv() *RecvQueue {
	if qp.Resp.XRC != nil {
		return qp.Resp.XRC.Queue
	}
	if qp.SRQ != nil {
		return qp.SRQ
	}
	return qp.RQ
}

// Dest is the peer's IP address (connected QPs).
func (qp *QP) Dest() netip.Addr { return qp.Attr.AH.Addr() }

// SrcPort is the UDP source port of the QP's packets, as rxe picks it.
func (qp *QP) SrcPort() uint16 {
	if qp.Type == ib.QPTypeUD {
		return ibudp.SourcePortQPN(qp.QPN)
	}
	return ibudp.SourcePortFlow(qp.Attr.AH.FlowLabel, qp.QPN, qp.Attr.DestQPN)
}

// ACKTimeout is the local ACK timeout, 4.096 us * 2^Timeout (IBTA
// 9.7.6.1.3); 0 means the QP never times out.
func (qp *QP) ACKTimeout() time.Duration {
	t := qp.Attr.Timeout
	if t == 0 {
		return 0
	}
	if t > 31 {
		t = 31
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// Modify applies ModifyQP: it checks the transition and the attribute
// values first and changes nothing if either is wrong (IBTA 11.2.4.2).
func (qp *QP) Modify(a *ib.QPAttr, mask ib.AttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return fmt.Errorf("qpmgr: QP %#x destroyed", qp.QPN)
	}
	next := qp.state
	if mask&ib.AttrState != 0 {
		next = a.State
	}
	if err := CheckModify(qp.VerbsType(), qp.state, next, mask); err != nil {
		return err
	}
	if err := checkAttr(a, mask, qp.PortMTU); err != nil {
		return fmt.Errorf("qpmgr: QP %#x: %w", qp.QPN, err)
	}
	qp.apply(a, mask)
	if next != qp.state {
		qp.enter(next)
	}
	return nil
}

func checkAttr(a *ib.QPAttr, mask ib.AttrMask, portMTU int) error {
	switch {
	case mask&ib.AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU.Bytes() > portMTU):
		return fmt.Errorf("path MTU %d: need 256..%d", a.PathMTU.Bytes(), portMTU)
	case mask&ib.AttrTimeout != 0 && a.Timeout > 31:
		return fmt.Errorf("timeout %d > 31", a.Timeout)
	case mask&ib.AttrRetryCnt != 0 && a.RetryCnt > 7:
		return fmt.Errorf("retry_cnt %d > 7", a.RetryCnt)
	case mask&ib.AttrRNRRetry != 0 && a.RNRRetry > 7:
		return fmt.Errorf("rnr_retry %d > 7", a.RNRRetry)
	case mask&ib.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return fmt.Errorf("min_rnr_timer %d > 31", a.MinRNRTimer)
	case mask&ib.AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > ib.MaxRdAtomic:
		return fmt.Errorf("max_rd_atomic %d > %d", a.MaxRdAtomic, ib.MaxRdAtomic)
	case mask&ib.AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > ib.MaxRdAtomic:
		return fmt.Errorf("max_dest_rd_atomic %d > %d", a.MaxDestRdAtomic, ib.MaxRdAtomic)
	case mask&ib.AttrSQPSN != 0 && a.SQPSN > bth.PSNMask:
		return fmt.Errorf("sq_psn %#x has more than 24 bits", a.SQPSN)
	case mask&ib.AttrRQPSN != 0 && a.RQPSN > bth.PSNMask:
		return fmt.Errorf("rq_psn %#x has more than 24 bits", a.RQPSN)
	case mask&ib.AttrDestQPN != 0 && a.DestQPN > bth.QPNMask:
		return fmt.Errorf("dest_qp_num %#x has more than 24 bits", a.DestQPN)
	case mask&ib.AttrAccessFlags != 0 && a.AccessFlags&^(ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic) != 0:
		return fmt.Errorf("qp_access_flags %v not allowed on a QP", a.AccessFlags)
	case mask&ib.AttrAV != 0 && !a.AH.Addr().IsValid():
		return fmt.Errorf("address vector has no usable DGID")
	case mask&ib.AttrAV != 0 && int(a.AH.SGIDIndex) >= ib.GIDTableLen:
		return fmt.Errorf("sgid_index %d: the port's GID table has %d entries", a.AH.SGIDIndex, ib.GIDTableLen)
	case mask&ib.AttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return fmt.Errorf("pkey_index %d: the port has one P_Key", a.PKeyIndex)
	}
	return nil
}

func (qp *QP) apply(a *ib.QPAttr, mask ib.AttrMask) {
	t := &qp.Attr
	set := func(bit ib.AttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(ib.AttrPathMTU, func() { t.PathMTU = a.PathMTU })
	set(ib.AttrQKey, func() { t.QKey = a.QKey })
	set(ib.AttrRQPSN, func() { t.RQPSN = a.RQPSN })
	set(ib.AttrSQPSN, func() { t.SQPSN = a.SQPSN })
	set(ib.AttrDestQPN, func() { t.DestQPN = a.DestQPN })
	set(ib.AttrAccessFlags, func() { t.AccessFlags = a.AccessFlags })
	set(ib.AttrPKeyIndex, func() { t.PKeyIndex = a.PKeyIndex })
	set(ib.AttrPort, func() { t.PortNum = a.PortNum })
	set(ib.AttrAV, func() { t.AH = a.AH })
	set(ib.AttrTimeout, func() { t.Timeout = a.Timeout })
	set(ib.AttrRetryCnt, func() { t.RetryCnt = a.RetryCnt; qp.Comp.RetryCnt = a.RetryCnt })
	set(ib.AttrRNRRetry, func() { t.RNRRetry = a.RNRRetry; qp.Comp.RNRRetry = a.RNRRetry })
	set(ib.AttrMinRNRTimer, func() { t.MinRNRTimer = a.MinRNRTimer })
	set(ib.AttrMaxQPRdAtomic, func() { t.MaxRdAtomic = a.MaxRdAtomic })
	set(ib.AttrMaxDestRdAtomic, func() {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
		qp.Resp.Resources = make([]RespResource, max(int(a.MaxDestRdAtomic), 1))
		qp.Resp.NextRes = 0
	})
	set(ib.AttrRQPSN, func() { qp.Resp.EPSN = a.RQPSN })
	set(ib.AttrSQPSN, func() { qp.Req.PSN, qp.Comp.PSN = a.SQPSN, a.SQPSN })
}

// enter moves the QP to state s, doing what the state asks on entry.
func (qp *QP) enter(s ib.QPState) {
	qp.state = s
	qp.Attr.State = s
	switch s {
	case ib.QPSReset:
		qp.reset()
	case ib.QPSRTS:
		qp.Kick()
	case ib.QPSErr:
		qp.flush()
		// IBTA 11.6.3.1: a QP of an SRQ that enters ERR, by the NIC
		// or by modify_qp, raises LAST_WQE_REACHED once its last WQE
		// is done with (rxe's flush_recv_queue).
		if qp.SRQ != nil {
			qp.raise(ib.EventQPLastWQEReached)
		}
	}
}

// reset empties the queues without completions, as modify to RESET does.
func (qp *QP) reset() {
	qp.stopTimer()
	qp.state = ib.QPSReset
	qp.Attr = ib.QPAttr{}
	qp.SQ.Head, qp.SQ.Next, qp.SQ.Tail = 0, 0, 0
	clear(qp.SQ.ring)
	if qp.RQ != nil {
		qp.RQ.Drain()
	}
	qp.Req, qp.Comp = ReqState{}, CompState{}
	qp.Resp = RespState{Resources: make([]RespResource, 1)}
}

// EnterError moves the QP to ERR and flushes its queues. Call with the lock
// held. The NIC moved it there for an error no completion reports:
// QP_FATAL, the local work queue catastrophic error (IBTA 11.6.3.1);
// EnterErrorFor names another kind, EnterErrorReported none.
func (qp *QP) EnterError() { qp.EnterErrorFor(ib.EventQPFatal) }

// flush completes every outstanding WQE with WR_FLUSH_ERR (IBTA 10.3.1:
// in ERR all WQEs complete in error), nothing lost silently.
func (qp *QP) flush() {
	qp.stopTimer()
	for qp.SQ.Head < qp.SQ.Tail {
		w := qp.SQ.At(qp.SQ.Head)
		if w.State != WQEDone {
			qp.completeSend(w, ib.WCWRFlushErr)
		}
		qp.SQ.Head++
	}
	qp.SQ.Next = qp.SQ.Tail
	if qp.Resp.HaveWQE {
		qp.completeRecvFlush(qp.Resp.WQE)
		qp.Resp.HaveWQE = false
	}
	if qp.RQ != nil {
		for _, wr := range qp.RQ.Drain() {
			qp.completeRecvFlush(wr)
		}
	}
}

func (qp *QP) completeRecvFlush(wr ib.RecvWR) {
	qp.Recv().retire()
	qp.pushRecv(wr.WRID, &RecvCompletion{Status: ib.WCWRFlushErr, Opcode: ib.WCRecv})
}

// Flush completes, with WR_FLUSH_ERR, any WQE posted while in ERR.
func (qp *QP) Flush() {
	if qp.state == ib.QPSErr {
		qp.flush()
	}
}

// Destroy stops the QP's timers; the device drops it from its table.
func (qp *QP) Destroy() {
	qp.mu.Lock()
	qp.destroyed = true
	qp.stopTimer()
	qp.mu.Unlock()
}

// Destroyed reports whether the QP was destroyed.
func (qp *QP) Destroyed() bool { return qp.destroyed }

// RetryTimeout is how long the retransmission timer waits: the local ACK
// timeout, doubled per Backoff up to MaxBackoff times; 0 if the QP has none.
func (qp *QP) RetryTimeout() time.Duration {
	return qp.ACKTimeout() << min(qp.Backoff, MaxBackoff)
}

// MaxBackoff is the most doublings of the ACK timeout (QP.Backoff): 8x.
const MaxBackoff = 3

// ArmTimer starts the retransmission timer if it is not running (rxe
// arms it when a packet goes out and no timer is pending). It runs until
// the ACK timeout of the current period, opened now if none is, or
// until RTO (doubled per probe) if that comes first.
func (qp *QP) ArmTimer() {
	d := qp.RetryTimeout()
	if d == 0 || qp.destroyed || qp.timerArmed {
		return
	}
	now := time.Now()
	if !qp.ackDue.After(now) {
		// None open, or one whose expiry no Timeout consumed (the QP
		// had nothing outstanding by then): a new period.
		qp.ackDue = now.Add(d)
	}
	d = max(qp.ackDue.Sub(now), time.Microsecond)
	if qp.RTO > 0 {
		d = min(d, qp.RTO<<min(qp.Probes, MaxBackoff))
	}
	qp.timerArmed = true
	qp.timerAt = now.Add(d)
	if qp.timer == nil {
		qp.timer = time.AfterFunc(d, qp.onTimer)
		return
	}
	qp.timer.Reset(d)
}

// RestartTimer restarts the retransmission timer after progress, or stops
// it when nothing is outstanding.
func (qp *QP) RestartTimer() {
	if !qp.Outstanding() {
		qp.stopTimer()
		return
	}
	qp.stopTimer()
	qp.ArmTimer()
}

func (qp *QP) stopTimer() {
	if qp.timer != nil {
		qp.timer.Stop()
	}
	qp.timerArmed = false
	qp.ackDue = time.Time{}
	qp.TimerFired.Store(false)
}

// AckTimeoutDue reports, for an expiry of the timer, whether the ACK
// timeout of the period ran out (the next ArmTimer opens a new period)
// or the expiry came early, after RTO: a probe.
func (qp *QP) AckTimeoutDue() bool {
	if !qp.ackDue.IsZero() && time.Now().Before(qp.ackDue) {
		return false
	}
	qp.ackDue = time.Time{}
	return true
}

// TimerExpired is called by the send pipeline, with the lock held, when
// it takes a timer expiry: the timer is no longer pending. It reports
// false for an expiry that raced with a stop.
//
// An expiry taken before the armed timer is due is stale: it belongs to
// a timer that stopTimer stopped too late (time.Timer.Stop returned
// false: onTimer had started) and that was armed again since. Such an
// onTimer sets TimerFired after stopTimer cleared it, and at load 17 on 2
// cores it ran more than 20 ms late (a stress of RestartTimer against
// 20 us timers), after any number of later arms. Taken as the armed
// timer's expiry it cleared timerArmed while that timer was still
// pending and ran the completer's Timeout early: a probe or a go-back
// the round trip did not call for. The armed timer stays armed and
// pending; its own expiry comes at timerAt (the runtime fires an
// AfterFunc no earlier than its duration on the same monotonic clock).
func (qp *QP) TimerExpired() bool {
	if !qp.TimerFired.Swap(false) || !qp.timerArmed {
		return false
	}
	if time.Now().Before(qp.timerAt) {
		return false
	}
	qp.timerArmed = false
	return true
}

func (qp *QP) onTimer() {
	qp.TimerFired.Store(true)
	qp.kick(qp)
}

// KickAfter rings the doorbell after d, for the end of an RNR wait.
func (qp *QP) KickAfter(d time.Duration) { time.AfterFunc(d, func() { qp.kick(qp) }) }

// CompleteSend retires the WQE at the head of the send queue with status st:
// a completion goes to the send CQ if the WR was signaled or failed.
func (qp *QP) CompleteSend(st ib.WCStatus) {
	w := qp.SQ.At(qp.SQ.Head)
	qp.completeSend(w, st)
	qp.SQ.Head++
	if qp.SQ.Next < qp.SQ.Head {
		qp.SQ.Next = qp.SQ.Head
	}
}

func (qp *QP) completeSend(w *SendWQE, st ib.WCStatus) {
	w.State, w.Status = WQEDone, st
	if qp.sendSrc != nil {
		qp.sendSrc.Retire(1)
	}
	if st == ib.WCSuccess && w.WR.Flags&ib.SendSignaled == 0 && !qp.SigAll {
		return
	}
	// The completion is written from the WQE itself (CQ.PushSend): into
	// the host's CQE ring with no WC made between.
	var n uint32
	var flags ib.WCFlags
	if st == ib.WCSuccess {
		n = uint32(w.Len)
		if w.WR.Opcode == ib.WRSendWithImm || w.WR.Opcode == ib.WRRDMAWriteWithImm {
			flags = ib.WCFlagWithImm
		}
	}
	if qp.SendCQ == nil { // an XRC target, which has no send queue to complete
		qp.Counters.Inc(ib.SendErr)
		return
	}
	// A send CQE that finds the CQ full is lost (counted, and the CQ
	// raises CQ_ERR) and the QP goes on, as rxe's completer does: its
	// do_complete ignores rxe_cq_post's -EBUSY (Linux 6.1, Debian 12's),
	// where IBTA would take the QP to ERR. rnicd follows rxe, against
	// which the interop suite runs.
	if err := qp.SendCQ.PushSend(w.WR.WRID, st, w.WR.Opcode.WCOpcode(), flags, n, qp.QPN); err != nil {
		qp.Counters.Inc(ib.SendErr)
	}
}

// CompleteRecv completes the receive WQE wr (the device's record of it,
// as its receive queue fetched it) with c: its slot is retired and its
// CQE written from wr's wr_id and c. It reports false if the CQE found
// the receive CQ full: the QP is then in ERR (pushRecv), and the request
// that completed must not be acknowledged.
func (qp *QP) CompleteRecv(wr *ib.RecvWR, c *RecvCompletion) bool {
	qp.Recv().retire()
	return qp.pushRecv(wr.WRID, c)
}

// FailSend completes, with status st, a send WQE the host interface
// fetched and could not hand the engine (it did not decode). It takes the
// send queue's next position, so that the queue's positions stay those of
// the host's ring, and is retired like any other. Call with the lock held
// and the QP in ERR: everything before it is flushed first.
func (qp *QP) FailSend(wr ib.SendWR, st ib.WCStatus) {
	qp.Flush()
	*qp.SQ.At(qp.SQ.Tail) = SendWQE{WR: wr}
	qp.SQ.Tail++
	qp.CompleteSend(st)
}

// FailRecv completes, with status st, a receive WQE the source fetched
// and could not hand the queue; the source retired it already. Call with
// the lock held.
func (qp *QP) FailRecv(wrid uint64, st ib.WCStatus) {
	qp.pushRecv(wrid, &RecvCompletion{Status: st, Opcode: ib.WCRecv})
}

// pushRecv writes a receive CQE. One that finds the CQ full is lost,
// and the QP goes to ERR as rxe's responder takes it there
// (do_complete's failed rxe_cq_post is RESPST_ERR_CQ_OVERFLOW, class
// G, then rxe_qp_error): a QP whose receive completions are being lost
// must not go on taking messages whose only record is gone. rxe raises
// no QP event for it; IBTA 11.6.3.1 names a work queue that can no
// longer report its completions a local work queue catastrophic error,
// as mlx5 reports it: QP_FATAL (EnterError), after the CQ's CQ_ERR.
// Its other WQEs are flushed; those find the CQ full too and are lost
// with it, each counted (hostif_cq_overrun). The send side differs, as
// in rxe: see completeSend.
func (qp *QP) pushRecv(wrid uint64, c *RecvCompletion) bool {
	if qp.RecvCQ == nil { // an XRC QP that never served a request
		qp.Counters.Inc(ib.SendErr)
		return true
	}
	err := qp.RecvCQ.PushRecv(wrid, qp.QPN, c)
	if err == nil {
		return true
	}
	qp.Counters.Inc(ib.SendErr)
	qp.EnterError()
	return false
}

// Outstanding reports whether any WQE has packets on the wire awaiting an
// ACK or response.
func (qp *QP) Outstanding() bool {
	return qp.SQ.Head < qp.SQ.Tail && qp.SQ.At(qp.SQ.Head).State != WQEPosted
}

// OutstandingRdAtomic counts READ and atomic WQEs started and not completed.
func (qp *QP) OutstandingRdAtomic() int {
	n := 0
	for i := qp.SQ.Head; i < qp.SQ.Next; i++ {
		if qp.SQ.At(i).WR.Opcode.IsReadOrAtomic() {
			n++
		}
	}
	return n
}

// PostSend queues send WQEs (already checked by the verbs layer) and rings
// the doorbell. It returns the index of the first WR that did not fit.
func (qp *QP) PostSend(wqes []SendWQE) (int, error) {
	for i := range wqes {
		if qp.SQ.Len() == qp.SQ.Cap() {
			return i, ib.ErrQueueFull
		}
		*qp.SQ.At(qp.SQ.Tail) = wqes[i]
		qp.SQ.Tail++
	}
	return len(wqes), nil
}

// TimerString describes the retransmission timer, for the dump of a QP
// that stalled (a test's poll that gave up). Call with the lock held.
func (qp *QP) TimerString() string {
	due := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return time.Until(t).String()
	}
	return fmt.Sprintf("armed %v due in %s, fired %v, ACK timeout due in %s, RTO %v, probes %d, scheduled %v",
		qp.timerArmed, due(qp.timerAt), qp.TimerFired.Load(), due(qp.ackDue), qp.RTO, qp.Probes, qp.Scheduled.Load())
}
