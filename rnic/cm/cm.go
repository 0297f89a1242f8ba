package cm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/mad"
)

// Dest is where a MAD goes: QP1 of the port that owns GID, with the GSI
// Q_Key (mad.GSIQKey) and P_Key. For HandleMAD it is where the MAD came
// from, with the P_Key of its BTH, which the answers reuse.
type Dest struct {
	GID  mad.GID
	PKey uint16
}

// QPModifier moves an application's QP; the engine's ModifyQP with its
// state and attribute checks. The CM calls it with the attributes the
// connection agreed, the way Linux's rdma_cm calls ib_modify_qp with what
// ib_cm_init_qp_attr returns.
type QPModifier interface {
	ModifyQP(qpn uint32, attr *ib.QPAttr, mask ib.AttrMask) error
}

// Config holds a CM's dependencies and settings. Now, Send, QP and Event
// are required; the zero value of every other field means the default
// named beside it.
type Config struct {
	// Now is the clock (time.Now in the daemon, a fake in tests).
	Now func() time.Time
	// Send sends a 256-byte MAD to the peer's QP1. An error counts as a
	// lost packet: the retry timer resends it.
	Send func(to Dest, mad []byte) error
	// QP moves the applications' QPs.
	QP QPModifier
	// Event receives the connections' events. It runs inside the CM's
	// calls and must not call the CM.
	Event func(Event)

	// CAGUID is the node's CA GUID, sent in REQ and REP (rxe derives it
	// from the MAC address).
	CAGUID uint64
	// PortGID is the GID of the port the CM serves, the one its peers'
	// MADs are addressed to: a REQ whose primary path names another GID
	// as ours is rejected (handleREQ). NewAgent takes it from QP1's port;
	// the zero value leaves only the check of the sender's GID.
	PortGID mad.GID
	// TIDHigh is the upper half of the transaction IDs this CM forms
	// (Linux: its MAD agent's hi_tid). Default 1.
	TIDHigh uint32
	// CMResponseTimeout is the time this CM takes to answer, as IBTA time
	// code (4.096 us * 2^t), sent in REQ and MRA. Default 20 (about 4.3 s),
	// rdma_cm's CMA_CM_RESPONSE_TIMEOUT.
	CMResponseTimeout uint8
	// PacketLifeTime is the path's packet lifetime code. Default 18, what
	// Linux uses for RoCE (CMA_IBOE_PACKET_LIFETIME).
	PacketLifeTime uint8
	// MaxCMRetries is how many times a REQ is resent. Default 15, rdma_cm's
	// CMA_MAX_CM_RETRIES; the passive side uses the REQ's value.
	MaxCMRetries uint8
	// Trace, if set, gets an event for each CM MAD sent and received,
	// with the connection's state change.
	Trace *trace.Probe
	// MaxIDs bounds the connections (REQs from the network create them).
	// Default 4096; past it a REQ gets REJ "no resources".
	MaxIDs int
	// MaxPending bounds the connections a REQ created that the listening
	// application has not answered yet: state that anyone on the network
	// can create with one unauthenticated packet. Past it a REQ gets REJ
	// "no resources", so that a flood leaves room in MaxIDs for
	// established connections and for this node's own Connects. Default
	// MaxIDs/2.
	MaxPending int
	// MaxPendingTime bounds how long a REQ nobody answers is held. A REQ
	// is held as long as its sender says it waits for the answer (its
	// retries times its response timeout and two packet lifetimes, what
	// Linux's active side waits), at most this long. Default 5 minutes.
	MaxPendingTime time.Duration
	// Log, if set, gets a line for MADs dropped or refused because they
	// could harm a connection or fill the CM (the reason, the sender,
	// the message), at most one a second for each reason with the count
	// of those not logged since: a flood must not flood the log too.
	Log *slog.Logger
	// CommIDSeed scrambles the local communication IDs, which Linux makes
	// unpredictable the same way (cm.c's random_id_operand, XORed into an
	// ID allocated cyclically from a random start). The zero value takes
	// the seed and the start from crypto/rand, per CM.
	CommIDSeed uint32
}

