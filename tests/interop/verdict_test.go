package interop

// The verdict on each case (both sides' exit codes, rnicd's counters) and
// the summary table of a run.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// result is one line of the summary table.
type result struct {
	c        tcase
	rxeRole  string // "server" or "client"
	mtu      int
	impair   string        // the impairment's name, "" for none
	deadline time.Duration // of one run of the case, either side
	ok       bool
	detail   string
	counters string
	// moved is rnicd's counters moved over the case's phase, by name.
	moved map[string]uint64
}

// hostRun is how the host's side of a case ended.
type hostRun struct {
	err error
	out string
	// killed: the host's watchdog killed it, its deadline past or the
	// VM's side long done or stalled.
	killed bool
}

// vmRun is how the VM's side of a case ended, if it has.
type vmRun struct {
	started  bool
	timedOut bool // the case's deadline killed rxe's tool
	rc       int
	finished bool
	out      string
	drops    *[3]int  // after an IPv6 case: see vmLog.drops
	stall    string   // why the VM was declared stalled, if it was
	cm       *cmState // after a case that connected through rdma_cm
}

// judge gives the verdict on one case of a phase: both sides must exit 0,
// and under an impairment rnicd's counters, moved over the phase, must
// show the recovery (want says what they lack, "" if nothing). A case that
// ran out of time says which side stalled: the side whose peer had
// already failed only waited for it.
func (r *result) judge(host hostRun, guest vmRun, want string) {
	hostRole := "client"
	if r.rxeRole == "client" {
		hostRole = "server"
	}
	if guest.stall == "" {
		guest.stall = "exited before it" // powered off, or qemu failed
	}
	said := fmt.Sprintf("\nrnic said:\n%s\nrxe said:\n%s", tail(host.out), tail(guest.out))
	switch {
	case !guest.started:
		r.detail = fmt.Sprintf("not run: the VM never started it; the VM %s", guest.stall)
	case guest.timedOut && r.rxeRole == "server" && host.err != nil && refused(host.out):
		r.detail = fmt.Sprintf("timed out: the VM's side stalled: rxe's server never listened and was killed at its deadline of %v; "+
			"rnic's client was refused until its own", r.deadline) + said
	case guest.timedOut && host.err != nil && !host.killed:
		r.detail = fmt.Sprintf("timed out: the host's side stalled: rnic's %s failed (%v), and rxe's %s in the VM waited for it "+
			"until its deadline of %v and was killed", hostRole, host.err, r.rxeRole, r.deadline) + said
	case guest.timedOut && host.killed:
		r.detail = fmt.Sprintf("timed out: both sides stalled: rxe's %s in the VM was killed at its deadline of %v, rnic's %s "+
			"on the host by the watchdog", r.rxeRole, r.deadline, hostRole) + said
	case guest.timedOut:
		r.detail = fmt.Sprintf("timed out: the VM's side stalled: rxe's %s was killed at its deadline of %v, rnic's %s ended %v",
			r.rxeRole, r.deadline, hostRole, host.err) + said
	case !guest.finished:
		r.detail = fmt.Sprintf("timed out: the VM stalled in rxe's %s and gave no verdict: the VM %s", r.rxeRole, guest.stall) + said
	case host.killed:
		r.detail = fmt.Sprintf("timed out: the host's side stalled: rnic's %s was killed by the watchdog "+
			"(rxe's %s had exited %d)", hostRole, r.rxeRole, guest.rc) + said
	case host.err != nil:
		r.detail = fmt.Sprintf("rnic: %v\n%s\nrxe said:\n%s", host.err, tail(host.out), tail(guest.out))
	case guest.rc != 0 && !rpingExitRace(r.c, guest.rc, guest.out):
		r.detail = fmt.Sprintf("rxe's %s exited %d:\n%s\nrnic said:\n%s", r.c.tool, guest.rc, tail(guest.out), tail(host.out))
	case r.c.ipv6 && guest.drops == nil:
		r.detail = "the VM did not say what it dropped"
	case r.c.ipv6 && *guest.drops != [3]int{}:
		d := *guest.drops
		r.detail = fmt.Sprintf("the VM dropped rnicd's IPv6 packets: Udp6InCsumErrors %d, Udp6InErrors %d, rxe's \"bad ICRC\" %d", d[0], d[1], d[2])
	case r.c.connectsByCM() && guest.cm == nil:
		r.detail = "the VM did not say what its CM IDs and rxe's counters were after the case" + said
	case r.c.connectsByCM() && guest.cm.ids != 0:
		r.detail = fmt.Sprintf("the disconnect left %d CM IDs in the VM (rdma res show cm_id)", guest.cm.ids) + said
	case r.c.connectsByCM() && len(unexplained(guest.cm.errors, r.moved)) != 0:
		r.detail = fmt.Sprintf("rxe's error counters moved: %s (rnicd's over the phase: %s)",
			strings.Join(unexplained(guest.cm.errors, r.moved), " "), r.counters) + said
	case r.c.isRdmaCM() && rpingCheck(r.c, r.rxeRole, host.out, guest.out) != "":
		r.detail = rpingCheck(r.c, r.rxeRole, host.out, guest.out) + said
	case r.c.isRstream() && rstreamCheck(r.c, r.rxeRole, host.out, guest.out) != "":
		r.detail = rstreamCheck(r.c, r.rxeRole, host.out, guest.out) + said
	case r.c.isMckey() && mckeyCheck(r.rxeRole, host.out, guest.out) != "":
		r.detail = mckeyCheck(r.rxeRole, host.out, guest.out) + said
	case r.c.isUCX() && ucxCheck(r.c, r.rxeRole, host.out, guest.out) != "":
		r.detail = ucxCheck(r.c, r.rxeRole, host.out, guest.out) + said
	case want != "":
		r.detail = "both sides exit 0, but rnicd's counters do not show the recovery: want " + want
	case guest.rc != 0:
		r.ok, r.detail = true, "both sides done; rxe's rping exited 255 in Debian's exit race (rpingExitRace)"
	default:
		r.ok, r.detail = true, "both sides exit 0"
	}
}

