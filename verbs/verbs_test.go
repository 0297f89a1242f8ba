package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// An RC WRITE between two in-process NICs through the verbs API: the
// smallest program an application writes.
func TestLocalWrite(t *testing.T) {
	a := openLocal(t, looptest.Get(t))
	b := openLocal(t, looptest.Get(t))
	qa, ma := rcQP(t, a)
	qb, mb := rcQP(t, b)
	connect(t, qa, qb, b)
	connect(t, qb, qa, a)

	copy(ma.mr.Buf, "hello, rnicd")
	wr := verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{ma.mr.SGE(0, 12)}, RemoteAddr: mb.mr.Addr, RKey: mb.mr.RKey}
	if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, ma.cq)
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.Opcode != verbs.WCRDMAWrite || wc.QPNum != qa.QPN {
		t.Fatalf("completion %v", &wc)
	}
	if got := mb.mr.Buf[:12]; !bytes.Equal(got, []byte("hello, rnicd")) {
		t.Fatalf("peer memory %q", got)
	}
}

type side struct {
	cq *verbs.CQ
	mr *verbs.MR
}

func openLocal(t testing.TB, addr netip.Addr) *verbs.Context {
	c, err := verbs.OpenLocal(verbs.LocalConfig{Addr: addr, MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func rcQP(t testing.TB, c *verbs.Context) (*verbs.QP, side) {
	return newQP(t, c, verbs.QPTypeRC, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
}

// newQP makes a QP of type typ with a PD, a 16-entry CQ and 4 KiB
// registered with access.
func newQP(t testing.TB, c *verbs.Context, typ verbs.QPType, access verbs.Access) (*verbs.QP, side) {
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(mem, access)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp, side{cq: cq, mr: mr}
}

func connect(t testing.TB, qp, peer *verbs.QP, peerCtx *verbs.Context) {
	pa, err := peerCtx.QueryPort()
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead, PortNum: 1},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.QPN, RQPSN: 100,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: verbs.AH{DGID: pa.GIDs[pa.GIDIndex]}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			t.Fatalf("modify to %v: %v", s.a.State, err)
		}
	}
}

func pollOne(t testing.TB, cq *verbs.CQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	for {
		if cq.Poll(wcs) == 1 {
			return wcs[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatal("no completion:", err)
		}
	}
}

// SocketDir follows $RNICD_DIR, then the user's runtime directory; Devices
// lists the sockets there.
func TestSocketDirAndDevices(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	if got := verbs.SocketDir(); got != dir {
		t.Fatalf("SocketDir %q, want %q", got, dir)
	}
	if got := verbs.SocketPath("rnic7"); got != dir+"/rnic7.sock" {
		t.Fatalf("SocketPath %q", got)
	}
	for _, n := range []string{"rnicB", "rnicA"} {
		l, err := net.Listen("unixpacket", verbs.SocketPath(n))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	os.WriteFile(dir+"/notes.sock.txt", nil, 0o600)
	devs, err := verbs.Devices()
	if err != nil || len(devs) != 2 || devs[0] != "rnicA" || devs[1] != "rnicB" {
		t.Fatalf("Devices: %q, %v", devs, err)
	}
	if _, err := verbs.Open("rnicZ"); err == nil {
		t.Fatal("Open of a device with no daemon succeeded")
	}
	t.Setenv("RNICD_DIR", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	// In pid 1's network namespace the plain directory; in another, or
	// where pid 1's is unreadable (this sandbox's pid 1), net-INODE in it.
	var self, host unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("/net-%d", self.Ino)
	if unix.Stat("/proc/1/ns/net", &host) == nil && host.Ino == self.Ino && host.Dev == self.Dev {
		ns = ""
	}
	if os.Geteuid() != 0 {
		if got := verbs.SocketDir(); got != "/run/user/1000/rnicd"+ns {
			t.Fatalf("SocketDir without RNICD_DIR: %q, want %q", got, "/run/user/1000/rnicd"+ns)
		}
	} else if got := verbs.SocketDir(); got != "/run/rnicd"+ns {
		t.Fatalf("SocketDir for root: %q, want %q", got, "/run/rnicd"+ns)
	}
}

// TestSocketDirPerNetns: a thread in a network namespace of its own gets
// that namespace's directory, net-INODE, never the one it came from,
// and RNICD_DIR still overrides it.
func TestSocketDirPerNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to make a network namespace; CI runs as root")
	}
	t.Setenv("RNICD_DIR", "")
	outer := verbs.SocketDir()
	type result struct {
		dir, want, override string
		err                 error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies in its namespace
		var r result
		if r.err = unix.Unshare(unix.CLONE_NEWNET); r.err != nil {
			ch <- r
			return
		}
		var st unix.Stat_t
		if r.err = unix.Stat("/proc/thread-self/ns/net", &st); r.err != nil {
			ch <- r
			return
		}
		r.dir, r.want = verbs.SocketDir(), fmt.Sprintf("/run/rnicd/net-%d", st.Ino)
		os.Setenv("RNICD_DIR", "/elsewhere")
		r.override = verbs.SocketDir()
		os.Setenv("RNICD_DIR", "")
		ch <- r
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.dir != r.want || r.dir == outer || r.override != "/elsewhere" {
		t.Fatalf("in a new namespace: SocketDir %q (with RNICD_DIR: %q), want %q; outside %q", r.dir, r.override, r.want, outer)
	}
}

// Each device's node GUID comes from its port's address, so two daemons
// on lo differ, and ibv_query_device reports it.
func TestNodeGUID(t *testing.T) {
	for _, c := range []struct {
		addr string
		want uint64
	}{
		{"127.0.0.1", 0x0200_0000_7f00_0001},
		{"::ffff:198.18.0.2", 0x0200_0000_c612_0002},
		{"fe80::a8bb:ccff:fedd:eeff", 0xa8bb_ccff_fedd_eeff},
	} {
		if got := verbs.NodeGUID(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("NodeGUID(%s) = %#016x, want %#016x", c.addr, got, c.want)
		}
	}
	addr := looptest.Get(t)
	a, err := openLocal(t, addr).QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	// 02:00:00:00 and the four bytes of the IPv4 address, as the table's
	// 127.0.0.1 row.
	v4 := addr.As4()
	if want := 0x0200_0000<<32 | uint64(v4[0])<<24 | uint64(v4[1])<<16 | uint64(v4[2])<<8 | uint64(v4[3]); a.NodeGUID != want {
		t.Fatalf("QueryDevice node GUID %#016x", a.NodeGUID)
	}
}

// The GID table QueryPort gives is the one the daemon checks sgid_index
// against: every index of it is taken, the one past it refused.
func TestGIDTableBound(t *testing.T) {
	c := openLocal(t, looptest.Get(t))
	pa, err := c.QueryPort()
	if err != nil {
		t.Fatal(err)
	}
	if len(pa.GIDs) != 2 || pa.GIDIndex != 1 {
		t.Fatalf("GID table %v, index %d: want the port's GID twice, index 1", pa.GIDs, pa.GIDIndex)
	}
	for i, g := range pa.GIDs {
		if netip.AddrFrom16(g).Unmap() != pa.Addr {
			t.Fatalf("GID[%d] %x is not the port's address %v", i, g, pa.Addr)
		}
	}
	init := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}
	initMask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
		verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	for idx := 0; idx <= len(pa.GIDs); idx++ {
		qp, _ := rcQP(t, c)
		if err := qp.Modify(&init, initMask); err != nil {
			t.Fatal(err)
		}
		rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: qp.QPN, MinRNRTimer: 12,
			AH: verbs.AH{DGID: pa.GIDs[0], SGIDIndex: uint8(idx)}}
		err := qp.Modify(&rtr, rtrMask)
		if idx < len(pa.GIDs) && err != nil {
			t.Errorf("sgid_index %d: %v", idx, err)
		}
		if idx == len(pa.GIDs) && (err == nil || !strings.Contains(err.Error(), "sgid_index 2: the port's GID table has 2 entries")) {
			t.Errorf("sgid_index %d past the table: %v", idx, err)
		}
	}
}
