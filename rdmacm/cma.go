package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/mad"
)

// EventChannel is struct rdma_event_channel: where the events of its CM
// IDs arrive. It spans every rnicd its IDs use: one CM channel on each,
// each with the read end of its daemon's wake pipe, and an eventfd for
// the events made here.
type EventChannel struct {
	efd int

	mu     sync.Mutex
	devs   []*device
	opened bool          // devs were opened here (CreateEventChannel): Destroy closes them
	local  []*Event      // ADDR_RESOLVED and ROUTE_RESOLVED, which no daemon sends
	ids    map[idKey]*ID // by device and handle

	// source is the address the kernel would send from to dst (route);
	// nil: kernelSource. Tests stand in for the routing table.
	source func(dst netip.Addr) (netip.Addr, bool)
}

// device is one rnicd: its context, its port's address, GID index and
// MTU, and the channel's CM channel there (0 until an ID uses the device).
type device struct {
	ctx      *verbs.Context
	addr     netip.Addr
	gidIndex uint8
	mtu      ib.MTU
	ch       uint32
	wake     int // read end of the CM channel's wake pipe (when ch != 0)
}

type idKey struct {
	dev *device
	h   uint32
}

// CreateEventChannel is rdma_create_event_channel: its IDs may use every
// rnicd running on this host (verbs.Devices), chosen by address.
func CreateEventChannel() (*EventChannel, error) {
	names, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	var ctxs []*verbs.Context
	for _, n := range names {
		// The CM agent is the daemon's, on its QP1: an rdma_cm ID's QPs
		// are the daemon's too, on its own data path.
		c, err := verbs.Open(n)
		if err != nil {
			continue // a daemon that went away meanwhile
		}
		ctxs = append(ctxs, c)
	}
	ch, err := CreateEventChannelOn(ctxs...)
	if err != nil {
		for _, c := range ctxs {
			c.Close()
		}
		return nil, err
	}
	ch.opened = true
	return ch, nil
}

// CreateEventChannelOn is CreateEventChannel over the devices given,
// which the caller keeps owning (an in-process NIC, say).
func CreateEventChannelOn(ctxs ...*verbs.Context) (*EventChannel, error) {
	if len(ctxs) == 0 {
		return nil, errors.New("rdmacm: no RDMA device (is rnicd running?)")
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: eventfd: %w", err)
	}
	ch := &EventChannel{efd: efd, ids: make(map[idKey]*ID)}
	for _, c := range ctxs {
		p, err := c.QueryPort()
		if err != nil {
			unix.Close(efd)
			return nil, fmt.Errorf("rdmacm: %s: %w", c.Name(), err)
		}
		ch.devs = append(ch.devs, &device{ctx: c, addr: p.Addr, gidIndex: uint8(p.GIDIndex), mtu: p.ActiveMTU})
	}
	return ch, nil
}

// Destroy is rdma_destroy_event_channel; destroy its IDs first.
func (ch *EventChannel) Destroy() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, d := range ch.devs {
		if d.ch != 0 {
			d.ctx.CMCall(abi.KindCMDestroyChannel, &abi.Handle{H: d.ch}, nil, &abi.Empty{})
			unix.Close(d.wake)
			d.ch = 0
		}
		if ch.opened {
			d.ctx.Close()
		}
	}
	return unix.Close(ch.efd)
}

// owner is the device whose port holds a, as rdma_bind_addr finds the
// RDMA device of a netdev; an unspecified a picks the first device.
func (ch *EventChannel) owner(a netip.Addr) (*device, error) {
	a = a.Unmap()
	for _, d := range ch.devs {
		if !a.IsValid() || a.IsUnspecified() || d.addr == a {
			return d, nil
		}
	}
	return nil, fmt.Errorf("rdmacm: no rnicd owns %v: %w", a, syscall.EADDRNOTAVAIL)
}

