package cm

import (
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/wire/mad"
)

// GSIPort is a device's QP1 as the agent uses it (rnic.GSI): send a MAD to
// a port's QP1, take the next MAD received, learn when one may be waiting.
type GSIPort interface {
	Addr() netip.Addr // the port's address: its GID (Config.PortGID)
	SendMAD(to netip.Addr, mad []byte) error
	RecvMAD(mad []byte) (from netip.Addr, srcQP uint32, n int, ok bool)
	Ready() <-chan struct{}
}

// Agent runs a CM on a device's QP1: one goroutine (Run) that feeds the CM
// every MAD QP1 receives, runs its timers, and runs the calls handed to Do,
// so the CM itself needs no lock. It is what the daemon's CM agent is; the
// CM's events reach Config.Event on Run's goroutine.
type Agent struct {
	cm    *CM
	gsi   GSIPort
	calls chan func()
	// stopped is closed when Run returns: Do then runs nothing.
	stopped chan struct{}
	// NotFromQP1 counts MADs that came from another QP than QP1: the CM
	// answers only to QP1, so they are dropped.
	NotFromQP1 uint64
}

// NewAgent returns an agent for gsi with the CM cfg describes; cfg.Send and
// cfg.Now are the agent's (QP1 and the wall clock) and may be left nil.
func NewAgent(gsi GSIPort, cfg Config) (*Agent, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PortGID == (mad.GID{}) {
		cfg.PortGID = mad.GIDFromAddr(gsi.Addr())
	}
	if cfg.Send == nil {
		cfg.Send = func(to Dest, b []byte) error {
			return gsi.SendMAD(to.GID.Addr(), b)
		}
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Agent{cm: c, gsi: gsi, calls: make(chan func()), stopped: make(chan struct{})}, nil
}

// Do runs f with the CM on the agent's goroutine and returns when f has,
// reporting whether it ran: once Run has returned, f does not run (a
// daemon's last clients may still be tearing down). It must not be called
// from an event callback, which already runs there.
func (a *Agent) Do(f func(c *CM)) bool {
	done := make(chan struct{})
	select {
	case a.calls <- func() { f(a.cm); close(done) }:
	case <-a.stopped:
		return false
	}
	<-done
	return true
}

// Run serves QP1 until done is closed.
func (a *Agent) Run(done <-chan struct{}) {
	defer close(a.stopped)
	buf := make([]byte, mad.MADLen)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for {
			from, srcQP, n, ok := a.gsi.RecvMAD(buf)
			if !ok {
				break
			}
			if srcQP != mad.GSIQPN {
				a.NotFromQP1++
				continue
			}
			a.cm.HandleMAD(Dest{GID: mad.GIDFromAddr(from), PKey: 0xffff}, buf[:min(n, mad.MADLen)])
		}
		a.cm.Expire()
		wait := time.Hour
		if t, ok := a.cm.NextDeadline(); ok {
			wait = max(time.Until(t), 0)
		}
		timer.Reset(wait)
		select {
		case <-done:
			return
		case <-a.gsi.Ready():
		case f := <-a.calls:
			f()
		case <-timer.C:
		}
	}
}
