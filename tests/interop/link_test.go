package interop

// One link MTU: its namespace, the two rnicd, the capture of the tap, the
// VM, and the phases run across them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// link is the bench of one link MTU.
type link struct {
	t              *testing.T
	bin            string // where rnicd and rnic are
	linkMTU, ibMTU int
	ns             *netns
	dir            string   // rnicd's sockets, the capture, the VM's files
	env            []string // RNICD_DIR for every command
	ctx            context.Context
	vm             *vm
	// runHost runs the host's side of a case; nil is rnic (l.rnic). The
	// harness's own test sets it to break a case on purpose.
	runHost func(ctx context.Context, c tcase, port int, client bool) hostRun
}

// runLink runs every phase of one link MTU and returns its results.
func runLink(t *testing.T, bin, img string, linkMTU, ibMTU int) []result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	l := &link{t: t, bin: bin, linkMTU: linkMTU, ibMTU: ibMTU, ns: newNetns(t, linkMTU), dir: t.TempDir(), ctx: ctx}
	l.env = []string{"RNICD_DIR=" + l.dir}

	capture := filepath.Join(l.dir, "tap0.pcap")
	dump := l.ns.command(ctx, nil, "tcpdump", "-i", "tap0", "-s", "0", "-U", "-w", capture, "udp", "port", "4791", "and",
		"(", "src", "host", hostAddr, "or", "src", "host", hostAddr6, ")")
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	// RNICD_INTEROP_PCAP names a folder that keeps a capture of both
	// directions of the tap per link (rxe's packets before the impairment
	// drops them), for one who studies a failed case.
	if keep := os.Getenv("RNICD_INTEROP_PCAP"); keep != "" {
		both := l.ns.command(ctx, nil, "tcpdump", "-i", "tap0", "-s", "0", "-U", "-w",
			filepath.Join(keep, fmt.Sprintf("tap0-mtu%d.pcap", ibMTU)), "udp", "port", "4791")
		if err := both.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { both.Process.Signal(os.Interrupt); both.Wait() }()
	}
	// rnicd checks every rxe packet's ICRC, all 32 bits, in packet mode.
	d, dout := l.startRnicd(device, hostAddr, "-mode", "packet")
	defer d.Process.Kill()
	dd, ddout := l.startRnicd(udpDevice, udpAddr)
	defer dd.Process.Kill()
	d6, _ := l.startRnicd(device6, hostAddr6, "-mode", "packet")
	defer d6.Process.Kill()
	defer func() {
		if t.Failed() {
			t.Logf("the UDP-mode rnicd said:\n%s", tail(ddout.String()))
		}
	}()
	t.Setenv("RNICD_DIR", l.dir)
	// rnicd, as root, makes its device's node (or finds one of its name)
	// after its socket listens, so the node may come a moment after
	// waitSocket: the first link's rnicd removes the node it made when it
	// stops, and at the second link this check once ran before the new
	// rnicd had made it again ("no node for UCX", a clean-clone run beside
	// a benchmark). A node still missing after the wait is made again, as
	// for a UCX case (keepDevNode); that rnicd makes it is
	// tests/clib_world_test.go's to check.
	if err := l.awaitDevNode(10 * time.Second); err != nil {
		t.Errorf("MTU %d: %v", ibMTU, err)
	}

	cases, err := selectCases(matrix(ibMTU), os.Getenv("RNICD_INTEROP_CASES"))
	if err != nil {
		t.Fatal(err)
	}
	repeat, err := lossRepeat()
	if err != nil {
		t.Fatal(err)
	}
	phases := plan(cases, repeat)
	script := filepath.Join(l.dir, "case.sh")
	if err := os.WriteFile(script, []byte(vmScript(phases)), 0o755); err != nil {
		t.Fatal(err)
	}
	if l.vm, err = bootVM(ctx, img, l.ns, linkMTU, script, l.dir, phases); err != nil {
		t.Fatal(err)
	}
	// rnicd's port follows the link of its interface, as rxe's follows
	// its netdev: br0 has no carrier until qemu opens tap0, and a
	// perftest started before that finds the port DOWN and stops ("Port
	// number 1 state is Down"), as it would on rxe. The VM reports its
	// GIDs once its eth0 is up, by when qemu holds the tap.
	if !l.vm.waitFor(func() bool { return len(l.vm.gids()) > 0 }) {
		t.Fatalf("MTU %d: the VM never came up; console:\n%s", ibMTU, tail(l.vm.console.String()))
	}
	var results []result
	for pi, ph := range phases {
		results = append(results, l.runPhase(pi, ph)...)
	}
	if stall := l.vm.stalled(); stall != "" {
		t.Errorf("MTU %d: the VM %s; console:\n%s", ibMTU, stall, tail(l.vm.console.String()))
	} else if !l.vm.poweredOff(2 * time.Minute) {
		t.Errorf("MTU %d: the VM did not power off; console:\n%s", ibMTU, tail(l.vm.console.String()))
		l.vm.kill()
	} else if n := l.vm.unfinished(); n != 0 {
		// It powered off (or qemu ended) before its last case: its
		// console says why, as no case's output can.
		t.Errorf("MTU %d: the VM exited with %d cases not run; console:\n%s", ibMTU, n, tail(l.vm.console.String()))
	}
	l.checkGIDs()
	if sendsFrom(cases, hostAddr6) {
		l.checkIPv6Device()
	}
	end := counters(t)
	d.Process.Signal(os.Interrupt)
	d.Wait()
	dump.Process.Signal(os.Interrupt)
	dump.Wait()

	st, err := checkCapture(capture, ibMTU)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MTU %d: capture of tap0: ICRC good %v, bad %v, GSO super-frames %d", ibMTU, st.good, st.bad, st.oversized)
	for _, a := range []string{hostAddr, hostAddr6} {
		if (st.good[a] == 0 && sendsFrom(cases, a)) || st.bad[a] != 0 {
			t.Errorf("MTU %d: rnicd's packets on the wire from %s: %d with a good ICRC, %d bad", ibMTU, a, st.good[a], st.bad[a])
		}
	}
	// rnicd sends a CNP only for a packet that came marked CE, which only
	// the CE-marking cases do, and every CNP it sent is on the wire with a
	// good ICRC (checked above with every packet of rnicd). The capture
	// may miss a few packets of a whole run (647 of 652 CNPs once, with
	// 204,572 packets of rnicd's in it; all of them in a run of the CE
	// case alone): at least 95%, never more than np_cnp_sent.
	sent := end["np_cnp_sent"]
	if cnps := uint64(st.cnp[hostAddr]); cnps > sent || cnps*100 < sent*95 || (cnps == 0) == marksCE(cases) || st.cnp[hostAddr6] != 0 {
		t.Errorf("MTU %d: %d CNPs from rnicd in the capture (%d over IPv6), np_cnp_sent %d; CE-marking cases ran: %v",
			ibMTU, cnps, st.cnp[hostAddr6], sent, marksCE(cases))
	} else {
		t.Logf("MTU %d: %d CNPs from rnicd on the wire, np_cnp_sent %d", ibMTU, cnps, sent)
	}
	if st.oversized != 0 {
		t.Errorf("MTU %d: %d packets on the tap larger than the MTU", ibMTU, st.oversized)
	}
	// The exit's counters line; bare when this rnicd ran no case (a
	// selection of UDP-mode cases only).
	if !strings.Contains(dout.String(), " msg=counters") {
		t.Errorf("rnicd did not stop cleanly:\n%s", tail(dout.String()))
	}
	return results
}

