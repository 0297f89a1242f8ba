package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The harness's own parts, without a VM.

func TestParseVMLog(t *testing.T) {
	l := parseVMLog([]byte("=== gid 1 0000:0000:0000:0000:0000:ffff:c612:0002\r\n" +
		"=== out 0 3 hello\n=== retry 0 3 1\n=== out 0 3 world\n=== case 0 3 rc=17\n=== case 2 0 rc=0\nnoise\n"))
	if rc, ok := l.rc[caseID{0, 3}]; !ok || rc != 17 {
		t.Errorf("case 0 3: rc %d, finished %v; want 17, true", rc, ok)
	}
	if _, ok := l.rc[caseID{0, 2}]; ok {
		t.Error("case 0 2 finished, but the log never said so")
	}
	if l.retries[caseID{0, 3}] != 1 || l.out[caseID{0, 3}].String() != "hello\nworld\n" {
		t.Errorf("case 0 3: retries %d, output %q", l.retries[caseID{0, 3}], l.out[caseID{0, 3}].String())
	}
	if g := l.gids[1]; g != sysfsGID(netip.MustParseAddr(vmAddr)) {
		t.Errorf("GID 1 %q, want the VM's IPv4 GID", g)
	}
}

func TestSysfsGID(t *testing.T) {
	for addr, want := range map[string]string{
		"198.18.0.2":    "0000:0000:0000:0000:0000:ffff:c612:0002",
		"2001:db8:1::2": "2001:0db8:0001:0000:0000:0000:0000:0002",
	} {
		if got := sysfsGID(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// A case with an impairment of its own runs alone under it, in both
// roles, after the plain phases and never in them; ports never repeat.
func TestPlanImpairedCase(t *testing.T) {
	ce := markCE(10, nil)
	cases := []tcase{{tool: "ib_write_bw"}, {tool: "ib_send_bw", impair: ce}, {tool: "ib_read_bw", loss: true}}
	phases := plan(cases, 1)
	var roles []string
	ports := map[int]bool{}
	for _, ph := range phases {
		for i, c := range ph.cases {
			if ports[ph.ports[i]] {
				t.Errorf("port %d used twice", ph.ports[i])
			}
			ports[ph.ports[i]] = true
			if (c.impair != nil) != (ph.impair == ce) {
				t.Errorf("case %s in a phase under %v", c.name(), ph.impair)
			}
		}
		if ph.impair == ce {
			if len(ph.cases) != 1 {
				t.Errorf("the impaired case shares its phase: %d cases", len(ph.cases))
			}
			roles = append(roles, ph.rxeRole)
		}
	}
	if len(roles) != 2 || roles[0] == roles[1] {
		t.Errorf("the impaired case ran with rxe as %v, want client and server", roles)
	}
	if len(phases) != 2+3+2 {
		t.Errorf("%d phases, want 2 plain, 3 loss and corruption, 2 for the impaired case", len(phases))
	}
}

// RNICD_INTEROP_REPEAT=3 runs the loss phases three times in a row, in
// both roles each time, on ports of their own, and the rest once.
func TestPlanRepeatsLossPhases(t *testing.T) {
	cases := []tcase{{tool: "ib_write_bw"}, {tool: "ib_read_bw", loss: true}}
	phases := plan(cases, 3)
	var roles []string
	ports := map[int]bool{}
	for _, ph := range phases {
		for i := range ph.cases {
			if ports[ph.ports[i]] {
				t.Errorf("port %d used twice", ph.ports[i])
			}
			ports[ph.ports[i]] = true
		}
		if ph.impair == loss {
			roles = append(roles, ph.rxeRole)
		}
	}
	if want := []string{"client", "server", "client", "server", "client", "server"}; fmt.Sprint(roles) != fmt.Sprint(want) {
		t.Errorf("loss phases with rxe as %v, want %v", roles, want)
	}
	if len(phases) != 2+6+1 {
		t.Errorf("%d phases, want 2 plain, 6 loss, 1 corruption", len(phases))
	}
	t.Setenv("RNICD_INTEROP_REPEAT", "0")
	if _, err := lossRepeat(); err == nil {
		t.Error("RNICD_INTEROP_REPEAT=0 taken")
	}
}

// The IPv6 cases run over rxe's IPv6 GID on both sides and an rnicd on
// hostAddr6; the exchange goes over IPv6 only where the VM's side is
// rdma-core's pingpong client (Debian's perftest resolves AF_INET only,
// the pingpong server listens on 0.0.0.0).
func TestIPv6CaseCommands(t *testing.T) {
	for _, tc := range []struct {
		c        tcase
		vm, host string
		index    string
	}{
		{tcase{tool: "ib_write_bw", args: []string{"-s", "8"}, ipv6: true}, hostAddr, vmAddr, "-x"},
		{tcase{tool: "ibv_rc_pingpong", args: []string{"--chk"}, ipv6: true}, hostAddr6, vmAddr, "-g"},
	} {
		vm := vmCommand(tc.c, 20001, true)
		if want := fmt.Sprintf("%s -d rxe0 %s $g6 -p 20001 %s %s", tc.c.tool, tc.index, strings.Join(tc.c.args, " "), tc.vm); vm != want {
			t.Errorf("VM: %q, want %q", vm, want)
		}
		host := strings.Join(hostArgs(tc.c, 20001, true), " ")
		if want := fmt.Sprintf("%s -d %s %s 1 -p 20001 %s %s", tc.c.tool, device6, tc.index, strings.Join(tc.c.args, " "), tc.host); host != want {
			t.Errorf("host: %q, want %q", host, want)
		}
	}
}

// fakeTool is rxe's side of the stall test's cases: a client connects if
// the host's server listens, a server waits for the host's client, for
// ever. Files in $FAKE_DIR stand for the listening sockets.
const fakeTool = `#!/bin/sh
for a; do [ "$prev" = -p ] && port=$a; prev=$a; done
if [ "$prev" = ` + hostAddr + ` ]; then
	[ -e "$FAKE_DIR/host-server-$port" ] || { echo "Couldn't connect to ` + hostAddr + `:$port"; exit 1; }
	touch "$FAKE_DIR/vm-client-$port"; echo "rxe client: done"; exit 0
fi
touch "$FAKE_DIR/vm-server-$port"; echo "rxe server: listening on $port"
while [ ! -e "$FAKE_DIR/host-client-$port" ]; do sleep 0.1; done
echo "rxe server: done"
`

// fakeBench runs the VM's script of phases here, under sh, over fakeTool
// and the other fake commands of bin (name to script), and returns a link
// whose host side is a fake: its "broken" case never starts, the others
// play the host's part against fakeTool. The VM may take margin over a
// case's deadline.
func fakeBench(t *testing.T, phases []phase, bin map[string]string, margin time.Duration) *link {
	dir := t.TempDir()
	bin["fake_rxe_tool"] = fakeTool
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range bin {
		if err := os.WriteFile(filepath.Join(dir, "bin", name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "case.sh")
	if err := os.WriteFile(script, []byte(vmScript(phases)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "FAKE_DIR="+dir,
		"RNICD_VM_TTY="+filepath.Join(dir, "verdicts"), "RNICD_VM_TMP="+dir)
	v, err := startVM(cmd, filepath.Join(dir, "verdicts"), phases, margin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.kill)

	exists := func(name string, port int) bool {
		_, err := os.Stat(filepath.Join(dir, name+"-"+strconv.Itoa(port)))
		return err == nil
	}
	return &link{t: t, ctx: context.Background(), ibMTU: 1024, vm: v,
		runHost: func(ctx context.Context, c tcase, port int, client bool) hostRun {
			if c.args[0] == "broken" {
				return hostRun{err: errors.New("never started: broken by the test")}
			}
			if client {
				if !exists("vm-server", port) {
					return hostRun{err: errors.New("exit status 1"), out: "Couldn't connect to " + vmAddr}
				}
				os.WriteFile(filepath.Join(dir, "host-client-"+strconv.Itoa(port)), nil, 0o644)
				return hostRun{out: "rnic client: done"}
			}
			os.WriteFile(filepath.Join(dir, "host-server-"+strconv.Itoa(port)), nil, 0o644)
			for !exists("vm-client", port) {
				select {
				case <-ctx.Done():
					return hostRun{err: ctx.Err()}
				case <-time.After(50 * time.Millisecond):
				}
			}
			return hostRun{out: "rnic server: done"}
		}}
}

// A case whose host side never starts fails within its deadline, with a
// verdict naming the case, the role and the side that stalled, and the
// next case, in the same phase and in the next, still passes: in both
// roles, the script going on after the VM's timeout killed rxe's side.
func TestStalledCaseFailsAndTheNextPasses(t *testing.T) {
	const deadline = 3 * time.Second
	broken := tcase{tool: "fake_rxe_tool", args: []string{"broken"}, deadline: deadline}
	good := tcase{tool: "fake_rxe_tool", args: []string{"good"}, deadline: 20 * time.Second}
	phases := plan([]tcase{broken, good}, 1)
	l := fakeBench(t, phases, map[string]string{}, vmMargin)
	for pi, ph := range phases {
		start := time.Now()
		rs := l.verdicts(pi, ph, l.runCases(pi, ph), "", nil, "")
		took := time.Since(start)
		if len(rs) != 2 || rs[0].c.args[0] != "broken" {
			t.Fatalf("phase %d: %d results, first %v", pi, len(rs), rs[0].c)
		}
		bad, ok := rs[0], rs[1]
		if bad.ok {
			t.Errorf("phase %d: the broken case passed: %s", pi, bad.detail)
		}
		for _, want := range []string{"timed out: the host's side stalled", "rxe's " + ph.rxeRole + " in the VM waited",
			"never started: broken by the test", "deadline of 3s"} {
			if !strings.Contains(bad.detail, want) {
				t.Errorf("phase %d, rxe %s: the verdict %q does not say %q", pi, ph.rxeRole, bad.detail, want)
			}
		}
		if !ok.ok {
			t.Errorf("phase %d, rxe %s: the case after the broken one failed: %s", pi, ph.rxeRole, ok.detail)
		}
		// The broken case costs its deadline, the good one a second or two.
		if limit := deadline + 10*time.Second; took > limit {
			t.Errorf("phase %d, rxe %s: took %v, more than %v", pi, ph.rxeRole, took, limit)
		}
	}
	if !l.vm.poweredOff(10*time.Second) || l.vm.stalled() != "" {
		t.Errorf("the script did not end cleanly: stalled %q", l.vm.stalled())
	}
}

// A VM whose own timeout fails (here a timeout command that bounds
// nothing) is declared stalled by the host's watchdog once the case's
// deadline and the margin are past, and killed; the case fails saying the
// VM stalled, and the cases it never started fail at once.
func TestStalledVMIsKilledAndReported(t *testing.T) {
	const deadline, margin = 1 * time.Second, 2 * time.Second
	broken := tcase{tool: "fake_rxe_tool", args: []string{"broken"}, deadline: deadline}
	good := tcase{tool: "fake_rxe_tool", args: []string{"good"}, deadline: deadline}
	ph := plan([]tcase{broken, good}, 1)[1] // rxe as the server, waiting for ever for the broken case's client
	if ph.rxeRole != "server" {
		t.Fatalf("phase 1 has rxe as the %s", ph.rxeRole)
	}
	l := fakeBench(t, []phase{ph}, map[string]string{"timeout": "#!/bin/sh\nshift 3\nexec \"$@\"\n"}, margin)
	start := time.Now()
	rs := l.verdicts(0, ph, l.runCases(0, ph), "", nil, "")
	if took := time.Since(start); took > deadline+margin+5*time.Second {
		t.Errorf("took %v", took)
	}
	if !l.vm.poweredOff(5 * time.Second) {
		t.Error("the stalled VM was not killed")
	}
	for i, want := range []string{"timed out: the VM stalled in rxe's server and gave no verdict: the VM stalled in case 0 0",
		"not run: the VM never started it; the VM stalled in case 0 0"} {
		if rs[i].ok || !strings.Contains(rs[i].detail, want) {
			t.Errorf("case %d: ok %v, verdict %q; want one that says %q", i, rs[i].ok, rs[i].detail, want)
		}
	}
}

// The VM's check after an rdma_cm case, run here over a fake rdma and a
// fake hw_counters directory: it reports the CM IDs rdma res still lists
// (after waiting 5 s for them to go) and the error counters that moved,
// by how much, and adds the IDs to the case's output.
func TestCMCheckScript(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmIDs  string // what the fake rdma res show cm_id prints
		moved  map[string]int
		want   cmState
		output string
	}{
		{name: "clean", want: cmState{}},
		{name: "an error counter moved", moved: map[string]int{"send_err": 2, "rcvd_seq_err": 1},
			want: cmState{errors: []string{"rcvd_seq_err=1", "send_err=2"}}},
		{name: "an ID left", cmIDs: "link rxe0/1 cm-idn 3 state LISTEN ps TCP comm rping src-addr 198.18.0.2:20000",
			want: cmState{ids: 1}, output: "cm-idn 3 state LISTEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			hw := filepath.Join(dir, "hw")
			os.Mkdir(hw, 0o755)
			for _, f := range strings.Fields(rxeErrCounters) {
				os.WriteFile(filepath.Join(hw, f), []byte("5\n"), 0o644)
			}
			var bump strings.Builder
			for f, n := range tc.moved {
				fmt.Fprintf(&bump, "echo %d > $hw/%s\n", 5+n, f)
			}
			os.Mkdir(filepath.Join(dir, "bin"), 0o755)
			os.WriteFile(filepath.Join(dir, "bin", "rdma"), []byte("#!/bin/sh\n[ -n \"$FAKE_CMIDS\" ] && echo \"$FAKE_CMIDS\"\nexit 0\n"), 0o755)
			script := "tty=" + filepath.Join(dir, "tty") + "; out=" + filepath.Join(dir, "out") + "; hw=" + hw + "\n: > $out\n" +
				cmBefore + bump.String() + cmCheck(0, 1)
			cmd := exec.Command("sh", "-c", script)
			cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "FAKE_CMIDS="+tc.cmIDs)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			log, _ := os.ReadFile(filepath.Join(dir, "tty"))
			got, ok := parseVMLog(log).cm[caseID{0, 1}]
			if !ok {
				t.Fatalf("no cm line in %q", log)
			}
			sort.Strings(got.errors)
			if got.ids != tc.want.ids || strings.Join(got.errors, " ") != strings.Join(tc.want.errors, " ") {
				t.Errorf("cm %+v, want %+v (log %q)", got, tc.want, log)
			}
			if out, _ := os.ReadFile(filepath.Join(dir, "out")); !strings.Contains(string(out), tc.output) {
				t.Errorf("case output %q lacks %q", out, tc.output)
			}
		})
	}
}

// rping's data as Debian's rping printed it between two rxe
// (testdata/rping.client.txt, from ../shared/golden): rpingData makes the
// same, and rpingCheck takes both sides' output of a good run and refuses
// a short or wrong one.
func TestRpingData(t *testing.T) {
	golden, err := os.ReadFile("testdata/rping.client.txt")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, line := range strings.Split(string(golden), "\n") {
		if d, ok := strings.CutPrefix(line, "ping data: "); ok {
			if want := rpingData(n, 64); d != want {
				t.Errorf("ping %d: golden %q, rpingData %q", n, d, want)
			}
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d pings in the golden output, want 3", n)
	}
	c := tcase{tool: "rping", args: []string{"-C", "3", "-v", "-V"}}
	var cli, srv strings.Builder
	for i := range 3 {
		fmt.Fprintf(&cli, "ping data: %s\n", rpingData(i, 64))
		fmt.Fprintf(&srv, "server ping data: %s\nserver noise\n", rpingData(i, 64))
	}
	if msg := rpingCheck(c, "server", cli.String(), srv.String()+"server DISCONNECT EVENT...\n"); msg != "" {
		t.Errorf("a good run: %s", msg)
	}
	if msg := rpingCheck(c, "client", cli.String(), srv.String()); !strings.Contains(msg, "rxe's client printed 0 pings") {
		t.Errorf("the outputs swapped: %q", msg)
	}
	bad := strings.Replace(cli.String(), "rdma-ping-1: B", "rdma-ping-1: X", 1)
	if msg := rpingCheck(c, "server", bad, srv.String()); !strings.Contains(msg, "rnic's client's ping 1") {
		t.Errorf("a wrong ping: %q", msg)
	}
}

// TestRpingExitRace: rxe's rping that printed every ping and then exited
// 255 in Debian's exit race (rdma_get_cm_event on a destroyed channel
// just after the DISCONNECTED event, as a clean-clone run saw it) passes;
// the same exit with any other last words, from another tool, or with a
// ping missing fails.
func TestRpingExitRace(t *testing.T) {
	c := tcase{tool: "rping", args: []string{"-C", "3", "-v", "-V"}}
	var cli, srv strings.Builder
	for i := range 3 {
		fmt.Fprintf(&cli, "ping data: %s\n", rpingData(i, 64))
		fmt.Fprintf(&srv, "server ping data: %s\n", rpingData(i, 64))
	}
	race := cli.String() + "client DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n"
	judge := func(c tcase, rc int, vmOut string) result {
		r := result{c: c, rxeRole: "client"}
		r.judge(hostRun{out: srv.String() + "server DISCONNECT EVENT...\n"},
			vmRun{started: true, finished: true, rc: rc, out: vmOut, cm: &cmState{}}, "")
		return r
	}
	if r := judge(c, 255, race); !r.ok || !strings.Contains(r.detail, "exit race") {
		t.Errorf("the exit race: ok %v, %q", r.ok, r.detail)
	}
	if r := judge(c, 0, cli.String()+"client DISCONNECT EVENT...\n"); !r.ok || r.detail != "both sides exit 0" {
		t.Errorf("a clean exit: ok %v, %q", r.ok, r.detail)
	}
	for name, tc := range map[string]struct {
		c    tcase
		rc   int
		out  string
		want string
	}{
		"another error":  {c, 255, cli.String() + "client DISCONNECT EVENT...\nrdma_get_cm_event: Invalid argument\n", "exited 255"},
		"no disconnect":  {c, 255, cli.String() + "rdma_get_cm_event: Bad file descriptor\n", "exited 255"},
		"another status": {c, 1, race, "exited 1"},
		"another tool":   {tcase{tool: "ib_send_bw"}, 255, race, "exited 255"},
		"a ping missing": {c, 255, strings.Replace(race, "ping data: "+rpingData(1, 64)+"\n", "", 1), "printed 2 pings"},
	} {
		if r := judge(tc.c, tc.rc, tc.out); r.ok || !strings.Contains(r.detail, tc.want) {
			t.Errorf("%s: ok %v, %q, want it failed with %q", name, r.ok, strings.SplitN(r.detail, "\n", 2)[0], tc.want)
		}
	}
}

// TestUnexplainedErrors: rxe's error counters are excused only by rnicd's
// own cause, moved at least as far: a retransmission for a duplicate, an
// RNR NAK sent for one received; every other fault stands.
func TestUnexplainedErrors(t *testing.T) {
	for _, tc := range []struct {
		errs  []string
		moved map[string]uint64
		want  []string
	}{
		{errs: nil, want: nil},
		{errs: []string{"duplicate_request=2"}, moved: map[string]uint64{"retransmitted_pkts": 2}, want: nil},
		{errs: []string{"duplicate_request=3"}, moved: map[string]uint64{"retransmitted_pkts": 2}, want: []string{"duplicate_request=3"}},
		{errs: []string{"duplicate_request=1"}, moved: map[string]uint64{"send_rnr_err": 5}, want: []string{"duplicate_request=1"}},
		{errs: []string{"rcvd_rnr_err=1", "send_rnr_err=1"}, moved: map[string]uint64{"send_rnr_err": 1, "rcvd_rnr_err": 1}, want: nil},
		{errs: []string{"out_of_seq_request=1", "rcvd_rnr_err=1"}, moved: map[string]uint64{"retransmitted_pkts": 9, "send_rnr_err": 1},
			want: []string{"out_of_seq_request=1"}},
		{errs: []string{"rcvd_seq_err=1"}, moved: map[string]uint64{"rcvd_seq_err": 1}, want: []string{"rcvd_seq_err=1"}},
		{errs: []string{"completer_retry_err=1"}, moved: map[string]uint64{"duplicate_request": 2}, want: nil},
		{errs: []string{"completer_retry_err=1", "retry_exceeded_err=1"}, moved: map[string]uint64{"duplicate_request": 7},
			want: []string{"retry_exceeded_err=1"}},
		{errs: []string{"completer_retry_err=2"}, moved: map[string]uint64{"duplicate_request": 1}, want: []string{"completer_retry_err=2"}},
	} {
		if got := unexplained(tc.errs, tc.moved); !slices.Equal(got, tc.want) {
			t.Errorf("unexplained(%q, %v) = %q, want %q", tc.errs, tc.moved, got, tc.want)
		}
	}
}