// rnicdCause is, for each of rxe's error counters that a loaded host can
// move on a clean link, the counter of rnicd's that moves with it: rnicd
// resending a request after its ACK timeout (the VM, emulated without KVM
// on a busy host, answered late) is a duplicate_request at rxe; rxe
// resending one (completer_retry_err: its timer fired in a VM that had
// been off the CPU, before it read the ACK waiting in its queue) must
// reach rnicd as a duplicate_request, answered as the IBTA says (9.9.2);
// an RNR NAK, sent when rping's completion thread had not yet posted its
// next receive, is rcvd_rnr_err at the side that gets it. The protocol
// does all three by design; between two rxe on a busy host they happen
// too. A retry rnicd did not see as a duplicate, or rxe's retries
// running out, still fails.
var rnicdCause = map[string]string{
	"duplicate_request":   "retransmitted_pkts",
	"completer_retry_err": "duplicate_request",
	"rcvd_rnr_err":        "send_rnr_err",
	"send_rnr_err":        "rcvd_rnr_err",
}

// unexplained returns those of rxe's moved error counters ("name=delta")
// that rnicd's own counters, moved over the phase, do not account for:
// a fault rxe saw that rnicd did not cause by a retransmission or an RNR.
func unexplained(errs []string, moved map[string]uint64) []string {
	var left []string
	for _, e := range errs {
		name, v, _ := strings.Cut(e, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if cause, ok := rnicdCause[name]; ok && err == nil && moved[cause] >= n {
			continue
		}
		left = append(left, e)
	}
	return left
}

// counters reads rnicd's counters through its control socket (a unix
// socket is reachable from outside the namespace).
func counters(t *testing.T) map[string]uint64 { return countersOf(t, device) }

// countersOf reads the counters of the rnicd of dev.
func countersOf(t *testing.T, dev string) map[string]uint64 {
	c, err := verbs.Open(dev)
	if err != nil {
		t.Fatalf("open %s: %v", dev, err)
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
	fmt.Fprintf(&b, "# Last run of the rxe interop suite\n\n%s, `RNICD_INTEROP=1 go test ./tests/interop/`: rnicd (`-mode packet`) on the host side of a bridge, Debian 12's rxe in qemu on a tap; the `-mode udp` cases on a second rnicd in UDP mode, 198.18.0.3.\n"+
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
