package tests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// runHog is the "hog" helper: a client that takes what it can of rnicd
// RNICD_HELPER_DEV, phase by phase as RNICD_HOG lists them (cq, qp,
// bytes, mr, conn), each until the daemon refuses. It prints one line a
// phase, "phase count error", then "ready", and holds everything until
// its stdin closes (it then exits 0 without freeing anything: the daemon
// must) or it is killed.
func runHog() error {
	dev := os.Getenv("RNICD_HELPER_DEV")
	c, err := verbs.Open(dev)
	if err != nil {
		return err
	}
	pd, err := c.AllocPD()
	if err != nil {
		return err
	}
	cq, err := c.CreateCQ(1, nil)
	if err != nil {
		return err
	}
	var keep []any // everything the hog holds, so nothing is collected
	until := func(phase string, try func() error) {
		n := 0
		for ; n < 1<<20; n++ {
			if err = try(); err != nil {
				break
			}
		}
		fmt.Printf("%s %d %v\n", phase, n, strings.ReplaceAll(fmt.Sprint(err), "\n", " "))
	}
	for _, phase := range strings.Split(os.Getenv("RNICD_HOG"), ",") {
		switch phase {
		case "cq": // besides the first
			until(phase, func() error {
				q, err := c.CreateCQ(1, nil)
				keep = append(keep, q)
				return err
			})
		case "qp":
			until(phase, func() error {
				q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
					Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				keep = append(keep, q)
				return err
			})
		case "bytes": // regions of 1 TiB of a sparse memfd, which cost the hog nothing
			until(phase, func() error {
				mem, err := c.Alloc(1 << 40)
				if err != nil {
					return err
				}
				mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
				keep = append(keep, mr)
				return err
			})
		case "mr":
			mem, err := c.Alloc(4096)
			if err != nil {
				return err
			}
			until(phase, func() error {
				mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
				keep = append(keep, mr)
				return err
			})
		case "conn": // besides the first; a connection's first verb says if it is refused
			until(phase, func() error {
				o, err := verbs.Open(dev)
				if err != nil {
					return err
				}
				keep = append(keep, o)
				_, err = o.AllocPD()
				return err
			})
		default:
			return fmt.Errorf("RNICD_HOG phase %q", phase)
		}
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	// Held until here for real: `_ = keep` is no use to the collector,
	// and a Context nothing reaches any more has its control socket
	// closed by the runtime's finalizer, which made the daemon free a
	// hog's objects while the hog still waited (TestHogsFillDaemon went
	// through 8 hogs without filling the daemon).
	runtime.KeepAlive(keep)
	runtime.KeepAlive(c)
	return nil
}

// hog is a running hog helper.
type hog struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	phases map[string]hogPhase
}

type hogPhase struct {
	n   int
	err string
}

// startHog starts a hog of device dev through phases and waits until it
// holds all it could.
func startHog(t *testing.T, dev, phases string) *hog {
	t.Helper()
	h := &hog{cmd: exec.Command(os.Args[0], "-test.run=^$"), phases: map[string]hogPhase{}}
	h.cmd.Env = append(os.Environ(), helperEnv+"=hog", "RNICD_HELPER_DEV="+dev, "RNICD_HOG="+phases)
	h.stdin = must[io.WriteCloser](t)(h.cmd.StdinPipe())
	stdout := must[io.ReadCloser](t)(h.cmd.StdoutPipe())
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cmd.Process.Kill(); h.cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "ready" {
		f := strings.SplitN(lines.Text(), " ", 3)
		if len(f) != 3 {
			t.Fatalf("hog line %q", lines.Text())
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("hog line %q", lines.Text())
		}
		h.phases[f[0]] = hogPhase{n, f[2]}
	}
	if lines.Text() != "ready" {
		t.Fatalf("hog stopped before it was ready: %v", h.phases)
	}
	return h
}

// want checks that phase got n objects and was then refused for the
// limit flag names.
func (h *hog) want(t *testing.T, phase string, n int, flag string) {
	t.Helper()
	p, ok := h.phases[phase]
	if !ok || p.n != n || !strings.Contains(p.err, "rnicd "+flag+" raises it") || !strings.Contains(p.err, "cannot allocate memory") {
		t.Errorf("hog %s: %d then %q, want %d then a refusal (ENOMEM) naming %s", phase, p.n, p.err, n, flag)
	}
}

// held returns the daemon's hostif_held_* counters.
func held(t *testing.T, c *verbs.Context) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for k, v := range must[map[string]uint64](t)(c.Counters()) {
		if strings.HasPrefix(k, "hostif_held_") {
			out[strings.TrimPrefix(k, "hostif_held_")] = v
		}
	}
	return out
}

