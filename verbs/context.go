package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/kwait"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/hostif"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Context is an open device (ibv_context). Its methods are safe for
// concurrent use; the objects it creates live until destroyed or until the
// Context is closed.
type Context struct {
	name string
	cl   *hostif.Client
	// local is the NIC of OpenLocal, served in this process over a
	// socketpair: the same protocol and rings as a daemon's.
	local *localNIC

	mem allocs

	mu     sync.Mutex
	closed bool
}

type localNIC struct {
	dev  *rnic.Device
	conn *net.UnixConn // the server's end of the socketpair
	srv  *hostif.Local // serves conn; doorbells are calls
	done chan struct{} // closed when the server has torn the client down
}

// SocketDir is the directory of the daemons' control sockets, NAME.sock:
// $RNICD_DIR if set, else /run/rnicd for root, else
// $XDG_RUNTIME_DIR/rnicd, else /tmp/rnicd-UID; in a network namespace
// other than pid 1's, or where pid 1's cannot be read (a user's process, a
// sandbox), the subdirectory net-INODE of that, the namespace's inode as
// `lsns -t net` and `stat -L /proc/self/ns/net` show it.
//
// A device is an address in a network namespace, so its name is too: two
// namespaces (two containers, two `ip netns exec`) each run `rnicd -d
// rnic0`, and each namespace's tools see only its own, as each sees only
// its own interfaces. A directory per namespace, rather than the abstract
// socket namespace (which Linux keeps per network namespace by itself),
// because the sockets stay files: their modes say who may use a device,
// `ls` shows what runs, and the host's namespace keeps the paths it always
// had. Where pid 1's namespace cannot be read, this one may be another, so
// it gets its own directory: a daemon and its clients in one namespace
// compute the same path either way.
func SocketDir() string {
	if d := os.Getenv("RNICD_DIR"); d != "" {
		return d
	}
	var base string
	switch d := os.Getenv("XDG_RUNTIME_DIR"); {
	case os.Geteuid() == 0:
		base = "/run/rnicd"
	case d != "":
		base = filepath.Join(d, "rnicd")
	default:
		base = fmt.Sprintf("/tmp/rnicd-%d", os.Getuid())
	}
	if ns := netnsDir(); ns != "" {
		return filepath.Join(base, ns)
	}
	return base
}

// netnsDir is "net-INODE" for the calling thread's network namespace
// unless it is pid 1's, then "" ("" too if /proc cannot say). The thread's, not the process's: a Go program
// may enter a namespace on one locked thread (netns.Set) and open a device
// there.
func netnsDir() string {
	var self, host unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &self) != nil {
		return ""
	}
	if unix.Stat("/proc/1/ns/net", &host) == nil && self.Ino == host.Ino && self.Dev == host.Dev {
		return ""
	}
	return fmt.Sprintf("net-%d", self.Ino)
}

// SocketPath is the control socket of device name.
func SocketPath(name string) string { return filepath.Join(SocketDir(), name+".sock") }

// MonitorSocketPath is where the daemon of device name serves its
// monitor (counters, trace, fault injection) over HTTP, for the rnic
// stat, trace and inject tools. It does not end in .sock, so Devices
// does not take it for a device.
func MonitorSocketPath(name string) string { return filepath.Join(SocketDir(), name+".http") }

