package hostif

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/abi"
)

// The daemon's polling engine (rnic's engine.go) polls the rings of
// every QP and SRQ as a NIC polls its doorbell records: qpObj and srqObj
// are its rnic.HostQueues. A fetch it makes is the one a doorbell message
// makes, under the connection's handling lock, which it only tries to
// take: a client whose request is being served is polled on the next
// pass. What the fetch refuses goes back as a doorbell's asynchronous
// error would.

// asyncID is the request id of an error the engine found while polling:
// no request of the client's bears it, so the client takes it for the
// error reply to a doorbell it sent.
const asyncID = ^uint32(0)

// Pending reports whether the client posted to the QP's send or receive
// ring since the last fetch (rnic.HostQueue).
func (q *qpObj) Pending() bool {
	if q.isBroken() {
		return false
	}
	if q.sqRing.Pending() {
		return true
	}
	return q.rqRing != nil && q.rqRing.Ring().Producer() != q.rqSeen.Load()
}

// Poll fetches what Pending says is new, as the doorbells would
// (rnic.HostQueue).
func (q *qpObj) Poll() bool {
	c := q.owner
	if !c.handling.TryLock() {
		return false
	}
	defer c.handling.Unlock()
	if q.isBroken() {
		return false
	}
	work := false
	if q.sqRing.Pending() {
		work = true
		q.sq.ClearBell()
		c.asyncError(c.fetchSend(q))
	}
	if q.rqRing != nil {
		if p := q.rqRing.Ring().Producer(); p != q.rqSeen.Load() {
			work = true
			q.rqSeen.Store(p)
			c.asyncError(c.fetchRecv(q))
		}
	}
	return work
}

// SetAsleep writes the asleep word of the QP's rings (rnic.HostQueue).
func (q *qpObj) SetAsleep(on bool) {
	q.sq.SetAsleep(on)
	if q.rqRing != nil {
		q.rqRing.Ring().SetAsleep(on)
	}
}

// Pending reports whether the client posted to the SRQ since the last
// fetch (rnic.HostQueue).
func (s *srqObj) Pending() bool { return s.ring.Ring().Producer() != s.seen.Load() }

// Poll fetches the SRQ's new WQEs (rnic.HostQueue).
func (s *srqObj) Poll() bool {
	c := s.owner
	if !c.handling.TryLock() {
		return false
	}
	defer c.handling.Unlock()
	p := s.ring.Ring().Producer()
	if p == s.seen.Load() {
		return false
	}
	s.seen.Store(p)
	c.asyncError(c.fetchSRQ(s))
	return true
}

// SetAsleep writes the SRQ ring's asleep word (rnic.HostQueue).
func (s *srqObj) SetAsleep(on bool) { s.ring.Ring().SetAsleep(on) }

// asyncError sends err, if any, to the client as the error reply to a
// doorbell.
func (c *conn) asyncError(err error) {
	if err == nil {
		return
	}
	c.s.badRequests.Add(1)
	code := abi.CodeFailed
	var ce *codeErr
	if errors.As(err, &ce) {
		code = ce.code
	}
	c.s.log.Debug("fetch refused", "pid", c.pid, "code", code, "err", err)
	// Never blocking: a client that does not read its socket must not
	// stop the engine, which serves every client; the error is then
	// lost, its WQE's error completion is not.
	msg := abi.EncodeError(abi.KindDoorbell, asyncID, code, err.Error())
	if rc, err := c.uc.SyscallConn(); err == nil {
		rc.Write(func(fd uintptr) bool {
			unix.Sendmsg(int(fd), msg, nil, nil, unix.MSG_DONTWAIT)
			return true
		})
	}
}