// goodClient checks that a client other than the hog gets what it asks
// for at once: two RC QPs on regions of their own, connected, and a
// WRITE of one into the other, checked byte for byte.
func goodClient(t *testing.T, dev string, seed byte) {
	t.Helper()
	c, err := verbs.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, b := newEnd(t, c, endOpts{typ: verbs.QPTypeRC}), newEnd(t, c, endOpts{typ: verbs.QPTypeRC})
	connect(t, a, b, verbs.QPTypeRC, 3, 14)
	connect(t, b, a, verbs.QPTypeRC, 3, 14)
	writeAndCheck(t, a, b, uint64(seed), 4096, 512, seed, "a WRITE beside the hog")
}

// The limits rnicd is started with in TestHogClient: small, so that the
// hog reaches each in a moment.
const (
	hogCQs   = 40 // the hog's first CQ and 39 more
	hogQPs   = 30
	hogMRs   = 20
	hogBytes = 64 << 20
	hogConns = 3
)

// TestHogClient: a client takes all the CQs, QPs, registered bytes, MRs
// and connections its limits allow, and is refused past each with an
// error naming the limit's flag. The daemon stays up; another client
// creates QPs, registers memory and moves data at once; once the hog
// leaves (killed, or exiting without freeing anything) the daemon holds
// only what the other client holds.
func TestHogClient(t *testing.T) {
	dir := t.TempDir()
	d := ownDaemon(t, dir, "rnicH", "-client-max-cq", strconv.Itoa(hogCQs),
		"-client-max-qp", strconv.Itoa(hogQPs), "-client-max-mr", strconv.Itoa(hogMRs),
		"-client-max-mr-bytes", strconv.Itoa(hogBytes), "-client-max-conns", strconv.Itoa(hogConns))
	t.Setenv("RNICD_DIR", dir)
	watch := open(t, "rnicH")
	base := held(t, watch) // the watcher's own connection

	for round, leave := range []string{"killed", "exits"} {
		h := startHog(t, "rnicH", "cq,qp,bytes,mr,conn")
		h.want(t, "cq", hogCQs-1, "-client-max-cq")
		h.want(t, "qp", hogQPs, "-client-max-qp")
		// 1 TiB is over 64 MiB at once: the daemon mapped nothing.
		h.want(t, "bytes", 0, "-client-max-mr-bytes")
		h.want(t, "mr", hogMRs, "-client-max-mr")
		h.want(t, "conn", hogConns-1, "-client-max-conns")
		during := held(t, watch)
		if during["qp"] != base["qp"]+hogQPs || during["cq"] != base["cq"]+hogCQs || during["mr"] != base["mr"]+hogMRs ||
			during["conns"] != base["conns"]+hogConns || during["maps"] != base["maps"]+hogQPs+hogCQs+hogMRs {
			t.Fatalf("round %d: the daemon holds %v with the hog, %v without", round, during, base)
		}

		goodClient(t, "rnicH", byte(round+1))
		// And a new client connects and is served (Open only dials: its
		// first verb is where a refused connection would say so).
		nc, err := verbs.Open("rnicH")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.AllocPD(); err != nil {
			t.Fatalf("a new client beside the hog: %v", err)
		}
		nc.Close()

		if leave == "killed" {
			h.cmd.Process.Signal(syscall.SIGKILL)
		} else {
			h.stdin.Close()
		}
		h.cmd.Wait()
		eventually(t, "the hog's objects released ("+leave+")", func() bool {
			now := held(t, watch)
			for k, v := range base {
				if now[k] != v {
					return false
				}
			}
			return true
		})
	}
	if !strings.Contains(d.errb.String(), "client over a limit") {
		t.Errorf("the daemon's log never said a client went over a limit:\n%s", d.errb.String())
	}
}

// TestDaemonWideLimit: two clients, each under its own limit of QPs,
// together reach the daemon's; the second is refused naming -max-qp, and
// once the first leaves, another client gets QPs again.
func TestDaemonWideLimit(t *testing.T) {
	dir := t.TempDir()
	ownDaemon(t, dir, "rnicW", "-max-qp", "50", "-client-max-qp", "30")
	t.Setenv("RNICD_DIR", dir)
	watch := open(t, "rnicW")
	h1 := startHog(t, "rnicW", "qp")
	h1.want(t, "qp", 30, "-client-max-qp")
	h2 := startHog(t, "rnicW", "qp")
	h2.want(t, "qp", 20, "-max-qp")
	if n := held(t, watch)["qp"]; n != 50 {
		t.Fatalf("the daemon holds %d QPs, want its limit of 50", n)
	}
	h1.cmd.Process.Signal(syscall.SIGKILL)
	h1.cmd.Wait()
	eventually(t, "the first hog's QPs released", func() bool { return held(t, watch)["qp"] == 20 })
	goodClient(t, "rnicW", 7)
}