// startRnicd starts an rnicd in the namespace and waits for its socket.
func (l *link) startRnicd(name, addr string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	c := l.ns.command(l.ctx, l.env, append([]string{filepath.Join(l.bin, "rnicd"), "-d", name, "-addr", addr}, args...)...)
	out := new(bytes.Buffer)
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		l.t.Fatal(err)
	}
	waitSocket(l.t, filepath.Join(l.dir, name+".sock"))
	return c, out
}

// rnic runs the host's side of c, the server or the client.
func (l *link) rnic(ctx context.Context, c tcase, port int, client bool) hostRun {
	cmd := append([]string{filepath.Join(l.bin, "rnic")}, hostArgs(c, port, client)...)
	env := l.env
	if c.clib {
		// Debian's binary of the tool, with the C library TestRxeInterop built.
		cmd, env = cmd[1:], append([]string{"LD_LIBRARY_PATH=" + filepath.Join(l.bin, "clib")}, l.env...)
	}
	if c.isUCX() {
		if err := l.keepDevNode(); err != nil {
			return hostRun{err: err}
		}
		env = append(env, ucxEnv(device)...)
	}
	if c.tool == "riostream" && client {
		// riostream's client binds to nothing: rdma_cm would route it
		// through the rnicd whose address shares the longest prefix
		// with the VM's, the UDP-mode one (198.18.0.3). It sees
		// rnicd's socket alone.
		only := filepath.Join(l.dir, "only-"+device)
		if err := os.MkdirAll(only, 0o755); err != nil {
			return hostRun{err: err}
		}
		if err := os.Symlink(filepath.Join(l.dir, device+".sock"), filepath.Join(only, device+".sock")); err != nil && !os.IsExist(err) {
			return hostRun{err: err}
		}
		env = append(append([]string{}, env...), "RNICD_DIR="+only)
	}
	run := l.ns.command(ctx, env, cmd...)
	if c.clib && c.isRdmaCM() {
		// Debian's rping buffers its pings (stdout, a pipe) and writes
		// its CM events unbuffered, some without a newline: its stderr
		// goes after its stdout, as the VM's script puts it, rather than
		// into the middle of a ping's line.
		var out, errb bytes.Buffer
		run.Stdout, run.Stderr = &out, &errb
		err := run.Run()
		return hostRun{err: err, out: out.String() + errb.String()}
	}
	out, err := run.CombinedOutput()
	return hostRun{err: err, out: string(out)}
}

