package tests

import (
	"context"
	"testing"

	"github.com/rnicd/rnicd/verbs"
)

// benchPair is an RC connection between two daemons.
func benchPair(b *testing.B) (*end, *end) {
	daemons(b)
	a := newEnd(b, open(b, "rnicA"), endOpts{typ: verbs.QPTypeRC})
	p := newEnd(b, open(b, "rnicB"), endOpts{typ: verbs.QPTypeRC})
	connect(b, a, p, verbs.QPTypeRC, 7, 14)
	connect(b, p, a, verbs.QPTypeRC, 7, 14)
	return a, p
}

// BenchmarkDaemonWriteLatency: one 8-byte RDMA WRITE at a time, post to
// completion, through two rnicd processes (ring, doorbell, engine, wire,
// peer, ACK, CQE ring, poll), polling in a spin or sleeping in CQ.Wait
// between polls.
func BenchmarkDaemonWriteLatency(b *testing.B) {
	b.Run("spin", func(b *testing.B) { writeLatency(b, false) })
	b.Run("wait", func(b *testing.B) { writeLatency(b, true) })
}

func writeLatency(b *testing.B, wait bool) {
	a, p := benchPair(b)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: p.mr.Addr, RKey: p.mr.RKey}}
	wcs := make([]verbs.WC, 1)
	for b.Loop() {
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for a.cq.Poll(wcs) == 0 {
			if wait {
				a.cq.Wait(context.Background())
			}
		}
		if wcs[0].Status != verbs.WCSuccess {
			b.Fatal(&wcs[0])
		}
	}
}

// BenchmarkDaemonWriteBandwidth: 32 KiB WRITEs, 16 outstanding.
func BenchmarkDaemonWriteBandwidth(b *testing.B) {
	a, p := benchPair(b)
	const size, depth = 32 << 10, 16
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: p.mr.Addr, RKey: p.mr.RKey}}
	wcs := make([]verbs.WC, depth)
	b.SetBytes(size)
	out := 0
	for b.Loop() {
		for out == depth {
			k := a.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					b.Fatal(&wc)
				}
			}
			out -= k
		}
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		out++
	}
	for out > 0 {
		out -= a.cq.Poll(wcs)
	}
}
