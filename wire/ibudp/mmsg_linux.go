package ibudp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgs is the scratch space of one direction of a port: the mmsghdr array
// sendmmsg and recvmmsg take, with an iovec, a socket address and a control
// buffer per message, all allocated once.
type mmsgs struct {
	hdrs    []unix.Mmsghdr
	iovs    []unix.Iovec
	names   []byte
	ctrl    []byte
	ctrlLen int
}

func newMmsgs(n, ctrlLen int) *mmsgs {
	return &mmsgs{
		hdrs:    make([]unix.Mmsghdr, n),
		iovs:    make([]unix.Iovec, n),
		names:   make([]byte, n*nameLen),
		ctrl:    make([]byte, n*ctrlLen),
		ctrlLen: ctrlLen,
	}
}

func (m *mmsgs) name(i int) []byte { return m.names[i*nameLen : (i+1)*nameLen] }

func (m *mmsgs) control(i int) []byte { return m.ctrl[i*m.ctrlLen : (i+1)*m.ctrlLen] }

// set points message i at data, with the first nlen bytes of its name
// buffer and the first clen bytes of its control buffer.
func (m *mmsgs) set(i int, data []byte, nlen, clen int) {
	iov := &m.iovs[i]
	iov.Base = &data[0]
	iov.SetLen(len(data))
	h := &m.hdrs[i]
	h.Hdr = unix.Msghdr{Iov: iov}
	h.Hdr.SetIovlen(1)
	if nlen > 0 {
		h.Hdr.Name = &m.names[i*nameLen]
		h.Hdr.Namelen = uint32(nlen)
	}
	if clen > 0 {
		h.Hdr.Control = &m.ctrl[i*m.ctrlLen]
		h.Hdr.SetControllen(clen)
	}
	h.Len = 0
}

// setv points message i at the n iovecs from iovs[iov], with the first
// nlen bytes of its name buffer and the first clen bytes of its control
// buffer: one UDP_SEGMENT run.
func (m *mmsgs) setv(i, iov, n, nlen, clen int) {
	h := &m.hdrs[i]
	h.Hdr = unix.Msghdr{Iov: &m.iovs[iov]}
	h.Hdr.SetIovlen(n)
	if nlen > 0 {
		h.Hdr.Name = &m.names[i*nameLen]
		h.Hdr.Namelen = uint32(nlen)
	}
	if clen > 0 {
		h.Hdr.Control = &m.ctrl[i*m.ctrlLen]
		h.Hdr.SetControllen(clen)
	}
	h.Len = 0
}

// release drops the pointers to the callers' buffers.
func (m *mmsgs) release(n int) {
	for i := range n {
		m.iovs[i].Base = nil
	}
}

// received returns the length, the socket address and the control messages
// the kernel wrote for message i, each cut to what fits.
func (m *mmsgs) received(i int) (n int, flags int, name, ctrl []byte) {
	h := &m.hdrs[i]
	name = m.name(i)
	if int(h.Hdr.Namelen) < len(name) {
		name = name[:h.Hdr.Namelen]
	}
	ctrl = m.control(i)
	if int(h.Hdr.Controllen) < len(ctrl) {
		ctrl = ctrl[:h.Hdr.Controllen]
	}
	return int(h.Len), int(h.Hdr.Flags), name, ctrl
}

// batchIO runs sendmmsg or recvmmsg on a non-blocking socket; a call that
// finds nothing to do waits in the runtime's poller, or in poll(2) for a
// port that waits in the kernel (rawIO, kfd), and Close wakes it either
// way. The callbacks are bound once so that a call does not allocate.
type batchIO struct {
	rc rawIO
	m  *mmsgs

	// Arguments and results of the call in progress.
	from, to int
	n        int
	errno    unix.Errno

	recvFn, sendFn, peekFn func(fd uintptr) bool
	recvOnceFn             func(fd uintptr)
}

func newBatchIO(rc rawIO, m *mmsgs) *batchIO {
	b := &batchIO{rc: rc, m: m}
	b.recvFn = b.doRecv
	b.sendFn = b.doSend
	b.peekFn = doPeek
	b.recvOnceFn = b.doRecvOnce
	return b
}

func (b *batchIO) doRecv(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&b.m.hdrs[b.from])), uintptr(b.to-b.from),
			unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			b.n, b.errno = int(r), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until readable
		}
		b.n, b.errno = 0, e
		return true
	}
}

// doRecvOnce is doRecv that takes EAGAIN for an empty result.
func (b *batchIO) doRecvOnce(fd uintptr) {
	if !b.doRecv(fd) {
		b.n, b.errno = 0, 0
	}
}

// doPeek reports whether a datagram (or an error to report) waits on the
// socket, without taking it: a zero-length MSG_PEEK.
func doPeek(fd uintptr) bool {
	for {
		_, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		return true
	}
}

func (b *batchIO) doSend(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&b.m.hdrs[b.from])), uintptr(b.to-b.from),
			unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			b.n, b.errno = int(r), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until writable
		}
		b.n, b.errno = 0, e
		return true
	}
}

// recv receives up to vlen messages into the prepared m.hdrs[:vlen]. If
// wait, it blocks until there is at least one; if not, it returns 0 when
// there is none. Errors that concern one datagram or a passing condition
// (ENOBUFS, an ICMP error) are retried.
func (b *batchIO) recv(vlen int, wait bool) (int, error) {
	for {
		b.from, b.to = 0, vlen
		var err error
		if wait {
			err = b.rc.Read(b.recvFn)
		} else {
			err = b.rc.Control(b.recvOnceFn)
		}
		if err != nil {
			return 0, err
		}
		switch b.errno {
		case 0:
			if b.n > 0 || !wait {
				return b.n, nil
			}
		case unix.ENOBUFS, unix.ENOMEM, unix.ECONNREFUSED, unix.EHOSTUNREACH,
			unix.ENETUNREACH, unix.ENETDOWN, unix.EMSGSIZE:
		default:
			return 0, os.NewSyscallError("recvmmsg", b.errno)
		}
	}
}

// waitReadable blocks until a datagram waits on the socket, without
// taking it and without serializing with recv(vlen, false).
func (b *batchIO) waitReadable() error { return b.rc.Read(b.peekFn) }

// send sends m.hdrs[from:to], blocking while the socket buffer is full. It
// returns how many messages went out; if that is 0, errno is why the
// message at from was refused.
func (b *batchIO) send(from, to int) (int, unix.Errno, error) {
	b.from, b.to = from, to
	if err := b.rc.Write(b.sendFn); err != nil {
		return 0, 0, err
	}
	return b.n, b.errno, nil
}

// closedError turns the error of an I/O call on a closed port into one that
// wraps net.ErrClosed.
func closedError(op string, closed bool, err error) error {
	if closed || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("ibudp: %s: %w", op, net.ErrClosed)
	}
	return fmt.Errorf("ibudp: %s: %w", op, err)
}

// sendFatal reports whether a sendmmsg errno means the socket is unusable,
// rather than that one packet was refused.
func sendFatal(e unix.Errno) bool {
	switch e {
	case unix.EBADF, unix.ENOTSOCK, unix.EFAULT, unix.EOPNOTSUPP:
		return true
	}
	return false
}