// devNode is the node rnicd makes for UCX, /dev/infiniband/rnicd-rnio0,
// without which UCX lists no device.
const devNode = "/dev/infiniband/rnicd-" + device

// keepDevNode makes sure devNode is there for a UCX case. runLink has
// checked that rnicd made it (or found it); but the node is one for every
// rnicd of that name, in any namespace, and goes when the daemon that
// made it stops, so a second interop suite on this machine, whose rnio0
// made it first, takes it away from this one mid-run (it did, in two
// runs of three beside other suites). Then it is made again here, as
// rnicd's log tells a user to (mknod, the null device's number, 0600).
func (l *link) keepDevNode() error {
	if _, err := os.Stat(devNode); err == nil {
		return nil
	}
	if err := syscall.Mknod(devNode, syscall.S_IFCHR|0o600, 1<<8|3); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("UCX lists no %s without %s, gone (another rnicd named %s stopped) and not made again: %w", device, devNode, device, err)
	}
	l.t.Logf("MTU %d: %s was gone (another rnicd named %s stopped): made again", l.ibMTU, devNode, device)
	return nil
}

// awaitDevNode waits up to d for rnicd's devNode, then makes it again if
// it is not there (keepDevNode).
func (l *link) awaitDevNode(d time.Duration) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(devNode); err == nil {
			return nil
		}
	}
	return l.keepDevNode()
}

// host runs the host's side of c: rnic, unless a test says otherwise.
func (l *link) host(ctx context.Context, c tcase, port int, client bool) hostRun {
	if l.runHost != nil {
		return l.runHost(ctx, c, port, client)
	}
	return l.rnic(ctx, c, port, client)
}

// runPhase runs the host's side of each case of phase pi under its
// impairment, waits for the VM's side, and judges each case.
func (l *link) runPhase(pi int, ph phase) []result {
	start := time.Now()
	remove := l.ns.impair(l.t, ph.impair)
	before := counters(l.t)
	host := l.runCases(pi, ph)
	remove()
	l.checkCMClean(ph)
	moved := diff(before, counters(l.t))
	var want, impair string
	if ph.impair != nil {
		impair = ph.impair.name
		if ph.impair.check != nil {
			want = ph.impair.check(ph.rxeRole, moved)
		}
	}
	// The suite's share of CI's 60 minutes, phase by phase.
	l.t.Logf("MTU %d phase %d: rxe %s, impairment %q, %d cases, %.1f s", l.ibMTU, pi, ph.rxeRole, impair, len(ph.cases), time.Since(start).Seconds())
	return l.verdicts(pi, ph, host, impair, moved, want)
}

