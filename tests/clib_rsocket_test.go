package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// rsockets (clib/rdmacm/rsocket.c): Debian's rstream, unmodified, on the
// C library's librdmacm between two rnicd, both roles, speaking
// rdma-core's rsocket protocol over the daemons' RC QPs.

// rstreamRow is one result line of rstream: its test's name, the
// transfer size, transfers per iteration and iterations as rstream
// prints them (size_str, cnt_str), and the bytes each side sent.
type rstreamRow struct {
	name, size, xfers, iters, total string
	bytes                           uint64 // sent by each side
}

// rstreamHeader is the line rstream prints before its results.
const rstreamHeader = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer"

// rstreamDefault is what rstream's default run (no -S, -C, -I) prints,
// from its test_size table (64 B, 4 KiB, 64 KiB, 1 MiB; the other sizes
// need -S all) and size_to_count: a latency run of each size on one
// connection, then a bandwidth run of each on a second.
var rstreamDefault = []rstreamRow{
	{"64_lat", "64", "1", "100k", "12m", 64 * 100000},
	{"4k_lat", "4k", "1", "10k", "78m", 4096 * 10000},
	{"64k_lat", "64k", "1", "1k", "125m", 65536 * 1000},
	{"1m_lat", "1m", "1", "100", "200m", 1 << 20 * 100},
	{"64_bw", "64", "100k", "1", "12m", 64 * 100000},
	{"4k_bw", "4k", "10k", "1", "78m", 4096 * 10000},
	{"64k_bw", "64k", "1k", "1", "125m", 65536 * 1000},
	{"1m_bw", "1m", "100", "1", "200m", 1 << 20 * 100},
}

// custom is the row of a custom run (-S size -C xfers, one iteration).
func custom(size, xfers int, sizeStr, xfersStr, totalStr string) []rstreamRow {
	return []rstreamRow{{"custom", sizeStr, xfersStr, "1", totalStr, uint64(size * xfers)}}
}

// checkRstream compares rstream's output with the header and rows.
func checkRstream(t *testing.T, who, out string, rows []rstreamRow) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(rows)+1 || lines[0] != rstreamHeader {
		t.Errorf("%s printed\n%s\nwant the header and %d rows", who, out, len(rows))
		return
	}
	for i, r := range rows {
		re := regexp.MustCompile(fmt.Sprintf(`^%-10s%-8s%-8s%-8s%-8s +[0-9.]+s +[0-9.]+ +[0-9.]+$`,
			r.name, r.size, r.xfers, r.iters, r.total))
		if !re.MatchString(lines[i+1]) {
			t.Errorf("%s row %d: %q, want %s %s %s %s %s", who, i, lines[i+1], r.name, r.size, r.xfers, r.iters, r.total)
		}
	}
}

// listenRsocket starts tool (rstream, riostream) as a server bound to
// srv's address with args and returns once its listening CM ID shows in
// `rnic res` (rstream's non-blocking connect reports a refusal only as
// "rpoll: ...", so the client is not started before), with its stdout
// and stderr.
func listenRsocket(t *testing.T, ctx context.Context, run runner, tool string, srv *daemon, args ...string) (*exec.Cmd, *lockedBuf, *lockedBuf) {
	t.Helper()
	server := run(ctx, tool, append([]string{"-b", srv.addr.String()}, args...)...)
	so, se := &lockedBuf{}, &lockedBuf{}
	server.Stdout, server.Stderr = so, se
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(resRows(t, srv.name, server.Process.Pid, true)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			server.Process.Kill()
			server.Wait()
			t.Fatalf("%s server %s: no listening CM ID after 30 s\n%s%s", tool, strings.Join(args, " "), so.String(), se.String())
		}
	}
	return server, so, se
}

// rstreamStall is how long the two daemons may go without sending one
// new packet (progressWatch) before an rstream pair counts as hung and
// is killed. A run's length says nothing: rstream's default run is some
// 600,000 non-blocking calls' messages, and each program spins (rsend,
// rrecv, EAGAIN, the C library's sched_yield) while the other program
// and the two daemons must be scheduled in turn. On this 2-core host it
// took 16-28 s at load 18, but 214, 421 and 442 s with two more
// stress-ng CPU hogs beside it, and one was still moving thousands of
// packets every 10 s when the old 5-minute limit killed it, both ends
// alive and silent: the "hang" that took rsockets out of main once (the
// blocking and rpoll runs, whose waits sleep, took 1-6 s beside the same
// hogs). Nothing in a working connection is quiet for a minute: rsockets
// have no timer, the CM retries a MAD after about 4 s, a retransmission
// or an RNR retry comes within seconds.
const rstreamStall = 60 * time.Second

