package hostif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/cm"
)

// Config says what a Server serves.
type Config struct {
	Device *rnic.Device
	Name   string       // the device's name, for QueryPort
	Log    *slog.Logger // nil: no logs
	// Limits bound what each client and all of them hold (limits.go);
	// the zero value limits nothing.
	Limits Limits
}

// Server is the host interface of one device: it serves the control
// protocol to any number of clients, one goroutine per connection.
type Server struct {
	dev  *rnic.Device
	name string
	log  *slog.Logger

	mu    sync.Mutex
	conns map[*conn]struct{}
	lns   []net.Listener

	// qps maps a QPN to the client's QP, for ListQPs (which shows the
	// owner).
	qps sync.Map // uint32 -> *qpObj

	// Counters of what the host interface refused.
	badRequests atomic.Uint64 // control messages answered with an error
	badWQEs     atomic.Uint64 // WQEs that failed validation at fetch
	cqOverruns  atomic.Uint64 // completions that found their ring full
	overLimit   atomic.Uint64 // requests and connections refused for a limit
	unsealed    atomic.Uint64 // memory refused: not a memfd sealed against shrinking
	adminDenied atomic.Uint64 // administrative requests refused (AuthorizeAdmin)
	connWarned  atomic.Int64  // when a refused connection was last logged (UnixNano)

	ownUID uint32 // the daemon's effective uid, trusted as root is

	acct accounts // what each client holds, against cfg.Limits
	// acceptErrors counts accepts that failed and were retried.
	acceptErrors atomic.Uint64

	// The CM agent (cm.go), nil until StartCM; cmDropped counts events
	// dropped for a full or closed channel.
	cmAgent   *cm.Agent
	cmStop    chan struct{}
	cmRunning sync.WaitGroup
	cmDropped atomic.Uint64
	cmIDN     atomic.Uint32 // the last cm-idn given (cmres.go)

	// Asynchronous events (asyncev.go): raised and dropped for a full
	// queue; closing stops them at Shutdown.
	asyncRaised, asyncDropped atomic.Uint64
	closing                   atomic.Bool
	portDown                  atomic.Bool // the link under the port is down (PortEvent)
}

// NewServer returns a server for cfg.Device; the caller keeps owning the
// device.
func NewServer(cfg Config) *Server {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := cfg.Name
	if name == "" {
		name = "rnic0"
	}
	return &Server{dev: cfg.Device, name: name, log: log, conns: make(map[*conn]struct{}),
		acct: accounts{lim: cfg.Limits}, ownUID: uint32(os.Geteuid())}
}

// Trusted says whether uid may administer the daemon and is not held to
// the per-user limits: root, or the daemon's own uid (either may stop
// the daemon, so neither gains from a limit).
func (s *Server) Trusted(uid uint32) bool { return uid == 0 || uid == s.ownUID }

// AuthorizeAdmin allows a request that changes the device for every
// client (what: "inject") only from root or the daemon's own uid, as
// iproute2's rdma needs CAP_NET_ADMIN to change a device; cred is the
// requester's SO_PEERCRED, nil if it has none (a TCP connection). A
// refusal is counted (hostif_admin_refused) and logged.
func (s *Server) AuthorizeAdmin(what string, cred *unix.Ucred) error {
	var err error
	switch {
	case cred == nil:
		err = fmt.Errorf("refused over TCP: it carries no credentials; ask on the device's unix socket as root or uid %d", s.ownUID)
	case !s.Trusted(cred.Uid):
		err = fmt.Errorf("refused for uid %d: only root and rnicd's own uid %d may change the device for every client", cred.Uid, s.ownUID)
	default:
		return nil
	}
	s.adminDenied.Add(1)
	args := []any{"what", what, "err", err}
	if cred != nil {
		args = append(args, "pid", cred.Pid, "uid", cred.Uid)
	}
	s.log.Warn("administrative request refused", args...)
	return err
}

