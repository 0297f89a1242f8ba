package rnic_test

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/fault"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/netif"
)

// nextPair gives a test its own pair of loopback addresses (looptest),
// so that no two tests, here or in a run beside this one, share a UDP
// 4791 socket.
func nextPair(t testing.TB) (netip.Addr, netip.Addr) {
	t.Helper()
	return looptest.Pair(t)
}

// node is one device with a PD, a CQ and a registered buffer.
type node struct {
	t      testing.TB
	peer   *node
	dev    *rnic.Device
	faulty *fault.Injector
	pd     rnic.PD
	cq     *rnic.CQ
	mem    []byte
	mr     *rnic.MR
}

const memVA = 0x7f0000000000 // the address the nodes' buffers answer to

func newNode(t testing.TB, addr netip.Addr, mtu, memLen int, faulty bool, seed int64) *node {
	t.Helper()
	return openNode(t, addr, pairOpts{mtu: mtu, memLen: memLen, faulty: faulty}, seed, "")
}

// openNode is newNode with the device options of o (tracer, GSO, window)
// and a name.
func openNode(t testing.TB, addr netip.Addr, o pairOpts, seed int64, name string) *node {
	t.Helper()
	mtu, memLen, faulty := o.mtu, o.memLen, o.faulty
	if o.engines > 1 && os.Geteuid() != 0 {
		t.Skip("skipped: several engines need a steered port, whose eBPF program needs CAP_BPF (root); CI runs as root")
	}
	port, err := ibudp.Open(ibudp.Config{Addr: addr, MTU: mtu, NoGSO: o.noGSO, Queues: o.engines})
	if err != nil {
		t.Fatalf("open port %v: %v", addr, err)
	}
	n := &node{t: t}
	var p ibudp.Port = port
	var pollOnly *pollOnlyPort
	if o.pollOnly {
		pollOnly = newPollOnlyPort(port.(ibudp.Poller))
		p = pollOnly
	}
	if faulty {
		if o.pollIdle > 0 {
			fp := fault.NewPoller(port.(ibudp.Poller), seed)
			n.faulty, p = fp.Injector, fp
		} else {
			n.faulty = fault.New(port, seed)
			p = n.faulty
		}
	}
	// The other engines' sockets, wrapped as the port is: their injectors
	// take what is set on the port's.
	var more []ibudp.Port
	for q := 1; q < o.engines; q++ {
		fd, err := ibudp.SteeringOf(port).Queue(q)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := ibudp.Open(ibudp.Config{Addr: addr, MTU: mtu, NoGSO: o.noGSO, SocketFD: fd})
		if err != nil {
			t.Fatalf("open queue %d of %v: %v", q, addr, err)
		}
		if faulty {
			fp := fault.NewPoller(qp.(ibudp.Poller), seed+int64(q)<<32)
			n.faulty.Follow(fp.Injector)
			qp = fp
		}
		more = append(more, qp)
	}
	ccp := flowctl.DefaultParams()
	if err := ccp.SetList(o.ccParams); err != nil {
		t.Fatal(err)
	}
	cc, err := flowctl.NewAlgorithm(cmp.Or(o.cc, "none"), ccp, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.dev, err = rnic.Open(rnic.Config{Port: p, Name: name, Trace: o.trace, Window: o.window, AckHold: o.ackHold, CC: cc,
		Retry7Forever: o.retry7Ever, Batch: o.batch, CopyPayload: o.copyPayload, CoalescePosts: o.coalesce,
		PollIdle: o.pollIdle, EnginePorts: more})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.dev.Close() })
	if pollOnly != nil {
		pollOnly.waitAsleep(t)
	}
	n.pd = n.dev.AllocPD()
	n.cq, err = n.dev.CreateCQ(65536)
	if err != nil {
		t.Fatal(err)
	}
	n.mem = make([]byte, memLen)
	n.mr, err = n.dev.RegMR(n.pd, n.mem, memVA,
		ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pair is two connected nodes.
type pair struct {
	a, b   *node
	qa, qb *rnic.QP
}

type pairOpts struct {
	typ     ib.QPType
	mtu     int
	memLen  int
	faulty  bool
	timeout uint8
	// retry is retry_cnt; 0 means the harness's default, 7, so that a
	// test whose point is not the retry budget survives an ACK that a
	// loaded machine delays past the 16.8 ms timeout (under -race at load
	// 10, TestRCSendWithInvalidate once completed with RETRY_EXC_ERR
	// after 80 ms). noRetry asks for retry_cnt 0 itself.
	retry      uint8
	noRetry    bool
	rnrRetry   uint8
	minRNR     uint8
	srq        bool
	sendWR     int
	maxInline  int
	accessB    ib.Access // the responder QP's remote access; 0 = all
	noConnectB bool
	noGSO      bool // ports send one packet per message (ibudp.Config.NoGSO)
	// copyPayload gathers payloads into the packets (rnic.Config.CopyPayload)
	copyPayload bool
	window      int           // rnic.Config.Window
	ackHold     time.Duration // rnic.Config.AckHold
	trace       *trace.Tracer // shared by both devices, named rnic0 and rnic1
	pollOnly    bool          // the device's own receive goroutine never receives: only PollRx does
	pollOnlyB   bool          // pollOnly for b only
	cc, ccB     string        // congestion control of a (and of b, if set; else a's): flowctl.NewAlgorithm's names
	ccParams    string        // its parameters, mlx5 names (flowctl.Params.SetList)
	retry7Ever  bool          // rnic.Config.Retry7Forever
	batchB      int           // rnic.Config.Batch of b only
	batch       int           // set from batchB for b
	coalesce    bool          // rnic.Config.CoalescePosts on both devices
	pollIdle    time.Duration // rnic.Config.PollIdle on both devices: the polling engine
	engines     int           // engines of each device (rnic.Config.EnginePorts, a steered port); needs pollIdle
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	if o.typ == 0 {
		o.typ = ib.QPTypeRC
	}
	if o.mtu == 0 {
		o.mtu = 1024
	}
	if o.memLen == 0 {
		o.memLen = 1 << 20
	}
	if o.timeout == 0 {
		o.timeout = 12 // 16.8 ms
	}
	switch {
	case o.noRetry:
		o.retry = 0
	case o.retry == 0:
		o.retry = 7
	}
	if o.sendWR == 0 {
		o.sendWR = 1024
	}
	aa, ab := nextPair(t)
	ob := o
	ob.pollOnly = o.pollOnly || o.pollOnlyB
	ob.cc = cmp.Or(o.ccB, o.cc)
	ob.batch = o.batchB
	p := &pair{a: openNode(t, aa, o, 1, "rnic0"), b: openNode(t, ab, ob, 2, "rnic1")}
	p.a.peer, p.b.peer = p.b, p.a
	p.qa = p.a.createQP(o)
	p.qb = p.b.createQP(o)
	p.a.connect(p.qa, p.b, p.qb, o, 0)
	if !o.noConnectB {
		accB := o.accessB
		if accB == 0 {
			accB = ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
		}
		p.b.connect(p.qb, p.a, p.qa, o, accB)
	}
	return p
}

func (n *node) createQP(o pairOpts) *rnic.QP {
	n.t.Helper()
	var srq *rnic.SRQ
	if o.srq {
		var err error
		if srq, err = n.dev.CreateSRQ(n.pd, 4096, 4); err != nil {
			n.t.Fatal(err)
		}
	}
	qp, err := n.dev.CreateQP(rnic.QPInitAttr{PD: n.pd, Type: o.typ, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq,
		Caps: ib.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: 4096, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: o.maxInline}})
	if err != nil {
		n.t.Fatal(err)
	}
	return qp
}