// progressWatch kills a hung pair: until stop, it reads both daemons'
// counters every second and calls kill once neither sent a new packet
// for stall (sent_pkts less retransmitted_pkts and send_rnr_err: a
// requester retrying into a receive queue nobody fills, RNR retry count
// 7 being for ever, is no progress). stop returns what it saw then (""
// if it did not fire): the counters that tell a hang's kind.
func (tb *toolBench) progressWatch(stall time.Duration, kill func()) (stop func() string) {
	done, quit := make(chan string, 1), make(chan struct{})
	sent := func() (uint64, [2]map[string]uint64, error) {
		var m [2]map[string]uint64
		var n uint64
		for i, c := range []*verbs.Context{tb.ca, tb.cb} {
			var err error
			if m[i], err = c.Counters(); err != nil {
				return 0, m, err
			}
			n += m[i]["sent_pkts"] - m[i]["retransmitted_pkts"] - m[i]["send_rnr_err"]
		}
		return n, m, nil
	}
	go func() {
		report := ""
		defer func() { done <- report }()
		last, _, err := sent()
		moved := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for err == nil {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			var n uint64
			var m [2]map[string]uint64
			if n, m, err = sent(); err != nil {
				break
			}
			if n != last {
				last, moved = n, time.Now()
				continue
			}
			if time.Since(moved) < stall {
				continue
			}
			var sb strings.Builder
			fmt.Fprintf(&sb, "no new packet from either daemon in %v; killed", stall)
			for i, c := range []*verbs.Context{tb.ca, tb.cb} {
				fmt.Fprintf(&sb, "\n%s:", c.Name())
				for _, k := range []string{"sent_pkts", "rcvd_pkts", "retransmitted_pkts", "rcvd_rnr_err",
					"send_rnr_err", "rcvd_seq_err", "out_of_seq_request", "duplicate_request", "ack_held",
					"ack_hold_expired", "drop_no_recv_wqe", "local_ack_timeout_err"} {
					fmt.Fprintf(&sb, " %s %d", k, m[i][k])
				}
			}
			report = sb.String()
			kill()
			return
		}
		report = fmt.Sprintf("counters: %v; killed", err)
		kill()
	}()
	return func() string {
		close(quit)
		return <-done
	}
}

// rstreamRun is what one run of an rstream pair left: what each side
// printed and how it exited, the watchdog's report, and how long it took.
type rstreamRun struct {
	sout, serr, cout, cerr string
	serverErr, clientErr   error
	hung                   string
	took                   time.Duration
}

// runRstream runs Debian's tool, rstream or riostream (which takes the
// same flags and prints the same table), as a server bound to srv's
// address and a client from cli's towards it, both with args, once the server
// listens, and calls started, if not nil, with both processes once the
// client started. A pair that stops moving packets for stall is killed
// as hung (progressWatch); limit only bounds a run that moves but never
// ends.
func (tb *toolBench) runRstream(t *testing.T, rstream runner, tool string, srv, cli *daemon, limit, stall time.Duration, started func(server, client *os.Process), args ...string) rstreamRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	port := freePort(t)
	server, so, se := listenRsocket(t, ctx, rstream, tool, srv, append([]string{"-p", port}, args...)...)
	client := rstream(ctx, tool, append([]string{"-s", srv.addr.String(), "-b", cli.addr.String(), "-p", port}, args...)...)
	co, ce := &lockedBuf{}, &lockedBuf{}
	client.Stdout, client.Stderr = co, ce
	stop := tb.progressWatch(stall, cancel)
	start := time.Now()
	r := rstreamRun{}
	if r.clientErr = client.Start(); r.clientErr == nil {
		if started != nil {
			started(server.Process, client.Process)
		}
		r.clientErr = client.Wait()
	}
	if r.clientErr != nil {
		server.Process.Kill()
	}
	r.serverErr = server.Wait()
	r.took = time.Since(start)
	r.hung = stop()
	if r.hung == "" && ctx.Err() != nil {
		r.hung = fmt.Sprintf("still moving packets at the %v limit; killed", limit)
	}
	r.sout, r.serr, r.cout, r.cerr = so.String(), se.String(), co.String(), ce.String()
	return r
}

