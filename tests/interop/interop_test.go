// Package interop runs rnicd against real Linux Soft-RoCE: a qemu VM with
// Debian's kernel, rdma_rxe and rdma-core's perftest and ibverbs-utils
// (vm.sh), on a tap in a network namespace, rnicd on the bridge beside it.
// Each case runs a real rdma-core tool in the VM against the same rnic tool
// on the host, with rxe as client and as server; every packet rnicd sends
// is captured on the tap and its ICRC checked by this package's own code,
// and rnicd runs in packet mode, checking the ICRC of every packet rxe
// sends.
//
//	sudo RNICD_INTEROP=1 go test -v -timeout 30m ./tests/interop/
//
// It writes last-run.md, the table of the last run.
package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// The VM is 198.18.0.2 on tap0, rnicd 198.18.0.1 on the bridge; a second
// rnicd, in UDP mode and lending sockets, 198.18.0.3, for the --direct
// cases (packet mode has no steering).
const (
	hostAddr     = "198.18.0.1"
	vmAddr       = "198.18.0.2"
	device       = "rnio0"
	directAddr   = "198.18.0.3"
	directDevice = "rnio1"
)

// tcase is one tool run; the harness runs it with rxe as client and as
// server.
type tcase struct {
	tool   string   // perftest or ibverbs-utils name
	args   []string // size, iterations, connection type...
	loss   bool     // also run under 3% loss each way
	direct bool     // rnic runs the QPs itself on a socket rnicd lends (--direct)
}

func (c tcase) name() string {
	n := c.tool + " " + strings.Join(c.args, " ")
	if c.direct {
		n += " (rnic --direct)"
	}
	return n
}

// isPingpong tells rdma-core's pingpong (-g for the GID index) from
// perftest (-x).
func (c tcase) isPingpong() bool { return strings.HasPrefix(c.tool, "ibv_") }