// Serve accepts connections on l until l is closed.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	failed := 0 // accepts failed in a row
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors or kernel memory is what one greedy
			// client can cause (20,000 CQs, an eventfd each):
			// the next client waits in the backlog while this backs off,
			// 5 ms doubling to 1 s as net/http's Serve does, and says so
			// once per burst. Returning would leave the daemon deaf.
			if !acceptRetryable(err) {
				return fmt.Errorf("hostif: accept: %w", err)
			}
			if failed == 0 {
				s.log.Error("accept failing, retrying until descriptors free up", "err", err)
			}
			failed++
			s.acceptErrors.Add(1)
			time.Sleep(min(5*time.Millisecond<<min(failed-1, 8), time.Second))
			continue
		}
		if failed > 0 {
			s.log.Info("accepting again", "failed_accepts", failed)
			failed = 0
		}
		go s.ServeConn(uc)
	}
}

// acceptRetryable says whether accept(2) failed for want of a resource
// that a departing client returns, not because the socket is broken.
func acceptRetryable(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ServeConn serves one client until it hangs up, then destroys everything
// the client created.
// A connection over the client's or the daemon's limit is answered
// with the limit's error to its first request, then closed.
func (s *Server) ServeConn(uc *net.UnixConn) {
	c := &conn{s: s, uc: uc, objs: make(map[uint32]object), next: 1}
	c.identify()
	if err := s.acct.connect(c.pid, owner{uid: c.uid, exempt: s.Trusted(c.uid)}, costConn); err != nil {
		s.overLimit.Add(1)
		c.refuseConn(err)
		return
	}
	defer s.acct.refund(c.pid, costConn)
	s.register(c).run()
}

// newConn registers a client's connection.
func (s *Server) newConn(uc *net.UnixConn) *conn {
	c := &conn{s: s, uc: uc, objs: make(map[uint32]object), next: 1}
	c.identify()
	return s.register(c)
}

// register adds c to the server's clients.
func (s *Server) register(c *conn) *conn {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.log.Info("client connected", c.who()...)
	return c
}

// who names the client for a log line: its pid, and its process name
// where /proc still had it (a probe such as verbs.Devices' connects and
// exits at once, often before the name is read; "" says nothing).
func (c *conn) who() []any {
	if c.comm == "" {
		return []any{"pid", c.pid}
	}
	return []any{"pid", c.pid, "comm", c.comm}
}

// run serves c until the client hangs up, then destroys what it created.
func (c *conn) run() {
	s, uc := c.s, c.uc
	c.serve()
	c.teardown()
	c.closeAsync()
	uc.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.log.Info("client gone", c.who()...)
}

// Local is the server's end of a client in the server's own process
// (verbs.OpenLocal). Besides the control protocol it takes doorbells as
// calls, so that a post runs the NIC's requester in the poster's
// goroutine, as rxe's post_send runs it in the caller's system call, with
// no hand-off to the connection's goroutine on the way.
type Local struct{ c *conn }

// NewLocal registers the server's end of an in-process client's
// connection; Serve serves it.
func (s *Server) NewLocal(uc *net.UnixConn) *Local { return &Local{c: s.newConn(uc)} }

// Serve serves the connection as ServeConn does.
func (l *Local) Serve() { l.c.run() }

// Doorbell rings the doorbell of queue (DoorbellSend or DoorbellRecv) of
// the QP or SRQ with handle h, as a KindDoorbell message would; the error
// is the one a daemon would send back as an asynchronous error.
func (l *Local) Doorbell(h uint32, queue uint8) error {
	c := l.c
	c.handling.Lock()
	defer c.handling.Unlock()
	if _, _, err := c.dispatch(requests[abi.KindDoorbell], &abi.DoorbellReq{H: h, Queue: queue}, nil); err != nil {
		c.s.badRequests.Add(1)
		return fmt.Errorf("hostif: %w", err)
	}
	return nil
}

// Shutdown is the daemon's exit: every QP of every client goes to ERR,
// which completes its outstanding WQEs with WR_FLUSH_ERR into the clients'
// completion rings, and the listeners close. Connections stay open: the
// clients see the flushes, then the hang-up when the process exits.
//
// Doorbells are not answered, so a client may have written WQEs whose
// doorbell is still in the socket: each client's rings are fetched up to
// their producer indexes first, so that everything posted is flushed.
func (s *Server) Shutdown() {
	s.closing.Store(true)
	s.mu.Lock()
	lns := s.lns
	s.lns = nil
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range conns {
		c.handling.Lock()
		c.fetchAll()
		c.handling.Unlock()
	}
	for _, qp := range s.dev.QPs() {
		s.dev.EnterError(qp)
	}
}

// Objects counts the live objects of every client, by kind ("qp", "cq",
// ...): what a test checks is back to its baseline after a client dies.
func (s *Server) Objects() map[string]int {
	m := make(map[string]int)
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		for _, o := range c.objs {
			m[o.kind().counter()]++
		}
		c.mu.Unlock()
	}
	m["clients"] = len(s.conns)
	return m
}

