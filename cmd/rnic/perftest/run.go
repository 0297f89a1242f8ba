package perftest

// A run of one tool, as perftest's main functions run it: open the device,
// connect the out-of-band exchange (exchange.go), create the NIC objects
// (resources.go), connect the QPs, then measure (bandwidth.go,
// latency.go) with completions taken by a poller (polling.go).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// Config is what Run needs besides the parameters.
type Config struct {
	Stdout, Stderr io.Writer
	// Version is what -V prints.
	Version string
	// Open opens the device the parameters name.
	Open func(p *Params) (*verbs.Context, error)
	// Listener, if set, is used by the server instead of listening on
	// the parameters' port (tests hand in one on a free port).
	Listener net.Listener
	// IdleTimeout bounds how long a test waits without any progress
	// (a completion, a received message, a changed byte) before it gives
	// up. 0 means 120 s, the time perftest's check_alive allows.
	IdleTimeout time.Duration
	// Stop ends a --run_infinitely run when closed: the client stops
	// posting and ends as perftest does on SIGINT (Main closes it on
	// SIGINT). Nil: the run goes on until the process ends.
	Stop <-chan struct{}
}

// defIdle is Config.IdleTimeout's default: the time perftest's
// check_alive allows.
const defIdle = 120 * time.Second

// ErrRun marks a failure during the measured run (perftest exits 17).
var ErrRun = errors.New("perftest: run failed")

// test is one run of a tool: its parameters, the exchange with the peer
// and this side's NIC resources.
type test struct {
	p   *Params
	cfg Config
	// out takes the tables, headers and addresses, which --output
	// leaves out; stdout what is printed whatever the verbosity.
	out, stdout io.Writer
	ctx         *verbs.Context
	idle        time.Duration
	ex          *exchange
	res         *resources
	cm          *cmQPs // -R: the test QPs' CM IDs
	// iterTime is a -D latency run's average iteration, measured.
	iterTime time.Duration
}

// Run runs one test to the end: connection, set-up, the measurement and
// the reports, printed on cfg.Stdout as perftest prints them.
func Run(p *Params, cfg Config) error {
	t := &test{p: p, out: cfg.Stdout, stdout: cfg.Stdout, idle: cfg.IdleTimeout}
	if p.Output != FullVerbosity {
		// One figure, as perftest's --output prints: no banner, header,
		// addresses or table (the exchange prints through cfg.Stdout).
		t.out, cfg.Stdout = io.Discard, io.Discard
	}
	t.cfg = cfg
	if p.postListNote {
		// perftest says so while it parses, whatever the verbosity.
		fmt.Fprint(t.stdout, resultLine+"Post List requested - CQ moderation will be the size of the post list\n")
	}
	if t.idle == 0 {
		t.idle = defIdle
	}
	ctx, err := cfg.Open(p)
	if err != nil {
		return err
	}
	t.ctx = ctx
	defer ctx.Close()
	// The header names the device opened, the first running one when -d
	// was not given.
	p.Device = ctx.Name()
	if p.inlineSet {
		// perftest checks an inline size it was given (or forced to 0)
		// against the devices it knows, and prints a line for rxe, which
		// it does not. Its message, that inline is disabled, would not be
		// true here: rnicd does inline.
		fmt.Fprint(t.out, resultLine)
	}
	if t.ex, err = openExchange(p, cfg, ctx); err != nil {
		return err
	}
	defer t.ex.conn.Close()
	if t.res, err = newResources(ctx, p, t.ex.link); err != nil {
		return err
	}
	if p.RDMACM {
		// Deferred after the exchange's Close, so it runs before: the
		// test's QPs go first, the control QP last, as perftest's
		// destroy_ctx calls come.
		defer func() {
			if t.cm == nil {
				return
			}
			if err := t.cm.close(); err != nil {
				fmt.Fprintf(cfg.Stderr, " Failed to disconnect RDMA CM nodes: %v\n", err)
			}
		}()
		if err := t.connectCM(); err != nil {
			return err
		}
	}
	printTestInfo(t.out, p, t.res.mtu, t.res.gidIndex, t.res.outReads)
	switch {
	case p.Tool.Kind == BW && p.Tool.Verb == Send:
		return t.sendBW()
	case p.Tool.Kind == BW:
		return t.rdmaBW()
	case p.Tool.Verb == Write:
		return t.writeLat()
	case p.Tool.Verb == Read:
		return t.readLat()
	default:
		return t.sendLat()
	}
}

// sizes are the message sizes of the run: one, or 2..2^23 with -a (UD:
// up to the MTU).
func (t *test) sizes() []int {
	if !t.p.All {
		return []int{t.res.size}
	}
	top := maxSize
	if t.p.Conn == verbs.QPTypeUD {
		top = t.res.mtu.Bytes()
	}
	var s []int
	for n := 2; n <= top; n *= 2 {
		s = append(s, n)
	}
	return s
}
