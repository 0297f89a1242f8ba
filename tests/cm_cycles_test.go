package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

// cmSide is one application of the cycles test: an event channel on one
// rnicd, and the PD and CQ its QPs share.
type cmSide struct {
	t   *testing.T
	ctx *verbs.Context
	ch  *rdmacm.EventChannel
	pd  *verbs.PD
	cq  *verbs.CQ
}

func newCMSide(t *testing.T, dev string) *cmSide {
	c, err := verbs.Open(dev) // rdma_cm's agent is the daemon's
	if err != nil {
		t.Fatal(err)
	}
	s := &cmSide{t: t, ctx: c}
	if s.ch, err = rdmacm.CreateEventChannelOn(c); err != nil {
		t.Fatal(err)
	}
	if s.pd, err = c.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = c.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// close frees everything the side made, as an application that ends.
func (s *cmSide) close() {
	s.cq.Destroy()
	s.pd.Dealloc()
	s.ch.Destroy()
	s.ctx.Close()
}

// event waits for the channel's next event, which must be want. An ID's
// TIMEWAIT_EXIT may come after its application moved on; it is skipped.
func (s *cmSide) event(cycle int, want rdmacm.EventType) *rdmacm.Event {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		e, err := s.ch.GetEvent(ctx)
		if err != nil {
			s.t.Fatalf("cycle %d: waiting for %v: %v", cycle, want, err)
		}
		if e.Event == rdmacm.EventTimewaitExit {
			continue
		}
		if e.Event != want {
			s.t.Fatalf("cycle %d: %v (%v), want %v", cycle, e.Event, e.Status, want)
		}
		return e
	}
}

func (s *cmSide) qp(id *rdmacm.ID) {
	s.t.Helper()
	if err := id.CreateQP(s.pd, verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		s.t.Fatal(err)
	}
}

// rssKiB is a process's resident set, from /proc.
func rssKiB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// 1,000 connects and disconnects through two daemons, as an application
// that opens and closes a connection per request does: each cycle a new
// CM ID and QP on the client, a CONNECT_REQUEST and a new QP on the
// server, ESTABLISHED on both, the client's DREQ and DISCONNECTED on both,
// then the QPs and IDs destroyed. Afterwards neither daemon holds a QP,
// CM ID, channel or connection (its agent's IDs leave TIMEWAIT) and rnic
// res lists nothing. The cycles run in four rounds, each left to drain
// (every connection out of TIMEWAIT); a daemon's resident memory after
// the last round is within rssSlack of what it was after the second.
//
// The daemons run with GOGC=10, so that their RSS follows their live
// heap: with Go's default of 100 it climbs towards twice the live heap
// over the rounds (16 to 27 MiB, the heap after a GC staying at 13 MiB
// throughout), which would hide a leak; with 10 it stays within 0.6 MiB
// from round 2 to 4.
func TestCMConnectCycles(t *testing.T) {
	const (
		cycles, rounds = 1000, 4
		// A QP or CM ID leaked per cycle (a QP's queues and context are
		// some 10 KiB) grows it by 5 MiB over the 500 cycles of rounds 3
		// and 4.
		rssSlack = 2 << 10 // KiB
	)
	t.Setenv("GOGC", "10") // for the daemons
	a, b := daemons(t)
	srv, cli := newCMSide(t, "rnicA"), newCMSide(t, "rnicB")
	port, _ := strconv.Atoi(freePort(t))
	dst := netip.AddrPortFrom(a.addr, uint16(port))
	listen := srv.ch.CreateID()
	if err := listen.BindAddr(dst); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(); err != nil {
		t.Fatal(err)
	}
	param := &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	ctxs := map[string]*verbs.Context{"rnicA": open(t, "rnicA"), "rnicB": open(t, "rnicB")}
	// drained waits until name's agent holds no connection, the last
	// ones out of TIMEWAIT (the ACK timeout, 2.1 s), and returns its
	// counters.
	drained := func(name string) map[string]uint64 {
		var m map[string]uint64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			m = must[map[string]uint64](t)(ctxs[name].Counters())
			if m["cm_ids"] == 0 {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %d connections", name, m["cm_ids"])
			}
		}
	}
	var rss [rounds][2]int
	start := time.Now()
	for i := range cycles {
		id := cli.ch.CreateID()
		if err := id.ResolveAddr(b.addr, dst); err != nil {
			t.Fatal(err)
		}
		cli.event(i, rdmacm.EventAddrResolved)
		if err := id.ResolveRoute(); err != nil {
			t.Fatal(err)
		}
		cli.event(i, rdmacm.EventRouteResolved)
		cli.qp(id)
		if err := id.Connect(param); err != nil {
			t.Fatal(err)
		}
		conn := srv.event(i, rdmacm.EventConnectRequest).ID
		srv.qp(conn)
		if err := conn.Accept(param); err != nil {
			t.Fatal(err)
		}
		cli.event(i, rdmacm.EventEstablished)
		srv.event(i, rdmacm.EventEstablished)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		cli.event(i, rdmacm.EventDisconnected)
		srv.event(i, rdmacm.EventDisconnected)
		for _, x := range []*rdmacm.ID{id, conn} {
			if err := x.QP.Destroy(); err != nil {
				t.Fatalf("cycle %d: destroy QP: %v", i, err)
			}
			if err := x.Destroy(); err != nil {
				t.Fatalf("cycle %d: destroy ID: %v", i, err)
			}
		}
		if (i+1)%(cycles/rounds) == 0 {
			r := (i + 1) / (cycles / rounds)
			drained("rnicA")
			drained("rnicB")
			rss[r-1] = [2]int{rssKiB(t, a.cmd.Process.Pid), rssKiB(t, b.cmd.Process.Pid)}
		}
	}
	t.Logf("%d cycles in %v with %d drains; RSS (KiB) rnicA, rnicB after each round: %v",
		cycles, time.Since(start).Round(time.Millisecond), rounds, rss)
	for k, name := range []string{"rnicA", "rnicB"} {
		if grew := rss[rounds-1][k] - rss[1][k]; grew > rssSlack {
			t.Errorf("%s's RSS grew by %d KiB from round 2 to round %d", name, grew, rounds)
		}
	}
	listen.Destroy()
	srv.close()
	cli.close()

	bin := filepath.Join(binDir, "rnic")
	for _, name := range []string{"rnicA", "rnicB"} {
		m := drained(name)
		for _, k := range []string{"hostif_objects_qp", "hostif_objects_cm_id", "hostif_objects_cm_event_channel",
			"hostif_objects_pd", "hostif_objects_cq", "cm_timeouts", "cm_tx_retries"} {
			if m[k] != 0 {
				t.Errorf("%s: %s = %d after the cycles, want 0", name, k, m[k])
			}
		}
		if n := m["cm_tx_msgs_req"] + m["cm_rx_msgs_req"]; n != cycles {
			t.Errorf("%s: %d REQs sent and received, want %d", name, n, cycles)
		}
		for _, what := range []string{"qp", "cm_id"} {
			if out := strings.TrimSpace(runTool(t, bin, "res", "-d", name, "show", what)); out != "" {
				t.Errorf("%s: rnic res show %s lists:\n%s", name, what, out)
			}
		}
	}
}
