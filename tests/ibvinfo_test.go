package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rnicOutput runs `rnic args...` to the end and returns its stdout; a
// failure is fatal.
func rnicOutput(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := rnic(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("rnic %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// TestInfoTools runs ibv_devices, ibv_devinfo and res as processes
// against the two daemons: they must find both daemons without -d, one
// with -d, and show each daemon's own GID and MTU.
func TestInfoTools(t *testing.T) {
	tb := newToolBench(t)
	want := "    device          \t   node GUID\n" +
		"    ------          \t----------------\n" +
		"    rnicA           \t" + nodeGUID(tb.a.addr) + "\n" +
		"    rnicB           \t" + nodeGUID(tb.b.addr) + "\n"
	if got := rnicOutput(t, "ibv_devices"); got != want {
		t.Errorf("ibv_devices printed\n%q\nwant\n%q", got, want)
	}
	if got, want := rnicOutput(t, "ibv_devinfo", "-l"), "2 HCAs found:\n\trnicA\n\trnicB\n\n"; got != want {
		t.Errorf("ibv_devinfo -l printed %q, want %q", got, want)
	}

	// Without -d, one block per daemon, each starting at its hca_id.
	all := devinfoBlocks(rnicOutput(t, "ibv_devinfo", "-v"))
	one := devinfoBlocks(rnicOutput(t, "ibv_devinfo", "-v", "-d", "rnicB"))
	if len(all) != 2 || len(one) != 1 || one["rnicB"] != all["rnicB"] {
		t.Fatalf("ibv_devinfo -v printed devices %v, with -d rnicB %v", keys(all), keys(one))
	}
	for _, d := range []*daemon{tb.a, tb.b} {
		for _, want := range []string{
			"hca_id:\t" + d.name + "\n\ttransport:\t\t\tInfiniBand (0)\n",
			"\tnode_guid:\t\t\t" + nodeGUIDColons(d.addr) + "\n",
			"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
			"\t\t\tactive_mtu:\t\t1024 (3)\n",
			"\t\t\tlink_layer:\t\tEthernet\n",
			"\t\t\tGID[  1]:\t\t::ffff:" + d.addr.String() + ", RoCE v2\n",
		} {
			if !strings.Contains(all[d.name], want) {
				t.Errorf("ibv_devinfo -v printed no %q for %s:\n%s", want, d.name, all[d.name])
			}
		}
	}
	if got := rnicOutput(t, "res"); got != "" {
		t.Errorf("res with no tool running printed\n%s", got)
	}
}

// devinfoBlocks splits ibv_devinfo's output into its devices' blocks.
func devinfoBlocks(out string) map[string]string {
	m := make(map[string]string)
	for _, b := range strings.SplitAfter(out, "\n\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(b, "hca_id:\t"), "\n"); ok && strings.HasPrefix(b, "hca_id:\t") {
			m[name] = b
		}
	}
	return m
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// resLine is one line of `rnic res` for an RC QP.
var resLine = regexp.MustCompile(`^link (rnic[AB])/1 lqpn (\d+) rqpn (\d+) type RC state (\S+) rq-psn \d+ sq-psn \d+ path-mig-state MIGRATED pid (\d+) comm (\S+)$`)

type resRow struct {
	dev, state, comm string
	lqpn, rqpn, pid  int
}

func parseRes(t *testing.T, out string) []resRow {
	t.Helper()
	var rows []resRow
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		m := resLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("res line %q", l)
		}
		r := resRow{dev: m[1], state: m[4], comm: m[6]}
		fmt.Sscan(m[2], &r.lqpn)
		fmt.Sscan(m[3], &r.rqpn)
		fmt.Sscan(m[5], &r.pid)
		rows = append(rows, r)
	}
	return rows
}

// endless is an ibv_rc_pingpong pair with more iterations than any test
// lasts: the server on rnicA and the client on rnicB, in the background
// until ctx ends.
type endless struct {
	ctx       context.Context
	args      []string
	server    *exec.Cmd
	srvErr    lockedBuf
	srvDone   chan error
	clientPid atomic.Int64
	cliDone   chan error
}

func startEndlessServer(t *testing.T, ctx context.Context) *endless {
	t.Helper()
	e := &endless{ctx: ctx, srvDone: make(chan error, 1), cliDone: make(chan error, 1),
		args: []string{"ibv_rc_pingpong", "-g", "1", "-s", "1", "-n", "100000000", "-p", freePort(t)}}
	e.server = rnic(ctx, append(e.args, "-d", "rnicA")...)
	e.server.Stderr = &e.srvErr
	if err := e.server.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.srvDone <- e.server.Wait() }()
	return e
}

