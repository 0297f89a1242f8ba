package cm

import (
	"testing"
	"time"

	"github.com/rnicd/rnicd/wire/mad"
)

// Any MAD, in any of the states a connection passes through, is handled
// without a panic, and the CM's state stays bounded and freeable.
func FuzzHandleMAD(f *testing.F) {
	// Seeds: every message of a connection's life, an RC one's and an
	// XRC one's (stage bit 4: the CM's connection is XRC too).
	for _, c := range []struct {
		service uint64
		p       ConnectParam
		stage   uint8
	}{{rpingService, rpingConnect(), 0}, {xrcService, xrcConnect(), 4}} {
		w := newWorld(f, nil)
		w.b.cm.Listen(c.service, nil)
		w.a.cm.Connect(c.p)
		for _, p := range w.deliver() {
			f.Add(p.b, c.stage)
		}
		w.b.events[0].ID.Accept(rpingAccept())
		for _, p := range w.deliver() {
			f.Add(p.b, c.stage+1)
		}
	}
	f.Add(make([]byte, 10), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, stage uint8) {
		w := newWorld(t, func(c *Config) { c.MaxIDs = 8 })
		w.listen()
		w.b.cm.Listen(udService, nil)
		w.b.cm.Listen(xrcService, nil)
		// Bring a connection to a stage, then throw data at both sides.
		p := rpingConnect()
		if stage&4 != 0 {
			p = xrcConnect()
		}
		a, _ := w.a.cm.Connect(p)
		if stage%4 >= 1 {
			w.deliver()
		}
		if stage%4 >= 2 && len(w.b.events) > 0 {
			w.b.events[0].ID.Accept(rpingAccept())
			w.deliver()
		}
		if stage%4 == 3 {
			a.Disconnect(nil)
		}
		w.inject(w.a, data)
		w.inject(w.b, data)
		w.deliver()
		w.inject(w.b, data)
		injectFrom(w.b, gidX, data)
		for i := 0; i < 60; i++ {
			// Ten-second steps, and past the fortieth one long one: an
			// MRA may ask for up to 4.096 us x 2^31 (2.4 hours) more, which
			// Linux's cm_mra_handler grants as it is; the REQ's retries
			// that follow it (up to 15 of a response timeout each) end
			// in the twenty steps after.
			step := 10 * time.Second
			if i == 40 {
				step = 3 * time.Hour
			}
			w.advance(step)
			w.deliver()
			// Ask for no answer: the fuzz data may have started anything.
			for _, n := range []*node{w.a, w.b} {
				for _, e := range n.events {
					if e.Type == EventConnectRequest && e.ID.State() != StateIdle {
						e.ID.Reject(mad.RejConsumerDefined, nil)
					}
				}
			}
		}
		for _, n := range []*node{w.a, w.b} {
			if n.cm.NumIDs() > 8 {
				t.Fatalf("%d IDs", n.cm.NumIDs())
			}
			// Whatever was started has ended: timers, TIMEWAIT, an MRA's
			// wait and the wait for an answer to a REQ (MaxPendingTime
			// at most) ran out.
			for _, id := range n.cm.ids {
				if id.State() != StateEstablished {
					t.Fatalf("ID left in %v (deadline in %v, %d retries, timeout %v, live %v)", id.State(), id.deadline.Sub(w.now), id.retries, id.timeout, id.msgLive)
				}
			}
			if n.cm.NumPending() != 0 {
				t.Fatalf("%d REQs pending", n.cm.NumPending())
			}
		}
	})
}