// runCases runs the host's side of each case of phase pi and waits for
// the VM's side of the last: its output may still be coming.
func (l *link) runCases(pi int, ph phase) []hostRun {
	var host []hostRun
	if ph.rxeRole == "client" {
		host = l.serve(pi, ph)
	} else {
		host = l.connect(pi, ph)
	}
	l.vm.waitVerdict(caseID{pi, len(ph.cases) - 1})
	return host
}

// verdicts judges each case of phase pi; a failed case's verdict is
// logged with both sides' output at once, for a run stopped later.
func (l *link) verdicts(pi int, ph phase, host []hostRun, impair string, moved map[string]uint64, want string) []result {
	var results []result
	for i, c := range ph.cases {
		r := result{c: c, rxeRole: ph.rxeRole, mtu: l.ibMTU, impair: impair, deadline: ph.deadlines[i], counters: format(moved), moved: moved}
		r.judge(host[i], l.vm.run(caseID{pi, i}), want)
		if !r.ok {
			l.t.Logf("MTU %d phase %d case %d, %s, rxe %s: %s", l.ibMTU, pi, i, c.name(), ph.rxeRole, r.detail)
		}
		results = append(results, r)
	}
	return results
}

// hostMargin is what the host's side of a case gets over the case's
// deadline: the VM's own timeout is to fire first, and say so.
const hostMargin = 15 * time.Second

// serve runs the host's servers of a phase where rxe is the client: every
// server listens at once, the VM's clients come in turn.
func (l *link) serve(pi int, ph phase) []hostRun {
	host := make([]hostRun, len(ph.cases))
	var wg sync.WaitGroup
	for i, c := range ph.cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := caseID{pi, i}
			ctx, cancel := context.WithCancel(l.ctx)
			defer cancel()
			// The watchdog: a server whose client failed would wait for
			// ever. It gets 20 s after the VM's verdict on the case, and
			// none once the VM has stalled or exited without one.
			go func() {
				if l.vm.waitStart(id) && l.vm.waitVerdict(id) {
					select {
					case <-time.After(20 * time.Second):
					case <-ctx.Done():
					}
				}
				cancel()
			}()
			for attempt := 1; ; attempt++ {
				host[i] = l.host(ctx, c, ph.ports[i], false)
				host[i].killed = host[i].err != nil && ctx.Err() != nil
				if host[i].err == nil || attempt > 2 || !l.vm.retried(id, attempt) {
					break
				}
			}
		}()
	}
	wg.Wait()
	return host
}