// Counters are the host interface's own counters, to add to the device's:
// what it refused, and how many clients and objects are alive
// (hostif_clients, hostif_objects_qp, ...).
func (s *Server) Counters() map[string]uint64 {
	m := map[string]uint64{
		"hostif_bad_request":      s.badRequests.Load(),
		"hostif_bad_wqe":          s.badWQEs.Load(),
		"hostif_cq_overrun":       s.cqOverruns.Load(),
		"hostif_accept_err":       s.acceptErrors.Load(),
		"hostif_over_limit":       s.overLimit.Load(),
		"hostif_unsealed_memfd":   s.unsealed.Load(),
		"hostif_admin_refused":    s.adminDenied.Load(),
		"hostif_users":            uint64(s.acct.heldUsers()),
		"hostif_cm_event_dropped": s.cmDropped.Load(),
	}
	// What all clients hold of each limited resource, to set beside
	// its limit: hostif_held_maps, hostif_held_fds, ...
	s.cmCounters(m)
	s.asyncCounters(m)
	held := s.acct.held()
	for r := range NumResources {
		m["hostif_held_"+resources[r].counter] = held[r]
	}
	for _, k := range kinds {
		m["hostif_objects_"+k.counter] = 0
	}
	for k, n := range s.Objects() {
		if k == "clients" {
			m["hostif_clients"] = uint64(n)
		} else {
			m["hostif_objects_"+k] = uint64(n)
		}
	}
	return m
}

// request is one kind of control request: its name, how many descriptors
// it carries, its body, the kinds of object its handle may name (target;
// 0 for a request that names none), and its handler, which gets the
// target checked. A new kind is its constant and name in package abi,
// one entry here and one handler.
type request struct {
	name    string
	fds     int
	body    func() abi.Body
	cost    func(abi.Body) Quota // what a creating request charges its client (limits.go)
	target  objKind
	handle  func(c *conn, target object, req abi.Body, fds []int) (abi.Body, []int, error)
	noReply bool
}

// targeted is a request body that names the object it acts on.
type targeted interface{ Target() uint32 }

var requests map[abi.Kind]request