// Devices lists the devices whose daemons serve a socket in SocketDir
// (ibv_get_device_list), sorted. A socket left by a daemon that was
// killed is no device: it refuses connections, and is left out.
func Devices() ([]string, error) {
	ents, err := os.ReadDir(SocketDir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("verbs: list devices: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".sock"); ok && e.Type()&os.ModeSocket != 0 && !stale(SocketPath(n)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// stale reports whether nobody listens on the socket at path. The probe
// connects and hangs up at once, which a live daemon sees as a client
// that came and went; any other failure (permissions, ...) is left for
// Open to report.
func stale(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return errors.Is(unix.Connect(fd, &unix.SockaddrUnix{Name: path}), unix.ECONNREFUSED)
}

// Open connects to the running rnicd serving device name
// (ibv_open_device): the daemon runs the Context's QPs, as a NIC runs its
// host's, and it alone holds the port's UDP 4791 socket. With no daemon
// there, the error says how to start one; it wraps the dial error
// (os.ErrNotExist or syscall.ECONNREFUSED).
func Open(name string) (*Context, error) {
	cl, err := hostif.Dial(SocketPath(name))
	if err != nil {
		return nil, openError(name, err)
	}
	return &Context{name: name, cl: cl}, nil
}

// OpenDaemon is Open.
//
// Deprecated: there is one data path, the daemon's; use Open.
func OpenDaemon(name string) (*Context, error) { return Open(name) }

// openError is the error of opening device name when the dial to its
// daemon failed: a missing or dead socket says how to start the daemon,
// as the rnic tools do.
func openError(name string, err error) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("verbs: open %s: no rnicd serves %s: start one with `rnicd -d %s` (no live control socket %s): %w",
			name, name, name, SocketPath(name), err)
	}
	return fmt.Errorf("verbs: open %s: %w", name, err)
}

// LocalConfig says how OpenLocal builds its NIC.
type LocalConfig struct {
	Name string     // device name; "" gives "rnic0"
	Addr netip.Addr // address of the NIC's UDP 4791 port
	MTU  int        // caps the active MTU; 0 takes the interface's
	// Port, if set, is used instead of opening one on Addr (tests hand
	// in a fault injector this way).
	Port ibudp.Port
}

// OpenLocal starts a NIC inside this process and opens it. Closing the
// Context stops the NIC.
func OpenLocal(cfg LocalConfig) (*Context, error) {
	if cfg.Name == "" {
		cfg.Name = "rnic0"
	}
	p := cfg.Port
	if p == nil {
		var err error
		p, err = ibudp.Open(ibudp.Config{Addr: cfg.Addr, MTU: cfg.MTU})
		if err != nil {
			return nil, fmt.Errorf("verbs: open local %s: %w", cfg.Name, err)
		}
	}
	c, err := openNIC(rnic.Config{Port: p, Name: cfg.Name, CoalescePosts: true})
	if err != nil {
		return nil, fmt.Errorf("verbs: open local %s: %w", cfg.Name, err)
	}
	return c, nil
}

// openNIC starts a NIC on cfg.Port in this process, served over a
// socketpair as a daemon serves its clients, and opens it. The NIC owns
// the port, even on error.
func openNIC(cfg rnic.Config) (*Context, error) {
	d, err := rnic.Open(cfg)
	if err != nil {
		cfg.Port.Close()
		return nil, err
	}
	srvEnd, cliEnd, err := hostif.Socketpair()
	if err != nil {
		d.Close()
		return nil, err
	}
	srv := hostif.NewServer(hostif.Config{Device: d, Name: cfg.Name})
	// rdma_cm works in-process too (package rdmacm over this Context).
	if err := srv.StartCM(d.GSI(), NodeGUID(d.QueryPort().Addr)); err != nil {
		srvEnd.Close()
		cliEnd.Close()
		d.Close()
		return nil, err
	}
	l := &localNIC{dev: d, conn: srvEnd, srv: srv.NewLocal(srvEnd), done: make(chan struct{})}
	go func() {
		l.srv.Serve()
		srv.StopCM()
		close(l.done)
	}()
	return &Context{name: cfg.Name, cl: hostif.NewClient(cliEnd), local: l}, nil
}

// Name is the device's name (ibv_get_device_name).
func (c *Context) Name() string { return c.name }

// Close destroys every object of the Context and closes it.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.cl.Close()
	if c.local != nil {
		<-c.local.done
		if e := c.local.dev.Close(); err == nil {
			err = e
		}
	}
	c.mem.releaseAll()
	return err
}

func (c *Context) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// fatal says whether the daemon is gone: it closed the control
// connection, as it does when it exits or is killed.
func (c *Context) fatal() error {
	if err := c.check(); err != nil {
		return err
	}
	if c.cl.HungUp() {
		return fmt.Errorf("%w: the rnicd of %s hung up", ErrDeviceFatal, c.name)
	}
	return nil
}

// call makes one control request.
func (c *Context) call(k hostif.Kind, req hostif.Body, fds []int, reply hostif.Body) ([]int, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	rfds, err := c.cl.Call(k, req, fds, reply)
	var refused *hostif.Error
	if errors.As(err, &refused) {
		return rfds, &RequestError{Verb: refused.Kind.String(), Errno: refused.Code.Errno(), Msg: refused.Msg}
	}
	return rfds, c.hungUp(err)
}

// doorbell rings the doorbell of queue q of the QP or SRQ h: a message to
// a daemon, a call into an in-process NIC.
func (c *Context) doorbell(h uint32, q uint8) error {
	if c.local != nil {
		return c.local.srv.Doorbell(h, q)
	}
	return c.hungUp(c.cl.Send(hostif.KindDoorbell, &hostif.DoorbellReq{H: h, Queue: q}))
}