// route is the device a connection to dst leaves from, as the kernel's
// rdma_resolve_addr picks it for an unbound ID (addr4_resolve, then
// cma_acquire_dev_by_src_ip): the one that owns dst itself (a loopback
// route), else the one that owns the source address the routing table
// gives for dst, which on a subnet of several addresses is the primary
// one, not the closest. Where no rnicd owns that source (no route, or
// 127.0.0.1 for a loopback peer no daemon holds), the one whose address
// shares the longest prefix with dst stands in, where Linux would
// refuse.
func (ch *EventChannel) route(dst netip.Addr) *device {
	dst = dst.Unmap()
	for _, d := range ch.devs {
		if d.addr == dst {
			return d
		}
	}
	source := ch.source
	if source == nil {
		source = kernelSource
	}
	if src, ok := source(dst); ok {
		for _, d := range ch.devs {
			if d.addr == src {
				return d
			}
		}
	}
	best, bestLen := ch.devs[0], -1
	for _, d := range ch.devs {
		if n := commonPrefix(d.addr, dst); n > bestLen {
			best, bestLen = d, n
		}
	}
	return best
}

// kernelSource asks the routing table which address a datagram to dst
// would leave from: connecting a UDP socket routes it and binds its
// source, sending nothing (ip route get, without netlink).
func kernelSource(dst netip.Addr) (netip.Addr, bool) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
	if err != nil {
		return netip.Addr{}, false
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), true
}

func commonPrefix(a, b netip.Addr) int {
	x, y := a.As16(), b.As16()
	for i := range 128 {
		if x[i/8]>>(7-i%8)&1 != y[i/8]>>(7-i%8)&1 {
			return i
		}
	}
	return 128
}

// channelOn returns the channel's CM channel on d, creating it.
func (ch *EventChannel) channelOn(d *device) (uint32, error) {
	if d.ch != 0 {
		return d.ch, nil
	}
	var h abi.Handle
	fds, err := d.ctx.CMCall(abi.KindCMCreateChannel, &abi.Empty{}, nil, &h)
	if err != nil {
		return 0, fmt.Errorf("rdmacm: %s: %w", d.ctx.Name(), err)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		d.ctx.CMCall(abi.KindCMDestroyChannel, &abi.Handle{H: h.H}, nil, &abi.Empty{})
		return 0, fmt.Errorf("rdmacm: %s: create_event_channel's reply carries %d descriptors, want a wake pipe", d.ctx.Name(), len(fds))
	}
	d.ch, d.wake = h.H, fds[0]
	return d.ch, nil
}

// PortSpace is enum rdma_port_space: PSTCP for RC connections, PSUDP for
// UD QPs, whose "connection" is a service ID resolution (SIDR_REQ and
// SIDR_REP, IBTA 12.11) that tells the client the server's QPN and Q_Key.
type PortSpace = mad.PortSpace

// The port spaces an ID can be created in (RDMA_PS_TCP, RDMA_PS_UDP).
const (
	PSTCP = mad.PSTCP
	PSUDP = mad.PSUDP
)

// UDPQKey is RDMA_UDP_QKEY, the Q_Key of every UD QP of the UDP port
// space: CreateQP puts it on the QP, the server's SIDR_REP names it.
const UDPQKey = mad.RDMAUDPQKey

// ID is struct rdma_cm_id, in the TCP port space (RDMA_PS_TCP) unless
// CreateIDIn made it in another.
type ID struct {
	ch *EventChannel
	ps PortSpace
	// Verbs is the device the ID is bound to, after BindAddr or
	// ResolveAddr (cm_id->verbs): make the QP's PD and CQs on it.
	Verbs *verbs.Context
	// QP is the ID's QP, after CreateQP.
	QP *verbs.QP

	dev           *device
	h             uint32
	local, remote netip.AddrPort
	tos           uint8               // SetTOS's
	groups        map[netip.Addr]bool // JoinMulticast's, the QP attached to each (not send-only)
	// Context is the application's.
	Context any
}

// CreateID is rdma_create_id with RDMA_PS_TCP.
func (ch *EventChannel) CreateID() *ID { return ch.CreateIDIn(PSTCP) }

// CreateIDIn is rdma_create_id in port space ps: PSTCP (RC QPs) or PSUDP
// (UD QPs).
func (ch *EventChannel) CreateIDIn(ps PortSpace) *ID { return &ID{ch: ch, ps: ps} }

// SetTOS is rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS): the
// IP TOS byte of the connection Connect makes, which its REQ carries to
// the peer and both QPs put on their packets (RoCEv2's traffic class).
// Set it before Connect; a UD ID's SIDR has no place for it.
func (id *ID) SetTOS(tos uint8) { id.tos = tos }

// PS is the ID's port space (cm_id->ps).
func (id *ID) PS() PortSpace { return id.ps }

func (id *ID) ud() bool { return id.ps == PSUDP }

