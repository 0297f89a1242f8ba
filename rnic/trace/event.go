package trace

import (
	"fmt"
	"strings"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/mad"
)

// Module is the NIC block an event comes from, as DESIGN.md lays them out.
type Module uint8

const (
	ModVerbs     Module = iota + 1 // verbs interface: work requests posted
	ModDoorbell                    // doorbell: the send pipeline told of work
	ModQPMgr                       // QP manager: timers
	ModWQE                         // WQE process engine (requester)
	ModDMA                         // DMA engine: reads and writes of registered memory
	ModRX                          // RX packet handler: classifier and responder
	ModCompleter                   // completer: ACKs, NAKs, responses, CQEs
	ModPort                        // Ethernet/UDP port: ICRC, wire
	ModFault                       // the fault injector in front of the port
	ModFlowCtl                     // Flow Control Manager: CE, CNPs, rate changes
	ModCM                          // Communication Manager on QP1: CM MADs and connection states
	ModTrace                       // the tracer itself: where a reader missed events
	numModules
)

var moduleNames = [numModules]string{"", "verbs", "doorbell", "qpmgr", "wqe", "dma", "rx", "comp", "port", "fault", "flowctl", "cm", "trace"}

func (m Module) String() string {
	if m < numModules && moduleNames[m] != "" {
		return moduleNames[m]
	}
	return fmt.Sprintf("module(%d)", uint8(m))
}

// Step is what happened.
type Step uint8

const (
	StepPost      Step = iota + 1 // send WR posted: WRID, WROp, Len
	StepPostRecv                  // receive WR posted: WRID, Len
	StepDoorbell                  // doorbell rung: Arg WRs posted
	StepFetch                     // WQE fetched and started: WRID, WROp, Len, PSN first, Arg packets
	StepDMARead                   // payload gathered: Len bytes at message offset Arg
	StepSegment                   // one packet's slice: PSN, bytes Arg..Arg+Len of Aux
	StepHeaders                   // headers built: Opcode, PSN, Len payload, Flags
	StepICRC                      // ICRC sealed: Arg the ICRC
	StepTransmit                  // packet on the wire: Len bytes of IP datagram, DestQPN, Aux the AETH syndrome if any
	StepReceive                   // packet off the wire: Len bytes of IP datagram, Aux the AETH syndrome if any
	StepICRCCheck                 // ICRC checked: Arg an ibudp.ICRCStatus, or ICRCBad
	StepPSNCheck                  // responder PSN check: Arg a PSNVerdict, Aux the expected PSN
	StepDMAWrite                  // payload placed: Len bytes at offset Arg (of the message or region)
	StepAckSent                   // ACK/NAK sent: PSN, Arg syndrome, Aux MSN
	StepAckRecv                   // ACK/NAK received: PSN, Arg syndrome, Aux MSN
	StepRetry                     // go-back-N decided: PSN to resend from, Arg a RetryReason
	StepRewind                    // requester went back: PSN, WRID of the WQE it resumes
	StepComplete                  // WQE retired: WRID, Arg WC status, FlagCQE if a CQE was written
	StepDrop                      // packet dropped: Arg the qpmgr.Counter that counts it
	StepFaultDrop                 // fault injector dropped a packet: Arg 0 TX, 1 RX
	StepLinkMark                  // the injector's bottleneck link marked a packet CE: Arg 0 TX, 1 RX, Aux the queue depth in bytes
	StepLinkDrop                  // the bottleneck link's queue was full: Arg 0 TX, 1 RX, Aux the queue depth in bytes
	StepCERecv                    // notification point: a packet arrived ECN-marked CE; Arg 1 if a CNP answers it
	StepCNPSent                   // notification point: CNP sent to DestQPN
	StepCNPRecv                   // reaction point: CNP received
	StepRate                      // reaction point: Arg a flowctl.EventKind, Aux the current rate and Len the target, in Mb/s, WRID alpha (1024ths)
	StepCMSent                    // CM MAD sent: Arg its mad.AttrID, Aux the connection's state before and Len after (CMNoState: none), WRID the local comm ID
	StepCMRecv                    // CM MAD received: as StepCMSent
	StepLost                      // the reader fell a ring behind: Arg events went unread before this point (Sub.TryRead)
	numSteps
)