// hungUp turns the error of a message to a daemon that has gone (killed
// while the application posted) into the device's fatal error, as a wait
// on a ring reports it.
func (c *Context) hungUp(err error) error {
	if err != nil && c.cl.HungUp() {
		return fmt.Errorf("%w: the rnicd of %s hung up (%v)", ErrDeviceFatal, c.name, err)
	}
	return err
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (c *Context) QueryDevice() (DeviceAttr, error) {
	p, err := c.QueryPort()
	if err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{
		Name: c.name, NodeGUID: NodeGUID(p.Addr), FWVer: "0.1", MaxQP: 1 << 16, MaxQPWR: ib.MaxQPWR, MaxSGE: ib.MaxSGE,
		MaxCQ: 1 << 16, MaxCQE: rnic.MaxCQE, MaxMR: 1 << 16, MaxMRSize: 1 << 40, MaxPD: 1 << 16,
		MaxQPRdAtom: ib.MaxRdAtomic, MaxQPInitRdAtom: ib.MaxRdAtomic, MaxSRQ: 1 << 16,
		MaxSRQWR: ib.MaxQPWR, MaxInlineData: ib.MaxInlineData, AtomicCap: "ATOMIC_HCA",
	}, nil
}

// NodeGUID is the node GUID of the device whose port has address a. rxe
// takes it from the interface's MAC, which every rnicd on one interface
// (on lo, every one) would share; rnicd serves one address per device, so
// the GUID is made from it instead: an IPv4 address in the low 32 bits
// under a locally administered prefix (127.0.0.1 gives
// 0200:0000:7f00:0001), an IPv6 address's interface identifier.
func NodeGUID(a netip.Addr) uint64 {
	a = a.Unmap()
	b := a.As16()
	if a.Is4() {
		return 0x02<<56 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	}
	var g uint64
	for _, x := range b[8:] {
		g = g<<8 | uint64(x)
	}
	return g
}

// QueryPort returns the port's attributes and GID table (ibv_query_port).
func (c *Context) QueryPort() (PortAttr, error) {
	var r hostif.PortReply
	if _, err := c.call(hostif.KindQueryPort, &hostif.Empty{}, nil, &r); err != nil {
		return PortAttr{}, err
	}
	mtu := MTUFromBytes(int(r.ActiveMTU))
	// rxe lays an IPv4 address out as two GIDs, RoCE v1 at index 0 and v2
	// at index 1 (on an interface without IPv6), and RDMA users pass -g 1
	// / -x 1 out of habit; rnicd speaks v2 only, so every index of its
	// table (ib.GIDTableLen, the length the daemon checks sgid_index
	// against) holds the port's GID and 1 is the one to use.
	gids := make([]GID, ib.GIDTableLen)
	for i := range gids {
		gids[i] = r.GID
	}
	return PortAttr{
		State: "PORT_ACTIVE", MaxMTU: MTU4096, ActiveMTU: mtu, LinkLayer: "Ethernet",
		Addr: netip.AddrFrom16(r.Addr).Unmap(), GIDs: gids, GIDIndex: 1,
	}, nil
}

// Alloc returns n bytes of memory the NIC can share, zeroed. Register it
// (or slices of it) with RegMR; give it back with Free.
func (c *Context) Alloc(n int) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("verbs: alloc %d bytes", n)
	}
	s, err := c.mem.alloc(n)
	if err != nil {
		return nil, err
	}
	return s.app, nil
}

// Free gives back memory from Alloc. A region still registered keeps the
// NIC's own mapping until it is deregistered.
func (c *Context) Free(b []byte) error { return c.mem.release(b) }

// QPs lists every QP of the device, the ones of other clients among them
// (rdma res show qp). Owner is "comm[pid]".
func (c *Context) QPs() ([]QPInfo, error) {
	var out []QPInfo
	from := uint32(0)
	for {
		var r hostif.ListQPsReply
		if _, err := c.call(hostif.KindListQPs, &hostif.ListQPsReq{From: from}, nil, &r); err != nil {
			return nil, err
		}
		for _, row := range r.Rows {
			owner := row.Comm
			if row.PID != 0 {
				owner = row.Comm + "[" + strconv.Itoa(int(row.PID)) + "]"
			}
			out = append(out, QPInfo{
				QPN: row.QPN, Type: row.Type, State: row.State, SQPSN: row.SQPSN, RQPSN: row.RQPSN,
				DestQPN: row.DestQPN, Dest: netip.AddrFrom16(row.Dest).Unmap(), PathMTU: row.PathMTU,
				Owner: owner, SQDepth: int(row.SQDepth), RQDepth: int(row.RQDepth),
			})
		}
		if !r.More {
			return out, nil
		}
		from = r.Next
	}
}

// Counters returns the device's counters by rxe's names
// (/sys/class/infiniband/rxe0/ports/1/hw_counters), and the host
// interface's (hostif_*).
func (c *Context) Counters() (map[string]uint64, error) {
	var r hostif.CountersReply
	if _, err := c.call(hostif.KindCounters, &hostif.Empty{}, nil, &r); err != nil {
		return nil, err
	}
	return r.Counters, nil
}

