package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// rdmaSends is the rdma_sends counter of device dev, from rnic stat.
func rdmaSends(t *testing.T, dev string) int {
	t.Helper()
	out := runTool(t, filepath.Join(binDir, "rnic"), "stat", "-d", dev)
	m := regexp.MustCompile(`(?m)^link ` + dev + `/1 .* rdma_sends (\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rnic stat -d %s has no rdma_sends:\n%s", dev, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// bwResults are the result lines of a bandwidth table.
func bwResults(out string) []string {
	var r []string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, " #bytes") {
			for _, l := range lines[i+1:] {
				if strings.HasPrefix(l, "---") {
					break
				}
				if l != "" { // a line still being written
					r = append(r, l)
				}
			}
		}
	}
	return r
}

// TestCLibPerftestHabits runs the perftest options users reach for
// between Debian's perftest (on the C library) and rnic's, in both
// roles: -b -l 4 moves data both ways (each daemon counts the side's
// WRITEs) and each side prints the same line, the two sides' sum, under
// a "Bidirectional Post List" header with CQ moderation 4; -e runs on
// completion events and says so; --output prints one figure, the same
// on both sides.
func TestCLibPerftestHabits(t *testing.T) {
	tb := newToolBench(t)
	real := debianTool(t, "ib_write_bw", "perftest")
	realRead := debianTool(t, "ib_read_bw", "perftest")
	realSend := debianTool(t, "ib_send_bw", "perftest")
	const iters = 200 // above the TX depth, which perftest clamps to the iterations
	for i, p := range []toolPair{{"real-rnic", real, rnicTool}, {"rnic-real", rnicTool, real}} {
		t.Run("ib_write_bw-b-l4/"+p.name, func(t *testing.T) {
			a0, b0 := rdmaSends(t, "rnicA"), rdmaSends(t, "rnicB")
			srv, cli := tb.pairRun(t, p.srv, p.cli, "rnicA", "rnicB", "ib_write_bw", "-b", "-l", "4", "-n", strconv.Itoa(iters), "-s", "65536")
			if da, db := rdmaSends(t, "rnicA")-a0, rdmaSends(t, "rnicB")-b0; da != iters || db != iters {
				t.Errorf("rdma_sends grew by %d on the server's rnicA and %d on the client's rnicB, want %d each", da, db, iters)
			}
			checkBidirectional(t, "RDMA_Write", srv, cli, iters)
		})
		rp := []toolPair{{p.name, realRead, rnicTool}, {p.name, rnicTool, realRead}}[i]
		t.Run("ib_read_bw-b/"+p.name, func(t *testing.T) {
			srv, cli := tb.pairRun(t, rp.srv, rp.cli, "rnicA", "rnicB", "ib_read_bw", "-b", "-l", "4", "-n", strconv.Itoa(iters), "-s", "65536")
			checkBidirectional(t, "RDMA_Read", srv, cli, iters)
		})
		sp := []toolPair{{p.name, realSend, rnicTool}, {p.name, rnicTool, realSend}}[i]
		t.Run("ib_send_bw-e/"+p.name, func(t *testing.T) {
			srv, cli := tb.pairRun(t, sp.srv, sp.cli, "rnicA", "rnicB", "ib_send_bw", "-e", "-n", strconv.Itoa(iters), "-s", "4096")
			for who, out := range map[string]string{"server": srv, "client": cli} {
				dev := map[string]string{"server": "rnicA", "client": "rnicB"}[who]
				if want := "Send BW Test\n Test with events. Using " + dev + "_comp0\n"; !strings.Contains(out, want) {
					t.Errorf("%s printed no %q:\n%s", who, want, out)
				}
				if r := bwResults(out); len(r) != 1 || !strings.HasPrefix(r[0], fmt.Sprintf(" 4096       %d ", iters)) {
					t.Errorf("%s result lines %q", who, r)
				}
			}
		})
		t.Run("ib_write_bw--output/"+p.name, func(t *testing.T) {
			srv, cli := tb.pairRun(t, p.srv, p.cli, "rnicA", "rnicB", "ib_write_bw", "--output=bandwidth", "-n", strconv.Itoa(iters))
			if figure := regexp.MustCompile(`^\d+\.\d{6}\n$`); !figure.MatchString(cli) || srv != cli {
				t.Errorf("--output=bandwidth: server %q, client %q; want one figure, the same", srv, cli)
			}
		})
	}
}

// TestCLibPerftestLatDuration: the latency tools' -D between Debian's
// perftest (on the C library) and rnic's, in both roles: each side that
// reports prints print_report_lat_duration's table with iterations, and
// both end well. Debian's ib_write_lat failed its last WRITE
// (RETRY_EXC_ERR) when rnic's tore its QP down as its own clock ended.
func TestCLibPerftestLatDuration(t *testing.T) {
	tb := newToolBench(t)
	for _, c := range []struct {
		tool    string
		reports []string
	}{
		{"ib_write_lat", []string{"server", "client"}},
		{"ib_send_lat", []string{"server", "client"}},
		{"ib_read_lat", []string{"client"}},
	} {
		real := debianTool(t, c.tool, "perftest")
		for _, p := range []toolPair{{"real-rnic", real, rnicTool}, {"rnic-real", rnicTool, real}} {
			t.Run(c.tool+"/"+p.name, func(t *testing.T) {
				srv, cli := tb.pairRun(t, p.srv, p.cli, "rnicA", "rnicB", c.tool, "-D", "2", "-s", "2")
				out := map[string]string{"server": srv, "client": cli}
				for _, who := range c.reports {
					head := " #bytes        #iterations       t_avg[usec]    tps average"
					i := strings.Index(out[who], head)
					if i < 0 {
						t.Fatalf("%s printed no -D table:\n%s", who, out[who])
					}
					f := strings.Fields(strings.SplitN(out[who][i+len(head):], "\n", 3)[1])
					if len(f) != 4 || f[0] != "2" || f[1] == "0" {
						t.Errorf("%s result line %q: want 2 bytes, iterations, t_avg, tps", who, f)
					}
				}
			})
		}
	}
}

func checkBidirectional(t *testing.T, verb, srv, cli string, iters int) {
	t.Helper()
	for who, out := range map[string]string{"server": srv, "client": cli} {
		for _, want := range []string{
			"Post List requested - CQ moderation will be the size of the post list\n",
			"                    " + verb + " Bidirectional Post List BW Test\n",
			" TX depth        : 128\n Post List       : 4\n CQ Moderation   : 4\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s printed no %q:\n%s", who, want, out)
			}
		}
	}
	s, c := bwResults(srv), bwResults(cli)
	if len(s) != 1 || len(c) != 1 || s[0] != c[0] {
		t.Fatalf("result lines: server %q, client %q; want one, the same on both sides", s, c)
	}
	if f := strings.Fields(c[0]); len(f) != 5 || f[0] != "65536" || f[1] != fmt.Sprint(iters) || f[3] == "0.00" {
		t.Errorf("result line %q: want 65536 bytes, %d iterations, a bandwidth", c[0], iters)
	}
}

// TestPerftestTOS: ib_write_bw -R -T 96 between two rnicd: both headers
// say the TOS, and every packet of the connections, the control QP's
// and the test QP's, each way, leaves with DSCP 24 (TOS 96, its ECN bits
// DCQCN's): the client's CM agent sent the traffic class in its REQ and
// the server's took it from there, as rdma_set_option's TOS does.
func TestPerftestTOS(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	dir := t.TempDir()
	pc := filepath.Join(dir, "a.pcap")
	a, b := daemonsWith(t, dir, []string{"-pcap", pc}, nil)
	tb := &toolBench{a: a, b: b, ca: open(t, "rnicA"), cb: open(t, "rnicB"), host: a.addr.String()}
	srv, cli := tb.pair(t, "ib_write_bw", "-R", "-T", "96", "-n", "200")
	for who, out := range map[string]string{"server": srv, "client": cli} {
		if !strings.Contains(out, " Data ex. method : rdma_cm \tTOS    : 96\n") {
			t.Errorf("%s's header has no TOS:\n%s", who, out)
		}
	}
	// The capture is flushed every second: read it until the WRITEs are
	// there.
	var from map[string]int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command(tshark, "-r", pc, "-Y", "infiniband.bth.destqp != 1", "-T", "fields", "-E", "separator=,",
			"-e", "ip.src", "-e", "ip.dsfield.dscp").Output()
		if err != nil && time.Now().Before(deadline) {
			continue // the file's first flush is yet to come
		}
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		from = map[string]int{}
		var bad []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			src, dscp, _ := strings.Cut(l, ",")
			if dscp != "24" {
				bad = append(bad, l)
			}
			from[src]++
		}
		if len(bad) > 0 {
			t.Fatalf("packets (source, DSCP) not DSCP 24 (TOS 96): %q", bad)
		}
		if from[a.addr.String()] > 0 && from[b.addr.String()] >= 200 || time.Now().After(deadline) {
			break
		}
	}
	if from[a.addr.String()] == 0 || from[b.addr.String()] < 200 {
		t.Errorf("packets by source %v: want the server's answers and the client's 200 WRITEs at least", from)
	}
}

// TestRunInfinitelySIGINT: rnic's ib_write_bw --run_infinitely -D 1 as a
// user runs it: the client prints a line a second until ^C (SIGINT),
// then ends with perftest's closing steps, status 0; the server then says
// the client closed the connection and exits 0 too.
func TestRunInfinitelySIGINT(t *testing.T) {
	tb := newToolBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	srv := rnicTool(ctx, "ib_write_bw", "-d", "rnicA", "-p", port, "--run_infinitely", "-D", "1", "-s", "4096")
	sout := &lockedBuf{}
	srv.Stdout, srv.Stderr = sout, sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var cout lockedBuf
	var cli *exec.Cmd
	for lines := 0; lines < 2; {
		if cli == nil {
			cli = rnicTool(ctx, "ib_write_bw", "-d", "rnicB", "-p", port, "--run_infinitely", "-D", "1", "-s", "4096", "127.0.0.1")
			cli.Stdout, cli.Stderr = &cout, &cout
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if cli.ProcessState == nil && strings.Contains(cout.String(), "couldn't connect") {
			// Started before the server listened: again, as a user would.
			cli.Wait()
			cli, cout = nil, lockedBuf{}
			continue
		}
		lines = len(bwResults(cout.String()))
		if ctx.Err() != nil {
			t.Fatalf("client printed %d lines:\n%s", lines, cout.String())
		}
	}
	cli.Process.Signal(os.Interrupt)
	if err := cli.Wait(); err != nil {
		t.Fatalf("client after SIGINT: %v\n%s", err, cout.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server after the client's SIGINT: %v\n%s", err, sout.String())
	}
	out := cout.String()
	for _, l := range bwResults(out) {
		if f := strings.Fields(l); len(f) != 5 || f[0] != "4096" || f[1] == "0" || f[2] != "0.00" {
			t.Errorf("client line %q: want 4096 bytes, iterations, no peak", l)
		}
	}
	if !strings.HasSuffix(out, "\n---------------------------------------------------------------------------------------\n") {
		t.Errorf("client's end:\n%s", out)
	}
	if !strings.Contains(sout.String(), " Client closed connection\n") {
		t.Errorf("server's end:\n%s", sout.String())
	}
	tb.idle(t)
}
