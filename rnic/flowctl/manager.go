package flowctl

import (
	"fmt"
	"time"
)

// DefaultWindow is the most PSNs an RC QP may have sent and not had
// acknowledged when Config.Window is 0: rxe's RXE_MAX_UNACKED_PSNS.
const DefaultWindow = 128

// MaxWindow bounds Config.Window: half the 24-bit PSN space, beyond which
// an old PSN and a new one could not be told apart.
const MaxWindow = 1 << 22

// DefaultLineRate is the line rate when Config.LineRate is 0, in bits per
// second: the 10 Gb/s that `rnic ibv_devinfo` reports as active_speed.
const DefaultLineRate = 10_000_000_000

// Clock reads a monotonic time in nanoseconds.
type Clock interface{ Nanotime() int64 }

type monoClock struct{ start time.Time }

func (c monoClock) Nanotime() int64 { return int64(time.Since(c.start)) }

// Config configures a device's Flow Control Manager. The zero Config is
// no congestion control and rxe's window.
type Config struct {
	// Algorithm is the congestion control, nil for none (`rnicd -cc
	// none`): CNPs received are counted and ignored, none are sent, data
	// packets are not ECN-capable.
	Algorithm Algorithm
	// Params are the notification point's parameters (the reaction
	// point's are the Algorithm's); the zero Params means DefaultParams.
	Params Params
	// Window is the most unacknowledged PSNs of an RC QP; 0:
	// DefaultWindow.
	Window int
	// Clock is the time the timers and the pacer run on; nil: the
	// runtime's monotonic clock.
	Clock Clock
	// Emit, when not nil, is told of each step of every reaction point
	// (for the trace); it runs under the QP's lock.
	Emit func(qpn uint32, ev Event)
}

// NewAlgorithm returns the algorithm rnicd's -cc flag names: "dcqcn"
// with parameters p on a port of lineRate bits per second (0:
// DefaultLineRate), or nil for "none".
func NewAlgorithm(name string, p Params, lineRate uint64) (Algorithm, error) {
	if lineRate == 0 {
		lineRate = DefaultLineRate
	}
	switch name {
	case "none":
		return nil, nil
	case "dcqcn":
		return NewDCQCN(p, lineRate)
	}
	return nil, fmt.Errorf("flowctl: no congestion control %q (dcqcn or none)", name)
}

// Manager is a device's Flow Control Manager: it answers, for each QP,
// whether it may send now (window and pacer), runs the reaction point on
// the CNPs the QP receives and decides when the notification point
// answers a CE-marked packet with a CNP. Its per-QP state is a QP kept in
// the QP's context; the Manager itself is safe for concurrent use.
type Manager struct {
	alg      Algorithm
	window   int
	clock    Clock
	emit     func(uint32, Event)
	minCNP   int64 // np_min_time_between_cnps, ns
	cnpTOS   uint8
	params   Params
	counters Counters
}

// New returns a Manager configured by cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Params == (Params{}) {
		cfg.Params = DefaultParams()
	}
	if err := cfg.Params.Validate(); err != nil {
		return nil, err
	}
	if cfg.Window < 0 || cfg.Window > MaxWindow {
		return nil, fmt.Errorf("flowctl: window %d is out of range [0, %d]", cfg.Window, MaxWindow)
	}
	m := &Manager{
		alg: cfg.Algorithm, window: cfg.Window, clock: cfg.Clock, emit: cfg.Emit,
		minCNP: int64(cfg.Params.NPMinTimeBetweenCNPs) * usec,
		cnpTOS: uint8(cfg.Params.NPCNPDSCP << 2), params: cfg.Params,
	}
	if m.window == 0 {
		m.window = DefaultWindow
	}
	if m.clock == nil {
		m.clock = monoClock{start: time.Now()}
	}
	return m, nil
}

// Name is the congestion control's name, "none" without one.
func (m *Manager) Name() string {
	if m.alg == nil {
		return "none"
	}
	return m.alg.Name()
}

// Params returns the device's parameters.
func (m *Manager) Params() Params { return m.params }

// Counters returns the device's flow-control counters.
func (m *Manager) Counters() *Counters { return &m.counters }

// Window returns the most unacknowledged PSNs of an RC QP.
func (m *Manager) Window() int { return m.window }

// ECT reports whether data packets leave ECN-capable (ECT(0)), as an RNIC
// sends them when congestion control is on, so that a switch may mark
// them; ACKs and CNPs never are.
func (m *Manager) ECT() bool { return m.alg != nil }

// CNPTOS is the TOS (traffic class) of the CNPs the device sends: DSCP
// np_cnp_dscp, not ECN-capable.
func (m *Manager) CNPTOS() uint8 { return m.cnpTOS }

// QP is one QP's flow-control state, kept in the QP's context and used
// under its lock. The zero QP has seen no congestion: it is unpaced, and
// asking it costs one branch.
type QP struct {
	QPN uint32 // for the trace

	rp      ReactionPoint // nil until the QP's first CNP
	paced   bool
	rate    uint64 // the current rate while paced
	pacer   Pacer
	now     int64 // the clock at the last Wait, which Sent reuses
	cnpSent bool  // the notification point has sent a CNP for this QP
	lastCNP int64 // when

	// win is the loss window and the round trip (window.go).
	win Window

	// Wake is the device's: the timer that runs the QP's requester again
	// when the pacer lets it send. Guarded by the QP's lock.
	Wake *time.Timer
}

// Paced reports whether the QP is limited by its pacer now: what a caller
// checks before working out the byte count Sent takes.
func (q *QP) Paced() bool { return q.paced }