// destroy releases a handle with a destroy request of kind k.
func (c *Context) destroy(k hostif.Kind, h uint32) error {
	_, err := c.call(k, &hostif.Handle{H: h}, nil, &hostif.Empty{})
	return err
}

// PD is a protection domain (ibv_pd).
type PD struct {
	ctx *Context
	h   uint32
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	var r hostif.Handle
	if _, err := c.call(hostif.KindAllocPD, &hostif.Empty{}, nil, &r); err != nil {
		return nil, err
	}
	return &PD{ctx: c, h: r.H}, nil
}

// Dealloc frees the PD (ibv_dealloc_pd).
func (pd *PD) Dealloc() error { return pd.ctx.destroy(hostif.KindDeallocPD, pd.h) }

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd   *PD
	h    uint32
	Buf  []byte // the registered memory
	Addr uint64 // the address SGEs and the peer use for Buf[0] (0 if zero-based)
	LKey uint32
	RKey uint32
}

// RegMR registers buf, which must lie in memory from Alloc (ibv_reg_mr).
// The NIC maps the same pages: no copies.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if err := pd.ctx.check(); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, errors.New("verbs: register an empty buffer")
	}
	va := Addr(buf)
	if access&AccessZeroBased != 0 {
		va = 0
	}
	s, off, err := pd.ctx.mem.find(buf)
	if err != nil {
		return nil, err
	}
	var r hostif.RegMRReply
	req := &hostif.RegMRReq{PD: pd.h, Access: uint32(access), Offset: uint64(off), Length: uint64(len(buf)), IOVA: va}
	if _, err := pd.ctx.call(hostif.KindRegMR, req, []int{s.fd}, &r); err != nil {
		return nil, fmt.Errorf("verbs: reg_mr: %w", err)
	}
	return &MR{pd: pd, h: r.H, Buf: buf, Addr: va, LKey: r.LKey, RKey: r.RKey}, nil
}

// Dereg deregisters the region (ibv_dereg_mr).
func (mr *MR) Dereg() error { return mr.pd.ctx.destroy(hostif.KindDeregMR, mr.h) }

// SGE returns the SGE for buf[off:off+n].
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.Addr + uint64(off), Length: uint32(n), LKey: mr.LKey}
}

// eventFD is the read end of a pipe the daemon writes (its wake pipe:
// the daemon keeps the write end, so nothing this process does to the
// descriptor can block the daemon), waited on in poll(2), not through
// the runtime's poller: a poller wait costs this process two or three
// thread wake-ups per event where poll(2) costs one, on the path of
// every completion a latency test waits for (package kwait). intr is an
// eventfd of this process's own that ends a wait early (a cancelled
// context, close).
type eventFD struct {
	fd     int
	intr   int
	mu     sync.RWMutex // held shared while fd is used; close takes it
	closed atomic.Bool
}

// newEventFD waits on fd, the read end of a wake pipe the daemon sent;
// it owns fd from now on, closing it on failure.
func newEventFD(fd int) (*eventFD, error) {
	intr, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("verbs: eventfd: %w", err)
	}
	// The daemon hands the read end non-blocking; a wait sleeps in poll.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(intr)
		return nil, fmt.Errorf("verbs: wake pipe: %w", err)
	}
	return &eventFD{fd: fd, intr: intr}, nil
}

// add ends a wait; intr must be open.
func (e *eventFD) add() { kwait.Signal(e.intr) }

// interrupt wakes a wait, if the descriptors are still open.
func (e *eventFD) interrupt() {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.closed.Load() {
		e.add()
	}
}

// wait blocks until the daemon writes the pipe or ctx ends; it may
// return early with no error (after a cancellation raced an event).
func (e *eventFD) wait(ctx context.Context) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	stop := context.AfterFunc(ctx, e.interrupt)
	defer stop()
	var b [64]byte // eight wake-ups at a time: the caller looks at its ring after any
	for woken := false; ; woken = true {
		if e.closed.Load() {
			return ErrClosed
		}
		n, _ := unix.Read(e.fd, b[:])
		if err := ctx.Err(); err != nil {
			// An event taken with the cancellation is no loss:
			// callers look at their ring again.
			return err
		}
		if n > 0 {
			return nil
		}
		if woken {
			// The poll ended with nothing in the pipe: intr ended it
			// (a cancellation that came too late for an earlier wait),
			// drained here so that the next poll sleeps. Not done
			// after every poll: it would cost each wake-up a system
			// call on the path of every completion waited for.
			unix.Read(e.intr, b[:8])
		}
		if err := kwait.Wait(e.fd, unix.POLLIN, e.intr); err != nil {
			return fmt.Errorf("verbs: wait for the wake pipe: %w", err)
		}
	}
}

