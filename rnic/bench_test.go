package rnic_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
)

// Bandwidth and latency between two devices over loopback UDP. Compare
// ratios within one run: the machine is shared.

const (
	benchMsg   = 64 << 10
	benchDepth = 16 // outstanding work requests, as perftest's tx_depth
)

func BenchmarkRCWriteBW(b *testing.B) { benchBW(b, ib.WRRDMAWrite) }
func BenchmarkRCSendBW(b *testing.B)  { benchBW(b, ib.WRSend) }
func BenchmarkRCReadBW(b *testing.B)  { benchBW(b, ib.WRRDMARead) }

func benchBW(b *testing.B, op ib.WROpcode) {
	for _, c := range []struct {
		mtu int
		gso bool
	}{{1024, false}, {1024, true}, {4096, false}, {4096, true}} {
		name := fmt.Sprintf("mtu%d/64KiB", c.mtu)
		if c.gso {
			name += "/gso"
		}
		b.Run(name, func(b *testing.B) {
			runBW(b, op, pairOpts{mtu: c.mtu, noGSO: !c.gso})
		})
	}
}

// BenchmarkRCWriteBWLent is 64 KiB WRITEs at MTU 4096 with runs of
// packets, the payloads sent from the registered memory (lent, the
// default) and gathered into the packets first (copy, the old way, which
// cost 20% more user CPU per 64 KiB WRITE, BENCHMARKS.md): run the two in
// one go to compare them on a shared machine.
func BenchmarkRCWriteBWLent(b *testing.B) {
	for _, copyPayload := range []bool{false, true} {
		name := "lent"
		if copyPayload {
			name = "copy"
		}
		b.Run(name, func(b *testing.B) {
			runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 4096, copyPayload: copyPayload})
		})
	}
}

// runBW streams 64 KiB operations between a pair made with o (its MTU;
// memory, retries and queue depth are set here), benchDepth at a time.
func runBW(b *testing.B, op ib.WROpcode, o pairOpts) {
	o.memLen, o.retry, o.sendWR = 4<<20, 7, 2*benchDepth
	p := newPair(b, o)
	wr := ib.SendWR{Opcode: op, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, benchMsg)},
		RemoteAddr: memVA + 2<<20, RKey: p.b.mr.RKey}
	recv := ib.RecvWR{SGL: []ib.SGE{sge(p.b, 0, benchMsg)}}
	wcs := make([]ib.WC, benchDepth)
	b.SetBytes(benchMsg)
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < benchDepth {
			if op == ib.WRSend {
				mustRecv(b, p.b, p.qb, recv)
			}
			mustPost(b, p.a, p.qa, wr)
			posted++
		}
		n := p.a.cq.Poll(wcs)
		if n == 0 {
			select {
			case <-p.a.cq.Ready():
			case <-time.After(10 * time.Second):
				b.Fatalf("stalled at %d of %d; %v", done, b.N, p.a.dev.Observer().Counters())
			}
		}
		for _, wc := range wcs[:n] {
			if wc.Status != ib.WCSuccess {
				b.Fatalf("completion %v", &wc)
			}
		}
		done += n
		if op == ib.WRSend {
			for p.b.cq.Poll(wcs) > 0 {
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(p.a.dev.Observer().Counters()["retransmitted_pkts"])/float64(b.N), "retx/op")
}

// BenchmarkRCWriteLat is one signaled 8-byte RDMA WRITE at a time: the
// time from post to completion, a full round trip (ib_write_lat reports
// half of a ping-pong, which is the same trip).
func BenchmarkRCWriteLat(b *testing.B) {
	for _, mtu := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("mtu%d/8B", mtu), func(b *testing.B) { runLat(b, pairOpts{mtu: mtu}) })
	}
}

// BenchmarkRCSendPingPong is ib_send_lat's loop between two devices: a
// SENDs, b receives and SENDs back, each side taking its send completion
// before it goes on; one op is a round trip. "held" delays the ACKs of
// the ping-pong QPs (rnic.Config.AckHold), "at-once" sends them as rxe.
func BenchmarkRCSendPingPong(b *testing.B) {
	for _, c := range []struct {
		name string
		hold time.Duration
	}{{"at-once", -1}, {"held", 0}} {
		b.Run(c.name, func(b *testing.B) {
			p := newPair(b, pairOpts{retry: 7, timeout: 14, ackHold: c.hold})
			var wcs [2]ib.WC
			waitFor := func(n *node, want int) {
				got := 0
				for got < want {
					k := n.cq.Poll(wcs[got:want])
					for _, wc := range wcs[got : got+k] {
						if wc.Status != ib.WCSuccess {
							b.Fatalf("completion %v", &wc)
						}
					}
					if got += k; got < want {
						<-n.cq.Ready()
					}
				}
			}
			send := func(n *node, qp *rnic.QP) {
				mustPost(b, n, qp, ib.SendWR{Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(n, 0, 8)}})
			}
			recv := func(n *node, qp *rnic.QP) {
				mustRecv(b, n, qp, ib.RecvWR{SGL: []ib.SGE{sge(n, 64, 8)}})
			}
			done := make(chan struct{})
			go func() { // b: receive, answer, take the send completion
				defer close(done)
				for range b.N {
					waitFor(p.b, 1)
					recv(p.b, p.qb)
					send(p.b, p.qb)
					waitFor(p.b, 1)
				}
			}()
			for range 4 {
				recv(p.a, p.qa)
				recv(p.b, p.qb)
			}
			b.ResetTimer()
			for range b.N {
				send(p.a, p.qa)
				waitFor(p.a, 2) // the send and the answer
				recv(p.a, p.qa)
			}
			<-done
		})
	}
}

func runLat(b *testing.B, o pairOpts) {
	o.retry = 7
	p := newPair(b, o)
	wr := ib.SendWR{Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(p.a, 0, 8)},
		RemoteAddr: memVA, RKey: p.b.mr.RKey}
	var wc [1]ib.WC
	b.ResetTimer()
	for range b.N {
		mustPost(b, p.a, p.qa, wr)
		for p.a.cq.Poll(wc[:]) == 0 {
			<-p.a.cq.Ready()
		}
		if wc[0].Status != ib.WCSuccess {
			b.Fatalf("completion %v", &wc[0])
		}
	}
}

// BenchmarkDCQCNOff and BenchmarkDCQCNOn are the same WRITE bandwidth and
// latency with congestion control off and with DCQCN on but no
// congestion (no CNP arrives, so no QP is paced): what DCQCN costs a
// packet when nothing is congested (data packets leave ECT(0), each asks
// an unpaced pacer).
func BenchmarkDCQCNOff(b *testing.B) { benchCC(b, "none") }
func BenchmarkDCQCNOn(b *testing.B)  { benchCC(b, "dcqcn") }

func benchCC(b *testing.B, cc string) {
	b.Run("write_bw/mtu4096/64KiB/gso", func(b *testing.B) { runBW(b, ib.WRRDMAWrite, pairOpts{mtu: 4096, cc: cc}) })
	b.Run("write_lat/mtu1024/8B", func(b *testing.B) { runLat(b, pairOpts{mtu: 1024, cc: cc}) })
}
