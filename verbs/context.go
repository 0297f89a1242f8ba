package verbs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"sync"

	"syscall"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/hostif"
	"github.com/rnicd/rnicd/rnic"
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

	// objs maps the handles of the Context's QPs, CQs and SRQs to
	// them, for AsyncEvents (asyncev.go).
	objs sync.Map
}

type localNIC struct {
	dev  *rnic.Device
	conn *net.UnixConn // the server's end of the socketpair
	srv  *hostif.Local // serves conn; doorbells are calls
	done chan struct{} // closed when the server has torn the client down
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
func (c *Context) call(k abi.Kind, req abi.Body, fds []int, reply abi.Body) ([]int, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	rfds, err := c.cl.Call(k, req, fds, reply)
	var refused *abi.Error
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
	return c.hungUp(c.cl.Send(abi.KindDoorbell, &abi.DoorbellReq{H: h, Queue: q}))
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

// destroy releases a handle with a destroy request of kind k.
func (c *Context) destroy(k abi.Kind, h uint32) error {
	_, err := c.call(k, &abi.Handle{H: h}, nil, &abi.Empty{})
	if err == nil {
		c.objs.Delete(h)
	}
	return err
}

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
