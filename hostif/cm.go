package hostif

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

// The daemon's CM agent as its clients see it: rdma_cm's objects (an event
// channel, CM IDs) in each client's object table, the agent (rnic/cm)
// running the connections on QP1, and its events queued on the channel of
// the ID they belong to. This is the part of Linux's ucma.c that a
// userspace daemon needs: the CM moves only QPs of the client that owns
// the CM ID, and a client that dies has its IDs destroyed (a DREQ for an
// established connection) and its listeners closed.

// Bounds a hostile client cannot push past: CM IDs per client, and events
// waiting on one channel (past it an event is dropped and counted; a
// connect request dropped this way is rejected).
//
// maxBacklog is the most connect requests one listener holds for its
// client to fetch, and what a backlog of 0 or more means: ucma's
// max_backlog (net.rdma_ucm.max_backlog, 1024). Each also counts as a CM
// ID of the listening client (maxCMIDs) from the moment its REQ arrives,
// so a flood against one listener costs only its client.
const (
	maxCMIDs    = 1024
	maxCMEvents = 4096
	maxBacklog  = 1024
)

// StartCM starts the CM agent on gsi (the device's QP1) with caGUID as
// the node's CA GUID; it runs until StopCM. Without it the CM requests
// are refused.
func (s *Server) StartCM(gsi cm.GSIPort, caGUID uint64) error {
	a, err := cm.NewAgent(gsi, cm.Config{QP: (*cmQPs)(s), Event: s.cmEvent, CAGUID: caGUID, Trace: s.dev.Probe(), Log: s.log})
	if err != nil {
		return fmt.Errorf("hostif: CM agent: %w", err)
	}
	s.cmAgent, s.cmStop = a, make(chan struct{})
	s.cmRunning.Add(1)
	go func() { defer s.cmRunning.Done(); a.Run(s.cmStop) }()
	return nil
}

// StopCM stops the agent; call it when no client is left to use it.
func (s *Server) StopCM() {
	if s.cmAgent != nil {
		close(s.cmStop)
		s.cmRunning.Wait()
	}
}

// CMCounters are the CM agent's message counters, named as Linux's
// per-port CM counters (cm_tx_msgs/req is cm_tx_msgs_req), for /metrics
// and rnic stat; nil without an agent.
func (s *Server) CMCounters() map[string]uint64 {
	c, _, ok := s.cmSnapshot()
	if !ok {
		return nil
	}
	m := map[string]uint64{}
	for a := mad.AttrREQ; a <= mad.AttrSIDRRep; a++ {
		name := strings.ToLower(a.String())
		m["cm_tx_msgs_"+name] = c.Sent[a]
		m["cm_rx_msgs_"+name] = c.Received[a]
	}
	m["cm_tx_retries"] = c.Retries
	m["cm_timeouts"] = c.Timeouts
	m["cm_rx_duplicates"] = c.Duplicates
	m["cm_rx_dropped"] = c.Dropped
	m["cm_tx_errors"] = c.SendErrors
	m["cm_rx_dropped_comm_id"] = c.CommIDMismatch
	m["cm_rx_dropped_source"] = c.WrongSource
	m["cm_rx_stale_conn"] = c.StaleConns
	m["cm_rx_dropped_stale"] = c.StaleDropped
	m["cm_rx_dropped_pending"] = c.PendingDropped
	m["cm_req_timeouts"] = c.PendingTimeouts
	m["cm_listen_drops"] = c.ListenDrops
	return m
}

// cmSnapshot reads the agent's counters and how many connections it
// holds (TIMEWAIT included); ok is false without a running agent.
func (s *Server) cmSnapshot() (c cm.Counters, ids int, ok bool) {
	if s.cmAgent == nil {
		return c, 0, false
	}
	ok = s.cmAgent.Do(func(x *cm.CM) { c, ids = x.Counters(), x.NumIDs() })
	return c, ids, ok
}

