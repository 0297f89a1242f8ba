package hostif

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

// Client is the application's end of a control connection. Calls are
// serialized: one request, then its reply.
type Client struct {
	uc *net.UnixConn

	mu  sync.Mutex
	id  uint32
	buf []byte
	oob []byte
	// async is the latest error reply to a doorbell (which has no reply
	// when it goes well); Call skips such replies on its way.
	async error
}

// Dial connects to a daemon's control socket.
func Dial(path string) (*Client, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("hostif: connect to %s: %w", path, err)
	}
	return NewClient(uc), nil
}

// NewClient wraps a connected SOCK_SEQPACKET socket.
func NewClient(uc *net.UnixConn) *Client {
	return &Client{uc: uc, buf: make([]byte, abi.MaxMessage+1), oob: make([]byte, unix.CmsgSpace(4*8))}
}

// Close hangs up: the daemon destroys everything this client created.
func (c *Client) Close() error { return c.uc.Close() }

// Call sends a request with fds and decodes its reply into reply,
// returning the descriptors the reply carries (the caller owns them).
func (c *Client) Call(k abi.Kind, req abi.Body, fds []int, reply abi.Body) ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	id := c.id
	if _, _, err := c.uc.WriteMsgUnix(abi.Encode(k, 0, id, req), rightsOf(fds), nil); err != nil {
		return nil, fmt.Errorf("hostif: %v: send: %w", k, err)
	}
	for {
		h, body, rfds, err := c.read()
		if err != nil {
			return nil, fmt.Errorf("hostif: %v: %w", k, err)
		}
		if h.ID != id {
			// An error reply to an earlier doorbell.
			c.async = abi.DecodeReply(h.Kind, body, nil)
			closeAll(rfds)
			continue
		}
		if err := abi.DecodeReply(k, body, reply); err != nil {
			closeAll(rfds)
			return nil, err
		}
		return rfds, nil
	}
}

// Send sends a request that has no reply (a doorbell).
func (c *Client) Send(k abi.Kind, req abi.Body) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	if _, _, err := c.uc.WriteMsgUnix(abi.Encode(k, 0, c.id, req), nil, nil); err != nil {
		return fmt.Errorf("hostif: %v: send: %w", k, err)
	}
	return nil
}

// HungUp reports whether the daemon has closed its end of the
// connection (it exited or was killed), without a request and without
// reading: an application waiting on its rings learns it this way, as a
// device's fatal event.
func (c *Client) HungUp() bool {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return true // closed here
	}
	hung := false
	err = rc.Control(func(fd uintptr) {
		// A SOCK_SEQPACKET socket whose peer closed polls as POLLRDHUP
		// and POLLHUP; pending data alone polls as POLLIN only.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hung = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hung || err != nil
}

// AsyncErr returns, and forgets, the last error reply to a doorbell that
// a Call read on its way.
func (c *Client) AsyncErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.async
	c.async = nil
	return err
}

// Raw sends msg as it is, with fds, and returns the next message that
// comes back: for tests that speak the protocol wrongly on purpose.
func (c *Client) Raw(msg []byte, fds []int) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, _, err := c.uc.WriteMsgUnix(msg, rightsOf(fds), nil); err != nil {
		return nil, err
	}
	n, oobn, _, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return nil, err
	}
	closeAll(parseFDs(c.oob[:oobn]))
	return append([]byte(nil), c.buf[:n]...), nil
}

func (c *Client) read() (abi.Header, []byte, []int, error) {
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return abi.Header{}, nil, nil, err
	}
	fds := parseFDs(c.oob[:oobn])
	if n == 0 {
		closeAll(fds)
		return abi.Header{}, nil, nil, errors.New("daemon hung up")
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(fds)
		return abi.Header{}, nil, nil, errors.New("reply truncated")
	}
	h, err := abi.ParseHeader(c.buf[:n])
	if err != nil || h.Flags&abi.FlagReply == 0 {
		closeAll(fds)
		return h, nil, nil, fmt.Errorf("bad reply: %v", err)
	}
	return h, c.buf[abi.HeaderLen:n], fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Socketpair returns the two ends of a SOCK_SEQPACKET socketpair, for a
// server and a client in one process.
func Socketpair() (server, client *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("hostif: socketpair: %w", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := osNewFile(fd)
		fc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				unix.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("hostif: socketpair: %w", err)
		}
		conns[i] = fc.(*net.UnixConn)
	}
	return conns[0], conns[1], nil
}

func osNewFile(fd int) *os.File { return os.NewFile(uintptr(fd), "seqpacket") }