// Counters count what a CM sent, received and dropped, by message.
type Counters struct {
	Sent, Received [mad.AttrSIDRRep + 1]uint64 // by attribute ID
	Retries        uint64                      // messages resent after a timeout
	Timeouts       uint64                      // messages whose retries ran out
	Duplicates     uint64                      // duplicate REQ, REP, DREQ answered or dropped
	Dropped        uint64                      // malformed, unknown or out-of-state MADs
	SendErrors     uint64                      // Config.Send failures
	// The drops and refusals that protect connections from other hosts
	// (each also counted in Dropped where the MAD was dropped):
	// CommIDMismatch: our comm ID found, the peer's not the connection's
	// (Linux cm_acquire_id fails); WrongSource: the comm IDs match but
	// the MAD came from another address than the connection's peer;
	// StaleConns: REQs from a connected peer's address naming its QP
	// again (stale connection, REJ and DREQ as cm_req_handler);
	// StaleDropped: such REQs from another address, dropped.
	CommIDMismatch, WrongSource, StaleConns, StaleDropped uint64
	// PendingDropped: REQs refused with REJ "no resources" past
	// MaxPending or MaxIDs; PendingTimeouts: REQs freed because the
	// listener never answered; ListenDrops: REQs the application refused
	// (Refuse: a full backlog), dropped without a REJ so the peer retries.
	PendingDropped, PendingTimeouts, ListenDrops uint64
}

// CM is a Communication Manager for one port. Its zero value is not
// usable: make one with New.
type CM struct {
	cfg       Config
	ids       map[uint32]*ID       // by local communication ID
	remote    map[remoteKey]*ID    // by the peer's comm ID and CA GUID: REQ duplicates
	remoteQPs map[remoteKey]*ID    // by the peer's QPN and CA GUID: stale connections
	listeners map[uint64]*Listener // by service ID
	sidrRcvd  map[sidrKey]*ID      // SIDR_REQs being answered
	nextID    uint32
	pending   int              // IDs in REQ_RCVD or MRA_REQ_SENT (passive, not answered)
	buf       [mad.MADLen]byte // responses that need no retry
	counters  Counters
	// rxTrace is the attribute of the MAD HandleMAD is handling while
	// its received event is not yet traced (trace.go); rxPending says so.
	rxTrace   mad.AttrID
	rxPending bool
	// rxAttr is the attribute of the MAD HandleMAD is handling, for the
	// log; logged says when each reason was last logged and how many
	// went unlogged since.
	rxAttr mad.AttrID
	logged map[string]*logState
}

type logState struct {
	last       time.Time
	suppressed uint64
}

// remoteKey names the peer's side of a connection: its comm ID (remote)
// or its QPN (remoteQPs), with its CA GUID.
type remoteKey struct {
	id     uint32
	caGUID uint64
}

type sidrKey struct {
	requestID uint32
	gid       mad.GID
}

// New returns a CM with cfg's dependencies.
func New(cfg Config) (*CM, error) {
	if cfg.Now == nil || cfg.Send == nil || cfg.QP == nil || cfg.Event == nil {
		return nil, errors.New("cm: Config needs Now, Send, QP and Event")
	}
	if cfg.TIDHigh == 0 {
		cfg.TIDHigh = 1
	}
	if cfg.CMResponseTimeout == 0 {
		cfg.CMResponseTimeout = 20
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = 18
	}
	if cfg.MaxCMRetries == 0 {
		cfg.MaxCMRetries = 15
	}
	if cfg.MaxIDs == 0 {
		cfg.MaxIDs = 4096
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = max(cfg.MaxIDs/2, 1)
	}
	if cfg.MaxPendingTime == 0 {
		cfg.MaxPendingTime = 5 * time.Minute
	}
	var next uint32
	if cfg.CommIDSeed == 0 {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, fmt.Errorf("cm: comm ID seed: %w", err)
		}
		cfg.CommIDSeed, next = binary.LittleEndian.Uint32(r[:4])|1, binary.LittleEndian.Uint32(r[4:])
	}
	return &CM{
		cfg:       cfg,
		nextID:    next,
		ids:       make(map[uint32]*ID),
		remote:    make(map[remoteKey]*ID),
		remoteQPs: make(map[remoteKey]*ID),
		listeners: make(map[uint64]*Listener),
		sidrRcvd:  make(map[sidrKey]*ID),
		logged:    make(map[string]*logState),
	}, nil
}

// Counters returns the CM's counters.
func (c *CM) Counters() Counters { return c.counters }

// NumIDs is the number of connections the CM holds, in any state.
func (c *CM) NumIDs() int { return len(c.ids) }

// NumPending is the number of them that a REQ or SIDR_REQ created and
// the application has not answered yet.
func (c *CM) NumPending() int { return c.pending }