// startClient starts the client, and again while the server does not
// listen yet.
func (e *endless) startClient() {
	go func() {
		for {
			var errb bytes.Buffer
			client := rnic(e.ctx, append(e.args, "-d", "rnicB", "127.0.0.1")...)
			client.Stderr = &errb
			err := client.Start()
			if err == nil {
				e.clientPid.Store(int64(client.Process.Pid))
				err = client.Wait()
			}
			if err == nil || !strings.Contains(errb.String(), "connection refused") || e.ctx.Err() != nil {
				e.cliDone <- fmt.Errorf("client: %v: %s", err, errb.String())
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// connected waits until res shows both QPs in RTS and returns its rows.
func (e *endless) connected(t *testing.T) []resRow {
	t.Helper()
	var rows []resRow
	eventually(t, "both QPs in RTS", func() bool {
		rows = parseRes(t, rnicOutput(t, "res"))
		return len(rows) == 2 && rows[0].state == "RTS" && rows[1].state == "RTS"
	})
	return rows
}

// TestResWhileRunning watches `rnic res` while an ibv_rc_pingpong runs
// between the daemons: first the server's QP alone in INIT, then both QPs
// in RTS, each the other's rqpn, each owned by its process; once both
// processes are killed, no QP and no object is left.
func TestResWhileRunning(t *testing.T) {
	tb := newToolBench(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := startEndlessServer(t, ctx)
	spid := e.server.Process.Pid

	var rows []resRow
	// The QP shows in RESET a moment between its creation and the
	// server's move to INIT.
	eventually(t, "the server's QP in res, past RESET", func() bool {
		rows = parseRes(t, rnicOutput(t, "res"))
		return len(rows) > 0 && rows[0].state != "RESET"
	})
	if len(rows) != 1 || rows[0].dev != "rnicA" || rows[0].state != "INIT" || rows[0].pid != spid || rows[0].comm != "rnic" {
		t.Fatalf("before the client: res rows %+v, want one INIT QP of rnicA owned by rnic[%d]", rows, spid)
	}

	e.startClient()
	rows = e.connected(t)
	a, b := rows[0], rows[1]
	if a.dev != "rnicA" || b.dev != "rnicB" || a.rqpn != b.lqpn || b.rqpn != a.lqpn ||
		a.pid != spid || int64(b.pid) != e.clientPid.Load() || b.comm != "rnic" {
		t.Fatalf("while running: res rows %+v, want rnicA's of pid %d and rnicB's of pid %d, connected to each other",
			rows, spid, e.clientPid.Load())
	}
	// rdma -j: the same QPs as one JSON array; the options anywhere.
	var js []map[string]any
	if err := json.Unmarshal([]byte(rnicOutput(t, "res", "show", "qp", "-j", "-d", "rnicA")), &js); err != nil || len(js) != 1 ||
		js[0]["ifname"] != "rnicA" || js[0]["lqpn"] != float64(a.lqpn) || js[0]["rqpn"] != float64(a.rqpn) ||
		js[0]["pid"] != float64(spid) || js[0]["comm"] != "rnic" || js[0]["type"] != "RC" {
		t.Errorf("res show qp -j -d rnicA: %v %v, want rnicA's row %+v", js, err, a)
	}
	select {
	case err := <-e.cliDone:
		t.Fatalf("the client ended early: %v", err)
	case err := <-e.srvDone:
		t.Fatalf("the server ended early: %v", err)
	default:
	}
	cancel() // SIGKILL both
	<-e.cliDone
	<-e.srvDone
	tb.idle(t)
	if got := rnicOutput(t, "res"); got != "" {
		t.Errorf("res after the tools were killed printed\n%s", got)
	}
}

// TestToolSeesDaemonKilled: rnicA is SIGKILLed while a pingpong runs on
// it. The tool on rnicA ends with the device's fatal error rather than
// waiting for completions forever; rnicB, whose tool is killed then,
// is left with no object.
func TestToolSeesDaemonKilled(t *testing.T) {
	dir := t.TempDir()
	a, err := startDaemon(dir, "rnicA", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.cmd.Process.Kill()
	b, err := startDaemon(dir, "rnicB", ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.stop(); err != nil {
			t.Errorf("%v\n%s", err, b.errb.String())
		}
	}()
	t.Setenv("RNICD_DIR", dir)
	tb := &toolBench{b: b, cb: open(t, "rnicB")}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := startEndlessServer(t, ctx)
	e.startClient()
	e.connected(t)
	a.cmd.Process.Kill()
	<-a.done
	// The deadline only guards against the hang this test is about.
	select {
	case err := <-e.srvDone:
		// The pingpong's own words, then the cause; no counters, as
		// there is no daemon to ask.
		want := "verbs: device fatal error: the rnicd of rnicA hung up ("
		if code := e.server.ProcessState.ExitCode(); code != 1 || !strings.Contains(e.srvErr.String(), want) ||
			strings.Contains(e.srvErr.String(), "counters") {
			t.Fatalf("the tool on the killed daemon: %v, stderr %q; want exit 1 and %q", err, e.srvErr.String(), want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tool on the killed daemon still waits")
	}
	cancel() // the client waits for a peer that is gone: kill it
	<-e.cliDone
	tb.idle(t)
	// rnicA's socket is still there, but no device any more.
	want := "    device          \t   node GUID\n" +
		"    ------          \t----------------\n" +
		"    rnicB           \t" + nodeGUID(b.addr) + "\n"
	if got := rnicOutput(t, "ibv_devices"); got != want {
		t.Errorf("ibv_devices with rnicA killed printed\n%q\nwant\n%q", got, want)
	}
}