// cmCounters adds the CM's counters to m, cm_ids, the connections the CM
// holds, and cm_pending, those of them a REQ created that no application
// answered yet; nothing without an agent.
func (s *Server) cmCounters(m map[string]uint64) {
	for k, v := range s.CMCounters() {
		m[k] = v
	}
	var ids, pending int
	if s.cmAgent != nil && s.cmAgent.Do(func(x *cm.CM) { ids, pending = x.NumIDs(), x.NumPending() }) {
		m["cm_ids"], m["cm_pending"] = uint64(ids), uint64(pending)
	}
}

// cmQPs is the agent's QPModifier: it moves a QP only if the QP's owner
// bound it to one of its CM IDs (Connect, Accept), so a connection never
// touches another client's QP, even one that took a freed QPN.
type cmQPs Server

func (q *cmQPs) ModifyQP(qpn uint32, attr *ib.QPAttr, mask ib.AttrMask) error {
	s := (*Server)(q)
	v, ok := s.qps.Load(qpn)
	if !ok {
		return fmt.Errorf("hostif: no QP %d", qpn)
	}
	qp := v.(*qpObj)
	c := qp.owner
	c.mu.Lock()
	bound := c.cmQPNs[qpn] > 0
	c.mu.Unlock()
	if !bound {
		return fmt.Errorf("hostif: QP %d is not bound to a CM ID of its owner", qpn)
	}
	return s.dev.ModifyQP(qp.qp, attr, mask)
}

// cmChanObj is a CM event channel (rdma_create_event_channel): its wake
// pipe's write end (wakePipe), written when an event is queued, and the
// queue.
type cmChanObj struct {
	useCount
	fd int

	mu     sync.Mutex
	queue  []cmPending
	closed bool
}

type cmPending struct {
	ev     cm.Event
	id     *cmIDObj
	listen *cmIDObj // CONNECT_REQUEST: the listening ID
}

func (*cmChanObj) kind() objKind { return kindCMChannel }
func (*cmChanObj) cost() Quota   { return costChannel }

// release closes the channel; connect requests nobody fetched are
// rejected, as rdma_destroy_event_channel's caller would have.
func (o *cmChanObj) release(c *conn) error {
	o.mu.Lock()
	o.closed = true
	q := o.queue
	o.queue = nil
	o.mu.Unlock()
	for _, p := range q {
		if p.ev.Type == cm.EventConnectRequest && p.id.h == 0 {
			c.s.cmAgent.Do(func(*cm.CM) { p.ev.ID.Destroy() })
			p.id.owner.uncountCMID()
		}
	}
	unix.Close(o.fd)
	return nil
}

// cmIDObj is a CM ID (struct rdma_cm_id): a listener, or one connection.
type cmIDObj struct {
	noUsers
	owner *conn
	ch    *cmChanObj
	h     uint32 // 0 for a connect request's ID the client has not fetched
	// id and l are set and read inside the agent's Do only.
	id  *cm.ID
	l   *cm.Listener
	qpn uint32 // the QP bound by Connect or Accept; 0: none
	// idn numbers the ID in rdma res show cm_id; ps, src and dst are
	// its port space and addresses (set and read inside the agent's Do).
	idn      uint32
	ps       mad.PortSpace
	src, dst netip.AddrPort
	// qpType is a listener's QP type, whose requests alone it hears (0:
	// every type); set inside the agent's Do.
	qpType ib.QPType
	// A listener's backlog, and its connect requests queued on ch that
	// the client has not fetched (both under ch.mu).
	backlog, queued int
}

func (*cmIDObj) kind() objKind { return kindCMID }
func (*cmIDObj) cost() Quota   { return Quota{} }

// release is rdma_destroy_id: the connection ends (DREQ if established,
// REJ if under way) and the listener closes.
func (o *cmIDObj) release(c *conn) error {
	c.s.cmAgent.Do(func(*cm.CM) {
		if o.l != nil {
			o.l.Close()
		}
		if o.id != nil {
			o.id.Destroy()
		}
	})
	c.mu.Lock()
	c.unbindQPN(o.qpn)
	c.cmIDs--
	c.mu.Unlock()
	o.ch.drop()
	o.h = 0
	return nil
}

// countCMID counts one more CM ID of the client, unless it holds the
// most it may.
func (c *conn) countCMID() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmIDs >= maxCMIDs {
		return false
	}
	c.cmIDs++
	return true
}