func init() {
	empty := func() abi.Body { return &abi.Empty{} }
	handle := func() abi.Body { return &abi.Handle{} }
	requests = map[abi.Kind]request{
		abi.KindQueryPort:      {body: empty, handle: (*conn).queryPort},
		abi.KindAllocPD:        {body: empty, cost: costOf(costPD), handle: (*conn).allocPD},
		abi.KindDeallocPD:      {body: handle, target: kindPD, handle: (*conn).destroy},
		abi.KindRegMR:          {fds: 1, body: func() abi.Body { return &abi.RegMRReq{} }, cost: regMRCost, handle: (*conn).regMR},
		abi.KindDeregMR:        {body: handle, target: kindMR, handle: (*conn).destroy},
		abi.KindRegMRShm:       {body: func() abi.Body { return &abi.RegMRShmReq{} }, cost: regMRShmCost, handle: (*conn).regMRShm},
		abi.KindRegMRMapped:    {body: func() abi.Body { return &abi.RegMRMappedReq{} }, cost: regMRMappedCost, handle: (*conn).regMRMapped},
		abi.KindCreateChannel:  {body: empty, cost: costOf(costChannel), handle: (*conn).createChannel},
		abi.KindDestroyChannel: {body: handle, target: kindChannel, handle: (*conn).destroy},
		abi.KindCreateCQ:       {body: func() abi.Body { return &abi.CreateCQReq{} }, cost: createCQCost, handle: (*conn).createCQ},
		abi.KindDestroyCQ:      {body: handle, target: kindCQ, handle: (*conn).destroy},
		abi.KindResizeCQ:       {body: func() abi.Body { return &abi.ResizeCQReq{} }, target: kindCQ, handle: (*conn).resizeCQ},
		abi.KindCreateSRQ:      {body: func() abi.Body { return &abi.CreateSRQReq{} }, cost: createSRQCost, handle: (*conn).createSRQ},
		abi.KindDestroySRQ:     {body: handle, target: kindSRQ, handle: (*conn).destroy},
		abi.KindCreateQP:       {body: func() abi.Body { return &abi.CreateQPReq{} }, cost: createQPCost, handle: (*conn).createQP},
		abi.KindModifyQP:       {body: func() abi.Body { return &abi.ModifyQPReq{} }, target: kindQP, handle: (*conn).modifyQP},
		abi.KindQueryQP:        {body: handle, target: kindQP, handle: (*conn).queryQP},
		abi.KindDestroyQP:      {body: handle, target: kindQP, handle: (*conn).destroy},
		abi.KindAttachMcast:    {body: func() abi.Body { return &abi.McastReq{} }, target: kindQP, handle: (*conn).attachMcast},
		abi.KindDetachMcast:    {body: func() abi.Body { return &abi.McastReq{} }, target: kindQP, handle: (*conn).detachMcast},
		abi.KindAllocMW:        {body: func() abi.Body { return &abi.AllocMWReq{} }, cost: costOf(costMW), handle: (*conn).allocMW},
		abi.KindDeallocMW:      {body: handle, target: kindMW, handle: (*conn).destroy},
		abi.KindListQPs:        {body: func() abi.Body { return &abi.ListQPsReq{} }, handle: (*conn).listQPs},
		abi.KindCounters:       {body: empty, handle: (*conn).counters},
		abi.KindDoorbell: {body: func() abi.Body { return &abi.DoorbellReq{} }, target: kindQP | kindSRQ,
			handle: (*conn).doorbell, noReply: true},

		abi.KindCMCreateChannel:  {body: empty, cost: costOf(costChannel), handle: (*conn).cmCreateChannel},
		abi.KindCMDestroyChannel: {body: handle, target: kindCMChannel, handle: (*conn).destroy},
		abi.KindCMCreateID:       {body: handle, target: kindCMChannel, handle: (*conn).cmCreateID},
		abi.KindCMDestroyID:      {body: handle, target: kindCMID, handle: (*conn).destroy},
		abi.KindCMListen:         {body: func() abi.Body { return &abi.CMListenReq{} }, target: kindCMID, handle: (*conn).cmListen},
		abi.KindCMConnect:        {body: func() abi.Body { return &abi.CMConnectReq{} }, target: kindCMID, handle: (*conn).cmConnect},
		abi.KindCMAccept:         {body: func() abi.Body { return &abi.CMAcceptReq{} }, target: kindCMID, handle: (*conn).cmAccept},
		abi.KindCMReject:         {body: func() abi.Body { return &abi.CMDataReq{} }, target: kindCMID, handle: (*conn).cmReject},
		abi.KindCMDisconnect:     {body: func() abi.Body { return &abi.CMDataReq{} }, target: kindCMID, handle: (*conn).cmDisconnect},
		abi.KindCMGetEvent:       {body: handle, target: kindCMChannel, handle: (*conn).cmGetEvent},
		abi.KindListCMIDs:        {body: func() abi.Body { return &abi.ListCMIDsReq{} }, handle: (*conn).listCMIDs},
		abi.KindOpenXRCD:         {body: empty, cost: costOf(costXRCD), handle: (*conn).openXRCD},
		abi.KindCloseXRCD:        {body: handle, target: kindXRCD, handle: (*conn).destroy},
		abi.KindOpenXRCDFile:     {fds: 1, body: func() abi.Body { return &abi.OpenXRCDFileReq{} }, cost: costOf(costXRCD), handle: (*conn).openXRCDFile},
		abi.KindCreateXRCSRQ:     {body: func() abi.Body { return &abi.CreateXRCSRQReq{} }, cost: createXRCSRQCost, handle: (*conn).createXRCSRQ},
		abi.KindCreateXRCQP:      {body: func() abi.Body { return &abi.CreateXRCQPReq{} }, cost: createXRCQPCost, handle: (*conn).createXRCQP},
	}
	registerAsync(requests)
	// A request's name is its kind's (abi's table), for errors and
	// the accounting's messages.
	for k, r := range requests {
		r.name = k.String()
		requests[k] = r
	}
}

