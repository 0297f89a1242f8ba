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
	"net/netip"
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
	open := func(addr netip.Addr, name string) *End {
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
		pd := e.Dev.AllocPD()
		if e.CQ, err = e.Dev.CreateCQ(4096); err != nil {
			t.Fatal(err)
		}
		e.Mem = make([]byte, 1<<20)
		if e.MR, err = e.Dev.RegMR(pd, e.Mem, MemVA, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		if e.QP, err = e.Dev.CreateQP(rnic.QPInitAttr{PD: pd, Type: ib.QPTypeRC, SendCQ: e.CQ, RecvCQ: e.CQ,
			Caps: ib.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a = open(looptest.Get(t), "rnic0")
	b = open(looptest.Get(t), "rnic1")
	connect := func(x, y *End) {
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
	connect(a, b)
	connect(b, a)
	return a, b
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
