package perftest

import (
	"bytes"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
)

// The options perftest users reach for, parsed with perftest's rules:
// -b, -l (and the CQ moderation it sets), -S, --output,
// --run_infinitely (a report every 5 s unless -D), --source_ip.
func TestParseHabits(t *testing.T) {
	wb, _ := Find("ib_write_bw")
	p, err := Parse(wb, []string{"-b", "-l", "4", "-n", "1000", "-S", "3", "--output=bandwidth", "host"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Duplex || p.PostList != 4 || p.CQMod != 4 || !p.postListNote || p.SL != 3 || p.Output != OutputBW {
		t.Fatalf("parsed %+v", p)
	}
	// A -Q given is kept when it divides the list.
	if p, err = Parse(wb, []string{"--post_list=8", "-Q", "2", "-n", "16"}); err != nil || p.CQMod != 2 || p.postListNote {
		t.Fatalf("-l 8 -Q 2: %+v, %v", p, err)
	}
	if p, err = Parse(wb, []string{"--run_infinitely"}); err != nil || !p.RunInfinitely || p.Duration != 5 || p.Margin != 0 || !p.NoPeak {
		t.Fatalf("--run_infinitely: %+v, %v", p, err)
	}
	if p, err = Parse(wb, []string{"--run_infinitely", "-D", "2", "--output", "message_rate"}); err != nil || p.Duration != 2 || p.Output != OutputMR {
		t.Fatalf("--run_infinitely -D 2: %+v, %v", p, err)
	}
	if p, err = Parse(wb, []string{"-R", "--source_ip", "198.18.0.1", "host"}); err != nil || p.SourceIP != netip.MustParseAddr("198.18.0.1") {
		t.Fatalf("--source_ip: %+v, %v", p, err)
	}
	if p, err = Parse(wb, []string{"-R", "-T", "96"}); err != nil || p.TOS != 96 {
		t.Fatalf("-R -T 96: %+v, %v", p, err)
	}
	if p, err = Parse(wb, []string{"-R"}); err != nil || p.TOS != -1 {
		t.Fatalf("-R: TOS %d, %v; want -1, none set", p.TOS, err)
	}
	wl, _ := Find("ib_write_lat")
	if p, err = Parse(wl, []string{"--output=latency"}); err != nil || p.Output != OutputLat {
		t.Fatalf("lat --output=latency: %+v, %v", p, err)
	}
	sb, _ := Find("ib_send_bw")
	for _, c := range []struct {
		tool Tool
		args []string
		want string
	}{
		{wb, []string{"-l", "3", "-n", "1000"}, "multiple of post list size"},
		{wb, []string{"-l", "4", "-Q", "3", "-n", "1200"}, "multiple of CQ moderation"},
		{wb, []string{"-l", "200", "-n", "1000"}, "exceeds the tx depth"},
		{wb, []string{"-S", "16"}, "service level"},
		{wb, []string{"-T", "96"}, "TOS only valid for rdma_cm"},
		{wb, []string{"-R", "-T", "256"}, "TOS should be between 0 and 255"},
		{wb, []string{"--output=latency"}, "for BW can be"},
		{wb, []string{"--output=bogus"}, "invalid verbosity"},
		{wb, []string{"--source_ip", "nowhere", "-R"}, "wants an IP address"},
		{wb, []string{"--run_infinitely", "-a"}, "not go with -a"},
		{wl, []string{"-b"}, "bw tests"},
		{wl, []string{"-l", "2"}, "BW tests only"},
		{wl, []string{"--output=bandwidth"}, "for LAT can be"},
		{wl, []string{"--run_infinitely"}, "only in BW tests"},
		{sb, []string{"-b"}, "not ib_send_bw"},
		{sb, []string{"--run_infinitely"}, "not ib_send_bw"},
	} {
		if _, err := Parse(c.tool, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: error %v, want one saying %q", c.tool.Name, c.args, err, c.want)
		}
	}
}

// resultLines are the lines of a result table: size, iterations,
// figures.
func resultLines(out string) []string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 5 && f[0] != "#bytes" && regexp.MustCompile(`^\d+$`).MatchString(f[0]) {
			r = append(r, l)
		}
	}
	return r
}