// ID is one connection (Linux struct cm_id_private). The fields are the
// CM's; the application reads them through the methods.
type ID struct {
	cm       *CM
	state    State
	localID  uint32
	remoteID uint32
	tid      uint64 // the transaction: the REQ's TID (echoed by REP, RTU), ours for DREQ
	dest     Dest
	localGID mad.GID
	listener *Listener
	context  any
	freed    bool
	// pending: a REQ created the ID and the application has not answered
	// it (counted in CM.pending); refused: the application refused it
	// from its ConnectRequest event (Refuse).
	pending, refused bool
	// pendingUntil: the latest a pending REQ is held (what its sender
	// waits, Config.MaxPendingTime at most); an MRA moves its deadline
	// no further.
	pendingUntil time.Time
	// destroyed: the application is gone (Destroy). The ID may live on to
	// finish a disconnect or a TIMEWAIT, but sends it no events and never
	// touches its QP again, which may belong to someone else by then.
	destroyed bool

	serviceID    uint64
	remoteCAGUID uint64
	transport    uint8 // mad.TransportRC, mad.TransportUC or mad.TransportXRC
	xrcTarget    bool  // an XRC connection's passive end: its QP is an XRC target
	qpn          uint32
	remoteQPN    uint32
	// ownPSN is the Starting PSN of our REQ or REP, peerPSN the peer's.
	// As Linux reads them (cm_req_handler and cm_rep_handler set sq_psn
	// from the message received), a side's Starting PSN is where the
	// other side's packets to it start: its RQ PSN; its SQ PSN is the
	// peer's. In write_bw_rdmacm.pcap (rxe to rxe) the client's first
	// SEND carries the REP's Starting PSN, the server's the REQ's.
	ownPSN       uint32
	peerPSN      uint32
	pathMTU      uint8
	respRes      uint8 // RDMA READ/atomic we accept: the QP's max_dest_rd_atomic
	initDepth    uint8 // RDMA READ/atomic we issue: the QP's max_rd_atomic
	retryCount   uint8
	rnrRetry     uint8
	ackTimeout   uint8 // local ACK timeout code: the path's packet lifetime + 1
	flowLabel    uint32
	hopLimit     uint8
	trafficClass uint8

	// The CM timers of this connection: the wait for an answer and the
	// resends (active side: from Config; passive side: from the REQ).
	cmTimeout time.Duration
	cmRetries int

	// The message being retried (REQ, REP, DREQ, SIDR_REQ): resent every
	// timeout until retries run out.
	msg      [mad.MADLen]byte
	msgLive  bool
	deadline time.Time
	timeout  time.Duration
	retries  int   // resends left
	traced   State // the state the trace last showed (trace.go)
	// The last answer sent (MRA, REP, RTU, DREP), resent on a duplicate.
	last     [mad.MADLen]byte
	lastLive bool
}

// State returns the connection's CM state.
func (id *ID) State() State { return id.state }

// Transport is the connection's transport service type: mad.TransportRC,
// mad.TransportUC or mad.TransportXRC (whose passive end drives an XRC
// target QP, its active end an XRC initiator).
func (id *ID) Transport() uint8 { return id.transport }

// LocalCommID is the connection's local communication ID.
func (id *ID) LocalCommID() uint32 { return id.localID }

// RemoteCommID is the peer's communication ID, 0 until it is known.
func (id *ID) RemoteCommID() uint32 { return id.remoteID }

// QPN is the application's QP the connection drives.
func (id *ID) QPN() uint32 { return id.qpn }

// Context is what the application attached to the ID (Connect's Context,
// or a listener's for an ID a REQ created).
func (id *ID) Context() any { return id.context }

// SetContext attaches v to the ID.
func (id *ID) SetContext(v any) { id.context = v }

// Listener is a service ID the passive side accepts REQs and SIDR_REQs on.
type Listener struct {
	cm        *CM
	serviceID uint64
	context   any
}

// ServiceID returns the service ID listened on.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Context returns what Listen attached.
func (l *Listener) Context() any { return l.context }

// ErrBusy is returned by Listen for a service ID already listened on.
var ErrBusy = errors.New("cm: service ID already has a listener")

// Listen accepts REQs for serviceID from now on (ib_cm_listen).
func (c *CM) Listen(serviceID uint64, context any) (*Listener, error) {
	if _, ok := c.listeners[serviceID]; ok {
		return nil, fmt.Errorf("%w: %#x", ErrBusy, serviceID)
	}
	l := &Listener{cm: c, serviceID: serviceID, context: context}
	c.listeners[serviceID] = l
	return l, nil
}