// DecodeRequest decodes a request message as the server does: header,
// kind, descriptor count and body. It is the decoder FuzzDecode drives.
func DecodeRequest(msg []byte, nfds int) (abi.Header, abi.Body, error) {
	h, err := abi.ParseHeader(msg)
	if err != nil {
		return h, nil, &codeErr{abi.CodeMalformed, err.Error()}
	}
	if h.Flags&abi.FlagReply != 0 {
		return h, nil, &codeErr{abi.CodeMalformed, "a reply sent to the daemon"}
	}
	r, ok := requests[h.Kind]
	if !ok {
		return h, nil, &codeErr{abi.CodeUnknown, fmt.Sprintf("unknown request kind %d", uint16(h.Kind))}
	}
	if nfds != r.fds {
		return h, nil, &codeErr{abi.CodeMalformed, fmt.Sprintf("%s carries %d descriptors, wants %d", r.name, nfds, r.fds)}
	}
	b := r.body()
	if err := abi.DecodeBody(msg[abi.HeaderLen:], b); err != nil {
		return h, nil, &codeErr{abi.CodeMalformed, fmt.Sprintf("%s: %v", r.name, err)}
	}
	return h, b, nil
}

// codeErr is a handler's refusal with its reply code.
type codeErr struct {
	code abi.Code
	msg  string
}

func (e *codeErr) Error() string { return e.msg }

func errf(code abi.Code, format string, a ...any) error {
	return &codeErr{code, fmt.Sprintf(format, a...)}
}

// conn is one client: its socket and its objects.
type conn struct {
	s    *Server
	uc   *net.UnixConn
	pid  int32
	uid  uint32
	comm string
	// start is when the process pid was started (procStart), 0 if
	// unknown: the pid names the client's process only while that
	// process lives, and the connection may outlive it (sameProcess).
	start uint64

	mu   sync.Mutex // objs, for Objects; handlers run on the conn's goroutine
	objs map[uint32]object
	next uint32

	// handling is held while a request runs, so that Shutdown can fetch
	// a client's rings between two of its requests.
	handling sync.Mutex

	warned bool // the log said once that this client went over a limit

	// cmIDs counts the client's CM IDs; cmQPNs the QPs bound to them,
	// the only ones the CM agent may move (under mu).
	cmIDs  int
	cmQPNs map[uint32]int

	async asyncQueue // asyncev.go
}

// identify learns the client's pid and process name from its credentials.
func (c *conn) identify() {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			c.pid, c.uid = cred.Pid, cred.Uid
		}
	})
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.pid)); err == nil {
		c.comm = strings.TrimSpace(string(b))
	}
	c.start, _ = procStart(c.pid)
}