// close wakes a wait in progress and closes the descriptors once no wait
// uses them.
func (e *eventFD) close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.add()
	e.mu.Lock()
	defer e.mu.Unlock()
	unix.Close(e.intr)
	return unix.Close(e.fd)
}

// CompChannel is a completion channel (ibv_comp_channel): where armed CQs
// report completion events.
type CompChannel struct {
	ctx *Context
	h   uint32
	ev  *eventFD

	mu  sync.Mutex
	cqs []*CQ
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	var r hostif.Handle
	fds, err := c.call(hostif.KindCreateChannel, &hostif.Empty{}, nil, &r)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		closeFDs(fds)
		c.destroy(hostif.KindDestroyChannel, r.H)
		return nil, fmt.Errorf("verbs: create_comp_channel: reply carries %d descriptors, want a wake pipe", len(fds))
	}
	ev, err := newEventFD(fds[0])
	if err != nil {
		c.destroy(hostif.KindDestroyChannel, r.H)
		return nil, err
	}
	return &CompChannel{ctx: c, h: r.H, ev: ev}, nil
}

// GetCQEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event). Re-arm the CQ with ReqNotify before polling it empty.
// It fails with ErrDeviceFatal once the daemon is gone.
func (ch *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	idle := false
	for {
		ch.mu.Lock()
		for _, cq := range ch.cqs {
			if ev := cq.ring.Events(); ev != cq.seen {
				cq.seen++
				ch.mu.Unlock()
				return cq, nil
			}
		}
		ch.mu.Unlock()
		if idle {
			if err := ch.ctx.fatal(); err != nil {
				return nil, err
			}
		}
		var err error
		if idle, err = waitBounded(ctx, ch.ev); err != nil {
			return nil, err
		}
	}
}

// waitBounded waits on e for at most a tenth of a second, so that a
// waiter looks at its daemon now and then; idle says the time ran out.
func waitBounded(ctx context.Context, e *eventFD) (idle bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = e.wait(wctx)
	cancel()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true, nil
	}
	return false, err
}

// Destroy destroys the channel (ibv_destroy_comp_channel).
func (ch *CompChannel) Destroy() error {
	if err := ch.ctx.destroy(hostif.KindDestroyChannel, ch.h); err != nil {
		return err
	}
	return ch.ev.close()
}

// ErrCQOverrun is CQ.Err's answer once a completion did not fit.
var ErrCQOverrun = ib.ErrCQOverrun

// CQ is a completion queue (ibv_cq): a ring the NIC writes completions
// into and Poll reads with no system call.
type CQ struct {
	ctx  *Context
	h    uint32
	ch   *CompChannel
	mem  []byte
	ring *hostif.Ring
	wake *eventFD // the NIC writes it when Wait sleeps

	mu   sync.Mutex
	cons uint32
	seen uint32 // events taken by GetCQEvent (under ch.mu)

	empty atomic.Uint32 // polls in a row that found nothing
}

// CreateCQ creates a CQ of at least cqe entries, reporting events to ch if
// not nil (ibv_create_cq).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > rnic.MaxCQE {
		return nil, fmt.Errorf("verbs: CQ size %d outside 1..%d", cqe, rnic.MaxCQE)
	}
	req := &hostif.CreateCQReq{CQE: uint32(cqe)}
	if ch != nil {
		req.Channel = ch.h
	}
	var r hostif.RingReply
	fds, err := c.call(hostif.KindCreateCQ, req, nil, &r)
	if err != nil {
		return nil, err
	}
	// The ring's memfd, then the read end of the CQ's wake pipe.
	if len(fds) != 2 {
		closeFDs(fds)
		c.destroy(hostif.KindDestroyCQ, r.H)
		return nil, fmt.Errorf("verbs: create_cq: reply carries %d descriptors, want a ring and a wake pipe", len(fds))
	}
	wake, err := newEventFD(fds[1])
	if err != nil {
		unix.Close(fds[0])
		c.destroy(hostif.KindDestroyCQ, r.H)
		return nil, err
	}
	mem, ring, err := mapRing(fds[:1], r.Send)
	if err != nil {
		wake.close()
		c.destroy(hostif.KindDestroyCQ, r.H)
		return nil, err
	}
	cq := &CQ{ctx: c, h: r.H, ch: ch, mem: mem, ring: ring, wake: wake}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs = append(ch.cqs, cq)
		ch.mu.Unlock()
	}
	return cq, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// mapRing maps the ring memfd of a create reply and views the ring d.