// rstreamPair is runRstream with rstreamStall, for a run that must
// work: both must exit 0 and print nothing on stderr (the library says
// nothing about a run that works); afterwards both daemons hold nothing
// of either. It returns what each printed.
func (tb *toolBench) rstreamPair(t *testing.T, rstream runner, tool string, srv, cli *daemon, limit time.Duration, args ...string) (sout, cout string) {
	t.Helper()
	r := tb.runRstream(t, rstream, tool, srv, cli, limit, rstreamStall, nil, args...)
	if r.clientErr != nil || r.serverErr != nil || r.serr != "" || r.cerr != "" {
		t.Fatalf("%s %s (%v)\n%s\nclient: %v\n%s%s\nserver: %v\n%s%s", tool, strings.Join(args, " "), r.took.Round(time.Second),
			r.hung, r.clientErr, r.cout, r.cerr, r.serverErr, r.sout, r.serr)
	}
	tb.idle(t)
	return r.sout, r.cout
}

// checkedPair runs a pair of tool (rstream, riostream) that must work,
// the server on rnicA (rnicB when reversed), and checks both sides
// printed the header and rows and that the bytes went through the
// daemons as RoCEv2 packets with a REP and an RTU for each of conns
// connections.
func (tb *toolBench) checkedPair(t *testing.T, run runner, tool string, reversed bool, limit time.Duration, rows []rstreamRow, conns uint64, args ...string) {
	t.Helper()
	srv, cli := tb.a, tb.b
	cs, cc := tb.ca, tb.cb
	if reversed {
		srv, cli, cs, cc = tb.b, tb.a, tb.cb, tb.ca
	}
	beforeS, beforeC := must[map[string]uint64](t)(cs.Counters()), must[map[string]uint64](t)(cc.Counters())
	sout, cout := tb.rstreamPair(t, run, tool, srv, cli, limit, args...)
	checkRstream(t, tool+" server", sout, rows)
	checkRstream(t, tool+" client", cout, rows)
	afterS, afterC := must[map[string]uint64](t)(cs.Counters()), must[map[string]uint64](t)(cc.Counters())
	var bytes uint64
	for _, r := range rows {
		bytes += r.bytes
	}
	// Each side sent bytes (the transfers go both ways, as many each
	// way): at least bytes/1024 packets at MTU 1024, on top of credits,
	// ACKs and the CM's MADs (atLeast); a REP and an RTU a connection,
	// exactly.
	pkts := bytes / 1024
	for _, w := range []struct {
		before, after map[string]uint64
		who, k        string
		want          uint64
		atLeast       bool
	}{
		{beforeS, afterS, srv.name, "sent_pkts", pkts, true},
		{beforeS, afterS, srv.name, "rcvd_pkts", pkts, true},
		{beforeC, afterC, cli.name, "sent_pkts", pkts, true},
		{beforeC, afterC, cli.name, "rcvd_pkts", pkts, true},
		{beforeS, afterS, srv.name, "cm_tx_msgs_rep", conns, false},
		{beforeS, afterS, srv.name, "cm_rx_msgs_rtu", conns, false},
		{beforeC, afterC, cli.name, "cm_rx_msgs_rep", conns, false},
		{beforeC, afterC, cli.name, "cm_tx_msgs_rtu", conns, false},
	} {
		got := w.after[w.k] - w.before[w.k]
		if w.atLeast && got < w.want || !w.atLeast && got != w.want {
			t.Errorf("%s counts %s %d, want %d (at least: %v) for %d connections and %d bytes each way",
				w.who, w.k, got, w.want, w.atLeast, conns, bytes)
		}
	}
}