// Close stops listening; connections it accepted are not affected.
func (l *Listener) Close() {
	if l.cm.listeners[l.serviceID] == l {
		delete(l.cm.listeners, l.serviceID)
	}
}

// newID allocates a local communication ID: sequential, scrambled with the
// seed, never 0 (0 means "unknown" in REJ and MRA), never one in use.
func (c *CM) newID(state State) (*ID, error) {
	if len(c.ids) >= c.cfg.MaxIDs {
		return nil, fmt.Errorf("cm: %d connections, the most this CM holds", len(c.ids))
	}
	for {
		c.nextID++
		local := c.nextID ^ c.cfg.CommIDSeed
		if _, used := c.ids[local]; local == 0 || used {
			continue
		}
		id := &ID{cm: c, state: state, localID: local}
		c.ids[local] = id
		return id, nil
	}
}

// free forgets the ID; later MADs for it find nothing.
func (c *CM) free(id *ID) {
	if id.freed {
		return
	}
	id.setPending(false)
	id.freed = true
	id.msgLive = false
	delete(c.ids, id.localID)
	if k := (remoteKey{id.remoteID, id.remoteCAGUID}); c.remote[k] == id {
		delete(c.remote, k)
	}
	if k := (remoteKey{id.remoteQPN, id.remoteCAGUID}); c.remoteQPs[k] == id {
		delete(c.remoteQPs, k)
	}
	for k, v := range c.sidrRcvd {
		if v == id {
			delete(c.sidrRcvd, k)
		}
	}
}

// setPending marks the ID as a REQ the application has not answered, or
// no longer.
func (id *ID) setPending(p bool) {
	if id.pending == p {
		return
	}
	id.pending = p
	if p {
		id.cm.pending++
	} else {
		id.cm.pending--
	}
}

// ownTID forms the transaction ID of a transaction this side starts, as
// Linux's cm_form_tid does: the agent's high half, then the local comm ID
// as it sits in memory on a little-endian host (so the TIDs on the wire
// look like Linux's: comm ID 0x4367800f goes with TID 0x...0f806743).
func (c *CM) ownTID(id *ID) uint64 {
	return uint64(c.cfg.TIDHigh)<<32 | uint64(bits.ReverseBytes32(id.localID))
}

// ibTime converts an IBTA time code to a duration: 4.096 us * 2^t (IBTA
// 12.7.31 and 12.7.34). Codes above 31 are cut to 31, about 2.4 hours.
func ibTime(t uint8) time.Duration {
	return 4096 * time.Nanosecond << min(t, 31)
}

// event delivers e, unless the application destroyed the ID.
func (c *CM) event(e Event) {
	if e.ID != nil && e.ID.destroyed {
		return
	}
	c.cfg.Event(e)
}

// send sends the MAD in b to dest for id (nil: for no connection),
// counts it and traces it.
func (c *CM) send(id *ID, dest Dest, b []byte) {
	m := mad.MAD(b)
	if a := m.AttrID(); a <= mad.AttrSIDRRep {
		c.counters.Sent[a]++
	}
	if c.cfg.Trace.On() {
		c.traceSent(id, m.AttrID())
	}
	if err := c.cfg.Send(dest, b); err != nil {
		c.counters.SendErrors++
	}
}

// format writes a CM MAD header for attr and tid into b and returns the
// class data to encode the message into.
func format(b *[mad.MADLen]byte, attr mad.AttrID, tid uint64) []byte {
	m := mad.MAD(b[:])
	h := mad.CMHeader(attr, tid)
	m.EncodeHeader(&h)
	return m.Data()
}

// sendRetried sends the message in id.msg and arms its retry timer:
// timeout per try, retries resends (Linux: the MAD layer's timeout_ms and
// retries for this msg).
func (id *ID) sendRetried(timeout time.Duration, retries int) {
	c := id.cm
	id.msgLive = true
	id.timeout = timeout
	id.retries = retries
	id.deadline = c.cfg.Now().Add(timeout)
	c.send(id, id.dest, id.msg[:])
}

// sendLast sends the answer in id.last (no retry: the peer's retry asks
// for it again).
func (id *ID) sendLast() {
	id.lastLive = true
	id.cm.send(id, id.dest, id.last[:])
}

// cancel stops the retry of id.msg (ib_cancel_mad).
func (id *ID) cancel() { id.msgLive = false }

