package perftest

import (
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/rnicd/rnicd/verbs"
)

// The table lines perftest prints (perftest_parameters.h).
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	resultFmt    = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	resultFmtG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	// resultFmtLatDur heads a latency tool's -D report.
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
)

// Units of the reports. The clock is Go's monotonic clock in nanoseconds,
// so a "cycle" of perftest's formulas is a nanosecond here.
const (
	cyclesPerSec  = 1e9
	cyclesPerUsec = 1e3
	mbFactor      = 0x100000  // MB/sec: 2^20 bytes
	gbFactor      = 125000000 // Gb/sec: 10^9 bits
)

// bwSamples are the timestamps a bandwidth run takes (perftest's tposted
// and tcompleted): posted[k] when WR k was posted, completed[k] when the
// completion covering WR k was seen, set at each signaled WR. With noPeak
// only index 0 of each is used: start and end.
type bwSamples struct {
	posted, completed []int64
}

// bwReport computes a run's figures as print_report_bw does: the average
// over the whole run, and the peak as the best rate of any stretch
// between a post and a later completion.
func bwReport(size, iters uint64, s bwSamples, cqMod int, noPeak, gbits bool) BWReport {
	ff := uint64(mbFactor)
	if gbits {
		ff = gbFactor
	}
	// perftest starts from tcompleted[0] - tposted[0], which for a
	// moderated run is a slot never written: 0, and the unsigned
	// difference wraps to a huge value. Start from that huge value.
	optDelta := uint64(math.MaxUint64)
	if noPeak || cqMod == 1 {
		optDelta = uint64(s.completed[0] - s.posted[0])
	}
	if !noPeak {
		n := int(iters)
		for i := 0; i < n; i++ {
			for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
				if t := (uint64(s.completed[j]) - uint64(s.posted[i])) / uint64(j-i+1); t < optDelta {
					optDelta = t
				}
			}
			if n%cqMod != 0 {
				j := n - 1
				if t := (uint64(s.completed[j]) - uint64(s.posted[i])) / uint64(j-i+1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	last := 0
	if !noPeak {
		last = int(iters) - 1
	}
	sum := float64(s.completed[last] - s.posted[0])
	r := BWReport{Size: size, Iters: iters}
	r.BWAvg = float64(size) * float64(iters) * cyclesPerSec / (sum * float64(ff))
	r.MsgRate = float64(iters) * cyclesPerSec / (sum * 1e6)
	var peakUp uint64
	if !noPeak {
		peakUp = size * uint64(cyclesPerSec)
	}
	r.BWPeak = float64(peakUp) / float64(optDelta*ff)
	return r
}

func roundUp(v, to int) int { return (v + to - 1) / to * to }

// printBWReport writes one result line (print_full_bw_report).
func printBWReport(w io.Writer, r BWReport, gbits bool) {
	if gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// printBW writes one bandwidth result: the table's line, or with
// --output the one figure asked for, as C's "%lf\n".
func (t *test) printBW(r BWReport) {
	switch t.p.Output {
	case OutputBW:
		fmt.Fprintf(t.stdout, "%f\n", r.BWAvg)
	case OutputMR:
		fmt.Fprintf(t.stdout, "%f\n", r.MsgRate)
	default:
		printBWReport(t.out, r, t.p.ReportGbits)
	}
}

// plus is a bidirectional run's result: this side's figures and the
// peer's added up, as print_full_bw_report adds them (size and
// iterations this side's).
func (r BWReport) plus(rem BWReport) BWReport {
	r.BWPeak += rem.BWPeak
	r.BWAvg += rem.BWAvg
	r.MsgRate += rem.MsgRate
	return r
}

// latTail is how many of the largest samples the statistics leave out
// (LAT_MEASURE_TAIL).
const latTail = 2

// LatReport are the figures of a latency run, in microseconds.
type LatReport struct {
	Size, Iters                   int
	Min, Max, Typical, Avg, Stdev float64
	P99, P999                     float64
	Unsorted                      []float64 // every sample, in order
}

// latReport computes print_report_lat's figures from the post times of a
// ping-pong run: each sample is the time between two posts, divided by
// rttFactor (2 when a sample is a round trip of two messages).
func latReport(size int, posted []int64, rttFactor int) (LatReport, error) {
	r := LatReport{Size: size, Iters: len(posted)}
	n := len(posted) - 1
	if n-latTail < 1 {
		return r, fmt.Errorf("perftest: %d iterations are too few for latency statistics", len(posted))
	}
	delta := make([]int64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	q := float64(cyclesPerUsec * rttFactor)
	for _, d := range delta {
		r.Unsorted = append(r.Unsorted, float64(d)/q)
	}
	sort.Slice(delta, func(i, j int) bool { return delta[i] < delta[j] })
	m := n - latTail
	var median int64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += float64(d) / q
	}
	r.Avg = sum / float64(m)
	// perftest squares each deviation truncated to an integer.
	var ss float64
	for _, d := range delta[:m] {
		dev := int(r.Avg - float64(d)/q)
		ss += float64(dev * dev)
	}
	r.Stdev = math.Sqrt(ss / float64(m))
	r.Min = float64(delta[0]) / q
	r.Max = float64(delta[m]) / q
	r.Typical = float64(median) / q
	r.P99 = float64(delta[int(math.Ceil(float64(m)*0.99))]) / q
	r.P999 = float64(delta[int(math.Ceil(float64(m)*0.999))]) / q
	return r, nil
}

// printLatReport writes one result line (print_report_lat).
func printLatReport(w io.Writer, r LatReport) {
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

// cHex formats v as C's "%#0Nx" does: zero without the 0x prefix.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", width-2, v) // C counts the prefix in the width
}

// printDest writes the address lines of a QP (ctx_print_pingpong_data).
func printDest(w io.Writer, side string, d *Dest, verb Verb) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	switch verb {
	case Read:
		fmt.Fprintf(w, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case Write:
		fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, " GID: ")
	for i, g := range d.GID {
		if i > 0 {
			fmt.Fprint(w, ":")
		}
		fmt.Fprintf(w, "%02d", g)
	}
	fmt.Fprintln(w)
}

var connNames = map[verbs.QPType]string{verbs.QPTypeRC: "RC", verbs.QPTypeUC: "UC", verbs.QPTypeUD: "UD"}

// printTestInfo writes the header block (ctx_print_test_info) as perftest
// 4.5 prints it on an rxe host: no relaxed ordering on write_lat, the
// legacy post-send API.
func printTestInfo(w io.Writer, p *Params, mtu verbs.MTU, gidIndex, outReads int) {
	fmt.Fprint(w, resultLine)
	fmt.Fprintf(w, "                    %s ", verbNames[p.Tool.Verb])
	if p.Tool.Verb == Atomic {
		fmt.Fprintf(w, "%s ", atomicNames[p.Atomic])
	}
	if p.Tool.Kind == BW {
		if p.Duplex {
			fmt.Fprint(w, "Bidirectional ")
		}
		if p.PostList > 1 {
			fmt.Fprint(w, "Post List ")
		}
		fmt.Fprint(w, "BW ")
	} else {
		fmt.Fprint(w, "Latency ")
	}
	fmt.Fprint(w, "Test\n")
	if p.Events {
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", p.Device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", p.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", p.NumQPs)
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : OFF\n", connNames[p.Conn])
	relax := "ON"
	if p.Tool.Verb == Write && p.Tool.Kind == Lat {
		relax = "OFF"
	}
	fmt.Fprintf(w, " PCIe relax order: %s\n", relax)
	fmt.Fprint(w, " ibv_wr* API     : OFF\n")
	if p.Client() || p.Duplex {
		fmt.Fprintf(w, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", p.PostList)
	}
	if p.Tool.Verb == Send && (!p.Client() || p.Duplex) {
		fmt.Fprintf(w, " RX depth        : %d\n", p.RxDepth)
	}
	if p.Tool.Kind == BW {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", mtu.Bytes())
	fmt.Fprint(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", gidIndex)
	if p.Tool.Verb != Read && p.Tool.Verb != Atomic {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", p.Inline)
	} else {
		fmt.Fprintf(w, " Outstand reads  : %d\n", outReads)
	}
	if !p.RDMACM {
		fmt.Fprint(w, " rdma_cm QPs\t : OFF\n")
		fmt.Fprint(w, " Data ex. method : Ethernet\n")
		fmt.Fprint(w, resultLine)
		return
	}
	fmt.Fprint(w, " rdma_cm QPs\t : ON\n")
	fmt.Fprint(w, " Data ex. method : rdma_cm")
	if p.TOS >= 0 {
		fmt.Fprintf(w, " \tTOS    : %d", p.TOS)
	}
	if !p.Client() {
		// perftest prints it once the QPs are connected already.
		fmt.Fprint(w, "\n"+resultLine)
		fmt.Fprint(w, " Waiting for client rdma_cm QP to connect\n")
		fmt.Fprint(w, " Please run the same command with the IB/RoCE interface IP")
	}
	fmt.Fprint(w, "\n"+resultLine)
}