// Wait returns how long q must wait before its next packet; 0: it may
// send now. An unpaced QP does not read the clock.
func (m *Manager) Wait(q *QP) time.Duration {
	if !q.paced {
		return 0 // inlined into the requester: the whole cost of an unpaced QP
	}
	return m.wait(q)
}

func (m *Manager) wait(q *QP) time.Duration {
	now := m.clock.Nanotime()
	q.now = now
	rate, limited := q.rp.Rate(now)
	if !limited {
		q.paced = false
		return 0
	}
	q.rate = rate
	w := q.pacer.Wait(now)
	if h, ok := q.rp.(Holder); ok && w > 0 {
		h.Held(now)
	}
	return time.Duration(w)
}

// Sent accounts a packet of n bytes (the IP datagram) that q sent, at
// the time of the Wait that let it go: the requester asks Wait, builds
// the packet and tells Sent, and one clock read (50 ns here,
// BenchmarkClock) is a third of what pacing costs a packet.
func (m *Manager) Sent(q *QP, n int) {
	if q.paced {
		m.sent(q, n)
	}
}

func (m *Manager) sent(q *QP, n int) {
	now := q.now
	q.rp.Sent(now, n)
	q.pacer.Sent(now, n, q.rate)
	q.rate, q.paced = q.rp.Rate(now)
}

// PacedAckInterval is how much sending time a paced QP lets pass between
// two packets that ask for an ACK. rxe's interval, MaxPktsPerAck (64)
// packets, is 50 us at 10 Gb/s but 46 ms at the 12 Mb/s that DCQCN gives
// each of eight QPs behind a 100 Mb/s link: the QP's oldest PSN then
// waits for its ACK most of the ACK timeout (67 ms at timeout 14), a
// loaded host stretches that past it, and the go-back-N that follows
// resends what the link had already carried (4,500 retransmissions, no
// drop, in TestFairness before this). 1 ms keeps the ACK clock of a
// paced QP near its line-rate one at about 1,000 ACKs a second.
const PacedAckInterval = 1_000 * usec

// AckReqDue reports whether a paced QP that has sent pkts packets of up
// to mtu bytes since its last ACK request should ask for an ACK with
// the next one: when sending them took PacedAckInterval at its rate. An
// unpaced QP keeps rxe's interval.
func (m *Manager) AckReqDue(q *QP, pkts, mtu int) bool {
	return q.paced && uint64(pkts)*uint64(mtu)*8_000_000_000 >= q.rate*PacedAckInterval
}

// ProbeFloor is the least retransmission timeout a probe may use for q
// (rx.Handler.Timeout probes after the measured round trip while a QP is
// lossy): for a paced QP, PacedAckInterval plus the time of two
// full-size packets of mtu bytes at its rate, since its next ACK request
// may be that far away before the round trip even starts; 0 for an
// unpaced QP. A probe sooner resends packets that were never lost, and
// each such go-back-N counts as a loss that keeps the QP lossy (and
// probing) for another second.
func (m *Manager) ProbeFloor(q *QP, mtu int) time.Duration {
	if !q.paced || q.rate == 0 {
		return 0
	}
	return time.Duration(PacedAckInterval + int64(uint64(2*mtu)*8_000_000_000/q.rate))
}

// CNPReceived is the reaction point's input: a CNP arrived for q.
func (m *Manager) CNPReceived(q *QP) {
	if m.alg == nil {
		m.counters.Inc(RPCNPIgnored)
		return
	}
	m.counters.Inc(RPCNPHandled)
	if q.rp == nil {
		var emit func(Event)
		if m.emit != nil {
			qpn, e := q.QPN, m.emit
			emit = func(ev Event) { e(qpn, ev) }
		}
		q.rp = m.alg.NewReactionPoint(emit)
	}
	now := m.clock.Nanotime()
	q.now = now
	q.rp.CNP(now)
	was := q.paced
	q.rate, q.paced = q.rp.Rate(now)
	if q.paced && !was {
		q.pacer.reset(now) // no credit from the unpaced past
	}
}

// CNPIgnored counts a CNP that reached no reaction point: for no QP, or
// malformed.
func (m *Manager) CNPIgnored() { m.counters.Inc(RPCNPIgnored) }

// CEReceived is the notification point: a RoCE packet for q arrived with
// ECN = CE. It reports whether to answer with a CNP now (and counts it as
// sent): at most one per QP per np_min_time_between_cnps, and none
// without congestion control.
func (m *Manager) CEReceived(q *QP) bool {
	m.counters.Inc(NPECNMarkedRoCEPackets)
	if m.alg == nil {
		return false
	}
	now := m.clock.Nanotime()
	if q.cnpSent && now-q.lastCNP < m.minCNP {
		return false
	}
	q.cnpSent, q.lastCNP = true, now
	m.counters.Inc(NPCNPSent)
	return true
}

// QPState is what /metrics and `rnic stat` show of a QP's flow control.
type QPState struct {
	Paced         bool
	CurrentRate   uint64 // bits per second; the line rate when not paced
	TargetRate    uint64
	Alpha         uint32 // 1024ths
	HasCongestion bool   // the QP has had a CNP
}

// State returns q's flow-control state now.
func (m *Manager) State(q *QP) QPState {
	if q.rp == nil {
		return QPState{}
	}
	if q.paced {
		q.rate, q.paced = q.rp.Rate(m.clock.Nanotime())
	}
	cur, tgt, alpha := q.rp.State()
	return QPState{Paced: q.paced, CurrentRate: cur, TargetRate: tgt, Alpha: alpha, HasCongestion: true}
}
