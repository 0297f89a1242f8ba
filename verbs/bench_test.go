package verbs_test

import (
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// benchPair is two in-process NICs with an RC QP each, connected, and
// 8-byte WRITE requests from a to b.
func benchPair(b *testing.B) (*verbs.QP, side, verbs.SendWR) {
	ca, cb := openLocal(b, looptest.Get(b)), openLocal(b, looptest.Get(b))
	qa, ma := rcQP(b, ca)
	qb, mb := rcQP(b, cb)
	connect(b, qa, qb, cb)
	connect(b, qb, qa, ca)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{ma.mr.SGE(0, 8)}, RemoteAddr: mb.mr.Addr, RKey: mb.mr.RKey}
	return qa, ma, wr
}

// BenchmarkLocalWriteLat is one signaled 8-byte WRITE at a time, posted and
// polled to completion through the verbs API: the application's post and
// poll path on an in-process NIC.
func BenchmarkLocalWriteLat(b *testing.B) {
	qp, s, wr := benchPair(b)
	wrs := []verbs.SendWR{wr}
	wcs := make([]verbs.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for s.cq.Poll(wcs) == 0 {
		}
		if wcs[0].Status != verbs.WCSuccess {
			b.Fatal(&wcs[0])
		}
	}
}

// BenchmarkLocalWriteBatch posts 8 signaled 8-byte WRITEs in one call and
// polls the 8 completions: more of each iteration is the post and poll path.
func BenchmarkLocalWriteBatch(b *testing.B) {
	qp, s, wr := benchPair(b)
	wrs := make([]verbs.SendWR, 8)
	for i := range wrs {
		wrs[i] = wr
	}
	wcs := make([]verbs.WC, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for n := 0; n < len(wrs); {
			k := s.cq.Poll(wcs[n:])
			for _, wc := range wcs[n : n+k] {
				if wc.Status != verbs.WCSuccess {
					b.Fatal(&wc)
				}
			}
			n += k
		}
	}
}
