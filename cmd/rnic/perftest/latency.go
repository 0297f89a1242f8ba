package perftest

// The latency tests: ib_write_lat, ib_read_lat and ib_send_lat, one
// message in flight, each iteration's post time kept for the report.

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/verbs"
)

func (t *test) printLatHeader() {
	fmt.Fprint(t.out, resultLine)
	fmt.Fprint(t.out, resultFmtLat)
	fmt.Fprint(t.out, "\n")
}

// latRun is what one latency run measured: each iteration's post time,
// or with -D the iterations completed while sampling and how long the
// sampling lasted.
type latRun struct {
	posted  []int64
	sampled uint64
	window  time.Duration
}

// measure runs one latency measurement per message size and prints the
// table. run returns each iteration's post time, or with -D what its
// clock sampled (one size: -a and -D do not go together); the report
// divides an iteration's time by rttFactor (2 for the ping-pongs, whose
// iteration is a round trip, as perftest reports them).
func (t *test) measure(run func() (latRun, error), rttFactor int) error {
	if t.p.Duration > 0 {
		fmt.Fprint(t.out, resultLine)
		fmt.Fprint(t.out, resultFmtLatDur)
		fmt.Fprint(t.out, "\n")
	} else {
		t.printLatHeader()
	}
	for _, size := range t.sizes() {
		t.res.size = size
		r, err := run()
		if err != nil {
			return err
		}
		if t.p.Duration > 0 {
			err = t.printLatDuration(r, rttFactor)
		} else {
			err = t.printLat(r.posted, rttFactor)
		}
		if err != nil {
			return err
		}
	}
	fmt.Fprint(t.out, resultLine)
	return nil
}

func (t *test) printLat(posted []int64, rttFactor int) error {
	r, err := latReport(t.res.size, posted, rttFactor)
	if err != nil {
		return err
	}
	if t.p.Unsorted {
		// The samples whatever the verbosity, as perftest prints them.
		fmt.Fprintln(t.stdout, "#, usec")
		for i, v := range r.Unsorted {
			fmt.Fprintf(t.stdout, "%d, %g\n", i+1, v)
		}
		t.printLatHeader()
	}
	if t.p.Output == OutputLat {
		fmt.Fprintf(t.stdout, "%f\n", r.Avg)
		return nil
	}
	printLatReport(t.out, r)
	return nil
}

// printLatDuration reports a -D run as perftest's
// print_report_lat_duration: the average iteration over the sampling
// window, divided by rttFactor, and iterations a second.
func (t *test) printLatDuration(r latRun, rttFactor int) error {
	if r.sampled == 0 || r.window <= 0 {
		return fmt.Errorf("%w: no iteration completed in the %v sampled", ErrRun, r.window)
	}
	t.iterTime = r.window / time.Duration(r.sampled)
	us := float64(r.window) / cyclesPerUsec
	lat := us / float64(rttFactor) / float64(r.sampled)
	tps := float64(r.sampled) / r.window.Seconds()
	if t.p.Output == OutputLat {
		fmt.Fprintf(t.stdout, "%f\n", lat)
		return nil
	}
	fmt.Fprintf(t.out, " %-7d       %d            %-7.2f        %-7.2f\n", t.res.size, r.sampled, lat, tps)
	return nil
}

// latClock is a latency run's -D clock (durationClock's states, as
// perftest's catch_alarm walks them): it counts the iterations completed
// while sampling. Without -D it is off and every method does nothing.
type latClock struct {
	on       bool
	started  bool
	p        *Params
	dc       durationClock
	from, to time.Time // when sampling was seen to begin and end
	sampled  uint64
}

func (t *test) newLatClock() *latClock { return &latClock{on: t.p.Duration > 0, p: t.p} }

// start starts the clock: write_lat and read_lat at their first post,
// send_lat at its first receive (set_on_first_rx_packet).
func (c *latClock) start() {
	if c.on && !c.started {
		c.started, c.dc = true, newDurationClock(c.p)
	}
}

// ended looks at the time and reports whether the run is over.
func (c *latClock) ended() bool {
	if !c.started {
		return false
	}
	now := time.Now()
	if c.from.IsZero() && !now.Before(c.dc.sample) {
		c.from = now
	}
	if c.to.IsZero() && !now.Before(c.dc.stop) {
		c.to = now
	}
	return !now.Before(c.dc.end)
}

// end is when the run ends, zero while the clock has not started (and
// without -D): a wait for the peer may last until then.
func (c *latClock) end() time.Time {
	if !c.started {
		return time.Time{}
	}
	return c.dc.end
}

