package tests

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

// connectTo brings e's RC QP to RTS towards QPN qpn at addr.
func connectTo(t testing.TB, e *end, qpn uint32, addr netip.Addr, retry, timeout uint8) {
	t.Helper()
	peer := &end{qp: &verbs.QP{QPN: qpn}, gid: addr.As16()} // IPv4-mapped GID, as RoCEv2 has it
	connect(t, e, peer, verbs.QPTypeRC, retry, timeout)
}

// objects returns a daemon's live-object counters.
func objects(t testing.TB, c *verbs.Context) map[string]uint64 {
	t.Helper()
	m := must[map[string]uint64](t)(c.Counters())
	out := make(map[string]uint64)
	for k, v := range m {
		if strings.HasPrefix(k, "hostif_objects_") || k == "hostif_clients" {
			out[k] = v
		}
	}
	return out
}

// eventually polls cond until it holds; the deadline only guards
// against a hang, it is no assertion about speed.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientKilledMidTransfer: a client of rnicA is SIGKILLed while its
// peer on rnicB writes into its memory. rnicA destroys everything the
// client had and keeps serving; the peer's QP (retry_cnt 3) completes
// with RETRY_EXC_ERR, then flushes, rather than hanging.
func TestClientKilledMidTransfer(t *testing.T) {
	_, db := daemons(t)
	ca := open(t, "rnicA")
	base := objects(t, ca)

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=target", "RNICD_HELPER_DEV=rnicA")
	stdin := must[io.WriteCloser](t)(helper.StdinPipe())
	stdout := must[io.ReadCloser](t)(helper.StdoutPipe())
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatal("helper said nothing")
	}
	var hqpn, hrkey uint32
	var haddr uint64
	var hip string
	if _, err := fmt.Sscan(lines.Text(), &hqpn, &hrkey, &haddr, &hip); err != nil {
		t.Fatalf("helper line %q: %v", lines.Text(), err)
	}

	b := newEnd(t, open(t, "rnicB"), endOpts{typ: verbs.QPTypeRC})
	fmt.Fprintf(stdin, "%d %v\n", b.qp.QPN, db.addr)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("helper not ready: %q", lines.Text())
	}
	connectTo(t, b, hqpn, netip.MustParseAddr(hip), 3, 8)

	qpns := func() map[uint32]string {
		m := make(map[uint32]string)
		for _, q := range must[[]verbs.QPInfo](t)(ca.QPs()) {
			m[q.QPN] = q.Owner
		}
		return m
	}
	if owner, want := qpns()[hqpn], "tests.test["+strconv.Itoa(helper.Process.Pid)+"]"; owner != want {
		t.Fatalf("helper's QP %#x listed with owner %q", hqpn, owner)
	}

	write := func(id uint64) {
		post(t, b, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{b.mr.SGE(0, 16384)}, RemoteAddr: haddr + id%32*16384, RKey: hrkey})
	}
	// The transfer runs: the first WRITE completes.
	write(0)
	if wc := pollN(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("first WRITE: %v", &wc)
	}
	for id := uint64(1); id < 8; id++ {
		write(id)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	for id := uint64(8); id < 24; id++ {
		write(id)
	}
	// Completions: some successes, then one RETRY_EXC_ERR, then
	// flushes, in WR order.
	wcs := pollN(t, b.cq, 23)
	i := 0
	for i < len(wcs) && wcs[i].Status == verbs.WCSuccess {
		i++
	}
	if i == len(wcs) || wcs[i].Status != verbs.WCRetryExcErr {
		t.Fatalf("after %d successes: %v, want RETRY_EXC_ERR", i, wcs[min(i, len(wcs)-1)].Status)
	}
	for j, wc := range wcs {
		if wc.WRID != uint64(j+1) {
			t.Fatalf("completion %d is wr_id %d", j, wc.WRID)
		}
		if j > i && wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("completion %d after the error: %v, want WR_FLUSH_ERR", j, &wc)
		}
	}

	// rnicA destroyed the dead client's objects and serves on.
	eventually(t, "the dead client's QP is gone", func() bool { _, ok := qpns()[hqpn]; return !ok })
	eventually(t, "object counts back to the baseline", func() bool {
		now := objects(t, ca)
		for k, v := range base {
			if now[k] != v {
				return false
			}
		}
		return true
	})
	c2 := open(t, "rnicA")
	if _, err := c2.AllocPD(); err != nil {
		t.Fatalf("rnicA after the kill: %v", err)
	}
}
