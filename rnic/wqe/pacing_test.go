package wqe_test

import (
	"math"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/flowctl"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/ibudp"
)

type clock struct{ t int64 }

func (c *clock) Nanotime() int64 { return c.t }

// withCC gives r's engine a Flow Control Manager running cc on a fake
// clock, and records what it tells the device of paced QPs.
func (r *requester) withCC(t *testing.T, cc string) (*flowctl.Manager, *clock, *[]time.Duration) {
	t.Helper()
	p := flowctl.DefaultParams()
	if err := p.SetList("rp_byte_reset=0"); err != nil { // the rate holds still while the test looks
		t.Fatal(err)
	}
	alg, err := flowctl.NewAlgorithm(cc, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: 1e9}
	fc, err := flowctl.New(flowctl.Config{Algorithm: alg, Params: p, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	r.e.FC = fc
	r.e.Paced = func(qp *qpmgr.QP, w time.Duration) {
		if qp != r.qp {
			t.Fatal("Paced on another QP")
		}
		waits = append(waits, w)
	}
	return fc, clk, &waits
}

// ecns runs the requester and returns the ECN codepoint of each packet.
func (r *requester) ecns(t *testing.T, budget int) []ibudp.ECN {
	t.Helper()
	r.qp.Lock()
	r.e.Run(r.qp, &r.port, budget)
	r.qp.Unlock()
	var out []ibudp.ECN
	for _, b := range r.port.bufs {
		out = append(out, b.ECN())
	}
	r.port.take(t)
	return out
}

// With DCQCN, data leaves ECT(0); without, Not-ECT.
func TestECT(t *testing.T) {
	for _, c := range []struct {
		cc   string
		want ibudp.ECN
	}{{"dcqcn", ibudp.ECT0}, {"none", ibudp.NotECT}} {
		r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0x100, 0)
		r.withCC(t, c.cc)
		r.post(t, r.write(1, 0, 4096))
		got := r.ecns(t, 64)
		if len(got) != 4 {
			t.Fatalf("%s: %d packets", c.cc, len(got))
		}
		for i, e := range got {
			if e != c.want {
				t.Errorf("%s: packet %d %v, want %v", c.cc, i, e, c.want)
			}
		}
	}
}

// Unpaced, a QP sends its whole budget; after a CNP the pacer lets one
// packet go and tells the device how long until the next: the packet's
// IP datagram at the QP's new rate, rounded up; when that time has
// passed, the next one goes, and no sooner.
func TestPaced(t *testing.T) {
	r := newRequester(t, ib.QPTypeRC, ib.MTU1024, 0x100, 0)
	fc, clk, waits := r.withCC(t, "dcqcn")
	r.post(t, r.write(1, 0, 16<<10))
	if n := len(r.run(t, 64)); n != 16 || len(*waits) != 0 {
		t.Fatalf("unpaced: %d packets, %d waits", n, len(*waits))
	}
	r.qp.Lock()
	fc.CNPReceived(&r.qp.FC)
	rate := fc.State(&r.qp.FC).CurrentRate
	r.qp.Unlock()
	r.post(t, r.write(2, 0, 16<<10))
	// RDMA_WRITE_FIRST: BTH, RETH, 1024 bytes, ICRC, then IPv4 and UDP.
	const first, middle = 12 + 16 + 1024 + 4 + 28, 12 + 1024 + 4 + 28
	gap := func(n int) time.Duration { return time.Duration(math.Ceil(float64(n) * 8e9 / float64(rate))) }
	if n := len(r.run(t, 64)); n != 1 || len(*waits) != 1 || (*waits)[0] != gap(first) {
		t.Fatalf("paced at %d bit/s: %d packets, waits %v; want 1 and %v", rate, n, *waits, gap(first))
	}
	clk.t += int64(gap(first)) - 1
	if n := len(r.run(t, 64)); n != 0 || (*waits)[1] != 1 {
		t.Fatalf("1 ns early: %d packets, waits %v", n, *waits)
	}
	clk.t++
	if n := len(r.run(t, 64)); n != 1 || (*waits)[2] != gap(middle) {
		t.Fatalf("on time: %d packets, waits %v; want 1 and %v", n, *waits, gap(middle))
	}
}