// TestCLibRstream runs Debian's rstream on the C library between two
// rnicd: its default run (eight tests, a latency and a bandwidth
// connection one after the other, non-blocking calls), then custom runs
// with every transfer's bytes verified (-T v): blocking (-T b, each rrecv
// waiting for all its bytes), asynchronous (-T a, rpoll before every
// call), with 64 KiB socket buffers (-B), so that a 1 MB transfer waits
// on the receiver offering each buffer half again, and rstream's plain
// socket mode (-T s) turned into rsockets by Debian's librspreload. Both print the
// header and each test's row; the daemons' counters show the bytes went
// through them as RoCEv2 packets (at least one per 1024-byte MTU of the
// data each side sent) and a REP and an RTU per connection; neither
// daemon keeps anything of either program.
func TestCLibRstream(t *testing.T) {
	tb := newToolBench(t)
	rstream := debianTool(t, "rstream", "rdmacm-utils")
	// Debian's librdmacm1 ships librspreload (rdma-core's preload/),
	// linked against librdmacm.so.1: this library, on LD_LIBRARY_PATH.
	const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"
	if _, err := os.Stat(rspreload); err != nil {
		t.Fatalf("librdmacm1 (rdmacm-utils' dependency) installed no %s: %v", rspreload, err)
	}
	for _, c := range []struct {
		name     string
		args     []string
		rows     []rstreamRow
		conns    uint64
		reversed bool // server on rnicB, client on rnicA
		preload  bool // rstream -T s (plain sockets) under Debian's librspreload
		// limit bounds a run that keeps moving packets but never ends
		// (rstreamStall catches one that stops): the default run, 15 s
		// alone, took 320 s beside stress-ng --cpu 2 under -race, and
		// went past 10 minutes in a whole-suite run beside it (the
		// other packages' tests at work too); the others take 6 s.
		limit time.Duration
	}{
		{"default", nil, rstreamDefault, 2, false, false, 15 * time.Minute},
		{"blocking", []string{"-T", "b", "-T", "v", "-S", "100000", "-C", "200"}, custom(100000, 200, "97k", "200", "38m"), 1, true, false, 3 * time.Minute},
		{"async", []string{"-T", "a", "-T", "v", "-S", "70000", "-C", "200"}, custom(70000, 200, "68k", "200", "26m"), 1, false, false, 3 * time.Minute},
		{"small-buffers", []string{"-T", "v", "-B", "65536", "-S", "1000000", "-C", "30"}, custom(1000000, 30, "976k", "30", "57m"), 1, true, false, 3 * time.Minute},
		{"librspreload", []string{"-T", "s", "-T", "v", "-S", "100000", "-C", "50"}, custom(100000, 50, "97k", "50", "9.5m"), 1, false, true, 3 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := rstream
			if c.preload {
				// librspreload turns the program's socket calls into
				// this library's rsocket calls (falling back to the
				// kernel's sockets where they fail: the counters and
				// the CM ID show they did not).
				run = func(ctx context.Context, tool string, args ...string) *exec.Cmd {
					cmd := rstream(ctx, tool, args...)
					cmd.Env = append(cmd.Env, "LD_PRELOAD="+rspreload)
					return cmd
				}
			}
			tb.checkedPair(t, run, "rstream", c.reversed, c.limit, c.rows, c.conns, c.args...)
		})
	}
}

// TestCLibRstreamHangCaught: the watchdog of the rstream pairs tells a
// hung pair from a slow one. A blocking run far too long to finish
// (100 GB) starts; once packets flow, both programs are stopped
// (SIGSTOP), as a hang would leave them: within the stall time (10 s
// here, rstreamStall in the other tests) both are killed, long before
// the run's 3-minute limit, with a report that says no packet moved and
// gives the daemons' counters; the daemons keep nothing of either.
func TestCLibRstreamHangCaught(t *testing.T) {
	tb := newToolBench(t)
	rstream := debianTool(t, "rstream", "rdmacm-utils")
	const stall = 10 * time.Second
	stopped := false
	r := tb.runRstream(t, rstream, "rstream", tb.a, tb.b, 3*time.Minute, stall, func(server, client *os.Process) {
		base := must[map[string]uint64](t)(tb.ca.Counters())["sent_pkts"]
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if must[map[string]uint64](t)(tb.ca.Counters())["sent_pkts"] > base+1000 {
				stopped = server.Signal(syscall.SIGSTOP) == nil && client.Signal(syscall.SIGSTOP) == nil
				return
			}
		}
	}, "-T", "b", "-S", "1000000", "-C", "100000")
	want := fmt.Sprintf("no new packet from either daemon in %v; killed\nrnicA: sent_pkts ", stall)
	var ce, se *exec.ExitError
	if !stopped || !strings.HasPrefix(r.hung, want) || !strings.Contains(r.hung, "\nrnicB: sent_pkts ") ||
		!errors.As(r.clientErr, &ce) || ce.String() != "signal: killed" || !errors.As(r.serverErr, &se) ||
		se.String() != "signal: killed" || r.took > 2*time.Minute {
		t.Fatalf("stopped %v after %v: watchdog %q (want %q...), client %v, server %v\n%s%s%s%s", stopped,
			r.took.Round(time.Second), r.hung, want, r.clientErr, r.serverErr, r.cout, r.cerr, r.sout, r.serr)
	}
	tb.idle(t)
}