// count counts an iteration completed now if the clock is sampling.
func (c *latClock) count() {
	c.ended()
	if !c.from.IsZero() && c.to.IsZero() {
		c.sampled++
	}
}

// result is the run's latRun with posted, the post times of an
// iteration run.
func (c *latClock) result(posted []int64) latRun {
	// A loop that ended in a wait given up at the end has not looked at
	// the clock since: the stop it passed is seen now.
	c.ended()
	return latRun{posted: posted, sampled: c.sampled, window: c.to.Sub(c.from)}
}

// more reports whether a run's loop goes on: with -D until its end, else
// while owed (iterations are still to post, complete or receive).
func (c *latClock) more(owed bool) bool {
	if c.on {
		return !c.ended()
	}
	return owed
}

// writeLat is ib_write_lat: each side WRITEs a message whose last byte is
// its iteration count into the peer's buffer and spins on its own
// buffer's last byte for the peer's; the server writes first.
func (t *test) writeLat() error {
	if err := t.establish(rdmaLatPreamble); err != nil {
		return err
	}
	if err := t.measure(t.runLatWrite, 2); err != nil {
		return err
	}
	// write_lat ends without the closing handshake. A -D run ends on each
	// side's own clock, so the peer, its clock a little behind, may post
	// one more WRITE after this side stopped: this side's QP must still be
	// there to ACK it, or the peer's last completion is RETRY_EXC_ERR and
	// its test fails (Debian's ib_write_lat -D 2 through rnicd did, in
	// both roles, against this tool tearing its QP down at once). The QP
	// stays a few of the run's iterations; perftest's own teardown takes
	// about as long.
	if t.p.Duration > 0 {
		time.Sleep(lingerAfterDuration(t.iterTime))
	}
	return nil
}

// lingerAfterDuration is how long write_lat keeps its QP after a -D run:
// twenty iterations, at least 100 ms, at most 2 s.
func lingerAfterDuration(iter time.Duration) time.Duration {
	return min(max(20*iter, 100*time.Millisecond), 2*time.Second)
}