// uncountCMID gives back a CM ID countCMID counted.
func (c *conn) uncountCMID() {
	c.mu.Lock()
	c.cmIDs--
	c.mu.Unlock()
}

// unbindQPN drops one binding of qpn; c.mu is held.
func (c *conn) unbindQPN(qpn uint32) {
	if qpn == 0 {
		return
	}
	if c.cmQPNs[qpn]--; c.cmQPNs[qpn] <= 0 {
		delete(c.cmQPNs, qpn)
	}
}

// cmEvent routes an event of the CM to the channel of its ID's owner. It
// runs on the agent's goroutine.
func (s *Server) cmEvent(e cm.Event) {
	var o, listen *cmIDObj
	if e.Type == cm.EventConnectRequest {
		listen, _ = e.Listener.Context().(*cmIDObj)
		if listen == nil {
			return
		}
		s.cmConnectRequest(e, listen)
		return
	} else if o, _ = e.ID.Context().(*cmIDObj); o == nil {
		return
	}
	ch := o.ch
	ch.mu.Lock()
	if e.Type == cm.EventUnreachable && ch.unqueueRequest(o) {
		// A REQ that timed out before the client fetched it: it leaves
		// the queue, and the client's count, with its CM state.
		ch.mu.Unlock()
		o.owner.uncountCMID()
		return
	}
	if ch.closed || len(ch.queue) >= maxCMEvents {
		ch.mu.Unlock()
		s.cmDropped.Add(1)
		return
	}
	ch.queue = append(ch.queue, cmPending{ev: e, id: o})
	ch.mu.Unlock()
	signalFD(ch.fd)
}

// cmConnectRequest queues a connect request for the client of listener
// listen, charged to it as one of its CM IDs from now on. One it cannot
// take (its backlog of unfetched requests full, its CM IDs at the most,
// its channel closed or full) is refused: the REQ is forgotten without
// an answer and the peer's next try is a new one, as ucma's backlog
// check makes Linux's CM forget it.
func (s *Server) cmConnectRequest(e cm.Event, listen *cmIDObj) {
	ch := listen.ch
	if !listen.hears(e.ID) {
		// cma_ib_check_req_qp_type fails the request, and the CM's
		// cm_destroy_id answers it with REJ "consumer defined".
		_ = e.ID.Reject(mad.RejConsumerDefined, nil)
		return
	}
	if !listen.owner.countCMID() {
		s.cmDropped.Add(1)
		e.ID.Refuse()
		return
	}
	o := &cmIDObj{owner: listen.owner, ch: ch, id: e.ID, idn: s.cmIDN.Add(1) - 1}
	o.setRequestAddrs(listen, e.PrivateData)
	ch.mu.Lock()
	if ch.closed || len(ch.queue) >= maxCMEvents || listen.queued >= listen.backlog {
		ch.mu.Unlock()
		listen.owner.uncountCMID()
		e.ID.Refuse()
		return
	}
	e.ID.SetContext(o)
	listen.queued++
	ch.queue = append(ch.queue, cmPending{ev: e, id: o, listen: listen})
	ch.mu.Unlock()
	signalFD(ch.fd)
}

// hears says whether listener o takes the request of id: one of its QP
// type (a SIDR_REQ is UD's, an XRC REQ an XRC target's), or any if it
// named none (cma_ib_check_req_qp_type).
func (o *cmIDObj) hears(id *cm.ID) bool {
	switch {
	case o.qpType == 0:
		return true
	case id.State() == cm.StateSIDRREQRcvd:
		return o.qpType == ib.QPTypeUD
	}
	switch id.Transport() {
	case mad.TransportXRC:
		return o.qpType == ib.QPTypeXRCRecv
	case mad.TransportUC:
		return o.qpType == ib.QPTypeUC
	}
	return o.qpType == ib.QPTypeRC
}

// unqueueRequest takes the connect request of o off the queue if it is
// still there (not fetched), and says whether it was; ch.mu is held.
func (ch *cmChanObj) unqueueRequest(o *cmIDObj) bool {
	for i, p := range ch.queue {
		if p.id == o && p.ev.Type == cm.EventConnectRequest {
			p.listen.queued--
			ch.queue = append(ch.queue[:i], ch.queue[i+1:]...)
			return true
		}
	}
	return false
}

