package hostif

import (
	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

// fetchAll fetches every QP's and SRQ's new WQEs, as if each had rung
// its doorbells; errors were already answered or counted by the fetch.
func (c *conn) fetchAll() {
	c.mu.Lock()
	objs := make([]object, 0, len(c.objs))
	for _, o := range c.objs {
		objs = append(objs, o)
	}
	c.mu.Unlock()
	for _, o := range objs {
		switch o := o.(type) {
		case *qpObj:
			o.rings.Fetch()
		case *srqObj:
			o.ring.Doorbell()
		}
	}
}

// doorbell fetches the WQEs between the daemon's fetch index and the
// ring's producer index, validates each and posts it to the engine. A
// WQE that fails validation completes with LOC_QP_OP_ERR and moves the
// QP to ERR, as a NIC does at WQE fetch; later ones are flushed.
func (c *conn) doorbell(target object, b abi.Body, _ []int) (abi.Body, []int, error) {
	r := b.(*abi.DoorbellReq)
	// The client rang because the engine sleeps: it wakes to poll for
	// what this post will bring.
	defer c.s.dev.Wake()
	switch o := target.(type) {
	case *qpObj:
		if o.rings.Broken() {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: QP %#x had a garbage producer index; modify it to RESET", o.qp.QPN)
		}
		if r.Queue == abi.DoorbellSend {
			return nil, nil, fetchRefused(o.rings.SendDoorbell())
		}
		if !o.rings.HasRecv() {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: QP %#x uses an SRQ", o.qp.QPN)
		}
		return nil, nil, fetchRefused(o.rings.RecvDoorbell())
	case *srqObj:
		if r.Queue != abi.DoorbellRecv {
			return nil, nil, errf(abi.CodeInvalid, "doorbell: an SRQ has no send queue")
		}
		return nil, nil, fetchRefused(o.ring.Doorbell())
	}
	return nil, nil, errf(abi.CodeNoHandle, "doorbell: handle %d names a %v", r.H, target.kind())
}

// fetchRefused is the doorbell's error reply for what the device's fetch
// refused (counted and completed with errors already), if anything.
func fetchRefused(err error) error {
	if err != nil {
		return errf(abi.CodeInvalid, "doorbell: %v", err)
	}
	return nil
}

// ringMem makes a memfd of n bytes and maps it; the client gets the fd.
// The memfd is sealed at its size before the client sees it: a client
// that could ftruncate it would make the daemon's next access to the
// ring (a doorbell's fetch, a completion) a SIGBUS that kills rnicd and
// every client with it.
func ringMem(n uint64) (int, []byte, error) {
	fd, err := unix.MemfdCreate("rnicd-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, errf(abi.CodeFailed, "memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "ring of %d bytes: %v", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "seal ring memfd: %v", err)
	}
	mem, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, errf(abi.CodeFailed, "mmap ring of %d bytes: %v", n, err)
	}
	return fd, mem, nil
}