func (t *test) runLatWrite() (latRun, error) {
	p := t.p
	iters := p.Iters
	d := t.newLatClock()
	var posted []int64
	if !d.on {
		posted = make([]int64, iters)
	}
	postAt := t.res.size - 1
	pollAt := p.NumQPs*t.res.bufLen + t.res.size - 1
	cq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	d.start()
	scnt, ccnt, rcnt := 0, 0, 0
	for d.more(scnt < iters || ccnt < iters || rcnt < iters) {
		if (d.on || rcnt < iters) && !(scnt < 1 && !p.Client()) {
			rcnt++
			if came, err := t.waitByte(pollAt, byte(rcnt), d.end()); err != nil {
				return latRun{}, err
			} else if !came {
				break // the run's end: the peer's may have come first
			}
		}
		if d.on || scnt < iters {
			if !d.on {
				posted[scnt] = int64(time.Since(epoch))
			}
			scnt++
			t.res.buf[postAt] = byte(scnt)
			wrs[0] = t.res.sendWR(0, 0, true)
			if err := t.res.qps[0].PostSend(wrs); err != nil {
				return latRun{}, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
		}
		if d.on && d.ended() {
			break
		}
		if d.on || ccnt < iters {
			if err := cq.pollOne("send"); err != nil {
				return latRun{}, err
			}
			ccnt++
			d.count()
		}
	}
	return d.result(posted), nil
}

// waitByte spins until buf[off] is v: the peer's WRITE has landed. It
// gives up after the idle timeout, and without an error at end if end
// is set (a -D run's), reporting whether the byte came.
//
// With an in-process NIC each empty look first runs the NIC's receive
// path on this goroutine (BusyPoll) and, if that found nothing, lets the
// NIC's own goroutines run (runtime.Gosched). With a daemon it spins on
// the byte as perftest does and, after spinBeforeYield empty looks, gives
// the core away at each one (sched_yield, a raw system call), as
// verbs.CQ.Poll does, so that on 2 cores the daemons' engines get
// theirs. A runtime.Gosched there did not give the core to them: it
// sent the goroutine through Go's scheduler at every look, now and then
// waking another thread to take it over (1,439 futex calls in one rnic
// ib_write_lat -s 2 -n 20000 client, 232 with the yield). Ten runs of
// each, alternated, through two rnicd on the 2-core machine: typical
// 14.4-22.6 us against 14.7-20.3, the same; average 17.5-29.6 against
// 17.9-25.2; the slowest iteration 1.6-6.0 ms against 0.3-1.5 ms
// (2026-11-27).
func (t *test) waitByte(off int, v byte, end time.Time) (bool, error) {
	deadline := time.Now().Add(t.idle)
	local := t.ctx.Local()
	for spins := 1; t.res.buf[off] != v; spins++ {
		if local {
			if t.ctx.BusyPoll() == 0 {
				runtime.Gosched()
			}
		} else if spins > spinBeforeYield {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		if spins%256 != 0 {
			continue
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return false, nil
		}
		if spins%4096 == 0 && now.After(deadline) {
			return false, fmt.Errorf("%w: the peer's WRITE %d did not arrive in %v", ErrRun, v, t.idle)
		}
	}
	return true, nil
}

// spinBeforeYield is how many empty looks at a byte spin before each look
// yields the core: verbs.CQ.Poll's 64.
const spinBeforeYield = 64

// readLat is ib_read_lat: the client READs the server's buffer, one READ
// at a time; the server only takes part in the exchange.
func (t *test) readLat() error {
	p := t.p
	if err := t.establish(rdmaLatPreamble); err != nil {
		return err
	}
	if !p.Client() {
		if err := t.ex.close(t.res.my); err != nil {
			return err
		}
		fmt.Fprint(t.out, resultLine)
		return nil
	}
	if err := t.measure(t.runLatRead, 1); err != nil {
		return err
	}
	return t.ex.close(t.res.my)
}

func (t *test) runLatRead() (latRun, error) {
	iters := t.p.Iters
	d := t.newLatClock()
	var posted []int64
	if !d.on {
		posted = make([]int64, iters)
	}
	cq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	d.start()
	for scnt := 0; d.more(scnt < iters); scnt++ {
		if !d.on {
			posted[scnt] = int64(time.Since(epoch))
		}
		wrs[0] = t.res.sendWR(0, 0, true)
		if err := t.res.qps[0].PostSend(wrs); err != nil {
			return latRun{}, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
		}
		if err := cq.pollOne("send"); err != nil {
			return latRun{}, err
		}
		d.count()
	}
	return d.result(posted), nil
}

// sendLat is ib_send_lat: SEND ping-pong, the client first.
func (t *test) sendLat() error {
	if err := t.establish(sendPreamble); err != nil {
		return err
	}
	err := t.measure(func() (latRun, error) {
		if _, err := t.res.postRecvs(); err != nil {
			return latRun{}, err
		}
		// The client must not send before the server's receives are
		// posted.
		if err := t.ex.barrier(t.res.my); err != nil {
			return latRun{}, err
		}
		return t.runLatSend()
	}, 2)
	if err != nil {
		return err
	}
	return t.ex.close(t.res.my)
}

func (t *test) runLatSend() (latRun, error) {
	p := t.p
	iters := p.Iters
	d := t.newLatClock()
	var posted []int64
	if !d.on {
		posted = make([]int64, iters)
	}
	rcq := t.newPoller(t.res.recvCQ, 1)
	scq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	scnt, rcnt := 0, 0
	for d.more(scnt < iters || rcnt < iters) {
		if (d.on || rcnt < iters) && !(scnt < 1 && p.Client()) {
			wcs, err := rcq.pollUntil(1, d.end())
			if err != nil {
				return latRun{}, err
			}
			if len(wcs) == 0 {
				break // the run's end: the peer's may have come first
			}
			if wcs[0].Status != verbs.WCSuccess {
				return latRun{}, wcError(&wcs[0], "receive")
			}
			d.start()
			rcnt++
			d.count()
			if d.on || rcnt+p.RxDepth <= iters {
				if err := t.res.postRecv(0, 0); err != nil {
					return latRun{}, fmt.Errorf("%w: %v", ErrRun, err)
				}
			}
		}
		if d.on || scnt < iters {
			if !d.on {
				posted[scnt] = int64(time.Since(epoch))
			}
			scnt++
			signaled := scnt%p.CQMod == 0 || !d.on && scnt == iters
			if d.on && d.ended() {
				break
			}
			wrs[0] = t.res.sendWR(0, 0, signaled)
			if err := t.res.qps[0].PostSend(wrs); err != nil {
				return latRun{}, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
			if signaled {
				if err := scq.pollOne("send"); err != nil {
					return latRun{}, err
				}
			}
		}
	}
	return d.result(posted), nil
}