// TestCLibRiostream runs Debian's riostream on the C library between
// two rnicd: each side riomaps its buffer for the peer to write (the
// entry going to the peer's target iomap as an IOMAP_SGL), then the two
// riowrite into each other's buffer, RDMA WRITEs with no message, each
// watching the last byte of its own buffer for the peer's marker.
// Custom runs, non-blocking unless said: 1000 round trips of 64 bytes
// (inline writes), 200 transfers of 100000 bytes each way with every
// byte verified (-T v) and roles swapped, the send buffers so small (-B
// 8192) that riowrite waits on its completions, and an asynchronous run
// (-T a, rpoll before every call) verified. Both sides print the header
// and the row; the counters show the bytes went through the daemons;
// neither keeps anything of either program. Its default run is not
// here: its 222,200 round trips (100,000 of 64 bytes alone) each wait
// on two processes spinning on memory, never calling in, beside the two
// daemons; on this 2-core host 1000 took some 2.5 s, the default run
// past 10 minutes.
func TestCLibRiostream(t *testing.T) {
	tb := newToolBench(t)
	riostream := debianTool(t, "riostream", "rdmacm-utils")
	// riostream's client does not bind to -b ("TODO: bind client to
	// src_addr"): rdma_cm would route its connection through the rnicd
	// that holds the server's address, both ends on one daemon. So the
	// client runs as on a host of its own, whose only rnicd is the
	// client's (the counters check that it did).
	hostOf := map[string]string{}
	for _, d := range []*daemon{tb.a, tb.b} {
		hostOf[d.name] = t.TempDir()
		if err := os.Symlink(filepath.Join(os.Getenv("RNICD_DIR"), d.name+".sock"), filepath.Join(hostOf[d.name], d.name+".sock")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		args     []string
		rows     []rstreamRow
		conns    uint64
		reversed bool
		limit    time.Duration // as TestCLibRstream's
	}{
		{"latency", []string{"-S", "64", "-C", "1", "-I", "1000"}, []rstreamRow{{"custom", "64", "1", "1k", "125k", 64 * 1000}}, 1, false, 3 * time.Minute},
		{"verify", []string{"-T", "v", "-B", "8192", "-S", "100000", "-C", "200"}, custom(100000, 200, "97k", "200", "38m"), 1, true, 3 * time.Minute},
		{"async", []string{"-T", "a", "-T", "v", "-S", "70000", "-C", "100"}, custom(70000, 100, "68k", "100", "13m"), 1, false, 3 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			cli := tb.b
			if c.reversed {
				cli = tb.a
			}
			run := func(ctx context.Context, tool string, args ...string) *exec.Cmd {
				cmd := riostream(ctx, tool, args...)
				if slices.Contains(args, "-s") {
					cmd.Env = append(cmd.Env, "RNICD_DIR="+hostOf[cli.name])
				}
				return cmd
			}
			tb.checkedPair(t, run, "riostream", c.reversed, c.limit, c.rows, c.conns, c.args...)
		})
	}
}