func mapRing(fds []int, d hostif.RingDesc) ([]byte, *hostif.Ring, error) {
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("verbs: reply carries %d descriptors, want a ring", len(fds))
	}
	defer unix.Close(fds[0])
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Size <= 0 {
		return nil, nil, fmt.Errorf("verbs: ring memfd: %v", err)
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("verbs: map ring: %w", err)
	}
	if uint64(d.Offset)+uint64(d.Size) > uint64(len(mem)) {
		unix.Munmap(mem)
		return nil, nil, fmt.Errorf("verbs: ring at %d+%d outside %d bytes", d.Offset, d.Size, len(mem))
	}
	ring, err := hostif.NewRing(mem[d.Offset:d.Offset+d.Size], d.Slots, d.SlotBytes)
	if err != nil {
		unix.Munmap(mem)
		return nil, nil, err
	}
	return mem, ring, nil
}

// Poll moves up to len(wcs) completions into wcs and returns how many
// (ibv_poll_cq). It never blocks. With a daemon it makes no system call;
// with an in-process NIC (OpenLocal) a Poll that finds the CQ empty busy
// polls (Context.BusyPoll) and looks again.
func (cq *CQ) Poll(wcs []WC) int {
	if n := cq.poll(wcs); n > 0 {
		cq.empty.Store(0)
		return n
	}
	if cq.ctx.BusyPoll() > 0 {
		if n := cq.poll(wcs); n > 0 {
			cq.empty.Store(0)
			return n
		}
	}
	// An application spinning on an empty CQ holds a core the NIC that
	// is to fill it may need: on 2 cores shared by two daemons and two
	// spinning tools, a spinner that never yields starves the engine
	// for its whole time slice. After a short spin, every few empty
	// polls give the core away (sched_yield, which returns at once when
	// nothing else is runnable).
	if e := cq.empty.Add(1); e > pollSpin && e%pollYieldEvery == 0 {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	return 0
}

// pollSpin is how many empty polls in a row spin before Poll starts to
// yield, one in pollYieldEvery of them: about the time a completion takes
// through the daemon's engine when it has a core (a few microseconds).
// Every empty poll after that yields, as the engine does when idle (see
// rnic's spinYield for what one yield in several cost on 2 cores).
const (
	pollSpin       = 64
	pollYieldEvery = 1
)

// BusyPoll lends the caller's goroutine to an in-process NIC (OpenLocal):
// it takes the packets waiting on the NIC's port, without blocking, and
// handles them here (rnic.Device.PollRx), so that a spinning application
// sees a message complete with no wake-up of the NIC's own goroutine in
// between. It returns how many packets it handled; with a daemon it does
// nothing. CQ.Poll calls it when the CQ is empty; an application that
// spins on memory a peer writes calls it in its loop.
func (c *Context) BusyPoll() int {
	if c.local == nil {
		return 0
	}
	return c.local.dev.PollRx()
}

// Local reports whether the Context's NIC runs in this process
// (OpenLocal): polling then drives it, and spinning pays.
func (c *Context) Local() bool { return c.local != nil }

func (cq *CQ) poll(wcs []WC) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return 0
	}
	prod := cq.ring.Producer()
	k := 0
	for k < len(wcs) && cq.cons != prod {
		hostif.GetCQE(cq.ring.Slot(cq.cons), &wcs[k])
		cq.cons++
		k++
	}
	if k > 0 {
		cq.ring.SetConsumer(cq.cons)
	}
	return k
}

// Err reports ErrCQOverrun once a completion found the CQ full (and was
// lost); the CQ was too small for its QPs.
func (cq *CQ) Err() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring != nil && cq.ring.Overrun() {
		return ErrCQOverrun
	}
	return nil
}

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// solicited or failed one) sends an event to its channel
// (ibv_req_notify_cq). It writes the ring's armed word: no system call.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return ErrClosed
	}
	if solicitedOnly {
		cq.ring.SetArmed(hostif.ArmSolicited)
	} else {
		cq.ring.SetArmed(hostif.ArmAny)
	}
	return nil
}

// Wait blocks until the CQ may have completions or ctx ends; a convenience
// for tools that would rather not spin. Poll after it returns. It sets
// the ring's waiting word and sleeps on the CQ's own wake pipe, which the
// NIC writes after its next completion: a system call only when there
// was nothing to poll.
func (cq *CQ) Wait(ctx context.Context) error {
	idle := false
	for {
		cq.mu.Lock()
		if cq.ring == nil {
			cq.mu.Unlock()
			return ErrClosed
		}
		if cq.ring.Producer() != cq.cons {
			cq.mu.Unlock()
			return nil
		}
		cq.ring.SetWaiting(true)
		ready := cq.ring.Producer() != cq.cons // a completion that raced the flag
		cq.mu.Unlock()
		if ready {
			return nil
		}
		// Completions the daemon wrote before it went (a SIGTERM's
		// flush) are taken above first.
		if idle {
			if err := cq.ctx.fatal(); err != nil {
				return err
			}
		}
		var err error
		if idle, err = waitBounded(ctx, cq.wake); err != nil || !idle {
			return err
		}
	}
}

