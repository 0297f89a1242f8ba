package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// xsrqAddr is a line of ibv_xsrq_pingpong's address exchange:
// "%8s: LID %04x, QPN RECV %06x SEND %06x, PSN %06x, SRQN %06x, GID %s".
var xsrqAddr = regexp.MustCompile(`^ *(local|remote): LID 0000, QPN RECV ([0-9a-f]{6}) SEND ([0-9a-f]{6}), PSN ([0-9a-f]{6}), SRQN ([0-9a-f]{6}), GID (\S+)$`)

// TestCLibXSRQPingpong runs Debian's ibv_xsrq_pingpong between two
// rnicd, XRC end to end: each side opens an XRC domain (through the
// file /tmp/xrc_domain, as the program does), makes an XRC SRQ, an XRC
// target and an XRC initiator, and sends 5000-byte messages (five
// packets at MTU 1024) that name the other's SRQ by number; each
// receive completion names the target QP. The sides must agree on each
// other's QPNs, PSNs and SRQ numbers, both must print "success", and
// each daemon must have received and sent the messages as XRC: counted
// in rdma_recvs, with no XRC request refused.
func TestCLibXSRQPingpong(t *testing.T) {
	tb := newToolBench(t)
	xsrq := debianTool(t, "ibv_xsrq_pingpong", "ibverbs-utils")
	before := [2]map[string]uint64{must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())}
	const iters = 30
	srv, cli := tb.pairRun(t, xsrq, xsrq, "rnicA", "rnicB", "ibv_xsrq_pingpong",
		"-g", "1", "-s", "5000", "-m", "1024", "-n", strconv.Itoa(iters))
	type addr struct{ recv, send, psn, srqn, gid string }
	parse := func(who, out string) (local, remote addr) {
		var tail []string
		for _, l := range regexp.MustCompile("\n").Split(out, -1) {
			m := xsrqAddr.FindStringSubmatch(l)
			switch {
			case m == nil:
				tail = append(tail, l)
			case m[1] == "local":
				local = addr{m[2], m[3], m[4], m[5], m[6]}
			default:
				remote = addr{m[2], m[3], m[4], m[5], m[6]}
			}
		}
		if fmt.Sprint(tail) != "[success ]" {
			t.Fatalf("%s printed\n%s", who, out)
		}
		return
	}
	t.Logf("server:\n%s\nclient:\n%s", srv, cli)
	sl, sr := parse("server", srv)
	cl, cr := parse("client", cli)
	// Each side prints its own receive PSN and the other's, by design of
	// the program, as the PSN the other sends with.
	if sl.recv != cr.recv || sl.send != cr.send || sl.srqn != cr.srqn || cl.recv != sr.recv || cl.send != sr.send || cl.srqn != sr.srqn {
		t.Fatalf("the sides disagree:\nserver:\n%s\nclient:\n%s", srv, cli)
	}
	if sl.gid != "::ffff:"+tb.a.addr.String() || cl.gid != "::ffff:"+tb.b.addr.String() || sl.srqn == "000000" || cl.srqn == "000000" ||
		sl.recv == sl.send || cl.recv == cl.send {
		t.Fatalf("addresses: server %+v, client %+v", sl, cl)
	}
	for i, c := range []map[string]uint64{must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())} {
		if got := c["rdma_recvs"] - before[i]["rdma_recvs"]; got != iters {
			t.Errorf("daemon %d received %d messages, want %d", i, got, iters)
		}
		if got := c["drop_bad_xrc_srq"] - before[i]["drop_bad_xrc_srq"]; got != 0 {
			t.Errorf("daemon %d refused %d XRC requests", i, got)
		}
	}
}