// TestCLibRsocketHostilePeer runs the C test program rshostile: an
// rsocket listener, whose peer is made of rdma_cm and verbs calls alone,
// rejects connection data no rsocket sends (version 2, a target list of
// no entries, a buffer half too long for a message's 29-bit length),
// saying why on stderr and taking no connection; a peer whose message
// claims more bytes than the half it was offered gets its connection
// failed, rrecv answering EPROTO, as does one whose IOMAP_SGL names an
// entry past the one-entry iomap offered; an IOMAP_SGL written past the
// iomap fails at the NIC (remote access error) and fails the connection;
// and a well-formed peer afterwards is accepted and read ("hello").
// Neither daemon keeps anything of it.
func TestCLibRsocketHostilePeer(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "rshostile"), tb.a.addr.String(), tb.b.addr.String(), freePort(t))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := "rsocket listening on " + tb.a.addr.String() + ":" + cmd.Args[3] + "\n" +
		"version 2: REJECTED\n" +
		"a target list of no entries: REJECTED\n" +
		"a buffer half of 2^29 bytes: REJECTED\n" +
		"connected: the REP offers a half of 65536 bytes\n" +
		"1 MiB claimed: rrecv failed with EPROTO\n" +
		"IOMAP_SGL naming entry 1 of 1: rrecv failed with EPROTO\n" +
		"IOMAP_SGL past the iomap: remote access error; the server's rrecv failed\n" +
		"5 bytes written: rrecv gave hello\n" +
		"PASS\n"
	// The REQ's private data is 56 bytes whatever the client gave:
	// rdma_cm's 92 less its 36-byte header, zero-padded.
	wantErr := "librdmacm-rnicd: rsocket: the peer's connection data is not rsockets version 1 (56 bytes, version 2)\n" +
		"librdmacm-rnicd: rsocket: the peer's connection data offers 0 target entries and 32 bytes\n" +
		"librdmacm-rnicd: rsocket: the peer's connection data offers 2 target entries and 536870912 bytes\n" +
		"librdmacm-rnicd: rsocket: the peer wrote 1048576 bytes past its credits or its buffer; closing\n" +
		"librdmacm-rnicd: rsocket: the peer wrote iomap entry 1 of the 1 offered; closing\n"
	if err != nil || string(out) != want || stderr.String() != wantErr {
		t.Fatalf("rshostile: %v\n%s\nwant\n%s\nstderr:\n%s\nwant\n%s", err, out, want, stderr.String(), wantErr)
	}
	tb.idle(t)
}

// TestCLibRsocketAPI runs the C test program rsapi: the calls a socket
// program makes beyond what rstream does, on two rnicd: a datagram
// rsocket refused (ENOSYS, with the reason on stderr), a connect where
// nobody listens refused (ECONNREFUSED), a non-blocking connect
// (EINPROGRESS, rpoll's POLLOUT, SO_ERROR 0, both ends' names), 4 MiB
// each way at once from two threads a socket with every byte checked,
// MSG_PEEK, a zero-length rrecv, iomap (RDMA_IOMAPSIZE's rounding,
// riomap's EINVAL and ENOMEM, riowrite in no mapping: EINVAL, past its
// end: the bytes within it, 4 KiB checked at the peer, riounmap's
// EINVAL), half-close by rshutdown(SHUT_WR) with
// the other direction going on, rselect, the end of stream at the peer's
// rclose, and rsend on a socket shut for writing (ECONNRESET).
func TestCLibRsocketAPI(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "rsapi"), tb.a.addr.String(), tb.b.addr.String(), freePort(t))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := "SOCK_DGRAM: ENOSYS\n" +
		"nobody listening: ECONNREFUSED\n" +
		"non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, the names\n" +
		"4 MiB each way at once, two threads a side: verified\n" +
		"MSG_PEEK, then the same 5 bytes; a zero-length rrecv: 0\n" +
		"iomap: RDMA_IOMAPSIZE rounded; riomap PROT_READ: EINVAL, past the peer's iomap: ENOMEM; " +
		"riowrite in no mapping: EINVAL, past its end: 50 of 100, 4 KiB: verified; riounmap\n" +
		"SHUT_WR: the server's end of stream; its bytes after it arrive\n" +
		"the server's rclose: end of stream; rsend: ECONNRESET\n" +
		"PASS\n"
	wantErr := "librdmacm-rnicd: rsocket: datagram rsockets (SOCK_DGRAM, rdma-core's UD service) are not built on rnicd\n" +
		"librdmacm-rnicd: riomap: the peer's iomap has 1 entries, all taken\n" +
		"librdmacm-rnicd: riowrite: offset 0 is in none of the peer's 1 iomap entries\n"
	if err != nil || string(out) != want || stderr.String() != wantErr {
		t.Fatalf("rsapi: %v\n%s\nwant\n%s\nstderr:\n%s\nwant\n%s", err, out, want, stderr.String(), wantErr)
	}
	tb.idle(t)
}