// cmReady checks that the daemon runs a CM agent.
func (c *conn) cmReady() error {
	if c.s.cmAgent == nil {
		return errf(abi.CodeUnknown, "this daemon runs no CM agent")
	}
	return nil
}

func (c *conn) cmCreateChannel(object, abi.Body, []int) (abi.Body, []int, error) {
	if err := c.cmReady(); err != nil {
		return nil, nil, err
	}
	rd, wr, err := wakePipe()
	if err != nil {
		return nil, nil, err
	}
	h := c.add(&cmChanObj{fd: wr})
	return &abi.Handle{H: h}, []int{rd}, nil
}

func (c *conn) cmCreateID(ch object, _ abi.Body, _ []int) (abi.Body, []int, error) {
	if !c.countCMID() {
		return nil, nil, errf(abi.CodeLimit, "create_id: %d CM IDs is the most a client may hold", maxCMIDs)
	}
	co := ch.(*cmChanObj)
	co.hold()
	o := &cmIDObj{owner: c, ch: co, idn: c.s.cmIDN.Add(1) - 1}
	o.h = c.add(o)
	return &abi.Handle{H: o.h}, nil, nil
}

func (c *conn) cmListen(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	o, r := t.(*cmIDObj), b.(*abi.CMListenReq)
	var err error
	c.s.cmAgent.Do(func(m *cm.CM) {
		if o.l != nil || o.id != nil {
			err = errors.New("the CM ID is already listening or connected")
			return
		}
		// ucma_listen: a backlog of 0, or past the most, is the most.
		o.ch.mu.Lock()
		o.backlog = int(r.Backlog)
		if o.backlog <= 0 || o.backlog > maxBacklog {
			o.backlog = maxBacklog
		}
		o.ch.mu.Unlock()
		o.qpType = ib.QPType(r.QPType)
		if o.l, err = m.Listen(r.ServiceID, o); err == nil {
			o.setListenAddrs(c.s.dev.QueryPort().Addr, r.ServiceID)
		}
	})
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "listen: %v", err)
	}
	return &abi.Empty{}, nil, nil
}

// bindQP binds the client's QP handle h to o for the agent (cmQPs); a
// UD connection (ud) takes a UD QP, any other one a QP that is not. It
// returns the QPN and, for an XRC QP, which end of XRC it is
// (ib.QPTypeXRCSend or ib.QPTypeXRCRecv; 0 for any other QP).
func (c *conn) bindQP(o *cmIDObj, h uint32, ud bool) (uint32, ib.QPType, error) {
	q, err := lookup[*qpObj](c, h, kindQP)
	if err != nil {
		return 0, 0, err
	}
	if o.qpn != 0 {
		return 0, 0, errf(abi.CodeInvalid, "CM ID %d already has QP %d", o.h, o.qpn)
	}
	if (q.qp.Type == ib.QPTypeUD) != ud {
		return 0, 0, errf(abi.CodeInvalid, "QP %d is %v: rdma_cm's UDP port space takes UD QPs, the others connected ones", q.qp.QPN, q.qp.Type)
	}
	c.mu.Lock()
	if c.cmQPNs == nil {
		c.cmQPNs = make(map[uint32]int)
	}
	o.qpn = q.qp.QPN
	c.cmQPNs[o.qpn]++
	c.mu.Unlock()
	return o.qpn, q.qp.XRC, nil
}

func (c *conn) unbindQP(o *cmIDObj) {
	c.mu.Lock()
	c.unbindQPN(o.qpn)
	o.qpn = 0
	c.mu.Unlock()
}

// isUDP says whether serviceID is in rdma_cm's UDP port space: a UD
// "connection", which SIDR resolves (cma.c: RDMA_PS_UDP IDs are UD).
func isUDP(serviceID uint64) bool {
	ps, _, ok := mad.SplitServiceID(serviceID)
	return ok && ps == mad.PSUDP
}

