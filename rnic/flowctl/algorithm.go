package flowctl

// Algorithm is a congestion-control algorithm: it makes the reaction point
// of each QP. DCQCN is the one built; TIMELY (RTT samples) or HPCC (the
// congestion point's telemetry echoed in ACKs) would be another
// Algorithm, fed through an optional interface of its ReactionPoint that
// the RX handler looks for, without a change to the requester, which only
// ever asks the pacer.
type Algorithm interface {
	// Name is what rnicd -cc takes and `rnic stat` shows ("dcqcn").
	Name() string
	// NewReactionPoint returns a new QP's reaction point, idle: at the
	// line rate until the first congestion signal. emit, which may be
	// nil, is told of each change of rate and of each signal.
	NewReactionPoint(emit func(Event)) ReactionPoint
}

// ReactionPoint is one QP's congestion control at the sender. Times are
// a Clock's nanoseconds and never go back; rates are in bits per second.
// It is used under its QP's lock only.
type ReactionPoint interface {
	// CNP tells of a CNP for this QP, received at now.
	CNP(now int64)
	// Sent tells of n bytes the QP sent at now while limited.
	Sent(now int64, n int)
	// Rate runs the algorithm's timers up to now and returns the QP's
	// current rate and whether it is limited at all; a reaction point
	// that is back at the line rate returns false and is asked again only
	// after its next congestion signal.
	Rate(now int64) (bps uint64, limited bool)
	// State returns the current rate, the target rate and alpha (in
	// 1024ths; 0 for algorithms without one), as /metrics shows them.
	State() (current, target uint64, alpha uint32)
}

// Holder is a ReactionPoint that wants to know when the pacer holds its
// QP back: the QP has a packet to send and its rate says not yet. The
// Manager tells it on every such Wait.
type Holder interface {
	Held(now int64)
}

// EventKind says what a reaction point did.
type EventKind uint8

const (
	EventCNP          EventKind = iota + 1 // a CNP arrived
	EventDecrease                          // the rate was cut
	EventFastRecovery                      // an increase event with the target unchanged
	EventAdditive                          // an increase event that raised the target by rp_ai_rate
	EventHyper                             // an increase event that raised the target by rp_hai_rate
	EventRecovered                         // back at the line rate: the QP is unpaced again
)

var eventNames = [...]string{"", "cnp", "rate_decrease", "fast_recovery", "additive_increase", "hyper_increase", "recovered"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(?)"
}

// Event is one step of a reaction point, for the trace: when, what, and
// the state after it.
type Event struct {
	Time            int64
	Kind            EventKind
	Current, Target uint64 // bits per second
	Alpha           uint32 // 1024ths
}