// Destroy destroys the CQ (ibv_destroy_cq).
func (cq *CQ) Destroy() error {
	if err := cq.ctx.destroy(hostif.KindDestroyCQ, cq.h); err != nil {
		return err
	}
	if cq.ch != nil {
		cq.ch.mu.Lock()
		for i, o := range cq.ch.cqs {
			if o == cq {
				cq.ch.cqs = append(cq.ch.cqs[:i], cq.ch.cqs[i+1:]...)
				break
			}
		}
		cq.ch.mu.Unlock()
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	unix.Munmap(cq.mem)
	cq.ring, cq.mem = nil, nil
	return cq.wake.close()
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	pd     *PD
	h      uint32
	maxSGE int
	mem    []byte

	mu   sync.Mutex
	ring *hostif.Ring
	prod uint32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQInitAttr) (*SRQ, error) {
	var r hostif.RingReply
	req := &hostif.CreateSRQReq{PD: pd.h, MaxWR: uint32(a.MaxWR), MaxSGE: uint32(a.MaxSGE), Limit: uint32(a.Limit)}
	if a.MaxWR < 0 || a.MaxSGE < 0 || a.Limit < 0 {
		return nil, fmt.Errorf("verbs: create SRQ: negative size in %+v", a)
	}
	fds, err := pd.ctx.call(hostif.KindCreateSRQ, req, nil, &r)
	if err != nil {
		return nil, err
	}
	mem, ring, err := mapRing(fds, r.Recv)
	if err != nil {
		pd.ctx.destroy(hostif.KindDestroySRQ, r.H)
		return nil, err
	}
	return &SRQ{pd: pd, h: r.H, maxSGE: r.Caps.MaxRecvSGE, mem: mem, ring: ring}, nil
}

// PostRecv posts receive WRs to the SRQ (ibv_post_srq_recv): it writes
// them into the SRQ's ring and rings the doorbell.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ring == nil {
		return ErrClosed
	}
	err := postRecv(s.ring, &s.prod, s.maxSGE, wrs)
	if !s.ring.EngineAsleep() {
		return err // the engine polls the ring
	}
	if err2 := s.pd.ctx.doorbell(s.h, hostif.DoorbellRecv); err == nil {
		err = err2
	}
	return err
}

// postRecv writes receive WRs into a ring and moves its producer index.
func postRecv(ring *hostif.Ring, prod *uint32, maxSGE int, wrs []RecvWR) error {
	var bad error
	for i := range wrs {
		var err error
		switch {
		case *prod-ring.Consumer() >= ring.Slots:
			err = ErrQueueFull
		case len(wrs[i].SGL) > maxSGE:
			err = fmt.Errorf("verbs: %d SGEs, queue allows %d", len(wrs[i].SGL), maxSGE)
		default:
			err = hostif.EncodeRecvWQE(ring.Slot(*prod), &wrs[i])
		}
		if err != nil {
			bad = &WRError{Index: i, WRID: wrs[i].WRID, Err: err}
			break
		}
		*prod++
	}
	ring.SetProducer(*prod)
	return bad
}

// Destroy destroys the SRQ (ibv_destroy_srq).
func (s *SRQ) Destroy() error {
	if err := s.pd.ctx.destroy(hostif.KindDestroySRQ, s.h); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unix.Munmap(s.mem)
	s.ring, s.mem = nil, nil
	return nil
}

// QP is a queue pair (ibv_qp).
type QP struct {
	pd  *PD
	h   uint32
	QPN uint32
	Cap QPCap // the queue sizes the QP got
	typ QPType
	mem []byte

	mu     sync.Mutex
	sq, rq *hostif.Ring // rq nil with an SRQ
	sqProd uint32
	rqProd uint32
	state  QPState // as the last Modify left it
}