// ib_write_bw -b -l 4 between two NICs: each side runs the test (the
// server's QPs are in RTS, its header shows its TX depth), the two
// exchange their figures and print the same line, the sum; both headers
// say Bidirectional Post List and CQ moderation 4.
func TestWriteBWBidirectionalPostList(t *testing.T) {
	for _, tool := range []string{"ib_write_bw", "ib_read_bw"} {
		srv, cli, srvErr, cliErr := runLocalPair(t, tool, "-b", "-l", "4", "-n", "200", "-s", "4096")
		if srvErr != nil || cliErr != nil {
			t.Fatalf("%s server: %v\n%s\nclient: %v\n%s", tool, srvErr, srv, cliErr, cli)
		}
		verb := map[string]string{"ib_write_bw": "RDMA_Write", "ib_read_bw": "RDMA_Read"}[tool]
		for who, out := range map[string]string{"server": srv, "client": cli} {
			for _, want := range []string{
				resultLine + "Post List requested - CQ moderation will be the size of the post list\n",
				"                    " + verb + " Bidirectional Post List BW Test\n",
				" TX depth        : 128\n Post List       : 4\n CQ Moderation   : 4\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("%s %s printed no %q:\n%s", tool, who, want, out)
				}
			}
		}
		s, c := resultLines(srv), resultLines(cli)
		if len(s) != 1 || len(c) != 1 || s[0] != c[0] {
			t.Fatalf("%s result lines: server %q, client %q; want one, the same", tool, s, c)
		}
		if f := strings.Fields(c[0]); f[0] != "4096" || f[1] != "200" || f[3] == "0.00" {
			t.Errorf("%s result line %q", tool, c[0])
		}
	}
}

// --output prints one figure and nothing else: the server of
// ib_write_bw the client's average bandwidth, as C's "%lf\n"; the
// latency tests each side's average latency.
func TestOutputOneFigure(t *testing.T) {
	figure := regexp.MustCompile(`^\d+\.\d{6}\n$`)
	srv, cli, srvErr, cliErr := runLocalPair(t, "ib_write_bw", "--output=bandwidth", "-n", "100", "-s", "4096")
	if srvErr != nil || cliErr != nil || !figure.MatchString(srv) || srv != cli {
		t.Fatalf("ib_write_bw --output=bandwidth: server %v %q, client %v %q", srvErr, srv, cliErr, cli)
	}
	srv, cli, srvErr, cliErr = runLocalPair(t, "ib_send_lat", "--output=latency", "-n", "100")
	if srvErr != nil || cliErr != nil || !figure.MatchString(srv) || !figure.MatchString(cli) {
		t.Fatalf("ib_send_lat --output=latency: server %v %q, client %v %q", srvErr, srv, cliErr, cli)
	}
}

// lineWriter is a Stdout that closes stop once n result lines came.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	n    int
	stop chan struct{}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if len(resultLines(w.buf.String())) >= w.n {
		select {
		case <-w.stop:
		default:
			close(w.stop)
		}
	}
	return len(b), nil
}