// connect runs the host's clients of a phase where rxe is the server, in
// turn: each once the VM has started the case, retrying until the VM's
// server listens, within the case's deadline and hostMargin.
func (l *link) connect(pi int, ph phase) []hostRun {
	host := make([]hostRun, len(ph.cases))
	for i, c := range ph.cases {
		id := caseID{pi, i}
		if !l.vm.waitStart(id) {
			host[i] = hostRun{err: fmt.Errorf("not run: the VM never started the case")}
			continue
		}
		var r hostRun
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(l.ctx, ph.deadlines[i]+hostMargin)
			for {
				r = l.host(ctx, c, ph.ports[i], true)
				if r.err == nil || !refused(r.out) || ctx.Err() != nil {
					break
				}
				select {
				case <-time.After(500 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			r.killed = r.err != nil && ctx.Err() != nil
			cancel()
			if r.err == nil || attempt > 2 || !l.vm.retried(id, attempt) {
				break
			}
		}
		host[i] = r
	}
	return host
}

// checkGIDs checks rxe0's GID table as the VM reported it: index 1 is the
// IPv4 GID every case uses (-x 1, -g 1), and the tap's IPv6 address has a
// GID too, for the IPv6 cases.
func (l *link) checkGIDs() {
	gids := l.vm.gids()
	l.t.Logf("MTU %d: rxe0's GIDs: %v", l.ibMTU, gids)
	if want := sysfsGID(netip.MustParseAddr(vmAddr)); gids[1] != want {
		l.t.Errorf("MTU %d: rxe0's GID 1 is %q, want the IPv4 GID %s; table %v", l.ibMTU, gids[1], want, gids)
	}
	want6 := sysfsGID(netip.MustParseAddr(vmAddr6))
	for _, g := range gids {
		if g == want6 {
			return
		}
	}
	l.t.Errorf("MTU %d: rxe0 has no GID for %s (%s); table %v", l.ibMTU, vmAddr6, want6, gids)
}

// checkIPv6Device checks the counters of the IPv6 cases' rnicd over the
// whole link: packets both ways, none with a bad ICRC and none dropped as
// malformed or misaddressed. (A late packet of rxe's for a QP a case has
// destroyed, drop_unknown_qp, is no fault of the wire format.)
func (l *link) checkIPv6Device() {
	m := countersOf(l.t, device6)
	var bad []string
	for _, k := range []string{"icrc_errors", "drop_malformed", "drop_bad_transport", "drop_bad_pkey", "drop_bad_address", "drop_corrupted"} {
		if m[k] != 0 {
			bad = append(bad, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	l.t.Logf("MTU %d: %s (IPv6) sent %d, received %d packets", l.ibMTU, device6, m["sent_pkts"], m["rcvd_pkts"])
	if m["sent_pkts"] == 0 || m["rcvd_pkts"] == 0 || len(bad) != 0 {
		l.t.Errorf("MTU %d: %s sent %d and received %d packets, dropped %v", l.ibMTU, device6, m["sent_pkts"], m["rcvd_pkts"], bad)
	}
}

// checkCMClean checks, after a phase with cases that connected through
// rdma_cm, that rnicd holds nothing of them: no application CM ID or
// event channel (hostif_objects_*), and no connection in its CM agent
// (cm_ids; one in TIMEWAIT leaves within the path's ACK timeout). The
// VM's side is cmCheck's.
func (l *link) checkCMClean(ph phase) {
	devs := map[string]bool{}
	for _, c := range ph.cases {
		if c.connectsByCM() {
			devs[map[bool]string{false: device, true: device6}[c.ipv6]] = true
		}
	}
	keys := []string{"hostif_objects_cm_id", "hostif_objects_cm_event_channel", "cm_ids"}
	for dev := range devs {
		var m map[string]uint64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			m = countersOf(l.t, dev)
			if m[keys[0]]+m[keys[1]]+m[keys[2]] == 0 {
				break
			}
			if time.Now().After(deadline) {
				l.t.Errorf("MTU %d, rxe %s: after the phase %s keeps %s=%d %s=%d %s=%d", l.ibMTU, ph.rxeRole, dev,
					keys[0], m[keys[0]], keys[1], m[keys[1]], keys[2], m[keys[2]])
				break
			}
		}
	}
}

// sysfsGID is the GID of addr as sysfs shows it: eight groups of four hex
// digits, an IPv4 address mapped into IPv6.
func sysfsGID(addr netip.Addr) string {
	b := addr.As16()
	var groups []string
	for i := 0; i < 16; i += 2 {
		groups = append(groups, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(groups, ":")
}

// refused tells a client that found no server yet from a failed run.
func refused(out string) bool {
	return strings.Contains(out, "connection refused") || strings.Contains(out, "Couldn't connect") || strings.Contains(out, "connect:") ||
		strings.Contains(out, "RDMA_CM_EVENT_REJECTED, error 8") || // Debian's rping on clib: REJ reason 8, nobody listens
		strings.Contains(out, "Connection refused") || // ucx_perftest's client
		// riostream's client connects non-blocking (its default -T):
		// a REJ (reason 8, its server in the VM not listening yet)
		// fails the connect asynchronously, and it prints the rpoll
		// that saw POLLERR with a stale errno, as on rdma-core. A
		// failure later in a run prints the same, but rxe's server
		// takes one connection, so a retry cannot hide it: it times out.
		strings.Contains(out, "rpoll: ")
}

func waitSocket(t *testing.T, path string) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rnicd made no socket %s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
