package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/verbs"
)

// TestCLibMckey runs Debian's mckey between the two rnicd, unmodified,
// in both roles: a receiver (`mckey -m GROUP -b ADDR`) joins the group
// and posts 10 receives, a sender (`-s`) on the other rnicd joins it and
// sends 10 datagrams of 100 bytes to it (rdma_join_multicast's AH, QPN
// 0xFFFFFF, RDMA_UDP_QKEY), 3 s after its join. Each side prints the
// program's lines for a clean run, the MGID the IPv4-mapped group; the
// receiver's rnicd counts the 10 datagrams received and taken, the
// sender's the 10 it sent; both leave and nothing is left. (The sender's
// own datagrams loop back to it, as IP multicast does on rxe, but it
// leaves the group as soon as it has posted them, so how many it gets
// back, to drop for want of a receive WQE, is a matter of timing.)
// The group is 239.x.y.z of the receiver's 127.x.y.z, which no
// concurrent test joins.
func TestCLibMckey(t *testing.T) {
	tb := newToolBench(t)
	lib := clibDir(t)
	bin := debtest.Ensure(t, "mckey", "rdmacm-utils")
	for _, c := range []struct {
		name       string
		recv, send *daemon
		rctx, sctx *verbs.Context
	}{
		{"receiver on rnicA", tb.a, tb.b, tb.ca, tb.cb},
		{"receiver on rnicB", tb.b, tb.a, tb.cb, tb.ca},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			a4 := c.recv.addr.As4()
			group := netip.AddrFrom4([4]byte{239, a4[1], a4[2], a4[3]}).String()
			before := must[map[string]uint64](t)(c.rctx.Counters())
			sBefore := must[map[string]uint64](t)(c.sctx.Counters())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			env := append(os.Environ(), "LD_LIBRARY_PATH="+lib)
			recv := exec.CommandContext(ctx, bin, "-m", group, "-b", c.recv.addr.String())
			recv.Env = env
			rout := &lockedBuf{}
			recv.Stdout, recv.Stderr = rout, rout
			if err := recv.Start(); err != nil {
				t.Fatal(err)
			}
			// The receiver posts its receives, then joins at once; the
			// sender waits 3 s after its own join before it sends.
			waitPosted(t, c.rctx, 10)
			send := exec.CommandContext(ctx, bin, "-m", group, "-b", c.send.addr.String(), "-s")
			send.Env = env
			var sout strings.Builder
			send.Stdout, send.Stderr = &sout, &sout
			sendErr := send.Run()
			if sendErr != nil {
				recv.Process.Kill()
			}
			recvErr := recv.Wait()
			joined := "mckey: joining\nmckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0\n"
			wantR := "mckey: starting server\n" + joined + "receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			wantS := "mckey: starting client\n" + joined + "initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			after := must[map[string]uint64](t)(c.rctx.Counters())
			sAfter := must[map[string]uint64](t)(c.sctx.Counters())
			if recvErr != nil || sendErr != nil || rout.String() != wantR || sout.String() != wantS {
				t.Fatalf("receiver: %v\n%s\nwant\n%s\nsender: %v\n%s\nwant\n%s\nreceiver's rnicd counted %s\nsender's %s",
					recvErr, rout, wantR, sendErr, sout.String(), wantS, counterDiff(before, after), counterDiff(sBefore, sAfter))
			}
			for _, d := range []struct {
				who     string
				b, a    map[string]uint64
				counter string
				want    uint64
			}{
				{"receiver", before, after, "rdma_recvs", 10},
				{"receiver", before, after, "drop_bad_qkey", 0},
				{"sender", sBefore, sAfter, "sent_pkts", 10},
			} {
				if got := d.a[d.counter] - d.b[d.counter]; got != d.want {
					t.Errorf("%s's rnicd: %s went up by %d, want %d", d.who, d.counter, got, d.want)
				}
			}
			tb.idle(t)
		})
	}
}

// waitPosted waits until a client's QP on c holds n posted receives.
func waitPosted(t *testing.T, c *verbs.Context, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, q := range must[[]verbs.QPInfo](t)(c.QPs()) {
			if q.Type == verbs.QPTypeUD && q.RQDepth == n && q.Owner != "rnicd" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no QP on %s with %d receives posted", c.Name(), n)
		}
	}
}

