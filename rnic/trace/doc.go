// Package trace models what a NIC's debug trace port shows: an event for
// every step a message takes through the NIC's blocks, from the work
// request posted to the completion written, on both ends. It owns the
// event (Event: time, NIC, block, QP, PSN, wr_id, opcode and the step's
// own figures), the hub that collects them (Tracer: a ring of fixed-size
// events that readers drain at their own pace, each through its Filter,
// losing the oldest when they fall behind and told where by a lost
// event; what no reader's filter selects never enters the ring), each
// NIC's handle on it (Probe), and their two renderings: JSON lines
// (WriteJSON, ReadJSON) and a one-line-per-event timeline for a terminal
// (Format). It imports nothing of the NIC's blocks, only ib and wire, so
// that every block can emit into it without an import cycle
// (ib/imports_test.go holds the rule); events built from a block's own
// state live in that block (qpmgr.SendCompletionEvent).
//
// Tracing costs nothing when off: an engine holds a *Probe, nil when the
// device has no tracer, and every step is guarded by Probe.On, a nil check
// and one atomic load; the Event is built, timed and copied only when a
// reader is listening. Nothing is formatted on the data path: details are
// kept as numbers and rendered by the reader.
package trace