const qkey = 0x11111111

// connect brings qp through INIT and RTR to RTS towards peer's QP, with
// the masks ibv_rc_pingpong uses.
func (n *node) connect(qp *rnic.QP, peer *node, pqp *rnic.QP, o pairOpts, access ib.Access) {
	n.t.Helper()
	if access == 0 {
		access = ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
	}
	gid := netif.GIDFromAddr(peer.dev.QueryPort().Addr)
	steps := []struct {
		a    ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1, AccessFlags: access, QKey: qkey},
			ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTUFromBytes(o.mtu), DestQPN: pqp.QPN, RQPSN: 0x100 + pqp.QPN,
			MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR, AH: ib.AH{DGID: gid, HopLimit: 64}},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPAttr{State: ib.QPSRTS, SQPSN: 0x100 + qp.QPN, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16},
			ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
	}
	switch o.typ {
	case ib.QPTypeUC:
		steps[1].mask &^= ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer
		steps[2].mask = ib.AttrState | ib.AttrSQPSN
		steps[0].a.AccessFlags &^= ib.AccessRemoteRead | ib.AccessRemoteAtomic
	case ib.QPTypeUD:
		steps[0].mask = ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrQKey
		steps[1].mask = ib.AttrState
		steps[2].mask = ib.AttrState | ib.AttrSQPSN
	}
	for _, s := range steps {
		if err := n.dev.ModifyQP(qp, &s.a, s.mask); err != nil {
			n.t.Fatalf("modify QP %#x to %v: %v", qp.QPN, s.a.State, err)
		}
	}
}

