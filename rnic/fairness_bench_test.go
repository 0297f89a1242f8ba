package rnic_test

import (
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/wire/fault"
)

// BenchmarkFairness is the congestion-control run end to end: 4 RC QPs, two on each
// of two sender devices, stream 64 KiB WRITEs (4 outstanding each) for 2
// s into one receiver whose port sits behind a 400 Mb/s bottleneck (the
// fault injector's link: 256 KB queue, the DCQCN paper's marking). It
// reports the goodput as a share of the link's payload capacity, Jain's
// fairness index over the 4 QPs, and the link's drops and marks and the
// senders' retransmissions, with DCQCN and without.
func BenchmarkFairness(b *testing.B) {
	for _, c := range []struct{ name, cc, params string }{
		{"dcqcn", "dcqcn", ""},
		// rp_byte_reset as Google's isekai model reads mlx5's value, in
		// 64-byte units (about 2 MB, the paper's byte counter is 10 MB).
		{"dcqcn-byte-reset-2MB", "dcqcn", "rp_byte_reset=2097088"},
		{"none", "none", ""},
	} {
		b.Run(c.name, func(b *testing.B) { runFairness(b, c.cc, c.params) })
	}
}

func runFairness(b *testing.B, cc, params string) {
	const (
		rate    = 400_000_000
		msg     = 64 << 10
		depth   = 4
		runFor  = 2 * time.Second
		perSide = 2
	)
	o := pairOpts{typ: ib.QPTypeRC, mtu: 1024, memLen: 1 << 20, faulty: true, retry: 7, timeout: 14, sendWR: 64, cc: cc, ccParams: params}
	a1, c := nextPair(b)
	a2, _ := nextPair(b)
	recv := openNode(b, c, o, 3, "rnicR")
	var senders []*node
	for i, ad := range []netip.Addr{a1, a2} {
		senders = append(senders, openNode(b, ad, o, int64(i+1), fmt.Sprintf("rnicS%d", i)))
	}
	recv.faulty.SetRX(fault.Faults{Link: fault.NewLink(rate)})
	type flow struct {
		n      *node
		qp     *rnic.QP
		posted int
		done   int
	}
	var flows []*flow
	for _, s := range senders {
		for range perSide {
			qs, qr := s.createQP(o), recv.createQP(o)
			s.connect(qs, recv, qr, o, 0)
			recv.connect(qr, s, qs, o, 0)
			flows = append(flows, &flow{n: s, qp: qs})
		}
	}
	post := func(f *flow) {
		wr := ib.SendWR{WRID: uint64(f.qp.QPN), Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(f.n, 0, msg)}, RemoteAddr: memVA + 1<<19, RKey: recv.mr.RKey}
		mustPost(b, f.n, f.qp, wr)
		f.posted++
	}
	byQPN := map[*node]map[uint32]*flow{}
	for _, f := range flows {
		if byQPN[f.n] == nil {
			byQPN[f.n] = map[uint32]*flow{}
		}
		byQPN[f.n][f.qp.QPN] = f
		for range depth {
			post(f)
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wc [16]ib.WC
	for time.Since(start) < runFor {
		for _, s := range senders {
			for _, w := range wc[:s.cq.Poll(wc[:])] {
				if w.Status != ib.WCSuccess {
					b.Fatalf("%v", &w)
				}
				f := byQPN[s][uint32(w.WRID)]
				f.done++
				post(f)
			}
		}
	}
	el := time.Since(start)
	b.StopTimer()
	var sum, sq float64
	for _, f := range flows {
		x := float64(f.done)
		sum += x
		sq += x * x
	}
	jain := sum * sum / (float64(len(flows)) * sq)
	// What the link carries of payload: a 1024-byte payload is a 1086-byte
	// frame (BTH, ICRC, IPv4, UDP, Ethernet header and FCS; the first
	// packet's RETH aside).
	capacity := float64(rate) / 8 * 1024 / (1024 + 12 + 4 + 20 + 8 + 18) * el.Seconds()
	st := recv.faulty.FaultStats().RX
	var retx uint64
	for _, s := range senders {
		retx += s.dev.Observer().Counters()["retransmitted_pkts"]
	}
	for _, s := range senders {
		for _, q := range s.dev.Observer().QPInfo() {
			if q.Type == "RC" {
				b.Logf("%s qp %#x: %+v", s.dev.Name(), q.QPN, q.CC)
			}
		}
		cs := s.dev.Observer().Counters()
		b.Logf("%s: rp_cnp_handled %d rp_cnp_ignored %d sent %d", s.dev.Name(), cs["rp_cnp_handled"], cs["rp_cnp_ignored"], cs["sent_pkts"])
	}
	b.Logf("receiver: np_cnp_sent %d np_ecn_marked %d", recv.dev.Observer().Counters()["np_cnp_sent"], recv.dev.Observer().Counters()["np_ecn_marked_roce_packets"])
	b.ReportMetric(sum*msg/capacity*100, "%goodput")
	b.ReportMetric(jain, "jain")
	b.ReportMetric(float64(st.LinkDropped), "drops")
	b.ReportMetric(float64(st.Marked), "marks")
	b.ReportMetric(float64(retx), "retx")
	b.ReportMetric(math.Round(sum*msg/el.Seconds()/1e6), "MB/s")
}
