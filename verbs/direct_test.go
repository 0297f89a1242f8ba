package verbs_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/hostif"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// startSteeredDaemon serves device name on addr in this process as rnicd
// does with -lend: a steered port, the device in QPN block 0, sockets
// lent to clients.
func startSteeredDaemon(t *testing.T, name string, addr netip.Addr) *rnic.Device {
	t.Helper()
	return startDaemon(t, name, addr, true, hostif.Limits{})
}

// startDaemon serves device name on addr in this process, with a steered
// port that lends sockets if steered, within limits.
func startDaemon(t *testing.T, name string, addr netip.Addr, steered bool, limits hostif.Limits) *rnic.Device {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: steering loads an eBPF program, which needs root (CAP_BPF); CI runs as root")
	}
	t.Setenv("RNICD_DIR", t.TempDir())
	port, err := ibudp.Open(ibudp.Config{Addr: addr, MTU: 1024, Steered: steered})
	if err != nil {
		t.Fatal(err)
	}
	var last uint32
	if steered {
		_, last = ibudp.SteerBlockQPNs(0)
	}
	dev, err := rnic.Open(rnic.Config{Port: port, Name: name, QPNLast: last})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	srv := hostif.NewServer(hostif.Config{Device: dev, Name: name, Steering: ibudp.SteeringOf(port), Limits: limits})
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: verbs.SocketPath(name), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go srv.Serve(l)
	return dev
}

// A Context opened direct runs its QPs in this process at the daemon's
// address: WRITE and SEND both ways with a NIC elsewhere, none of it
// through the daemon's device, while a client of the daemon itself is
// served beside it; closing the Context returns its QPN block.
func TestOpenDirect(t *testing.T) {
	addrA := looptest.Get(t)
	dev := startSteeredDaemon(t, "rnd", addrA)
	a, err := verbs.OpenDirect("rnd")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !a.Local() {
		t.Fatal("a direct Context's NIC is not in this process")
	}
	if pa, err := a.QueryPort(); err != nil || pa.Addr != addrA {
		t.Fatalf("direct port address %v, %v; want the daemon's", pa.Addr, err)
	}
	b := openLocal(t, looptest.Get(t))
	qa, ma, qb, mb := connectedPair(t, a, b, 1)

	write(t, qa, ma, mb, 64, "to the peer, from a borrowed socket", nil)

	if err := qa.PostRecv([]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{ma.mr.SGE(1024, 100)}}}); err != nil {
		t.Fatal(err)
	}
	copy(mb.mr.Buf[2048:], "back to the direct QP")
	send := verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mb.mr.SGE(2048, 21)}}
	if err := qb.PostSend([]verbs.SendWR{send}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, mb.cq); wc.Status != verbs.WCSuccess || wc.WRID != 3 {
		t.Fatalf("SEND completion %v", &wc)
	}
	if wc := pollOne(t, ma.cq); wc.Status != verbs.WCSuccess || wc.WRID != 2 || wc.ByteLen != 21 || wc.QPNum != qa.QPN {
		t.Fatalf("receive completion %v", &wc)
	}
	if got := ma.mr.Buf[1024 : 1024+21]; string(got) != "back to the direct QP" {
		t.Fatalf("received %q", got)
	}
	if n := dev.Counters()["rcvd_pkts"] + dev.Counters()["sent_pkts"]; n != 0 {
		t.Fatalf("the daemon's device moved %d packets of the direct QP", n)
	}

	// The daemon's own client, beside the direct one: block 0 is its.
	c, err := verbs.OpenDaemon("rnd")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, mc, qb2, mb2 := connectedPair(t, c, b, 0)
	write(t, qb2, mb2, mc, 0, "to the daemon's QP", dev.Fence)
	if dev.Counters()["rcvd_pkts"] == 0 {
		t.Fatal("the daemon's device received nothing for its own QP")
	}

	// The borrower is part of the daemon's NIC: the daemon lists its QP
	// beside its own, owned by this process, and counts its packets.
	qps, err := c.QPs()
	if err != nil {
		t.Fatal(err)
	}
	var row *verbs.QPInfo
	for i := range qps {
		if qps[i].QPN == qa.QPN {
			row = &qps[i]
		}
	}
	owner := fmt.Sprintf("[%d]", os.Getpid())
	if row == nil || row.State != verbs.QPSRTS || row.DestQPN != qb.QPN || row.Type != verbs.QPTypeRC || !strings.HasSuffix(row.Owner, owner) {
		t.Fatalf("the daemon's listing of the direct QP %#x: %+v (of %d QPs); want RTS to %#x, owner ...%s", qa.QPN, row, len(qps), qb.QPN, owner)
	}
	own, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	daemon := dev.Counters()
	for _, k := range []string{"sent_pkts", "rcvd_pkts"} {
		if own[k] == 0 || all[k] != daemon[k]+own[k] {
			t.Errorf("%s: the daemon says %d, its own device %d and the borrower %d", k, all[k], daemon[k], own[k])
		}
	}

	// Closing the direct Context returns block 1 for the next one.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var again *verbs.Context
	for range 100 { // the daemon releases the block when it sees the hang-up
		if again, err = verbs.OpenDirect("rnd"); err != nil {
			t.Fatal(err)
		}
		q, _ := rcQP(t, again)
		if ibudp.SteerBlock(q.QPN) == 1 {
			break
		}
		again.Close()
		again = nil
		time.Sleep(10 * time.Millisecond)
	}
	if again == nil {
		t.Fatal("block 1 never came back after its Context closed")
	}
	again.Close()
}

