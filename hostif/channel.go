package hostif

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

type chanObj struct {
	useCount
	fd int // write end of the wake pipe the client waits on (wakePipe)
}

func (*chanObj) kind() objKind { return kindChannel }
func (*chanObj) cost() Quota   { return costChannel }

func (o *chanObj) release(*conn) error {
	unix.Close(o.fd)
	return nil
}

func (c *conn) createChannel(object, abi.Body, []int) (abi.Body, []int, error) {
	rd, wr, err := wakePipe()
	if err != nil {
		return nil, nil, err
	}
	return &abi.Handle{H: c.add(&chanObj{fd: wr})}, []int{rd}, nil
}

// wakePipe makes the descriptor pair a wake-up goes through: the daemon
// keeps the write end, non-blocking on an open file description no
// client ever receives, and the client gets the read end. An eventfd the
// client handed over (as before) shares its flags with the client, which
// could clear O_NONBLOCK, fill the counter and block the daemon thread
// that writes it for ever, stopping every client. The pipe is cut to one
// page (F_SETPIPE_SZ): a client that never reads it pins 4 KiB, not 64.
func wakePipe() (rd, wr int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return -1, -1, errf(abi.CodeFailed, "pipe: %v", err)
	}
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, os.Getpagesize()) // a smaller pipe is only a saving
	return p[0], p[1], nil
}

// signalFD wakes whoever waits on the read end of the wake pipe whose
// write end is fd (abi.Wake).
func signalFD(fd int) { abi.Wake(fd) }