// TestCLibXRC runs clib/test/xrc.c, what ibv_xsrq_pingpong does not
// show: a SEND with immediate scattered over two SGEs of an XRC SRQ
// byte for byte and its completion field by field, a WRITE posted with
// ibv_wr_set_xrc_srqn, a READ and a FETCH_ADD (XRC's responses), EBUSY for a domain in use, and a SEND naming the
// SRQ of another domain: REM_INV_REQ_ERR at the initiator, the target
// in ERR, no receive taken, and the target's rnicd counting it once.
func TestCLibXRC(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	before := must[map[string]uint64](t)(tb.ca.Counters())
	cmd := exec.Command(filepath.Join(lib, "xrc"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := "device_cap_flags has XRC; SRQ numbers differ\n" +
		"SEND of 3000 bytes to SRQ 1: landed in its two SGEs, completion on its CQ names the target QP\n" +
		"WRITE with ibv_wr_set_xrc_srqn: landed\n" +
		"READ back and FETCH_ADD: done\n" +
		"close of a domain in use: EBUSY\n" +
		"SEND to another domain's SRQ: remote invalid request error, target in ERR, no receive taken\n" +
		"PASS\n"
	if out := runOut(t, cmd); out != want {
		t.Fatalf("xrc printed\n%s\nwant\n%s", out, want)
	}
	// What tb.idle checks, but for the one refusal the program asked
	// for (close_xrcd of a domain in use), which rnicA counts as a bad
	// request.
	for _, c := range []*verbs.Context{tb.ca, tb.cb} {
		for deadline := time.Now().Add(30 * time.Second); leftover(objects(t, c)) != ""; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %s", c.Name(), leftover(objects(t, c)))
			}
		}
	}
	a, b := must[map[string]uint64](t)(tb.ca.Counters()), must[map[string]uint64](t)(tb.cb.Counters())
	if a["drop_bad_xrc_srq"]-before["drop_bad_xrc_srq"] != 1 || a["hostif_bad_request"] != 1 || b["hostif_bad_request"] != 0 ||
		a["hostif_bad_wqe"]+b["hostif_bad_wqe"]+a["hostif_cq_overrun"]+b["hostif_cq_overrun"] != 0 {
		t.Fatalf("rnicA counts drop_bad_xrc_srq %d (want 1), hostif_bad_request %d (want the close_xrcd refused); rnicB %d; bad WQEs %d and %d, CQ overruns %d and %d",
			a["drop_bad_xrc_srq"]-before["drop_bad_xrc_srq"], a["hostif_bad_request"], b["hostif_bad_request"],
			a["hostif_bad_wqe"], b["hostif_bad_wqe"], a["hostif_cq_overrun"], b["hostif_cq_overrun"])
	}
}

// TestCLibXSRQPingpongClients runs ibv_xsrq_pingpong's server for two
// clients (-c 2) on rnicA and two clients on rnicB at once: the server
// has one XRC SRQ that both its targets deliver into, and sends to each
// client round robin over its two initiators; the clients, two
// processes that open /tmp/xrc_domain on one rnicd, share one XRC
// domain, each with its own SRQ in it. Each side prints its addresses
// and "success", the server's receives total both clients' messages.
func TestCLibXSRQPingpongClients(t *testing.T) {
	tb := newToolBench(t)
	xsrq := debianTool(t, "ibv_xsrq_pingpong", "ibverbs-utils")
	before := must[map[string]uint64](t)(tb.ca.Counters())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := freePort(t)
	const iters = 10
	args := []string{"-p", port, "-g", "1", "-n", strconv.Itoa(iters)}
	srv := xsrq(ctx, "", append(args, "-d", "rnicA", "-c", "2")...)
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var out bytes.Buffer
				cmd := xsrq(ctx, "", append(args, "-d", "rnicB", "127.0.0.1")...)
				cmd.Stdout, cmd.Stderr = &out, &out
				errs[i] = cmd.Run()
				outs[i] = out.String()
				if errs[i] == nil || !notListening(outs[i]) || ctx.Err() != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		srv.Process.Kill()
	}
	if err := srv.Wait(); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("server: %v\n%s%s\nclient 1: %v\n%s\nclient 2: %v\n%s", err, sout.String(), serr.String(), errs[0], outs[0], errs[1], outs[1])
	}
	count := func(out, what string) int { return strings.Count(out, what) }
	s := sout.String()
	if count(s, " local: ") != 2 || count(s, "remote: ") != 2 || !strings.HasSuffix(s, "success\n") {
		t.Fatalf("server printed\n%s", s)
	}
	for i, o := range outs {
		if count(o, " local: ") != 1 || count(o, "remote: ") != 1 || !strings.HasSuffix(o, "success\n") {
			t.Fatalf("client %d printed\n%s", i+1, o)
		}
	}
	after := must[map[string]uint64](t)(tb.ca.Counters())
	if got := after["rdma_recvs"] - before["rdma_recvs"]; got != 2*iters {
		t.Errorf("the server's rnicd received %d messages, want %d", got, 2*iters)
	}
	tb.idle(t)
}
