package perftest

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// runLocalPair runs tool with args as a server and a client, each on an
// in-process NIC on an address of its own (looptest), and returns what
// each printed and returned.
func runLocalPair(t *testing.T, tool string, args ...string) (srvOut, cliOut string, srvErr, cliErr error) {
	t.Helper()
	return runLocalPairCfg(t, tool, nil, args...)
}

// runLocalPairCfg is runLocalPair with the client's Config changed by
// cli, when set; its Stdout is then the client's output as well.
func runLocalPairCfg(t *testing.T, tool string, cli func(*Config), args ...string) (srvOut, cliOut string, srvErr, cliErr error) {
	t.Helper()
	tl, ok := Find(tool)
	if !ok {
		t.Fatal("no tool", tool)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	run := func(addr string, ln net.Listener, out *bytes.Buffer, extra ...string) error {
		p, err := Parse(tl, append(append([]string{"-p", port}, args...), extra...))
		if err != nil {
			return err
		}
		cfg := Config{Stdout: out, Stderr: out, Listener: ln, IdleTimeout: 30 * time.Second,
			Open: func(*Params) (*verbs.Context, error) {
				return verbs.OpenLocal(verbs.LocalConfig{Addr: netip.MustParseAddr(addr), MTU: 1024})
			}}
		if ln == nil && cli != nil {
			cli(&cfg)
		}
		return Run(p, cfg)
	}
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	srvAddr, cliAddr := looptest.Get(t).String(), looptest.Get(t).String()
	go func() { done <- run(srvAddr, ln, &sout) }()
	cliErr = run(cliAddr, nil, &cout, "127.0.0.1")
	srvErr = <-done
	return sout.String(), cout.String(), srvErr, cliErr
}

// A -D run of ib_send_bw ends on both sides: the server stops waiting for
// receives at its end of the run, although the client's last SEND came
// before (it used to wait for one more until its idle timeout).
func TestSendBWDuration(t *testing.T) {
	srv, cli, srvErr, cliErr := runLocalPair(t, "ib_send_bw", "-D", "1", "-s", "1024")
	if srvErr != nil || cliErr != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", srvErr, srv, cliErr, cli)
	}
	for who, out := range map[string]string{"server": srv, "client": cli} {
		i := strings.Index(out, " #bytes")
		if i < 0 {
			t.Fatalf("%s printed no result table:\n%s", who, out)
		}
		f := strings.Fields(strings.SplitN(out[i:], "\n", 3)[1])
		if n, err := strconv.Atoi(f[1]); f[0] != "1024" || err != nil || n <= 0 {
			t.Fatalf("%s result line %q", who, f)
		}
	}
}

// The latency tools run for -D seconds, as perftest's do, and report
// print_report_lat_duration's table: the iterations completed while
// sampling, their average time (a round trip halved for the
// ping-pongs) and iterations a second, which agree with each other. Both
// sides end on their own clock, whichever stops first: write_lat's
// spin on the peer's byte and send_lat's wait for a receive give up at
// the run's end. read_lat's server only takes part in the exchange.
func TestLatDuration(t *testing.T) {
	for _, c := range []struct {
		tool    string
		rtt     float64
		reports []string
	}{
		{"ib_send_lat", 2, []string{"server", "client"}},
		{"ib_write_lat", 2, []string{"server", "client"}},
		{"ib_read_lat", 1, []string{"client"}},
	} {
		t.Run(c.tool, func(t *testing.T) {
			srv, cli, srvErr, cliErr := runLocalPair(t, c.tool, "-D", "1", "-s", "2")
			if srvErr != nil || cliErr != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", srvErr, srv, cliErr, cli)
			}
			out := map[string]string{"server": srv, "client": cli}
			for _, who := range c.reports {
				o := out[who]
				head := " #bytes        #iterations       t_avg[usec]    tps average\n"
				i := strings.Index(o, head)
				if i < 0 {
					t.Fatalf("%s printed no duration table:\n%s", who, o)
				}
				f := strings.Fields(strings.SplitN(o[i+len(head):], "\n", 2)[0])
				if len(f) != 4 || f[0] != "2" {
					t.Fatalf("%s result line %q", who, f)
				}
				iters, err1 := strconv.ParseUint(f[1], 10, 64)
				avg, err2 := strconv.ParseFloat(f[2], 64)
				tps, err3 := strconv.ParseFloat(f[3], 64)
				if err1 != nil || err2 != nil || err3 != nil || iters == 0 || avg <= 0 || tps <= 0 {
					t.Fatalf("%s result line %q", who, f)
				}
				// Both figures come from one window: iters/tps seconds,
				// and iters iterations of avg*rtt microseconds (to the
				// two decimals printed).
				window := float64(iters) / tps
				if window < 0.5 || window > 30 { // the window opens at the first look at the clock, which load may delay
					t.Errorf("%s: %d iterations at %.2f a second make a %.3f s window, want one of about -D's 1 s", who, iters, tps, window)
				}
				if got := avg * c.rtt * float64(iters) / 1e6; got < window*0.98 || got > window*1.02 {
					t.Errorf("%s: %d iterations of %.2f us (x%v) make %.4f s, the rate says %.4f s", who, iters, avg, c.rtt, got, window)
				}
			}
		})
	}
}

// A wait for completions that fails for another reason than the idle
// timeout (a CQ gone, a daemon gone) says that reason, at once, instead
// of "no completion for 2m0s".
func TestPollerPassesWaitErrors(t *testing.T) {
	c, err := verbs.OpenLocal(verbs.LocalConfig{Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cq, err := c.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	pl := &poller{cq: cq, idle: time.Hour, wcs: make([]verbs.WC, 1)}
	_, err = pl.poll(1)
	if !errors.Is(err, ErrRun) || !errors.Is(err, verbs.ErrClosed) || strings.Contains(err.Error(), "no completion") {
		t.Fatalf("poll on a destroyed CQ: %v", err)
	}
}

// -x picks the source GID by index: the last index of the table runs, one
// past it is refused on both sides, naming the table's size.
func TestGIDIndexOutOfTable(t *testing.T) {
	srv, cli, srvErr, cliErr := runLocalPair(t, "ib_write_bw", "-x", "1", "-n", "8", "-s", "64")
	if srvErr != nil || cliErr != nil || !strings.Contains(cli, " GID index       : 1\n") {
		t.Fatalf("-x 1: server: %v\n%s\nclient: %v\n%s", srvErr, srv, cliErr, cli)
	}
	srv, cli, srvErr, cliErr = runLocalPair(t, "ib_write_bw", "-x", "2", "-n", "8", "-s", "64")
	const want = "GID index 2: the port's GID table has 2 entries (0..1)"
	for who, err := range map[string]error{"server": srvErr, "client": cliErr} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-x 2: %s: %v, want %q\nserver:\n%s\nclient:\n%s", who, err, want, srv, cli)
		}
	}
}
