package tests

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCLibFabricPingpong runs Debian's fi_pingpong (libfabric 1.17)
// between two rnicd, its server on one and its client on the other (each
// sees only its own: the daemons' sockets are in two directories), the
// program unmodified and only clib on LD_LIBRARY_PATH, with -c (every
// message's bytes checked by the receiver).
//
// Datagram endpoints (-e dgram, the verbs provider's UD domain) run,
// each size fi_pingpong tries echoed 100 times, which the client's
// rnicd's counters show. Reliable datagram endpoints over them (-e rdm,
// verbs;ofi_rxd) move their 64 KiB round trips, but in 1 run of 3 both
// ends then wait in fi_pingpong's finish until killed, the server's
// rows printed: not understood yet, so not asserted here (README). Message endpoints (-e msg, and verbs;ofi_rxm, which is
// made of them) are offered only on a device whose address is on an
// interface other than lo ("no valid IPoIB interfaces found"): here both
// ends say fi_getinfo found none.
func TestCLibFabricPingpong(t *testing.T) {
	pp := debianTool(t, "fi_pingpong", "libfabric-bin")
	p := startApart(t, "fp", nil)
	a, dirA, dirB, cb := p.a, p.dirA, p.dirB, p.cb

	// run runs fi_pingpong's server on the first rnicd and its client
	// on the second, both with args, and returns what each printed and
	// the client's exit status.
	run := func(args ...string) (srv, cli string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		port := freePort(t)
		s := pp(ctx, "", append([]string{"-B", port}, args...)...)
		s.Env = append(s.Env, "RNICD_DIR="+dirA)
		var sout bytes.Buffer
		s.Stdout, s.Stderr = &sout, &sout
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		for {
			c := pp(ctx, "", append([]string{"-P", port}, append(args, a.addr.String())...)...)
			c.Env = append(c.Env, "RNICD_DIR="+dirB)
			var cout bytes.Buffer
			c.Stdout, c.Stderr = &cout, &cout
			err = c.Run()
			if err != nil && ctx.Err() == nil && strings.Contains(cout.String(), "Connection refused") {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			// The server's exit goes into what it printed: killed by
			// the deadline, it never flushed its rows (a pipe is
			// fully buffered).
			if serr := s.Wait(); serr != nil {
				fmt.Fprintf(&sout, "[the server ended: %v]\n", serr)
			}
			return sout.String(), cout.String(), err
		}
	}
	// A row per size: bytes, 100 sent, =100 acknowledged, ...
	row := regexp.MustCompile(`(?m)^(\d+[km]?)\s+100\s+=100\s+\S+\s+\S+s\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$`)
	for _, c := range []struct {
		ep, prov, size string
		sizes          []string
	}{
		// Every size fi_pingpong tries up to the UD domain's
		// largest message, an MTU (1024 here).
		{"dgram", "verbs", "all", strings.Fields("0 1 2 3 4 6 8 12 16 24 32 48 64 96 128 192 256 384 512 768 1k")},
	} {
		before := must[map[string]uint64](t)(cb.Counters())
		srv, cli, err := run("-p", c.prov, "-e", c.ep, "-I", "100", "-c", "-S", c.size)
		if err != nil {
			t.Errorf("fi_pingpong -e %s -p %s: %v\n%s\nserver:\n%s", c.ep, c.prov, err, cli, srv)
			continue
		}
		for who, out := range map[string]string{"client": cli, "server": srv} {
			var got []string
			for _, m := range row.FindAllStringSubmatch(out, -1) {
				got = append(got, m[1])
			}
			if strings.Join(got, " ") != strings.Join(c.sizes, " ") {
				t.Errorf("fi_pingpong -e %s -p %s: the %s printed sizes %v echoed 100 times, want %v:\n%s", c.ep, c.prov, who, got, c.sizes, out)
			}
			if strings.Contains(out, "error") {
				t.Errorf("fi_pingpong -e %s -p %s: the %s printed an error:\n%s", c.ep, c.prov, who, out)
			}
		}
		after := must[map[string]uint64](t)(cb.Counters())
		// Each size: 100 messages the client's rnicd sent and 100
		// echoes it received, a packet at least each.
		n := uint64(100 * len(c.sizes))
		for _, k := range []string{"sent_pkts", "rcvd_pkts"} {
			if got := after[k] - before[k]; got < n {
				t.Errorf("fi_pingpong -e %s -p %s: the client's rnicd counts %s %d, want at least %d", c.ep, c.prov, k, got, n)
			}
		}
		t.Logf("fi_pingpong -e %s -p %s -c, client:\n%s", c.ep, c.prov, cli)
	}

	// Message endpoints: none on lo.
	for _, prov := range []struct{ ep, prov string }{{"msg", "verbs"}, {"rdm", "verbs;ofi_rxm"}} {
		srv, cli, err := run("-p", prov.prov, "-e", prov.ep, "-I", "10")
		if err == nil || !strings.Contains(srv, "fi_getinfo(): ") || !strings.Contains(srv, "ret=-61 (No data available)") {
			t.Errorf("fi_pingpong -e %s -p %s on lo: %v, want fi_getinfo's ENODATA\n%s\nserver:\n%s", prov.ep, prov.prov, err, cli, srv)
		}
	}
}