func matrix(ibMTU int) []tcase {
	sizes := []string{"1", strconv.Itoa(ibMTU), strconv.Itoa(ibMTU + 1), "1048576"}
	var cs []tcase
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		for _, s := range sizes {
			n := "50"
			if s == "1048576" {
				n = "8"
			}
			cs = append(cs, tcase{tool: tool, args: []string{"-s", s, "-n", n}, loss: ibMTU == 1024 && s == "1048576"})
		}
	}
	cs = append(cs,
		tcase{tool: "ib_send_bw", args: []string{"-c", "UC", "-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UC", "-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_write_bw", args: []string{"-c", "UC", "-s", "65536", "-n", "20"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_bw", args: []string{"-c", "UD", "-s", strconv.Itoa(ibMTU), "-n", "50"}},
		tcase{tool: "ib_atomic_bw", args: []string{"-A", "FETCH_AND_ADD", "-n", "50"}},
		tcase{tool: "ib_atomic_bw", args: []string{"-A", "CMP_AND_SWAP", "-n", "50"}},
		tcase{tool: "ib_send_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_send_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_write_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_write_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ib_read_lat", args: []string{"-s", "1", "-n", "50"}},
		tcase{tool: "ib_read_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}},
		tcase{tool: "ibv_ud_pingpong", args: []string{"-s", "512", "-n", "50", "--chk"}},
		tcase{tool: "ibv_srq_pingpong", args: []string{"-s", "4096", "-n", "50", "-q", "4", "--chk"}},
		// On the wire a lent socket's QPs are rnicd's; only their QPNs
		// (block 1 and up) tell them apart.
		tcase{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}, direct: true},
		tcase{tool: "ib_send_lat", args: []string{"-s", strconv.Itoa(ibMTU + 1), "-n", "50"}, direct: true},
		tcase{tool: "ibv_rc_pingpong", args: []string{"-s", "4096", "-n", "50", "--chk"}, direct: true},
	)
	return cs
}

// result is one line of the summary table.
type result struct {
	c        tcase
	rxeRole  string // "server" or "client"
	mtu      int
	impair   string // "", lossName or corruptName
	ok       bool
	detail   string
	counters string
}

func TestRxeInterop(t *testing.T) {
	if os.Getenv("RNICD_INTEROP") != "1" {
		t.Skip("the rxe interop suite runs with RNICD_INTEROP=1 as root: sudo RNICD_INTEROP=1 go test -v -timeout 30m ./tests/interop/")
	}
	if os.Geteuid() != 0 {
		t.Fatal("RNICD_INTEROP=1 needs root (network namespaces, tap, qemu)")
	}
	ensurePackages(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../../cmd/rnicd", "../../cmd/rnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cache := os.Getenv("RNICD_INTEROP_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "rnicd-interop")
	}
	img := filepath.Join(cache, "img")
	if out, err := exec.Command("./vm.sh", "image", img).CombinedOutput(); err != nil {
		t.Fatalf("VM image: %v\n%s", err, out)
	}
	var results []result
	for _, link := range []struct{ linkMTU, ibMTU int }{{1500, 1024}, {9000, 4096}} {
		rs := runLink(t, bin, img, link.linkMTU, link.ibMTU)
		results = append(results, rs...)
	}
	writeTable(t, results)
	for _, r := range results {
		if !r.ok {
			t.Errorf("%s, rxe %s, MTU %d, %q: %s", r.c.name(), r.rxeRole, r.mtu, r.impair, r.detail)
		}
	}
}

// ensurePackages installs what the suite runs from Debian's packages.
func ensurePackages(t *testing.T) {
	need := map[string]string{"qemu-system-x86_64": "qemu-system-x86", "busybox": "busybox-static", "cpio": "cpio",
		"depmod": "kmod", "tcpdump": "tcpdump", "nft": "nftables", "ip": "iproute2", "rdma": "iproute2"}
	var pkgs []string
	for cmd, pkg := range need {
		if _, err := exec.LookPath(cmd); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) == 0 {
		return
	}
	sort.Strings(pkgs)
	cmd := exec.Command("sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends "+strings.Join(pkgs, " "))
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install %v: %v\n%s", pkgs, err, out)
	}
}

// netns is the namespace of one link MTU: a bridge with rnicd's address
// and a tap for the VM.
type netns struct {
	name string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func newNetns(t *testing.T, name string, mtu int) *netns {
	exec.Command("ip", "netns", "del", name).Run()
	n := &netns{name: name}
	m := strconv.Itoa(mtu)
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", name, "link", "add", "br0", "mtu", m, "type", "bridge")
	sh(t, "ip", "-n", name, "addr", "add", hostAddr+"/24", "dev", "br0")
	sh(t, "ip", "-n", name, "addr", "add", directAddr+"/24", "dev", "br0")
	sh(t, "ip", "-n", name, "tuntap", "add", "dev", "tap0", "mode", "tap")
	// A long queue: the VM under TCG drains the tap slowly, and a burst of
	// unreliable (UC, UD) packets the queue drops is a message lost for
	// good, which would fail a case for the emulator's sake.
	sh(t, "ip", "-n", name, "link", "set", "tap0", "mtu", m, "txqueuelen", "20000", "master", "br0", "up")
	sh(t, "ip", "-n", name, "link", "set", "br0", "up")
	return n
}

func (n *netns) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// The impairments nftables puts on the tap (this kernel has no netem).
const (
	lossName    = "3% loss each way"
	corruptName = "2% of rxe's packets corrupted"
)

// impair sets the tap's impairment: none, lossName or corruptName. The
// corruption sets the last byte of the BTH (the PSN's low byte) to 0xff,
// which the ICRC covers: rnicd must drop such a packet and count it.
func (n *netns) impair(t *testing.T, kind string) {
	exec.Command("ip", "netns", "exec", n.name, "nft", "delete", "table", "netdev", "rnio").Run()
	var rules string
	switch kind {
	case "":
		return
	case lossName:
		rules = `table netdev rnio {
  chain in { type filter hook ingress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 3 counter drop; }
  chain out { type filter hook egress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 3 counter drop; }
}
`
	case corruptName:
		rules = `table netdev rnio {
  chain in { type filter hook ingress device tap0 priority 0; udp dport 4791 numgen random mod 100 < 2 @th,152,8 set 0xff counter; }
}
`
	}
	cmd := exec.Command("ip", "netns", "exec", n.name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
}

// phase is a set of cases run the same way: rxe as client or server,
// with an impairment or none. Each case gets its own TCP port.
type phase struct {
	rxeRole string
	impair  string
	cases   []tcase
	ports   []int
}

// vmCommand is the rdma-core command line of c in the VM.
func vmCommand(c tcase, port int, client bool) string {
	gid := "-x 1"
	if c.isPingpong() {
		gid = "-g 1"
	}
	cmd := fmt.Sprintf("%s -d rxe0 %s -p %d %s", c.tool, gid, port, strings.Join(c.args, " "))
	if client {
		cmd += " " + hostAddr
	}
	return cmd
}

// hostArgs is the rnic command line of c on the host.
func hostArgs(c tcase, port int, client bool) []string {
	gid := []string{"-x", "1"}
	if c.isPingpong() {
		gid = []string{"-g", "1"}
	}
	dev := device
	if c.direct {
		dev = directDevice
	}
	args := append([]string{c.tool, "-d", dev}, gid...)
	args = append(args, "-p", strconv.Itoa(port))
	if c.direct {
		args = append(args, "--direct")
	}
	args = append(args, c.args...)
	if client {
		args = append(args, vmAddr)
	}
	return args
}

// vmScript runs each phase's cases in order: a client retries until the
// host's server listens; a server waits for the host's client.
func vmScript(phases []phase) string {
	var b strings.Builder
	for pi, ph := range phases {
		for i, c := range ph.cases {
			// perftest measures the CPU clock for its report and gives up
			// ("Can't produce a report") when the samples scatter, as they
			// may in an emulated CPU: that case runs again, at most twice,
			// and a retry line tells the host to run its side again too.
			fmt.Fprintf(&b, "a=0; while :; do\n")
			if ph.rxeRole == "client" {
				// Retry only while the host's server is not listening yet.
				fmt.Fprintf(&b, "  i=0; while :; do %s > /tmp/out 2>&1; rc=$?; [ $rc -eq 0 ] && break; "+
					"grep -q \"Couldn't connect\" /tmp/out || break; i=$((i+1)); [ $i -ge 300 ] && break; sleep 1; done\n",
					vmCommand(c, ph.ports[i], true))
			} else {
				fmt.Fprintf(&b, "  %s > /tmp/out 2>&1; rc=$?\n", vmCommand(c, ph.ports[i], false))
			}
			fmt.Fprintf(&b, "  [ $rc -ne 0 ] && [ $a -lt 2 ] && grep -q \"Can't produce a report\" /tmp/out || break\n"+
				"  a=$((a+1)); echo \"=== retry %d %d $a\" > /dev/ttyS1\ndone\n", pi, i)
			fmt.Fprintf(&b, "{ sed 's/^/=== out %d %d /' /tmp/out; echo \"=== case %d %d rc=$rc\"; } > /dev/ttyS1\n", pi, i, pi, i)
		}
	}
	return b.String()
}

func runLink(t *testing.T, bin, img string, linkMTU, ibMTU int) []result {
	ns := newNetns(t, fmt.Sprintf("rnio-%d", linkMTU), linkMTU)
	dir := t.TempDir()
	env := []string{"RNICD_DIR=" + dir}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	cap := filepath.Join(dir, "tap0.pcap")
	dump := ns.command(ctx, nil, "tcpdump", "-i", "tap0", "-s", "0", "-U", "-w", cap, "udp", "port", "4791", "and", "src", "host", hostAddr)
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	startRnicd := func(name, addr string, args ...string) (*exec.Cmd, *bytes.Buffer) {
		c := ns.command(ctx, env, append([]string{filepath.Join(bin, "rnicd"), "-d", name, "-addr", addr}, args...)...)
		out := new(bytes.Buffer)
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitSocket(t, filepath.Join(dir, name+".sock"))
		return c, out
	}
	// rnicd checks every rxe packet's ICRC, all 32 bits, in packet mode.
	d, dout := startRnicd(device, hostAddr, "-mode", "packet")
	defer d.Process.Kill()
	dd, ddout := startRnicd(directDevice, directAddr)
	defer dd.Process.Kill()
	defer func() {
		if t.Failed() {
			t.Logf("the lending rnicd said:\n%s", tail(ddout.String()))
		}
	}()
	t.Setenv("RNICD_DIR", dir)

	cases := matrix(ibMTU)
	var lossy []tcase
	for _, c := range cases {
		if c.loss {
			lossy = append(lossy, c)
		}
	}
	port := 20000
	mk := func(role string, impair string, cs []tcase) phase {
		ph := phase{rxeRole: role, impair: impair, cases: cs}
		for range cs {
			ph.ports = append(ph.ports, port)
			port++
		}
		return ph
	}
	phases := []phase{mk("client", "", cases), mk("server", "", cases)}
	if len(lossy) > 0 {
		phases = append(phases, mk("client", lossName, lossy), mk("server", lossName, lossy),
			mk("client", corruptName, []tcase{{tool: "ib_write_bw", args: []string{"-s", "65536", "-n", "20"}}}))
	}
	script := filepath.Join(dir, "case.sh")
	if err := os.WriteFile(script, []byte(vmScript(phases)), 0o755); err != nil {
		t.Fatal(err)
	}

	// The VM writes each case's output and verdict to its second serial
	// port, a file here; the console only shows the boot.
	verdicts := filepath.Join(dir, "verdicts")
	vm := exec.CommandContext(ctx, "./vm.sh", "boot", img, ns.name, "tap0", vmAddr, strconv.Itoa(linkMTU), script, verdicts)
	var console bytes.Buffer
	vm.Stdout, vm.Stderr = &console, &console
	if err := vm.Start(); err != nil {
		t.Fatal(err)
	}
	vmDone := make(chan struct{})
	go func() { vm.Wait(); close(vmDone) }()
	var mu sync.Mutex // vmRC, vmOut
	vmRC := map[[2]int]int{}
	vmOut := map[[2]int]*strings.Builder{}
	caseRE := regexp.MustCompile(`^=== case (\d+) (\d+) rc=(\d+)`)
	retryRE := regexp.MustCompile(`^=== retry (\d+) (\d+) (\d+)`)
	vmRetries := map[[2]int]int{}
	outRE := regexp.MustCompile(`^=== out (\d+) (\d+) (.*)`)
	// readVerdicts parses the whole file again: it is small.
	readVerdicts := func() {
		data, _ := os.ReadFile(verdicts)
		mu.Lock()
		defer mu.Unlock()
		clear(vmOut)
		for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r", ""), "\n") {
			if m := caseRE.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				i, _ := strconv.Atoi(m[2])
				rc, _ := strconv.Atoi(m[3])
				vmRC[[2]int{p, i}] = rc
			} else if m := retryRE.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				i, _ := strconv.Atoi(m[2])
				n, _ := strconv.Atoi(m[3])
				vmRetries[[2]int{p, i}] = n
			} else if m := outRE.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				i, _ := strconv.Atoi(m[2])
				k := [2]int{p, i}
				if vmOut[k] == nil {
					vmOut[k] = &strings.Builder{}
				}
				vmOut[k].WriteString(m[3] + "\n")
			}
		}
	}
	go func() {
		for {
			readVerdicts()
			select {
			case <-vmDone:
				readVerdicts() // what it wrote before it powered off
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	// vmRetried waits a while for the VM to say it runs case (pi, i) for
	// the n-th time; the host then runs its side again.
	vmRetried := func(pi, i, n int) bool {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			readVerdicts()
			mu.Lock()
			got := vmRetries[[2]int{pi, i}]
			_, finished := vmRC[[2]int{pi, i}]
			mu.Unlock()
			if got >= n {
				return true
			}
			if finished {
				return false
			}
		}
		return false
	}

	var results []result
	for pi, ph := range phases {
		ns.impair(t, ph.impair)
		before := counters(t)
		hostRC := make([]error, len(ph.cases))
		hostOut := make([]string, len(ph.cases))
		if ph.rxeRole == "client" {
			// Every server listens at once; the VM's clients come in turn.
			var wg sync.WaitGroup
			for i, c := range ph.cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, ccancel := context.WithTimeout(ctx, 10*time.Minute)
					defer ccancel()
					// A server whose client failed would wait for ever:
					// it gets 20 s after the VM's verdict on the case.
					go func() {
						for {
							mu.Lock()
							_, seen := vmRC[[2]int{pi, i}]
							mu.Unlock()
							if seen {
								select {
								case <-time.After(20 * time.Second):
									ccancel()
								case <-cctx.Done():
								}
								return
							}
							select {
							case <-time.After(200 * time.Millisecond):
							case <-cctx.Done():
								return
							}
						}
					}()
					for attempt := 1; ; attempt++ {
						out, err := ns.command(cctx, env, append([]string{filepath.Join(bin, "rnic")}, hostArgs(c, ph.ports[i], false)...)...).CombinedOutput()
						hostRC[i], hostOut[i] = err, string(out)
						if err == nil || attempt > 2 || !vmRetried(pi, i, attempt) {
							break
						}
					}
				}()
			}
			wg.Wait()
		} else {
			for i, c := range ph.cases {
				var out []byte
				var err error
				for attempt := 1; ; attempt++ {
					for try := 0; try < 600; try++ {
						cctx, ccancel := context.WithTimeout(ctx, 5*time.Minute)
						out, err = ns.command(cctx, env, append([]string{filepath.Join(bin, "rnic")}, hostArgs(c, ph.ports[i], true)...)...).CombinedOutput()
						ccancel()
						if err == nil || !refused(out) {
							break
						}
						time.Sleep(500 * time.Millisecond)
					}
					if err == nil || attempt > 2 || !vmRetried(pi, i, attempt) {
						break
					}
				}
				hostRC[i], hostOut[i] = err, string(out)
			}
		}
		// The VM's side of the last case may still be printing.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			readVerdicts()
			mu.Lock()
			_, done := vmRC[[2]int{pi, len(ph.cases) - 1}]
			mu.Unlock()
			if done || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		moved := diff(before, counters(t))
		delta := format(moved)
		// Under an impairment rnicd's counters must show the recovery.
		var want string
		switch {
		case ph.impair == lossName && ph.rxeRole == "client" && moved["out_of_seq_request"] == 0:
			want = "out_of_seq_request moved (rnicd saw rxe's gaps)"
		case ph.impair == lossName && ph.rxeRole == "server" && moved["retransmitted_pkts"] == 0:
			want = "retransmitted_pkts moved (rnicd went back)"
		case ph.impair == corruptName && moved["icrc_errors"] == 0:
			want = "icrc_errors moved (rnicd dropped rxe's corrupted packets)"
		}
		mu.Lock()
		for i, c := range ph.cases {
			r := result{c: c, rxeRole: ph.rxeRole, mtu: ibMTU, impair: ph.impair, counters: delta}
			rc, seen := vmRC[[2]int{pi, i}]
			vo := ""
			if b := vmOut[[2]int{pi, i}]; b != nil {
				vo = b.String()
			}
			switch {
			case hostRC[i] != nil:
				r.detail = fmt.Sprintf("rnic: %v\n%s\nrxe said:\n%s", hostRC[i], tail(hostOut[i]), tail(vo))
			case !seen:
				r.detail = "the VM gave no verdict; its output so far:\n" + tail(vo)
			case rc != 0:
				r.detail = fmt.Sprintf("rxe's %s exited %d:\n%s\nrnic said:\n%s", c.tool, rc, tail(vo), tail(hostOut[i]))
			case want != "":
				r.detail = "both sides exit 0, but rnicd's counters do not show the recovery: want " + want
			default:
				r.ok, r.detail = true, "both sides exit 0"
			}
			results = append(results, r)
		}
		mu.Unlock()
	}
	ns.impair(t, "")
	select {
	case <-vmDone:
	case <-time.After(2 * time.Minute):
		t.Errorf("MTU %d: the VM did not power off; console:\n%s", ibMTU, tail(console.String()))
	}
	d.Process.Signal(os.Interrupt)
	d.Wait()
	dump.Process.Signal(os.Interrupt)
	dump.Wait()

	st, err := checkCapture(cap, ibMTU)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MTU %d: capture of tap0: ICRC good %v, bad %v, GSO super-frames %d", ibMTU, st.good, st.bad, st.oversized)
	if st.good[hostAddr] == 0 || st.bad[hostAddr] != 0 {
		t.Errorf("MTU %d: rnicd's packets on the wire: %d with a good ICRC, %d bad", ibMTU, st.good[hostAddr], st.bad[hostAddr])
	}
	if st.oversized != 0 {
		t.Errorf("MTU %d: %d packets on the tap larger than the MTU", ibMTU, st.oversized)
	}
	if !strings.Contains(dout.String(), "rnicd: counters") {
		t.Errorf("rnicd did not stop cleanly:\n%s", tail(dout.String()))
	}
	return results
}

