package perftest

// The bandwidth tests: ib_write_bw, ib_read_bw, ib_atomic_bw (the client
// moves data, the server's CPU idles) and ib_send_bw (both sides measure).

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rnicd/rnicd/verbs"
)

func (t *test) printBWHeader() {
	fmt.Fprint(t.out, resultLine)
	if t.p.ReportGbits {
		fmt.Fprint(t.out, resultFmtG)
	} else {
		fmt.Fprint(t.out, resultFmt)
	}
	fmt.Fprint(t.out, "\n")
}

// rdmaBW is ib_write_bw, ib_read_bw and ib_atomic_bw: the client moves
// data to or from the server's memory, the server's CPU idles until the
// client reports its result. With -b both sides move data and each
// prints the sum of the two sides' figures.
func (t *test) rdmaBW() error {
	p := t.p
	// The last handshake comes once both sides are in RTR.
	if err := t.establish(rdmaBWPreamble); err != nil {
		return err
	}
	t.printBWHeader()
	if p.RunInfinitely {
		return t.rdmaBWInfinitely()
	}
	if !p.Client() && !p.Duplex {
		// The client's handshake says its run is over.
		if err := t.ex.barrier(t.res.my); err != nil {
			return err
		}
		rep, err := t.ex.conn.ExchangeBWReports(BWReport{})
		if err != nil {
			return err
		}
		t.printBW(rep)
		if err := t.ex.close(t.res.my); err != nil {
			return err
		}
		fmt.Fprint(t.out, resultLine)
		return nil
	}
	var last BWReport
	for _, size := range t.sizes() {
		t.res.size = size
		if p.Duplex {
			// Both sides start each size together.
			if err := t.ex.barrier(t.res.my); err != nil {
				return err
			}
		}
		rep, err := t.runBWClient()
		if err != nil {
			return err
		}
		if p.Duplex {
			// perftest 4.6 and later meet again after each size of -a.
			if p.All {
				if err := t.ex.barrier(t.res.my); err != nil {
					return err
				}
			}
			rem, err := t.ex.conn.ExchangeBWReports(rep)
			if err != nil {
				return err
			}
			rep = rep.plus(rem)
		}
		t.printBW(rep)
		last = rep
	}
	fmt.Fprint(t.out, resultLine)
	if p.Duplex {
		return t.ex.close(t.res.my)
	}
	if err := t.ex.barrier(t.res.my); err != nil {
		return err
	}
	if _, err := t.ex.conn.ExchangeBWReports(last); err != nil {
		return err
	}
	return t.ex.close(t.res.my)
}