// --run_infinitely -D 1: the client prints a line a second of what
// completed in it, goes on until stopped (as by SIGINT), then ends as
// perftest does, with the closing steps: the server says the client
// closed the connection, and both exit cleanly.
func TestRunInfinitely(t *testing.T) {
	w := &lineWriter{n: 3, stop: make(chan struct{})}
	start := time.Now()
	srv, _, srvErr, cliErr := runLocalPairCfg(t, "ib_write_bw", func(c *Config) {
		c.Stdout, c.Stop = w, w.stop
	}, "--run_infinitely", "-D", "1", "-s", "4096")
	cli := w.buf.String()
	if srvErr != nil || cliErr != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", srvErr, srv, cliErr, cli)
	}
	lines := resultLines(cli)
	if len(lines) < 3 || time.Since(start) < 3*time.Second {
		t.Fatalf("client printed %d lines in %v, want 3 a second apart:\n%s", len(lines), time.Since(start), cli)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if f[0] != "4096" || f[1] == "0" || f[2] != "0.00" || f[3] == "0.00" {
			t.Errorf("interval line %q: want 4096 bytes, some iterations, no peak, a bandwidth", l)
		}
	}
	if !strings.HasSuffix(srv, " Client closed connection\n"+resultLine) || len(resultLines(srv)) != 0 {
		t.Errorf("server's end:\n%s", srv)
	}
}

// -e: the tools sleep on completion channels instead of polling, and say
// so under the title as perftest does; the runs complete with every
// iteration counted. WRITE has no events, as in perftest.
func TestEvents(t *testing.T) {
	for _, tool := range []string{"ib_send_bw", "ib_send_lat", "ib_read_bw"} {
		srv, cli, srvErr, cliErr := runLocalPair(t, tool, "-e", "-n", "100", "-s", "1024")
		if srvErr != nil || cliErr != nil {
			t.Fatalf("%s -e server: %v\n%s\nclient: %v\n%s", tool, srvErr, srv, cliErr, cli)
		}
		for who, out := range map[string]string{"server": srv, "client": cli} {
			if want := " Test with events. Using rnic"; !strings.Contains(out, want) || !strings.Contains(out, "_comp0\n Dual-port") {
				t.Errorf("%s %s: no %q line under the title:\n%s", tool, who, want, out)
			}
			if tool == "ib_read_bw" && who == "server" {
				continue // its server prints the client's line
			}
			r := resultLines(out)
			if len(r) != 1 || strings.Fields(r[0])[0] != "1024" || strings.Fields(r[0])[1] != "100" {
				t.Errorf("%s %s result lines %q", tool, who, r)
			}
		}
	}
	wb, _ := Find("ib_write_bw")
	if _, err := Parse(wb, []string{"-e"}); err == nil || !strings.Contains(err.Error(), "not available on WRITE") {
		t.Errorf("ib_write_bw -e: %v", err)
	}
	sb, _ := Find("ib_send_bw")
	if _, err := Parse(sb, []string{"-e", "-D", "2"}); err == nil || !strings.Contains(err.Error(), "duration mode") {
		t.Errorf("ib_send_bw -e -D 2: %v", err)
	}
	// Large messages keep the CQ moderation with -e, as perftest keeps it.
	if p, err := Parse(sb, []string{"-e", "-s", "65536", "-n", "1000"}); err != nil || p.CQMod != 100 {
		t.Errorf("ib_send_bw -e -s 65536: %+v, %v", p, err)
	}
}

// --source_ip: the client's exchange leaves from that address, and a
// server listens on it alone, as perftest binds its socket.
func TestSourceIP(t *testing.T) {
	src, other := looptest.Get(t), looptest.Get(t)
	ln, err := ListenOn(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if got := ln.Addr().(*net.TCPAddr).AddrPort().Addr().Unmap(); got != src {
		t.Fatalf("listening on %v, want %v", got, src)
	}
	if c, err := net.Dial("tcp", netip.AddrPortFrom(other, uint16(port)).String()); err == nil {
		c.Close()
		t.Fatalf("a server with --source_ip %v took a connection to %v", src, other)
	}
	from := looptest.Get(t)
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c, err := DialFrom(from, netip.AddrPortFrom(src, uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := <-accepted; got == nil || got.(*net.TCPAddr).AddrPort().Addr().Unmap() != from {
		t.Fatalf("the server saw the client at %v, want %v", got, from)
	}
}