// refused tells a client that found no server yet from a failed run.
func refused(out []byte) bool {
	s := string(out)
	return strings.Contains(s, "connection refused") || strings.Contains(s, "Couldn't connect") || strings.Contains(s, "connect:")
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

// counters reads rnicd's counters through its control socket (a unix
// socket is reachable from outside the namespace).
func counters(t *testing.T) map[string]uint64 {
	c, err := verbs.Open(device)
	if err != nil {
		t.Fatalf("open %s: %v", device, err)
	}
	defer c.Close()
	m, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// diff is the counters that moved, by how much.
func diff(before, after map[string]uint64) map[string]uint64 {
	m := map[string]uint64{}
	for k, v := range after {
		if !strings.HasPrefix(k, "hostif_") && v != before[k] {
			m[k] = v - before[k]
		}
	}
	return m
}

// format lists counters as name=value, sorted.
func format(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// writeTable records the run in last-run.md.
func writeTable(t *testing.T, rs []result) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Last run of the rxe interop suite\n\n%s, `RNICD_INTEROP=1 go test ./tests/interop/`: rnicd (`-mode packet`) on the host side of a bridge, Debian 12's rxe in qemu on a tap; the `--direct` cases run on sockets a second rnicd (UDP mode, 198.18.0.3) lends.\n"+
		"Counters are rnicd's, moved over the whole phase (all cases of one role, MTU and impairment).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("| test | rxe is | MTU | impairment | result | rnicd counters (phase) |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		res := "ok"
		if !r.ok {
			res = "FAIL"
		}
		impair := r.impair
		if impair == "" {
			impair = "none"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %s | %s | %s |\n", r.c.name(), r.rxeRole, r.mtu, impair, res, r.counters)
	}
	if err := os.WriteFile("last-run.md", []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}