// bind ties the ID to device d, creating it there.
func (id *ID) bind(d *device, local netip.AddrPort) error {
	if id.dev != nil {
		return errors.New("rdmacm: the CM ID is already bound")
	}
	ch := id.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	c, err := ch.channelOn(d)
	if err != nil {
		return err
	}
	var h abi.Handle
	if _, err := d.ctx.CMCall(abi.KindCMCreateID, &abi.Handle{H: c}, nil, &h); err != nil {
		return fmt.Errorf("rdmacm: create ID on %s: %w", d.ctx.Name(), err)
	}
	id.dev, id.h, id.Verbs, id.local = d, h.H, d.ctx, local
	ch.ids[idKey{d, h.H}] = id
	return nil
}

// BindAddr is rdma_bind_addr: the ID takes the rnicd that owns a's
// address (any, if it is unspecified) and a's port.
func (id *ID) BindAddr(a netip.AddrPort) error {
	d, err := id.ch.owner(a.Addr())
	if err != nil {
		return err
	}
	return id.bind(d, netip.AddrPortFrom(d.addr, a.Port()))
}

// ResolveAddr is rdma_resolve_addr: the ID takes the rnicd that owns src
// (if valid) or the one dst is routed through, and an ADDR_RESOLVED event
// follows. The address is a GID here (RoCEv2 over IP), so there is
// nothing to wait for.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort) error {
	var d *device
	if src.IsValid() && !src.IsUnspecified() {
		var err error
		if d, err = id.ch.owner(src); err != nil {
			return err
		}
	} else {
		d = id.ch.route(dst.Addr())
	}
	if err := id.bind(d, netip.AddrPortFrom(d.addr, uint16(32768+rand.IntN(28232)))); err != nil {
		return err
	}
	id.remote = dst
	id.ch.post(&Event{Event: EventAddrResolved, ID: id})
	return nil
}

// ResolveRoute is rdma_resolve_route: the path is the port's (its MTU);
// a ROUTE_RESOLVED event follows.
func (id *ID) ResolveRoute() error {
	if id.dev == nil || !id.remote.IsValid() {
		return errors.New("rdmacm: resolve the address first")
	}
	id.ch.post(&Event{Event: EventRouteResolved, ID: id})
	return nil
}