// CreateQP creates a QP in RESET (ibv_create_qp).
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, errors.New("verbs: create QP: needs a send CQ and a receive CQ")
	}
	c := a.Cap
	if c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, fmt.Errorf("verbs: create QP: negative caps %+v", c)
	}
	req := &hostif.CreateQPReq{PD: pd.h, SendCQ: a.SendCQ.h, RecvCQ: a.RecvCQ.h, Type: a.Type, SigAll: a.SigAll, Caps: a.Cap}
	if a.SRQ != nil {
		req.SRQ = a.SRQ.h
	}
	var r hostif.RingReply
	fds, err := pd.ctx.call(hostif.KindCreateQP, req, nil, &r)
	if err != nil {
		return nil, err
	}
	mem, sq, err := mapRing(fds, r.Send)
	if err != nil {
		pd.ctx.destroy(hostif.KindDestroyQP, r.H)
		return nil, err
	}
	qp := &QP{pd: pd, h: r.H, QPN: r.QPN, Cap: r.Caps, typ: a.Type, mem: mem, sq: sq, state: QPSReset}
	if r.Recv.Size != 0 {
		qp.rq, err = hostif.NewRing(mem[r.Recv.Offset:uint64(r.Recv.Offset)+uint64(r.Recv.Size)], r.Recv.Slots, r.Recv.SlotBytes)
		if err != nil {
			qp.Destroy()
			return nil, err
		}
	}
	return qp, nil
}

// Modify changes the QP's state and attributes (ibv_modify_qp).
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if _, err := qp.pd.ctx.call(hostif.KindModifyQP, &hostif.ModifyQPReq{H: qp.h, Mask: mask, Attr: *attr}, nil, &hostif.Empty{}); err != nil {
		return err
	}
	if mask&AttrState != 0 {
		qp.state = attr.State
		if attr.State == QPSReset {
			qp.sqProd, qp.rqProd = 0, 0 // the NIC reset the rings too
		}
	}
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, error) {
	var r hostif.QPAttrReply
	if _, err := qp.pd.ctx.call(hostif.KindQueryQP, &hostif.Handle{H: qp.h}, nil, &r); err != nil {
		return QPAttr{}, err
	}
	return r.Attr, nil
}

// PostSend posts send WRs (ibv_post_send): it writes them into the send
// ring and rings the doorbell. A WR that does not fit (the queue is full,
// too many SGEs, too much inline data) is refused with a *WRError
// and the ones after it are not posted; errors the NIC finds when it
// fetches a WQE come back as error completions.
func (qp *QP) PostSend(wrs []SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.sq == nil {
		return ErrClosed
	}
	switch qp.state {
	case QPSRTS, QPSSQD, QPSErr:
	default:
		return fmt.Errorf("verbs: post send in %v: %w", qp.state, ErrQPState)
	}
	var bad error
	for i := range wrs {
		wr := &wrs[i]
		var err error
		switch {
		case qp.sqProd-qp.sq.Consumer() >= qp.sq.Slots:
			err = ErrQueueFull
		case wr.Flags&SendInline != 0 && len(wr.InlineData) > qp.Cap.MaxInlineData:
			err = fmt.Errorf("verbs: %d bytes inline, QP allows %d", len(wr.InlineData), qp.Cap.MaxInlineData)
		case wr.Flags&SendInline == 0 && len(wr.SGL) > qp.Cap.MaxSendSGE:
			err = fmt.Errorf("verbs: %d SGEs, QP allows %d", len(wr.SGL), qp.Cap.MaxSendSGE)
		default:
			err = hostif.EncodeSendWQE(qp.sq.Slot(qp.sqProd), wr)
		}
		if err != nil {
			bad = &WRError{Index: i, WRID: wr.WRID, Err: err}
			break
		}
		qp.sqProd++
	}
	qp.sq.SetProducer(qp.sqProd)
	// The daemon's engine, awake, polls the producer index: no system
	// call. Asleep, it needs the doorbell, unless one is on its way
	// already, whose fetch takes these too.
	if !qp.sq.EngineAsleep() || !qp.sq.RingBell() {
		return bad
	}
	if err := qp.pd.ctx.doorbell(qp.h, hostif.DoorbellSend); err != nil && bad == nil {
		bad = err
	}
	return bad
}

// PostRecv posts receive WRs (ibv_post_recv) into the receive ring and
// rings the doorbell.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.sq == nil {
		return ErrClosed
	}
	if qp.rq == nil {
		return errors.New("verbs: QP uses an SRQ; post to the SRQ")
	}
	if qp.state == QPSReset {
		return fmt.Errorf("verbs: post recv in RESET: %w", ErrQPState)
	}
	err := postRecv(qp.rq, &qp.rqProd, qp.Cap.MaxRecvSGE, wrs)
	if !qp.rq.EngineAsleep() {
		return err // the engine polls the ring
	}
	if err2 := qp.pd.ctx.doorbell(qp.h, hostif.DoorbellRecv); err == nil {
		err = err2
	}
	return err
}

// Destroy destroys the QP (ibv_destroy_qp).
func (qp *QP) Destroy() error {
	if err := qp.pd.ctx.destroy(hostif.KindDestroyQP, qp.h); err != nil {
		return err
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	unix.Munmap(qp.mem)
	qp.sq, qp.rq, qp.mem = nil, nil, nil
	return nil
}