func (c *conn) cmConnect(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	o, r := t.(*cmIDObj), b.(*abi.CMConnectReq)
	ud := isUDP(r.ServiceID)
	qpn, xrc, err := c.bindQP(o, r.QP, ud)
	if err != nil {
		return nil, nil, err
	}
	transport := uint8(mad.TransportRC)
	switch xrc {
	case ib.QPTypeXRCSend:
		transport = mad.TransportXRC
	case ib.QPTypeXRCRecv:
		// A target has no send queue to connect from: cm_validate_req_param
		// takes RC, UC and XRC_INI only.
		c.unbindQP(o)
		return nil, nil, errf(abi.CodeInvalid, "connect: QP %d is an XRC target (XRC_RECV), which only accepts", qpn)
	}
	p := cm.ConnectParam{Transport: transport,
		ServiceID: r.ServiceID, QPN: qpn,
		Dest: cm.Dest{GID: mad.GID(r.DGID), PKey: 0xffff}, LocalGID: mad.GID(c.s.dev.QueryPort().GID),
		StartingPSN: r.StartingPSN, PathMTU: ib.MTU(r.PathMTU),
		ResponderResources: r.ResponderResources, InitiatorDepth: r.InitiatorDepth,
		RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount, TrafficClass: r.TrafficClass,
		PrivateData: r.PrivateData, Context: o,
	}
	c.s.cmAgent.Do(func(m *cm.CM) {
		if o.l != nil || o.id != nil {
			err = errors.New("the CM ID is already listening or connected")
			return
		}
		if ud {
			// cma_resolve_ib_udp: a SIDR_REQ with the cma_hdr, retried
			// on rdma_cm's timers; the QP stays as the client made it.
			o.id, err = m.SIDRRequest(cm.SIDRParam{ServiceID: p.ServiceID, Dest: p.Dest,
				PrivateData: p.PrivateData, Context: o})
		} else {
			o.id, err = m.Connect(p)
		}
		if err == nil {
			o.setConnectAddrs(c.s.dev.QueryPort().Addr, r.ServiceID, netip.AddrFrom16(r.DGID).Unmap(), r.PrivateData)
		}
	})
	if err != nil {
		c.unbindQP(o)
		return nil, nil, errf(abi.CodeInvalid, "connect: %v", err)
	}
	return &abi.Empty{}, nil, nil
}

func (c *conn) cmAccept(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	o, r := t.(*cmIDObj), b.(*abi.CMAcceptReq)
	var ud bool
	c.s.cmAgent.Do(func(*cm.CM) { ud = o.id != nil && o.id.State() == cm.StateSIDRREQRcvd })
	qpn, xrc, err := c.bindQP(o, r.QP, ud)
	if err != nil {
		return nil, nil, err
	}
	c.s.cmAgent.Do(func(*cm.CM) {
		switch {
		case o.id == nil:
			err = errors.New("the CM ID has no connect request")
			return
		case ud != (o.id.State() == cm.StateSIDRREQRcvd):
			err = errors.New("the connect request went away meanwhile")
			return
		case !ud && (xrc == ib.QPTypeXRCRecv) != (o.id.Transport() == mad.TransportXRC), xrc == ib.QPTypeXRCSend:
			// An XRC REQ is answered by an XRC target, any other by a
			// QP that is not one (cma_ib_check_req_qp_type).
			err = fmt.Errorf("QP %d (%v) cannot answer a REQ of transport type %d", qpn, xrc, o.id.Transport())
			return
		case ud:
			// cma_accept on a UD ID: the SIDR_REP names the QP and
			// the port space's Q_Key (cma_set_qkey).
			err = o.id.Accept(cm.AcceptParam{QPN: qpn, QKey: mad.RDMAUDPQKey, PrivateData: r.PrivateData})
			return
		}
		err = o.id.Accept(cm.AcceptParam{QPN: qpn, StartingPSN: r.StartingPSN,
			ResponderResources: r.ResponderResources, InitiatorDepth: r.InitiatorDepth,
			RNRRetryCount: r.RNRRetryCount, PrivateData: r.PrivateData})
	})
	if err != nil {
		c.unbindQP(o)
		return nil, nil, errf(abi.CodeInvalid, "accept: %v", err)
	}
	return &abi.Empty{}, nil, nil
}