// NextDeadline returns when Expire next has work: the earliest retry,
// timeout or end of TIMEWAIT. ok is false when no timer runs.
func (c *CM) NextDeadline() (t time.Time, ok bool) {
	for _, id := range c.ids {
		if id.msgLive && (!ok || id.deadline.Before(t)) {
			t, ok = id.deadline, true
		}
	}
	return t, ok
}

// Expire resends the messages whose timeout has passed, fails those whose
// retries ran out, and ends TIMEWAITs that are over.
func (c *CM) Expire() {
	now := c.cfg.Now()
	for _, id := range c.ids {
		if !id.msgLive || now.Before(id.deadline) {
			continue
		}
		if id.state == StateTimewait {
			id.timewaitExit()
			continue
		}
		if id.pending {
			id.msgLive = false
			c.counters.PendingTimeouts++
			id.pendingTimedOut()
			continue
		}
		if id.retries > 0 {
			id.retries--
			id.deadline = now.Add(id.timeout)
			c.counters.Retries++
			c.send(id, id.dest, id.msg[:])
			continue
		}
		id.msgLive = false
		c.counters.Timeouts++
		id.timedOut()
	}
}

// timedOut handles a message whose retries ran out (Linux
// cm_process_send_error; IBTA 12.9.6: a timeout in these states ends the
// attempt).
func (id *ID) timedOut() {
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd:
		// IBTA 12.9.6.1, 12.9.6.2: the REQ or REP went unanswered; back
		// to IDLE without a word to the peer, as Linux's
		// cm_process_send_error does (the peer's own timers end its side).
		id.toErr()
		id.state = StateIdle
		id.cm.event(Event{Type: EventUnreachable, ID: id, Err: ErrTimeout})
		id.cm.free(id)
	case StateDREQSent:
		// IBTA 12.9.6.3: no DREP; the connection is down anyway.
		id.enterTimewait()
		id.cm.event(Event{Type: EventDisconnected, ID: id, Err: ErrTimeout})
	case StateSIDRREQSent:
		id.state = StateIdle
		id.cm.event(Event{Type: EventUnreachable, ID: id, Err: ErrTimeout})
		id.cm.free(id)
	}
}

// modifyQP moves the connection's QP, and reports whether it worked.
func (id *ID) modifyQP(attr *ib.QPAttr, mask ib.AttrMask) error {
	if id.destroyed {
		return errors.New("cm: the connection was destroyed")
	}
	if err := id.cm.cfg.QP.ModifyQP(id.qpn, attr, mask); err != nil {
		return fmt.Errorf("cm: QP %#x to %v: %w", id.qpn, attr.State, err)
	}
	return nil
}

// enterTimewait puts the QP in ERR and holds the ID (so late messages for
// it are recognised) for the timewait: the path's local ACK timeout, as
// Linux's cm_enter_timewait waits (IBTA 12.9.7: long enough for packets
// of the old connection to leave the network).
func (id *ID) enterTimewait() {
	id.toErr()
	id.state = StateTimewait
	id.msgLive = true // the timewait timer, in the retry slot
	id.retries = 0
	id.deadline = id.cm.cfg.Now().Add(ibTime(id.ackTimeout))
}

func (id *ID) timewaitExit() {
	id.msgLive = false
	id.state = StateIdle
	id.cm.event(Event{Type: EventTimewaitExit, ID: id})
	id.cm.free(id)
}

// HandleMAD processes one MAD that QP1 received from the port with GID
// from. Anything that is not a well-formed CM message in a state that
// expects it is counted and dropped, as Linux's CM drops it.
func (c *CM) HandleMAD(from Dest, b []byte) {
	m, err := mad.ParseMAD(b)
	if err != nil || m.CheckCM() != nil {
		c.counters.Dropped++
		return
	}
	attr := m.AttrID()
	if attr > mad.AttrSIDRRep {
		c.counters.Dropped++ // LAP, APR: no alternate paths on RoCE
		return
	}
	c.counters.Received[attr]++
	c.rxAttr = attr
	if c.cfg.Trace.On() {
		c.rxTrace, c.rxPending = attr, true
		defer c.traceRecv(nil)
	}
	d := m.Data()
	tid := m.TID()
	switch attr {
	case mad.AttrREQ:
		c.handleREQ(from, tid, mad.REQ(d))
	case mad.AttrMRA:
		c.handleMRA(from, mad.MRA(d))
	case mad.AttrREJ:
		c.handleREJ(from, mad.REJ(d))
	case mad.AttrREP:
		c.handleREP(from, tid, mad.REP(d))
	case mad.AttrRTU:
		c.handleRTU(from, mad.RTU(d))
	case mad.AttrDREQ:
		c.handleDREQ(from, tid, mad.DREQ(d))
	case mad.AttrDREP:
		c.handleDREP(from, mad.DREP(d))
	case mad.AttrSIDRReq:
		c.handleSIDRReq(from, tid, mad.SIDRReq(d))
	case mad.AttrSIDRRep:
		c.handleSIDRRep(from, mad.SIDRRep(d))
	}
}

