// Package rnictest gives tests two connected devices: one RC QP each,
// a registered buffer, a fault injector in front of each port. It is to
// rnic what net/http/httptest is to net/http: a fixture for the tests of
// the packages above rnic (monitor, the tools) and of rnic's own external
// tests. It lives in internal/ because it is no API for other modules, and
// outside rnic/ because it builds whole devices (it imports rnic): under
// rnic/ it would read as a block of the NIC, and nothing of the NIC may
// depend on it (ib/imports_test.go).
package rnictest

import (
	"fmt"
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

// End is one device with a faulty port, a CQ, a buffer and an RC QP.
type End struct {
	Dev    *rnic.Device
	Faulty *fault.Injector
	PD     rnic.PD
	CQ     *rnic.CQ
	Mem    []byte
	MR     *rnic.MR
	QP     *rnic.QP
}

// MemVA is the address each End's buffer answers to.
const MemVA = 0x10000

// NewEnds opens two devices on loopback addresses of the test's own (see
// looptest), named rnic0 and rnic1, sharing tracer tr, with one RC QP
// each connected to the other.
func NewEnds(t testing.TB, tr *trace.Tracer) (a, b *End) {
	t.Helper()
	return NewEndsCC(t, tr, "none")
}

// NewEndsCC is NewEnds with congestion control cc on both devices
// (flowctl.NewAlgorithm's names, rnicd -cc), with mlx5's defaults.
func NewEndsCC(t testing.TB, tr *trace.Tracer, cc string) (a, b *End) {
	t.Helper()
	a = Open(t, tr, "rnic0", cc)
	b = Open(t, tr, "rnic1", cc)
	Connect(t, a, b)
	Connect(t, b, a)
	return a, b
}

// Open opens a device named name on a loopback address of the test's
// own, tracing into tr, with congestion control cc, and gives it a PD, a
// CQ, a registered buffer at MemVA and an RC QP in RESET; the device
// closes when the test ends.
func Open(t testing.TB, tr *trace.Tracer, name, cc string) *End {
	t.Helper()
	addr := looptest.Get(t)
	port, err := ibudp.Open(ibudp.Config{Addr: addr, MTU: 1024})
	if err != nil {
		t.Fatalf("open port %v: %v", addr, err)
	}
	e := &End{Faulty: fault.New(port, 1)}
	alg, err := flowctl.NewAlgorithm(cc, flowctl.DefaultParams(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Dev, err = rnic.Open(rnic.Config{Port: e.Faulty, Name: name, Trace: tr, CC: alg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Dev.Close() })
	e.PD = e.Dev.AllocPD()
	if e.CQ, err = e.Dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	e.Mem = make([]byte, 1<<20)
	if e.MR, err = e.Dev.RegMR(e.PD, e.Mem, MemVA, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	e.QP = e.createQP(t)
	return e
}

// AnotherQP returns an End on e's device, PD, CQ and buffer with an RC
// QP of its own, in RESET: a device's second connection.
func (e *End) AnotherQP(t testing.TB) *End {
	t.Helper()
	n := *e
	n.QP = e.createQP(t)
	return &n
}

func (e *End) createQP(t testing.TB) *rnic.QP {
	t.Helper()
	qp, err := e.Dev.CreateQP(rnic.QPInitAttr{PD: e.PD, Type: ib.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
		Caps: ib.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// Connect takes x's QP through INIT and RTR to RTS, connected to y's:
// its SQ PSN 0x1000 plus its own QPN, y's the same way.
func Connect(t testing.TB, x, y *End) {
	t.Helper()
	steps := []struct {
		a    ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1, AccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead},
			ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: y.QP.QPN, RQPSN: 0x1000 + y.QP.QPN, MaxDestRdAtomic: 4,
			AH: ib.AH{DGID: netif.GIDFromAddr(y.Dev.QueryPort().Addr), HopLimit: 64}},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
		{ib.QPAttr{State: ib.QPSRTS, SQPSN: 0x1000 + x.QP.QPN, Timeout: 17, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			ib.AttrState | ib.AttrTimeout | ib.AttrRetryCnt | ib.AttrRNRRetry | ib.AttrSQPSN | ib.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := x.Dev.ModifyQP(x.QP, &s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// Write posts a signaled RDMA WRITE of n bytes from a to b and waits for
// its completion.
func Write(t testing.TB, a, b *End, wrid uint64, n int) {
	t.Helper()
	if err := TryWrite(a, b, wrid, n); err != nil {
		t.Fatal(err)
	}
}

// TryWrite is Write for goroutines other than the test's.
func TryWrite(a, b *End, wrid uint64, n int) error {
	err := a.Dev.PostSend(a.QP, []ib.SendWR{{WRID: wrid, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: MemVA, Length: uint32(n), LKey: a.MR.LKey}}, RemoteAddr: MemVA + 1<<19, RKey: b.MR.RKey}})
	if err != nil {
		return err
	}
	var wc [1]ib.WC
	deadline := time.After(30 * time.Second)
	for a.CQ.Poll(wc[:]) == 0 {
		select {
		case <-a.CQ.Ready():
		case <-deadline:
			return fmt.Errorf("no completion for wr_id %d; %v", wrid, a.Dev.Observer().Counters())
		}
	}
	if wc[0].Status != ib.WCSuccess || wc[0].WRID != wrid {
		return fmt.Errorf("completion %v", &wc[0])
	}
	return nil
}