// post queues a local event and wakes GetEvent.
func (ch *EventChannel) post(e *Event) {
	ch.mu.Lock()
	ch.local = append(ch.local, e)
	ch.mu.Unlock()
	unix.Write(ch.efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

// LocalAddr and RemoteAddr are rdma_get_local_addr and rdma_get_peer_addr.
func (id *ID) LocalAddr() netip.AddrPort  { return id.local }
func (id *ID) RemoteAddr() netip.AddrPort { return id.remote }

// CreateQP is rdma_create_qp on pd (of id.Verbs). In the TCP port space
// it makes an RC QP in INIT, as librdmacm leaves it (ucma_init_conn_qp),
// so that receives may be posted before the connection; the CM moves it
// to RTS. In the UDP port space it makes a UD QP and takes it to RTS at
// once with Q_Key UDPQKey and send PSN 0, as ucma_init_ud_qp does: a UD
// QP needs nothing from the peer to send.
func (id *ID) CreateQP(pd *verbs.PD, attr verbs.QPInitAttr) error {
	attr.Type = verbs.QPTypeRC
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags}}
	if id.ud() {
		attr.Type = verbs.QPTypeUD
		steps = []struct {
			attr verbs.QPAttr
			mask verbs.AttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: UDPQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
			{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
			{verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN},
		}
	}
	qp, err := pd.CreateQP(attr)
	if err != nil {
		return err
	}
	for _, st := range steps {
		if err := qp.Modify(&st.attr, st.mask); err != nil {
			qp.Destroy()
			return fmt.Errorf("rdmacm: QP to %v: %w", st.attr.State, err)
		}
	}
	id.QP = qp
	return nil
}

// Listen is rdma_listen on the bound port with the most backlog the
// daemon allows (ListenBacklog(0)).
func (id *ID) Listen() error { return id.ListenBacklog(0) }

// ListenBacklog is rdma_listen with its backlog: how many connect
// requests may wait for GetEvent before the daemon drops more (their
// senders try again); 0 or more than the daemon allows means the most
// (1024, ucma's max_backlog).
func (id *ID) ListenBacklog(backlog int) error {
	if id.dev == nil {
		return errors.New("rdmacm: bind the CM ID before Listen")
	}
	sid := mad.ServiceID(id.ps, id.local.Port())
	req := &abi.CMListenReq{H: id.h, ServiceID: sid, Backlog: uint32(max(backlog, 0))}
	_, err := id.Verbs.CMCall(abi.KindCMListen, req, nil, &abi.Empty{})
	return err
}

// Connect is rdma_connect: a REQ with rdma_cm's cma_hdr before p's
// private data; ESTABLISHED, REJECTED or UNREACHABLE follows. In the UDP
// port space it is a SIDR_REQ (cma_resolve_ib_udp) and only p's private
// data counts: ESTABLISHED brings the server's QPN, Q_Key and address
// (Event.UD), UNREACHABLE a timeout or a refusal.
func (id *ID) Connect(p *ConnParam) error {
	if id.QP == nil || !id.remote.IsValid() {
		return errors.New("rdmacm: Connect needs a resolved route and a QP")
	}
	most := mad.CMAUserPrivateDataLen
	if id.ud() {
		most = mad.SIDRReqPrivateDataLen - mad.CMAHdrLen
	}
	if len(p.PrivateData) > most {
		return fmt.Errorf("rdmacm: %d bytes of private data, at most %d", len(p.PrivateData), most)
	}
	pd := make([]byte, mad.CMAHdrLen+len(p.PrivateData))
	if err := mad.EncodeCMAHdr(pd, id.local.Addr(), id.local.Port(), id.remote.Addr()); err != nil {
		return fmt.Errorf("rdmacm: %w", err)
	}
	copy(pd[mad.CMAHdrLen:], p.PrivateData)
	req := &abi.CMConnectReq{H: id.h, QP: id.QP.Handle(), DGID: mad.GIDFromAddr(id.remote.Addr()),
		ServiceID: mad.ServiceID(id.ps, id.remote.Port()), StartingPSN: rand.Uint32() & 0xffffff,
		CMParams: abi.CMParams{PathMTU: uint8(id.dev.mtu), ResponderResources: p.ResponderResources,
			InitiatorDepth: p.InitiatorDepth, RetryCount: min(p.RetryCount, 7), RNRRetryCount: min(p.RNRRetryCount, 7)},
		PrivateData: pd, TrafficClass: id.tos}
	_, err := id.Verbs.CMCall(abi.KindCMConnect, req, nil, &abi.Empty{})
	return err
}

// Accept is rdma_accept on a CONNECT_REQUEST's ID with its QP. In the
// UDP port space it sends the SIDR_REP that names the QP and UDPQKey, with
// p's private data (at most 136 bytes), and no event follows on this side.
func (id *ID) Accept(p *ConnParam) error {
	if id.QP == nil {
		return errors.New("rdmacm: Accept needs a QP (CreateQP)")
	}
	req := &abi.CMAcceptReq{H: id.h, QP: id.QP.Handle(), StartingPSN: rand.Uint32() & 0xffffff,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RNRRetryCount: min(p.RNRRetryCount, 7), PrivateData: p.PrivateData}
	_, err := id.Verbs.CMCall(abi.KindCMAccept, req, nil, &abi.Empty{})
	return err
}

// Reject is rdma_reject: REJ reason 28 (consumer defined).
func (id *ID) Reject(privateData []byte) error {
	_, err := id.Verbs.CMCall(abi.KindCMReject, &abi.CMDataReq{H: id.h, PrivateData: privateData}, nil, &abi.Empty{})
	return err
}

// Disconnect is rdma_disconnect: a DREQ; DISCONNECTED follows on both sides.
func (id *ID) Disconnect() error {
	_, err := id.Verbs.CMCall(abi.KindCMDisconnect, &abi.CMDataReq{H: id.h}, nil, &abi.Empty{})
	return err
}

// Destroy is rdma_destroy_id (destroy the QP first, as rdma_destroy_qp).
func (id *ID) Destroy() error {
	if id.dev == nil {
		return nil
	}
	ch := id.ch
	ch.mu.Lock()
	delete(ch.ids, idKey{id.dev, id.h})
	ch.mu.Unlock()
	_, err := id.Verbs.CMCall(abi.KindCMDestroyID, &abi.Handle{H: id.h}, nil, &abi.Empty{})
	id.dev = nil
	return err
}

// GetEvent is rdma_get_cm_event: it waits for the channel's next event
// until ctx ends.
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		// Drained before looking, so that a later event wakes the wait.
		fds := ch.drain()
		if e, err := ch.next(); e != nil || err != nil {
			return e, err
		}
		if _, err := unix.Poll(fds, 50); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("rdmacm: wait: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// drain empties the channel's eventfd and its daemons' wake pipes and
// returns them for poll.
func (ch *EventChannel) drain() []unix.PollFd {
	var b [64]byte
	ch.mu.Lock()
	defer ch.mu.Unlock()
	fds := []unix.PollFd{{Fd: int32(ch.efd), Events: unix.POLLIN}}
	unix.Read(ch.efd, b[:8])
	for _, d := range ch.devs {
		if d.ch != 0 {
			unix.Read(d.wake, b[:])
			fds = append(fds, unix.PollFd{Fd: int32(d.wake), Events: unix.POLLIN})
		}
	}
	return fds
}

// next returns a waiting event, or nil.
func (ch *EventChannel) next() (*Event, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.local) > 0 {
		e := ch.local[0]
		ch.local = ch.local[1:]
		return e, nil
	}
	for _, d := range ch.devs {
		if d.ch == 0 {
			continue
		}
		var r abi.CMEvent
		if _, err := d.ctx.CMCall(abi.KindCMGetEvent, &abi.Handle{H: d.ch}, nil, &r); err != nil {
			return nil, fmt.Errorf("rdmacm: %s: %w", d.ctx.Name(), err)
		}
		if r.Type != 0 {
			return ch.convert(d, &r), nil
		}
	}
	return nil, nil
}

// convert turns a daemon's event into rdma_cm's.
func (ch *EventChannel) convert(d *device, r *abi.CMEvent) *Event {
	e := &Event{Event: fromCM[r.Type], RejectReason: r.RejectReason,
		Param: ConnParam{PrivateData: r.PrivateData, ResponderResources: r.ResponderResources,
			InitiatorDepth: r.InitiatorDepth, RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount}}
	e.ID = ch.ids[idKey{d, r.ID}]
	if e.Event == EventConnectRequest {
		e.ListenID = ch.ids[idKey{d, r.Listen}]
		id := &ID{ch: ch, Verbs: d.ctx, dev: d, h: r.ID}
		if e.ListenID != nil {
			id.local, id.ps = e.ListenID.local, e.ListenID.ps
		}
		if h, err := mad.ParseCMAHdr(r.PrivateData); err == nil {
			id.remote = netip.AddrPortFrom(h.SrcAddr(), h.SrcPort())
			e.Param.PrivateData = h.UserData(r.PrivateData)
		}
		if id.ud() {
			e.UD = &UDParam{PrivateData: e.Param.PrivateData}
		}
		e.Remote = id.remote
		ch.ids[idKey{d, r.ID}] = id
		e.ID = id
	}
	if e.ID == nil {
		e.ID = &ID{ch: ch, Verbs: d.ctx, dev: d, h: r.ID} // destroyed meanwhile
	}
	if e.ID.ud() && e.Event == EventEstablished {
		// cma_sidr_rep_handler: the server's QP, Q_Key and an address
		// handle to its GID from our port (the path's hop limit, 64 as
		// the IP route gives).
		e.UD = &UDParam{PrivateData: r.PrivateData, QPN: r.RemoteQPN, QKey: r.QKey,
			AH: verbs.AH{DGID: r.RemoteGID, SGIDIndex: d.gidIndex, HopLimit: 64}}
	}
	// The agent moved the QP to RTS. Not on DISCONNECTED (it went to ERR,
	// and posts flush in the NIC): the application may be destroying the
	// QP then, having seen its flushed completions first, and a query of
	// a destroyed QP is a refused request (cma.c does not touch it either).
	if q := e.ID.QP; q != nil && !e.ID.ud() && e.Event == EventEstablished {
		q.SyncState() // an error leaves it for PostSend to report
	}
	if r.Err != "" {
		e.Status = errors.New(r.Err)
		refused := e.Event == EventRejected && r.RejectReason == uint16(mad.RejInvalidServiceID) ||
			e.Event == EventUnreachable && e.ID.ud() && r.RejectReason == uint16(mad.SIDRUnsupported)
		if refused {
			e.Status = fmt.Errorf("rdmacm: connect to %v: %w (nobody listens: %v)", e.ID.remote, syscall.ECONNREFUSED, r.Err)
		}
	}
	return e
}
