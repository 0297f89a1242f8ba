package hostif

import (
	"strings"

	"github.com/rnicd/rnicd/abi"
)

// objKind is the kind of object a handle names. Kinds are bits, so that a
// request may accept more than one (a doorbell names a QP or an SRQ).
type objKind uint16

const (
	kindPD objKind = 1 << iota
	kindMR
	kindChannel
	kindCQ
	kindSRQ
	kindQP
	kindCMChannel
	kindCMID
	kindXRCD
	kindMW
)

// kinds lists every kind with its name in messages and in the
// hostif_objects_* counters (libibverbs' object names).
var kinds = []struct {
	k             objKind
	name, counter string
}{
	{kindPD, "PD", "pd"},
	{kindMR, "MR", "mr"},
	{kindChannel, "completion channel", "comp_channel"},
	{kindCQ, "CQ", "cq"},
	{kindSRQ, "SRQ", "srq"},
	{kindQP, "QP", "qp"},
	{kindCMChannel, "CM event channel", "cm_event_channel"},
	{kindCMID, "CM ID", "cm_id"},
	{kindXRCD, "XRC domain", "xrcd"},
	{kindMW, "MW", "mw"},
}

// String names the kinds in k: "CQ", "QP or SRQ".
func (k objKind) String() string {
	var names []string
	for _, e := range kinds {
		if k&e.k != 0 {
			names = append(names, e.name)
		}
	}
	if len(names) == 0 {
		return "object"
	}
	return strings.Join(names, " or ")
}

func (k objKind) counter() string {
	for _, e := range kinds {
		if k == e.k {
			return e.counter
		}
	}
	return "?"
}

// object is what a client's handle names: a PD, MR, completion channel,
// CQ, SRQ or QP. The request table says which kinds each request acts on
// (request.target), and handle checks it before the handler runs.
type object interface {
	kind() objKind
	// users counts the objects that use this one (a QP its PD, CQs and
	// SRQ; an MR its PD; a CQ its channel): while it is not 0 the object
	// cannot be destroyed.
	users() int
	// release frees what the object holds in the device and in the
	// daemon, and lets go of the objects it uses. It runs once, with
	// users() 0, on the connection's goroutine.
	release(c *conn) error
	// cost is what the object's creation charged its client
	// (limits.go); it is refunded when the object goes.
	cost() Quota
}

// useCount is the users count the objects others may use embed. Only the
// connection's goroutine touches it.
type useCount struct{ n int }

func (u *useCount) users() int { return u.n }
func (u *useCount) hold()      { u.n++ }
func (u *useCount) drop()      { u.n-- }

// noUsers is embedded by the objects nothing else uses (MRs, QPs).
type noUsers struct{}

func (noUsers) users() int { return 0 }

// add gives o a handle of this client.
func (c *conn) add(o object) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.objs[c.next] != nil || c.next == 0 {
		c.next++
	}
	h := c.next
	c.next++
	c.objs[h] = o
	return h
}

// get returns this client's object h, which must be of a kind in want.
// Another client's handle and a stale one are the same: no such handle.
func (c *conn) get(h uint32, want objKind) (object, error) {
	c.mu.Lock()
	o := c.objs[h]
	c.mu.Unlock()
	if o == nil {
		return nil, errf(abi.CodeNoHandle, "no %v with handle %d", want, h)
	}
	if o.kind()&want == 0 {
		return nil, errf(abi.CodeNoHandle, "handle %d names a %v, not a %v", h, o.kind(), want)
	}
	return o, nil
}

// lookup is get for an object a request refers to besides its target
// (create_qp's PD and CQs, say), as its concrete type.
func lookup[T object](c *conn, h uint32, want objKind) (T, error) {
	o, err := c.get(h, want)
	if err != nil {
		var none T
		return none, err
	}
	return o.(T), nil
}

// destroy handles every destroy request; handle has checked that the
// target is of the request's kind.
func (c *conn) destroy(o object, b abi.Body, _ []int) (abi.Body, []int, error) {
	h := b.(*abi.Handle).H
	if n := o.users(); n > 0 {
		return nil, nil, errf(abi.CodeBusy, "%v %d is used by %d objects", o.kind(), h, n)
	}
	if err := o.release(c); err != nil {
		return nil, nil, err
	}
	c.s.acct.refund(c.pid, o.cost())
	c.mu.Lock()
	delete(c.objs, h)
	c.mu.Unlock()
	return &abi.Empty{}, nil, nil
}

// teardownOrder is the order in which a dead client's objects go: every
// object before the objects it uses; CM IDs first, so that an
// established connection's DREQ goes while its QP still exists.
var teardownOrder = []objKind{kindCMID, kindCMChannel, kindQP, kindMW, kindMR, kindSRQ, kindCQ, kindChannel, kindPD, kindXRCD}

// teardown destroys everything the client created. Its QPs go to ERR
// first, so that their outstanding WQEs are flushed into the completion
// rings (rxe does the same on close).
func (c *conn) teardown() {
	c.mu.Lock()
	objs := c.objs
	c.objs = make(map[uint32]object)
	c.mu.Unlock()
	for _, k := range teardownOrder {
		for _, o := range objs {
			if o.kind() != k {
				continue
			}
			if q, ok := o.(*qpObj); ok {
				c.flushQP(q)
			}
			if o.release(c) == nil {
				c.s.acct.refund(c.pid, o.cost())
			}
		}
		if k == kindQP {
			c.s.dev.Fence()
		}
	}
}