// write WRITEs msg from the start of from's buffer to offset off of to's,
// checks the completion and, after fence if the target NIC needs one,
// the bytes.
func write(t *testing.T, qp *verbs.QP, from, to side, off int, msg string, fence func()) {
	t.Helper()
	copy(from.mr.Buf, msg)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{from.mr.SGE(0, len(msg))}, RemoteAddr: to.mr.Addr + uint64(off), RKey: to.mr.RKey}
	if err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, from.cq); wc.Status != verbs.WCSuccess || wc.WRID != 1 || wc.QPNum != qp.QPN {
		t.Fatalf("WRITE completion %v", &wc)
	}
	if fence != nil {
		fence()
	}
	if got := to.mr.Buf[off : off+len(msg)]; !bytes.Equal(got, []byte(msg)) {
		t.Fatalf("target memory %q, want %q", got, msg)
	}
}

// connectedPair makes an RC QP on a, whose QPN must be in steering block
// block, and one on b, and connects them.
func connectedPair(t *testing.T, a, b *verbs.Context, block uint8) (*verbs.QP, side, *verbs.QP, side) {
	t.Helper()
	qa, ma := rcQP(t, a)
	qb, mb := rcQP(t, b)
	if ibudp.SteerBlock(qa.QPN) != block {
		t.Fatalf("QPN %#x is not in steering block %d", qa.QPN, block)
	}
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)
	return qa, ma, qb, mb
}

// Open takes the fast path by itself where the daemon lends sockets, and
// the daemon's path, quietly, where it lends none; where it lends but
// this client may borrow no more, it says so in one line and takes the
// daemon's path. OpenDaemon always takes the daemon's, OpenWith
// PathDirect insists.
func TestOpenPaths(t *testing.T) {
	startDaemon(t, "lends", looptest.Get(t), true, hostif.Limits{Client: hostif.Quota{hostif.ResLent: 1}})
	var notes []string
	note := func(s string) { notes = append(notes, s) }
	open := func(name string, p verbs.Path) *verbs.Context {
		t.Helper()
		c, err := verbs.OpenWith(name, verbs.Options{Path: p, Note: note})
		if err != nil {
			t.Fatalf("open %s %v: %v", name, p, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if c := open("lends", verbs.PathAuto); !c.Local() || len(notes) != 0 {
		t.Fatalf("auto on a lending daemon: in this process %v, notes %q", c.Local(), notes)
	}
	// The one socket this process may borrow is taken: the next auto
	// open falls back, with a note; direct fails.
	if c := open("lends", verbs.PathAuto); c.Local() || len(notes) != 1 || !strings.Contains(notes[0], "-client-max-lent") {
		t.Fatalf("auto over the lent limit: in this process %v, notes %q", c.Local(), notes)
	}
	if _, err := verbs.OpenWith("lends", verbs.Options{Path: verbs.PathDirect, Note: note}); err == nil || len(notes) != 1 {
		t.Fatalf("direct over the lent limit: %v, notes %q", err, notes)
	}
	if c := open("lends", verbs.PathDaemon); c.Local() {
		t.Fatal("PathDaemon runs the QPs in this process")
	}

	// A daemon that lends nothing: its path, without a word.
	startDaemon(t, "keeps", looptest.Get(t), false, hostif.Limits{})
	if c := open("keeps", verbs.PathAuto); c.Local() || len(notes) != 1 {
		t.Fatalf("auto on a daemon that does not lend: in this process %v, notes %q", c.Local(), notes)
	}
}