// poll waits for want completions on n's CQ. It fails when timeout passes
// with no completion at all: a hang, not a slow machine (under -race on
// two shared cores, a round of TestLossRecovery's go-back-N retries can
// take a minute while it keeps completing).
func (n *node) poll(want int, timeout time.Duration) []ib.WC {
	n.t.Helper()
	out := make([]ib.WC, 0, want)
	buf := make([]ib.WC, 256)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(out) < want {
		k := n.cq.Poll(buf[:min(len(buf), want-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			deadline.Reset(timeout)
			continue
		}
		select {
		case <-n.cq.Ready():
		case <-deadline.C:
			n.logQPs()
			if n.peer != nil {
				n.t.Logf("peer: counters %v", n.peer.dev.Observer().Counters())
				n.peer.logQPs()
			}
			n.t.Fatalf("got %d of %d completions, none in the last %v; counters %v", len(out), want, timeout, n.dev.Observer().Counters())
		}
	}
	n.fence()
	return out
}

// logQPs logs the requester and completer state of n's QPs, for a poll
// that gave up.
func (n *node) logQPs() {
	for _, q := range n.dev.QPs() {
		q.Lock()
		r := &q.Resp
		n.t.Logf("QP %#x %v: comp %+v req %+v SQ head %d next %d tail %d, backoff %d, timer fired %v; resp EPSN %d MSN %d NAKSent %v InMsg %v AckHeld %v",
			q.QPN, q.State(), q.Comp, q.Req, q.SQ.Head, q.SQ.Next, q.SQ.Tail, q.Backoff, q.TimerFired.Load(),
			r.EPSN, r.MSN, r.Ack.NAKSent, r.InMsg, r.Ack.Held)
		n.t.Logf("QP %#x timer: %s", q.QPN, q.TimerString())
		if q.SQ.Head < q.SQ.Tail {
			w := q.SQ.At(q.SQ.Head)
			n.t.Logf("QP %#x head WQE: %v %v PSN %d..%d, %d bytes", q.QPN, w.WR.Opcode, w.State, w.FirstPSN, w.LastPSN, w.Len)
		}
		q.Unlock()
	}
}

// fence makes what both devices wrote into memory visible to the test, and
// what the test wrote visible to both (Device.Fence).
func (n *node) fence() {
	n.dev.Fence()
	if n.peer != nil {
		n.peer.dev.Fence()
	}
}

// noMore checks that no further completion arrives for a while.
func (n *node) noMore(d time.Duration) {
	n.t.Helper()
	time.Sleep(d)
	var wc [1]ib.WC
	if n.cq.Poll(wc[:]) != 0 {
		n.t.Fatalf("unexpected completion %v", &wc[0])
	}
}

func fill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from %d expected, first difference at byte %d", what, len(got), len(want), i)
	}
}

// checkWC compares a completion field by field.
func checkWC(t testing.TB, got ib.WC, want ib.WC) {
	t.Helper()
	if got != want {
		t.Fatalf("completion\n got %v\nwant %v", &got, &want)
	}
}

func sge(n *node, off, length int) ib.SGE {
	return ib.SGE{Addr: memVA + uint64(off), Length: uint32(length), LKey: n.mr.LKey}
}

func mustPost(t testing.TB, n *node, qp *rnic.QP, wrs ...ib.SendWR) {
	t.Helper()
	if err := n.dev.PostSend(qp, wrs); err != nil {
		t.Fatal(err)
	}
}

func mustRecv(t testing.TB, n *node, qp *rnic.QP, wrs ...ib.RecvWR) {
	t.Helper()
	var err error
	if qp.SRQ != nil {
		err = n.dev.PostSRQRecv(qp.SRQ, wrs)
	} else {
		err = n.dev.PostRecv(qp, wrs)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func counter(n *node, name string) uint64 {
	v, ok := n.dev.Observer().Counters()[name]
	if !ok {
		panic(fmt.Sprintf("no counter %q", name))
	}
	return v
}