// TestHogDefaults: the first two attacks of a greedy client, CQs and QPs until
// something breaks, against rnicd with the limits it sizes itself (from
// vm.max_map_count and RLIMIT_NOFILE): the hog is refused at its own
// limits, far below the kernel's, and the daemon serves the next client.
func TestHogDefaults(t *testing.T) {
	dir := t.TempDir()
	d := ownDaemon(t, dir, "rnicD")
	t.Setenv("RNICD_DIR", dir)
	watch := open(t, "rnicD")
	// By default a client holds a quarter of the daemon's descriptors
	// and mappings, as the daemon's log says: its CQs (an eventfd and a
	// mapping each) stop at whichever comes first, its QPs (a mapping
	// each) at the mappings.
	fdsLim, mapsLim := clientLimit(t, d, "descriptors"), clientLimit(t, d, "memory mappings")
	wantCQs, cqFlag := fdsLim-1, "-client-max-fds" // its connection holds a descriptor
	if mapsLim <= wantCQs {
		wantCQs, cqFlag = mapsLim, "-client-max-maps"
	}
	h := startHog(t, "rnicD", "cq,qp")
	h.want(t, "cq", wantCQs-1, cqFlag) // besides its first
	h.want(t, "qp", mapsLim-wantCQs, "-client-max-maps")
	want := map[string]uint64{"qp": uint64(mapsLim - wantCQs), "cq": uint64(wantCQs), "fds": uint64(wantCQs) + 2,
		"maps": uint64(mapsLim), "conns": 2}
	for k, v := range want {
		if n := held(t, watch)[k]; n != v {
			t.Errorf("the daemon holds %d %s with the hog, want %d", n, k, v)
		}
	}
	goodClient(t, "rnicD", 9)
	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Wait()
	eventually(t, "the hog's objects released", func() bool {
		m := held(t, watch)
		return m["qp"] == 0 && m["cq"] == 0 && m["maps"] == 0 && m["fds"] == 1 && m["ring_bytes"] == 0
	})
}

// clientLimit is the per-client limit of what the daemon's start log
// says (the "limits" line).
func clientLimit(t *testing.T, d *daemon, what string) int {
	t.Helper()
	re := regexp.MustCompile(`client="[^"]*\b` + what + ` (\d+)`)
	var m []string
	// The log is copied from the daemon's stderr by a goroutine of
	// os/exec: it may come after the ready line.
	eventually(t, "the limits in the log", func() bool {
		m = re.FindStringSubmatch(d.errb.String())
		return m != nil
	})
	return must[int](t)(strconv.Atoi(m[1]))
}

// TestHogsFillDaemon: QPs until the daemon's mappings run out, by five
// processes against rnicd's defaults: together they reach the daemon's
// limit of mappings (vm.max_map_count less its reserve), the last is
// refused naming -max-maps, and the daemon, holding some 57,000 rings,
// still lists every QP (where one with no limit crashed: 65,530 QPs
// exhaust vm.max_map_count) and, once a hog has gone, serves a client
// that moves data.
func TestHogsFillDaemon(t *testing.T) {
	dir := t.TempDir()
	d := ownDaemon(t, dir, "rnicF")
	t.Setenv("RNICD_DIR", dir)
	watch := open(t, "rnicF")
	maps := clientLimit(t, d, "memory mappings")
	var hogs []*hog
	for i := 0; ; i++ {
		h := startHog(t, "rnicF", "qp")
		hogs = append(hogs, h)
		if p := h.phases["qp"]; strings.Contains(p.err, "rnicd -max-maps raises it") {
			break
		}
		h.want(t, "qp", maps-1, "-client-max-maps") // its CQ holds one mapping
		if i == 8 {
			t.Fatalf("8 hogs of %d mappings each never reached the daemon's limit", maps)
		}
	}
	all := held(t, watch)
	if len(hogs) < 2 || all["maps"] < uint64(maps*(len(hogs)-1)) {
		t.Fatalf("%d hogs; the daemon holds %v", len(hogs), all)
	}
	qps := must[[]verbs.QPInfo](t)(watch.QPs())
	seen := map[uint32]bool{}
	for _, q := range qps {
		seen[q.QPN] = true
	}
	if uint64(len(qps)) != all["qp"] || len(seen) != len(qps) {
		t.Fatalf("the daemon lists %d QPs (%d QPNs), holds %d", len(qps), len(seen), all["qp"])
	}
	hogs[0].cmd.Process.Signal(syscall.SIGKILL)
	hogs[0].cmd.Wait()
	eventually(t, "the first hog's QPs released", func() bool { return held(t, watch)["maps"] == all["maps"]-uint64(maps) })
	goodClient(t, "rnicF", 11)
}