// counterDiff lists the counters that changed from b to a.
func counterDiff(b, a map[string]uint64) string {
	var out []string
	for k, v := range a {
		if v != b[k] {
			out = append(out, fmt.Sprintf("%s +%d", k, v-b[k]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// TestCLibMcastRefusals runs the C test program mcrefuse: the
// multicast calls' results and refusals from C (a join before a bind, of
// a unicast address, of an IPv6 group; a second join; the
// MULTICAST_JOIN's ud param; attaches of a unicast GID, of an RC QP, past
// a limit; detaches of a group not attached; leaves that detach; a
// send-only join that attaches nothing), each refused attach with the
// daemon's reason on stderr; nothing is left behind. On rnicA, run with
// no per-client limit on attachments, the limit is the device's 64
// groups (max_mcast_grp); on rnicB, with the defaults, the client's
// share of them, 16 (-client-max-mcast).
func TestCLibMcastRefusals(t *testing.T) {
	unlimited := []string{"-client-max-mcast", "0", "-user-max-mcast", "0"}
	a, b := daemonsWith(t, t.TempDir(), unlimited, nil)
	tb := &toolBench{a: a, b: b, ca: open(t, "rnicA"), cb: open(t, "rnicB")}
	lib := clibDir(t)
	for _, c := range []struct {
		d      *daemon
		ctx    *verbs.Context
		n      int
		reason string
	}{
		{tb.a, tb.ca, 64, "the most they may (max_mcast_grp)"},
		{tb.b, tb.cb, 16, "over its limit of 16 (rnicd -client-max-mcast raises it)"},
	} {
		a4 := c.d.addr.As4()
		group := netip.AddrFrom4([4]byte{239, a4[1], a4[2], a4[3]}).String()
		cmd := exec.Command(filepath.Join(lib, "mcrefuse"), c.d.addr.String(), group, fmt.Sprint(c.n))
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		want := "join before a bind: EINVAL\n" +
			"join of a unicast address: EINVAL; of an IPv6 group: EOPNOTSUPP\n" +
			"MULTICAST_JOIN: QPN 0xFFFFFF, RDMA_UDP_QKEY, AH to ::ffff:" + group + ", the join's context\n" +
			"second join: EADDRINUSE; second attach: 0\n" +
			"attach of a unicast GID: EINVAL; of an RC QP: EINVAL\n" +
			fmt.Sprintf("%d groups attached, one more: ENOMEM; a detach of one not attached: EINVAL\n", c.n) +
			"leave: the QP detached; a second leave: EADDRNOTAVAIL\n" +
			"send-only join: MULTICAST_JOIN, the QP not attached\n" +
			"PASS\n"
		if err != nil || string(out) != want {
			t.Fatalf("mcrefuse on %s: %v\n%s\nwant\n%s\nstderr:\n%s", c.d.name, err, out, want, stderr.String())
		}
		for _, reason := range []string{
			"librdmacm-rnicd: rdma_join_multicast: the ID must be bound",
			"librdmacm-rnicd: rdma_join_multicast: " + c.d.addr.String() + " is not a multicast address",
			"librdmacm-rnicd: rdma_join_multicast: IPv6 groups are not joined on RoCEv2",
			"rnicd refused ibv_attach_mcast: attach_mcast: rnic: attach_mcast: ibudp: GID ::ffff:" + c.d.addr.String() + " is not a multicast GID",
			"only UD QPs join multicast groups",
			c.reason,
			"rnicd refused ibv_detach_mcast: detach_mcast: rnic: QP is not attached to the group",
		} {
			if !strings.Contains(stderr.String(), reason) {
				t.Errorf("%s: stderr says nothing of %q:\n%s", c.d.name, reason, stderr.String())
			}
		}
		// What tb.idle checks, but for the six refusals the program
		// asked for (the unicast GID, the RC QP, the group past the
		// limit and three detaches), which the daemon counts as bad
		// requests.
		for deadline := time.Now().Add(30 * time.Second); leftover(objects(t, c.ctx)) != ""; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %s", c.d.name, leftover(objects(t, c.ctx)))
			}
		}
		m := must[map[string]uint64](t)(c.ctx.Counters())
		if m["hostif_bad_request"] != 6 || m["hostif_bad_wqe"] != 0 || m["hostif_cq_overrun"] != 0 || m["hostif_held_mcast"] != 0 {
			t.Fatalf("%s counts hostif_bad_request %d (want the 6 refusals), hostif_bad_wqe %d, hostif_cq_overrun %d, hostif_held_mcast %d",
				c.d.name, m["hostif_bad_request"], m["hostif_bad_wqe"], m["hostif_cq_overrun"], m["hostif_held_mcast"])
		}
	}
}