// rdmaBWInfinitely is a --run_infinitely run of rdmaBW: the client (and
// with -b the server too) posts until Config.Stop and prints a line
// every -D seconds; a server that does not send waits for the client's
// end and says the client closed the connection, as perftest does.
func (t *test) rdmaBWInfinitely() error {
	p := t.p
	if !p.Client() && !p.Duplex {
		// A client killed instead of stopped (perftest 4.5's has no
		// SIGINT handler) just hangs up: that is the end of its run too.
		err := t.ex.barrier(t.res.my)
		if err == nil {
			_, err = t.ex.conn.ExchangeBWReports(BWReport{})
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			fmt.Fprint(t.stdout, " Client closed connection\n")
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprint(t.stdout, " Client closed connection\n")
		if err := t.ex.close(t.res.my); err != nil {
			return err
		}
		fmt.Fprint(t.out, resultLine)
		return nil
	}
	rep, err := t.runBWClient()
	if err != nil {
		return err
	}
	fmt.Fprint(t.out, resultLine)
	if p.Duplex {
		// perftest's -b --run_infinitely has no way out but the end of
		// the process; a stopped side just closes the connection.
		t.ex.conn.Close()
		return nil
	}
	if err := t.ex.barrier(t.res.my); err != nil {
		return err
	}
	if _, err := t.ex.conn.ExchangeBWReports(rep); err != nil {
		return err
	}
	return t.ex.close(t.res.my)
}

// sendBW is ib_send_bw: the server posts receives, the client SENDs;
// each side measures and prints its own figures.
func (t *test) sendBW() error {
	p := t.p
	if err := t.establish(sendPreamble); err != nil {
		return err
	}
	t.printBWHeader()
	for _, size := range t.sizes() {
		t.res.size = size
		var posted []int
		if !p.Client() {
			var err error
			if posted, err = t.res.postRecvs(); err != nil {
				return err
			}
		}
		// The client must not send before the receives are posted (UC
		// and UD would drop).
		if err := t.ex.barrier(t.res.my); err != nil {
			return err
		}
		var rep BWReport
		var err error
		if p.Client() {
			rep, err = t.runBWClient()
		} else {
			rep, err = t.runBWServer(posted)
		}
		if err != nil {
			return err
		}
		printBWReport(t.out, rep, p.ReportGbits)
		if p.All {
			if err := t.ex.barrier(t.res.my); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(t.out, resultLine)
	return t.ex.close(t.res.my)
}

// durationClock walks the states of a -D run: warm-up for the margin,
// sampling, cool-down for the margin, end (catch_alarm's states).
type durationClock struct {
	start, sample, stop, end time.Time
}

func newDurationClock(p *Params) durationClock {
	now := time.Now()
	m := time.Duration(p.Margin) * time.Second
	d := time.Duration(p.Duration) * time.Second
	return durationClock{start: now, sample: now.Add(m), stop: now.Add(d - m), end: now.Add(d)}
}

// runBWClient posts iterations WRs on every QP, tx_depth at most in
// flight per QP, one signaled WR every cq_mod (run_iter_bw), and
// computes the report.
func (t *test) runBWClient() (BWReport, error) {
	p := t.p
	n := len(t.res.qps)
	iters := p.Iters
	tot := iters * n
	slots := tot
	if p.NoPeak {
		slots = 1
	}
	s := bwSamples{posted: make([]int64, slots), completed: make([]int64, slots)}
	scnt := make([]int, n)
	ccnt := make([]int, n)
	totS, totC := 0, 0
	cq := t.newPoller(t.res.sendCQ, 16)
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }
	duration := p.Duration > 0
	var dc durationClock
	var sampled uint64
	var sampleStart, sampleEnd int64
	if duration {
		dc = newDurationClock(p)
	}
	if p.NoPeak && !duration {
		s.posted[0] = now()
	}
	// --run_infinitely: a report every -D seconds of what completed in
	// it (print_bw_infinite_mode); with -b each WR counts twice, for
	// the peer's that crossed it (perftest's run_inf_bi_factor).
	infinite := p.RunInfinitely
	var next time.Time
	var intervalStart int64
	var intervalIters uint64
	if infinite {
		next = time.Now().Add(time.Duration(p.Duration) * time.Second)
	}
	wrs := make([]verbs.SendWR, 0, p.PostList)
	for {
		if infinite {
			if tn := time.Now(); !tn.Before(next) {
				end := now()
				t.printBW(t.intervalReport(intervalIters, end-intervalStart))
				intervalStart, intervalIters = end, 0
				next = next.Add(time.Duration(p.Duration) * time.Second)
			}
			select {
			case <-t.cfg.Stop:
				return BWReport{Size: uint64(t.res.size)}, nil
			default:
			}
		} else if duration {
			tn := time.Now()
			if sampleStart == 0 && !tn.Before(dc.sample) {
				sampleStart = now()
			}
			if sampleEnd == 0 && !tn.Before(dc.stop) {
				sampleEnd = now()
			}
			if !tn.Before(dc.end) {
				break
			}
		} else if totS >= tot && totC >= tot {
			break
		}
		for i, qp := range t.res.qps {
			// -l: post_list WRs a call, the last one signaled (the
			// CQ moderation divides the list), all stamped at the call.
			for (duration || scnt[i] < iters) && scnt[i]-ccnt[i]+p.PostList <= p.TxDepth {
				var tp int64
				if !p.NoPeak {
					tp = now()
				}
				wrs = wrs[:0]
				for j := 0; j < p.PostList; j++ {
					k := scnt[i] + j
					signaled := p.CQMod == 1 || k%p.CQMod == p.CQMod-1 || (!duration && k == iters-1)
					if !p.NoPeak {
						s.posted[totS+j] = tp
					}
					wrs = append(wrs, t.res.sendWR(i, k, signaled))
				}
				if err := qp.PostSend(wrs); err != nil {
					return BWReport{}, fmt.Errorf("%w: post send on QP %#x, scnt=%d: %v", ErrRun, qp.QPN, scnt[i], err)
				}
				scnt[i] += p.PostList
				totS += p.PostList
			}
		}
		if totC < tot || (duration && totC < totS) {
			wcs, err := cq.poll(16)
			if err != nil {
				return BWReport{}, err
			}
			for j := range wcs {
				wc := &wcs[j]
				if wc.Status != verbs.WCSuccess {
					return BWReport{}, wcError(wc, "send")
				}
				if int(wc.WRID) >= n {
					return BWReport{}, fmt.Errorf("%w: completion for unknown wr_id %d", ErrRun, wc.WRID)
				}
				ccnt[wc.WRID] += p.CQMod
				totC += p.CQMod
				if !p.NoPeak {
					s.completed[min(totC, tot)-1] = now()
				}
				if duration && sampleStart != 0 && sampleEnd == 0 {
					sampled += uint64(p.CQMod)
				}
				intervalIters += uint64(p.CQMod)
			}
		}
	}
	if duration {
		s.posted[0], s.completed[0] = sampleStart, sampleEnd
		return bwReport(uint64(t.res.size), sampled, s, p.CQMod, true, p.ReportGbits), nil
	}
	if p.NoPeak {
		s.completed[0] = now()
	}
	return bwReport(uint64(t.res.size), uint64(tot), s, p.CQMod, p.NoPeak, p.ReportGbits), nil
}

// intervalReport is the line of one --run_infinitely interval of d
// nanoseconds in which iters WRs completed (print_report_bw with
// RUN_INFINITELY: no peak; with -b the bytes and messages count twice).
func (t *test) intervalReport(iters uint64, d int64) BWReport {
	factor := uint64(1)
	if t.p.Duplex {
		factor = 2
	}
	s := bwSamples{posted: []int64{0}, completed: []int64{max(d, 1)}}
	r := bwReport(factor*uint64(t.res.size), iters, s, t.p.CQMod, true, t.p.ReportGbits)
	r.Size = uint64(t.res.size)
	r.MsgRate *= float64(factor)
	return r
}

// runBWServer takes iterations receives per QP, re-posting as long as
// more are to come (run_iter_bw_server); the clock starts at the first
// one.
func (t *test) runBWServer(posted []int) (BWReport, error) {
	p := t.p
	n := len(t.res.qps)
	tot := p.Iters * n
	duration := p.Duration > 0
	cq := t.newPoller(t.res.recvCQ, 16)
	var start, end time.Time
	var dc durationClock
	rcnt := 0
	var sampled uint64
	var sampleStart, sampleEnd time.Time
	for duration || rcnt < tot {
		if duration && !start.IsZero() {
			tn := time.Now()
			if sampleStart.IsZero() && !tn.Before(dc.sample) {
				sampleStart = tn
			}
			if sampleEnd.IsZero() && !tn.Before(dc.stop) {
				sampleEnd = tn
			}
			if !tn.Before(dc.end) {
				break
			}
		}
		// In a -D run the client stops sending at its own end: wait for
		// completions no longer than this side's end.
		var until time.Time
		if duration && !start.IsZero() {
			until = dc.end
		}
		wcs, err := cq.pollUntil(16, until)
		if err != nil {
			fmt.Fprintf(t.cfg.Stderr, " Did not get Message for %v, exiting..\n Total Received=%d, Total Iters Required=%d\n", t.idle, rcnt, tot)
			return BWReport{}, err
		}
		if start.IsZero() {
			start = time.Now()
			dc = newDurationClock(p)
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return BWReport{}, wcError(wc, "receive")
			}
			i := int(wc.WRID)
			if i >= n {
				return BWReport{}, fmt.Errorf("%w: completion for unknown wr_id %d", ErrRun, wc.WRID)
			}
			rcnt++
			if duration && !sampleStart.IsZero() && sampleEnd.IsZero() {
				sampled++
			}
			if duration || posted[i]+1 <= p.Iters {
				if err := t.res.postRecv(i, posted[i]); err != nil {
					return BWReport{}, fmt.Errorf("%w: %v", ErrRun, err)
				}
				posted[i]++
			}
		}
	}
	end = time.Now()
	if duration {
		s := bwSamples{posted: []int64{0}, completed: []int64{int64(sampleEnd.Sub(sampleStart))}}
		return bwReport(uint64(t.res.size), sampled, s, p.CQMod, true, p.ReportGbits), nil
	}
	s := bwSamples{posted: []int64{0}, completed: []int64{int64(end.Sub(start))}}
	return bwReport(uint64(t.res.size), uint64(tot), s, p.CQMod, true, p.ReportGbits), nil
}
