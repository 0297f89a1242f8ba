package cm

import (
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/mad"
)

// The trace of the CM: one event per MAD sent or received, with the
// state change of the connection it belongs to, from the state the
// trace last showed (ID.traced) to the one it is in now. A received
// MAD's event goes out when its handler has moved the state and before
// anything the handler sends, or, for a MAD that names no connection,
// once HandleMAD is done. With the trace off, each costs Probe.On's one
// atomic load.

// traceSent traces a MAD sent for id; a received MAD still untraced
// goes first, as it came first.
func (c *CM) traceSent(id *ID, attr mad.AttrID) {
	c.traceRecv(id)
	c.emit(trace.StepCMSent, id, attr)
}

// traceRecv traces the MAD HandleMAD handles, if not done yet, as one
// for id (nil: no connection).
func (c *CM) traceRecv(id *ID) {
	if !c.rxPending {
		return
	}
	c.rxPending = false
	c.emit(trace.StepCMRecv, id, c.rxTrace)
}

// traceRecv is called by a handler once it has moved id's state.
func (id *ID) traceRecv() { id.cm.traceRecv(id) }

func (c *CM) emit(step trace.Step, id *ID, attr mad.AttrID) {
	e := trace.Event{Module: trace.ModCM, Step: step, Arg: uint32(attr), Aux: trace.CMNoState, Len: trace.CMNoState}
	if id != nil {
		e.QPN, e.WRID = id.qpn, uint64(id.localID)
		e.Aux, e.Len = uint32(id.traced), uint32(id.state)
		id.traced = id.state
	}
	c.cfg.Trace.Emit(e)
}