func (c *conn) serve() {
	buf := make([]byte, abi.MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*8))
	for {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			return
		}
		fds := parseFDs(oob[:oobn])
		msg := buf[:n]
		var reply []byte
		var rfds []int
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > abi.MaxMessage {
			reply = c.refuse(msg, &codeErr{abi.CodeMalformed, "message or its descriptors truncated"})
		} else {
			c.handling.Lock()
			reply, rfds = c.handle(msg, fds)
			c.handling.Unlock()
		}
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if reply != nil {
			_, _, err = c.uc.WriteMsgUnix(reply, rightsOf(rfds), nil)
			for _, fd := range rfds {
				unix.Close(fd)
			}
			if err != nil {
				return
			}
		}
	}
}

// overLimit counts a request refused at a limit, warns of the client
// once (a client looping on a refused request must not flood the log),
// and returns err.
func (c *conn) overLimit(err error) error {
	c.s.overLimit.Add(1)
	if !c.warned {
		c.warned = true
		c.s.log.Warn("client over a limit", "pid", c.pid, "comm", c.comm, "err", err)
	}
	return err
}

// handle runs one request; it returns the reply (nil for a doorbell that
// went well) and the descriptors to send with it. Handlers that keep a
// received descriptor set its entry to -1; the rest are closed.
func (c *conn) handle(msg []byte, fds []int) ([]byte, []int) {
	h, body, err := DecodeRequest(msg, len(fds))
	if err != nil {
		return c.refuse(msg, err), nil
	}
	r := requests[h.Kind]
	out, rfds, err := c.dispatch(r, body, fds)
	if err != nil {
		for _, fd := range rfds {
			unix.Close(fd)
		}
		return c.refuse(msg, err), nil
	}
	if r.noReply {
		return nil, nil
	}
	return abi.EncodeReply(h.Kind, h.ID, out), rfds
}

// dispatch checks that the object a request names is this client's and of a
// kind the request acts on, then runs its handler. Every request, from
// the socket or a Local's call, comes through here.
func (c *conn) dispatch(r request, body abi.Body, fds []int) (abi.Body, []int, error) {
	var target object
	if r.target != 0 {
		var err error
		if target, err = c.get(body.(targeted).Target(), r.target); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	if r.cost == nil {
		return r.handle(c, target, body, fds)
	}
	// Charged before anything is allocated, refunded if the handler
	// fails: a refused request changes nothing.
	cost := r.cost(body)
	if err := c.s.acct.charge(r.name, c.pid, cost); err != nil {
		return nil, nil, c.overLimit(err)
	}
	out, rfds, err := r.handle(c, target, body, fds)
	if err != nil {
		c.s.acct.refund(c.pid, cost)
		return out, rfds, err
	}
	if o := c.created(out); o != nil {
		c.s.acct.trueUp(c.pid, cost, o.cost())
	}
	return out, rfds, err
}

// created is the object a creating request's reply names.
func (c *conn) created(reply abi.Body) object {
	var h uint32
	switch r := reply.(type) {
	case *abi.Handle:
		h = r.H
	case *abi.RegMRReply:
		h = r.H
	case *abi.AllocMWReply:
		h = r.H
	case *abi.RingReply:
		h = r.H
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objs[h]
}

func costOf(q Quota) func(abi.Body) Quota { return func(abi.Body) Quota { return q } }

// refuse counts and logs a refused request and returns its error reply.
func (c *conn) refuse(msg []byte, err error) []byte {
	var k abi.Kind
	var id uint32
	if len(msg) >= 8 {
		k, id = abi.Kind(binary.LittleEndian.Uint16(msg[0:])), binary.LittleEndian.Uint32(msg[4:])
	}
	code, text := abi.CodeFailed, err.Error()
	var ce *codeErr
	if errors.As(err, &ce) {
		code = ce.code
	}
	c.s.badRequests.Add(1)
	c.s.log.Debug("request refused", "pid", c.pid, "kind", k, "code", code, "err", text)
	return abi.EncodeError(k, id, code, text)
}

func parseFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func rightsOf(fds []int) []byte {
	if len(fds) == 0 {
		return nil
	}
	return unix.UnixRights(fds...)
}
