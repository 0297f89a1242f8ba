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