func (c *conn) cmReject(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CMDataReq)
	reason := mad.RejReason(r.Reason)
	if reason == 0 {
		reason = mad.RejConsumerDefined
	}
	return c.onConnection(t, "reject", func(id *cm.ID) error { return id.Reject(reason, r.PrivateData) })
}

// cmDisconnect is rdma_disconnect: a DREQ for an established connection.
// On one the peer disconnected first (its DREQ crossed ours, or came
// before we asked) there is nothing to send and it succeeds, as the
// kernel's rdma_disconnect answers 0 when ib_send_cm_dreq fails.
// A UD ID has no connection: there is nothing to send, and it succeeds as
// the kernel's does (its DREQ and DREP fail on the IB CM ID, unreported).
func (c *conn) cmDisconnect(t object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.CMDataReq)
	o := t.(*cmIDObj)
	return c.onConnection(t, "disconnect", func(id *cm.ID) error {
		if o.ps == mad.PSUDP {
			return nil
		}
		switch id.State() {
		case cm.StateDREQSent, cm.StateDREQRcvd, cm.StateTimewait:
			return nil
		}
		return id.Disconnect(r.PrivateData)
	})
}

// onConnection runs f on the agent with the connection of CM ID t.
func (c *conn) onConnection(t object, what string, f func(*cm.ID) error) (abi.Body, []int, error) {
	o := t.(*cmIDObj)
	var err error
	c.s.cmAgent.Do(func(*cm.CM) {
		if o.id == nil {
			err = errors.New("the CM ID has no connection")
			return
		}
		err = f(o.id)
	})
	if err != nil {
		return nil, nil, errf(abi.CodeInvalid, "%s: %v", what, err)
	}
	return &abi.Empty{}, nil, nil
}

// cmGetEvent pops the channel's oldest event (rdma_get_cm_event). A
// connect request's new CM ID gets its handle here; events of IDs the
// client destroyed since are skipped.
func (c *conn) cmGetEvent(t object, _ abi.Body, _ []int) (abi.Body, []int, error) {
	ch := t.(*cmChanObj)
	for {
		ch.mu.Lock()
		if len(ch.queue) == 0 {
			ch.mu.Unlock()
			return &abi.CMEvent{}, nil, nil
		}
		p := ch.queue[0]
		ch.queue[0] = cmPending{}
		ch.queue = ch.queue[1:]
		if p.listen != nil {
			p.listen.queued--
		}
		ch.mu.Unlock()
		if p.ev.Type == cm.EventConnectRequest {
			// Counted as the client's since it came (cmConnectRequest).
			if p.listen.h == 0 {
				c.s.cmAgent.Do(func(*cm.CM) { p.ev.ID.Destroy() })
				c.uncountCMID()
				continue
			}
			ch.hold()
			p.id.h = c.add(p.id)
		}
		if p.id.h == 0 {
			continue // destroyed by the client meanwhile
		}
		return cmEventBody(&p), nil, nil
	}
}

func cmEventBody(p *cmPending) *abi.CMEvent {
	e := &p.ev
	r := &e.Remote
	out := &abi.CMEvent{Type: uint8(e.Type), ID: p.id.h, RemoteGID: r.GID, RemoteQPN: r.QPN,
		StartingPSN: r.StartingPSN, CMParams: abi.CMParams{PathMTU: r.PathMTU, ResponderResources: r.ResponderResources,
			InitiatorDepth: r.InitiatorDepth, RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount},
		PrivateData: e.PrivateData, QKey: r.QKey}
	if p.listen != nil {
		out.Listen = p.listen.h
	}
	if e.Err != nil {
		out.Err = e.Err.Error()
		var rej *cm.RejectError
		switch {
		case errors.As(e.Err, &rej) && rej.SIDR:
			// cma_sidr_rep_handler: a SIDR_REP other than success is
			// UNREACHABLE, its status the event's.
			out.Type, out.RejectReason = uint8(cm.EventUnreachable), uint16(rej.SIDRStatus)
		case rej != nil:
			out.RejectReason = uint16(rej.Reason)
		}
	}
	return out
}