var stepNames = [numSteps]string{"", "post", "post_recv", "doorbell", "fetch", "dma_read", "segment",
	"headers", "icrc", "transmit", "receive", "icrc_check", "psn_check", "dma_write", "ack_sent",
	"ack_recv", "retry", "rewind", "complete", "drop", "fault_drop", "link_mark", "link_drop",
	"ce_received", "cnp_sent", "cnp_received", "rate", "cm_sent", "cm_received", "lost"}

func (s Step) String() string {
	if s < numSteps && stepNames[s] != "" {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", uint8(s))
}

// Flags qualify an event.
type Flags uint8

const (
	FlagAckReq     Flags = 1 << iota // the packet asks for an ACK
	FlagRetransmit                   // a packet sent again (go-back-N)
	FlagRecv                         // a receive WR or receive completion
	FlagCQE                          // the completion wrote a CQE (signaled or failed)
	FlagSolicited                    // solicited event
)

// PSNVerdict is the responder's verdict on a request's PSN (IBTA 9.7.5.1).
type PSNVerdict uint32

const (
	PSNOk         PSNVerdict = iota // the expected PSN
	PSNDuplicate                    // behind: answered again, not executed again
	PSNOutOfOrder                   // ahead: a gap, NAKed once
)

func (v PSNVerdict) String() string {
	switch v {
	case PSNOk:
		return "ok"
	case PSNDuplicate:
		return "duplicate"
	case PSNOutOfOrder:
		return "out of sequence"
	}
	return "verdict(?)"
}

// RetryReason is why the requester goes back (go-back-N).
type RetryReason uint32

const (
	RetryTimeout    RetryReason = iota + 1 // local ACK timeout
	RetryNAK                               // NAK PSN sequence error
	RetryRNR                               // RNR NAK: wait, then resend
	RetryImpliedNAK                        // a response or ACK skipped a READ/atomic, or READ responses have a gap
	RetryProbe                             // the measured round trip passed with no answer, before the ACK timeout
)

func (r RetryReason) String() string {
	switch r {
	case RetryTimeout:
		return "timeout"
	case RetryNAK:
		return "NAK"
	case RetryRNR:
		return "RNR"
	case RetryImpliedNAK:
		return "implied NAK"
	case RetryProbe:
		return "probe"
	}
	return "reason(?)"
}

// ICRCBad is the Arg of a StepICRCCheck whose ICRC did not match.
const ICRCBad = 0xff

// Event is one step of one message through one NIC. It is a plain value
// of fixed size: the NIC name is a string set once per device.
type Event struct {
	Seq    uint64 // order of arrival at the Tracer, from 1
	Time   int64  // Unix nanoseconds
	NIC    string
	Module Module
	Step   Step
	Flags  Flags
	Opcode bth.Opcode  // packet steps
	WROp   ib.WROpcode // work request steps
	QPN    uint32      // the local QP; 0 where none (a packet no QP built)
	// DestQPN is the BTH destination QP of a packet the port sent or
	// received.
	DestQPN uint32
	PSN     uint32
	WRID    uint64
	Len     uint32
	Arg     uint32 // step-specific, see the Step constants
	Aux     uint32 // step-specific
}

// HasPSN reports whether the event is about a packet or a PSN.
func (e *Event) HasPSN() bool {
	switch e.Step {
	case StepPost, StepPostRecv, StepDoorbell, StepDMARead, StepDMAWrite, StepComplete, StepCMSent, StepCMRecv, StepLost:
		return false
	case StepDrop:
		return e.Opcode != 0 || e.PSN != 0
	}
	return true
}

// IsPacket reports whether the event is a packet crossing the wire
// (transmit or receive), or lost by the fault injector.
func (e *Event) IsPacket() bool {
	return e.Step == StepTransmit || e.Step == StepReceive || e.Step == StepFaultDrop
}

// OpName is the short name of the event's packet opcode, IBTA's without
// the RC_ prefix (UC_ and UD_ stay).
func (e *Event) OpName() string { return strings.TrimPrefix(e.Opcode.String(), "RC_") }

// Detail renders what the step's figures say, briefly.
func (e *Event) Detail() string { return string(e.AppendDetail(nil)) }

// AppendDetail appends Detail's text to b: a writer of many events
// (AppendJSON) renders each without a string of its own.
func (e *Event) AppendDetail(b []byte) []byte {
	switch e.Step {
	case StepLost:
		return fmt.Appendf(b, "%d events went unread here: this reader fell more than the tracer's ring behind", e.Arg)
	case StepPost:
		return fmt.Appendf(b, "post %v wr_id %#x %dB", e.WROp, e.WRID, e.Len)
	case StepPostRecv:
		return fmt.Appendf(b, "post recv wr_id %#x %dB", e.WRID, e.Len)
	case StepDoorbell:
		return fmt.Appendf(b, "doorbell: %d WR", e.Arg)
	case StepFetch:
		return fmt.Appendf(b, "fetch %v wr_id %#x %dB: %d packet(s) from psn 0x%06x", e.WROp, e.WRID, e.Len, e.Arg, e.PSN)
	case StepDMARead:
		return fmt.Appendf(b, "dma read %dB at offset %d wr_id %#x", e.Len, e.Arg, e.WRID)
	case StepSegment:
		if e.Len == 0 {
			return append(b, "segment: no payload"...)
		}
		return fmt.Appendf(b, "segment bytes %d..%d of %d", e.Arg, e.Arg+e.Len-1, e.Aux)
	case StepHeaders:
		b = fmt.Appendf(b, "%s %dB", e.OpName(), e.Len)
		if e.Flags&FlagAckReq != 0 {
			b = append(b, " ackreq"...)
		}
		if e.Flags&FlagRetransmit != 0 {
			b = append(b, " RETRANSMIT"...)
		}
		return b
	case StepICRC:
		return fmt.Appendf(b, "%s icrc 0x%08x", e.OpName(), e.Arg)
	case StepTransmit:
		return fmt.Appendf(b, "tx %s %dB to qp %#x", e.OpName(), e.Len, e.DestQPN)
	case StepReceive:
		return fmt.Appendf(b, "rx %s %dB", e.OpName(), e.Len)
	case StepICRCCheck:
		if e.Arg == ICRCBad {
			return fmt.Appendf(b, "%s icrc BAD: dropped", e.OpName())
		}
		return fmt.Appendf(b, "%s icrc %v", e.OpName(), ibudp.ICRCStatus(e.Arg))
	case StepPSNCheck:
		if PSNVerdict(e.Arg) == PSNOk {
			return fmt.Appendf(b, "%s psn ok", e.OpName())
		}
		return fmt.Appendf(b, "%s psn %v (expected 0x%06x)", e.OpName(), PSNVerdict(e.Arg), e.Aux)
	case StepDMAWrite:
		if e.Flags&FlagRecv != 0 {
			return fmt.Appendf(b, "dma write %dB at offset %d of recv wr_id %#x", e.Len, e.Arg, e.WRID)
		}
		return fmt.Appendf(b, "dma write %dB at offset %d", e.Len, e.Arg)
	case StepAckSent, StepAckRecv:
		verb := "sent"
		if e.Step == StepAckRecv {
			verb = "received"
		}
		return fmt.Appendf(b, "%v %s msn %d", bth.Syndrome(e.Arg), verb, e.Aux)
	case StepRetry:
		return fmt.Appendf(b, "go-back-N from psn 0x%06x: %v", e.PSN, RetryReason(e.Arg))
	case StepRewind:
		return fmt.Appendf(b, "rewind to psn 0x%06x, wr_id %#x", e.PSN, e.WRID)
	case StepComplete:
		kind := "send"
		if e.Flags&FlagRecv != 0 {
			kind = "recv"
		}
		cqe := "no CQE (unsignaled)"
		if e.Flags&FlagCQE != 0 {
			cqe = "CQE"
		}
		op := ""
		if e.Flags&FlagRecv == 0 {
			op = e.WROp.String() + " "
		}
		return fmt.Appendf(b, "%s %s%s wr_id %#x %v %dB", cqe, op, kind, e.WRID, ib.WCStatus(e.Arg), e.Len)
	case StepDrop:
		if e.Opcode != 0 || e.PSN != 0 {
			return fmt.Appendf(b, "%s dropped: %v", e.OpName(), ib.Counter(e.Arg))
		}
		return fmt.Appendf(b, "dropped: %v", ib.Counter(e.Arg))
	case StepFaultDrop:
		dir := "tx"
		if e.Arg == 1 {
			dir = "rx"
		}
		return fmt.Appendf(b, "%s LOST (fault injector, %s)", e.OpName(), dir)
	case StepLinkMark, StepLinkDrop:
		dir := "tx"
		if e.Arg == 1 {
			dir = "rx"
		}
		if e.Step == StepLinkMark {
			return fmt.Appendf(b, "%s marked CE by the bottleneck (%s), queue %dB", e.OpName(), dir, e.Aux)
		}
		return fmt.Appendf(b, "%s LOST at the bottleneck's full queue (%s), %dB", e.OpName(), dir, e.Aux)
	case StepCERecv:
		if e.Arg == 1 {
			return fmt.Appendf(b, "%s arrived ECN CE: CNP", e.OpName())
		}
		return fmt.Appendf(b, "%s arrived ECN CE: no CNP (one went within np_min_time_between_cnps, or no congestion control)", e.OpName())
	case StepCNPSent:
		return fmt.Appendf(b, "CNP sent to qp %#x", e.DestQPN)
	case StepCNPRecv:
		return append(b, "CNP received"...)
	case StepCMSent, StepCMRecv:
		verb := "sent"
		if e.Step == StepCMRecv {
			verb = "received"
		}
		if e.Aux == CMNoState {
			return fmt.Appendf(b, "%v %s: no connection", mad.AttrID(e.Arg), verb)
		}
		return fmt.Appendf(b, "%v %s: %s -> %s comm_id %#x", mad.AttrID(e.Arg), verb, cmStateName(e.Aux), cmStateName(e.Len), e.WRID)
	case StepRate:
		return fmt.Appendf(b, "%s: rate %d Mb/s, target %d Mb/s, alpha %d/1024", rateStepNames[min(e.Arg, uint32(len(rateStepNames)-1))], e.Aux, e.Len, e.WRID)
	}
	return append(b, e.Step.String()...)
}

// rateStepNames name StepRate's Arg, flowctl.EventKind's values (trace
// sits below flowctl and does not import it).
var rateStepNames = [...]string{"", "cnp", "rate_decrease", "fast_recovery", "additive_increase", "hyper_increase", "recovered", "rate(?)"}

// CMNoState is the state of a CM event whose MAD names no connection
// (dropped, or answered without one).
const CMNoState = ^uint32(0)

// CMStateNames name the CM's connection states, cm.State's values in its
// order (trace sits below rnic/cm and does not import it; a test there
// holds the two together).
var CMStateNames = [...]string{"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD",
	"REP_SENT", "REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD",
	"TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func cmStateName(s uint32) string {
	if s < uint32(len(CMStateNames)) {
		return CMStateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// Format renders e as one timeline line, with its time in seconds since
// t0 (Unix nanoseconds):
//
//	0.001234 rnic0 wqe    qp 0x11 psn 0x000111 RDMA_WRITE_FIRST 1024B ackreq
func Format(e *Event, t0 int64) string {
	var b strings.Builder
	d := time.Duration(e.Time - t0)
	fmt.Fprintf(&b, "%10.6f %-6s %-8s", d.Seconds(), e.NIC, e.Module)
	switch {
	case e.QPN != 0:
		fmt.Fprintf(&b, " qp %#-6x", e.QPN)
	case e.DestQPN != 0:
		fmt.Fprintf(&b, " >qp %#-5x", e.DestQPN)
	default:
		b.WriteString("          ")
	}
	if e.HasPSN() {
		fmt.Fprintf(&b, " psn 0x%06x ", e.PSN)
	} else {
		b.WriteString("                ")
	}
	b.WriteString(e.Detail())
	return b.String()
}