// lookup finds the connection a message from from names by our comm ID
// and the peer's, as Linux's cm_acquire_id does: both must match, a
// remote comm ID of 0 included (it matches only a connection that does
// not know its peer's yet). early also accepts a connection that does
// not know its peer's comm ID yet, for the answers to a REQ (REP, MRA,
// REJ of the REQ) that tell it. The MAD must come from the connection's
// peer: comm IDs are 32 bits a host that sees no packet of the
// connection can only guess, its address is what the network vouches
// for. A mismatch is counted and the MAD dropped.
func (c *CM) lookup(from Dest, local, remote uint32, early bool) *ID {
	id := c.ids[local]
	switch {
	case id == nil:
		return nil
	case id.remoteID != remote && !(early && id.remoteID == 0):
		c.counters.CommIDMismatch++
		c.logDrop("the peer's comm ID is not the connection's", from, "comm_id", local, "remote_comm_id", remote)
		return nil
	case from.GID != id.dest.GID:
		c.counters.WrongSource++
		c.logDrop("sent from another address than the connection's peer", from, "comm_id", local, "peer", id.dest.GID.Addr())
		return nil
	}
	return id
}

// logDrop logs a MAD dropped or refused for reason, rate-limited per
// reason (Config.Log).
func (c *CM) logDrop(reason string, from Dest, args ...any) {
	if c.cfg.Log == nil {
		return
	}
	st := c.logged[reason]
	if st == nil {
		st = &logState{}
		c.logged[reason] = st
	}
	now := c.cfg.Now()
	if !st.last.IsZero() && now.Sub(st.last) < time.Second {
		st.suppressed++
		return
	}
	args = append([]any{"reason", reason, "from", from.GID.Addr(), "mad", c.rxAttr.String()}, args...)
	if st.suppressed > 0 {
		args = append(args, "not_logged_since", st.suppressed)
	}
	st.last, st.suppressed = now, 0
	c.cfg.Log.Warn("cm: MAD dropped", args...)
}

func (c *CM) drop() { c.counters.Dropped++ }

// sendREJ sends a REJ for the connection (no retry: IBTA 12.6.7, a REJ is
// not acknowledged).
func (id *ID) sendREJ(reason mad.RejReason, rejected mad.MsgKind, ari, privateData []byte) {
	c := id.cm
	f := mad.REJFields{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		MessageRejected: rejected, Reason: reason, RejectInfoLength: uint8(len(ari))}
	copy(f.ARI[:], ari)
	copy(f.PrivateData[:], privateData)
	mad.REJ(format(&c.buf, mad.AttrREJ, id.tid)).Encode(&f)
	c.send(id, id.dest, c.buf[:])
}

// issueREJ answers a message that matches no connection (Linux
// cm_issue_rej): the comm IDs swapped from the message, its TID echoed.
func (c *CM) issueREJ(to Dest, tid uint64, theirLocal, theirRemote uint32, reason mad.RejReason, rejected mad.MsgKind) {
	c.issueREJInfo(to, tid, theirLocal, theirRemote, reason, rejected, nil)
}

// issueREJInfo is issueREJ with additional reject information (ARI).
func (c *CM) issueREJInfo(to Dest, tid uint64, theirLocal, theirRemote uint32, reason mad.RejReason, rejected mad.MsgKind, ari []byte) {
	f := mad.REJFields{LocalCommID: theirRemote, RemoteCommID: theirLocal, MessageRejected: rejected, Reason: reason,
		RejectInfoLength: uint8(len(ari))}
	copy(f.ARI[:], ari)
	mad.REJ(format(&c.buf, mad.AttrREJ, tid)).Encode(&f)
	c.send(nil, to, c.buf[:])
}

func clonePD(b []byte) []byte { return append([]byte(nil), b...) }
