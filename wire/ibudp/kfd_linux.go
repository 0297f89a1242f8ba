package ibudp

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/kwait"
)

// rawIO runs a non-blocking system call on a socket, waiting while the
// call reports false (EAGAIN): a syscall.RawConn of the runtime's poller,
// or a kfd.
type rawIO interface {
	Read(f func(fd uintptr) bool) error
	Write(f func(fd uintptr) bool) error
	// Control runs f once, never waiting; unlike Read it does not
	// serialize with a Read that waits (Port.TryRecv beside WaitRecv).
	Control(f func(fd uintptr)) error
}

// kfd is a socket kept out of the runtime's poller, for a port opened with
// Config.WaitInKernel: a call that must wait does so in poll(2) on its own
// thread (package kwait), one thread wake-up per packet instead of two or
// three.
//
// Close wakes every waiting call through an eventfd and closes the socket
// once they have all returned, so that no call runs on a descriptor number
// the process has reused.
type kfd struct {
	fd     int
	stop   int          // eventfd Close writes
	mu     sync.RWMutex // held shared by calls; Close takes it to close fd
	closed atomic.Bool
}

// socketIO takes ownership of fd, a non-blocking socket, and returns how
// to run calls on it and close it: a kfd if waitInKernel, otherwise an
// os.File in the runtime's poller.
func socketIO(fd int, waitInKernel bool, name string) (rawIO, io.Closer, error) {
	if waitInKernel {
		k, err := newKFD(fd)
		if err != nil {
			unix.Close(fd)
			return nil, nil, err
		}
		return k, k, nil
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return rc, f, nil
}

// newKFD takes ownership of fd, a non-blocking socket.
func newKFD(fd int) (*kfd, error) {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &kfd{fd: fd, stop: stop}, nil
}

func (k *kfd) Read(f func(fd uintptr) bool) error  { return k.wait(f, unix.POLLIN) }
func (k *kfd) Write(f func(fd uintptr) bool) error { return k.wait(f, unix.POLLOUT) }

func (k *kfd) Control(f func(fd uintptr)) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(k.fd))
	return nil
}

func (k *kfd) wait(f func(fd uintptr) bool, events int16) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for {
		if k.closed.Load() {
			return net.ErrClosed
		}
		if f(uintptr(k.fd)) {
			return nil
		}
		if err := kwait.Wait(k.fd, events, k.stop); err != nil {
			return err
		}
	}
}

// Close wakes the calls waiting on the socket and closes it after them.
func (k *kfd) Close() error {
	if k.closed.Swap(true) {
		return nil
	}
	kwait.Signal(k.stop)
	k.mu.Lock()
	defer k.mu.Unlock()
	err := unix.Close(k.fd)
	unix.Close(k.stop)
	return err
}
