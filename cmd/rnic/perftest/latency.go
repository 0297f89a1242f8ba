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

// measure runs one latency measurement per message size and prints the
// table. run returns each iteration's post time; the report divides an
// iteration's time by rttFactor (2 for the ping-pongs, whose iteration is
// a round trip, as perftest reports them).
func (t *test) measure(run func() ([]int64, error), rttFactor int) error {
	t.printLatHeader()
	for _, size := range t.sizes() {
		t.res.size = size
		posted, err := run()
		if err != nil {
			return err
		}
		if err := t.printLat(posted, rttFactor); err != nil {
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
	// write_lat ends without the closing handshake.
	return nil
}

func (t *test) runLatWrite() ([]int64, error) {
	p := t.p
	iters := p.Iters
	posted := make([]int64, iters)
	postAt := t.res.size - 1
	pollAt := p.NumQPs*t.res.bufLen + t.res.size - 1
	cq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	scnt, ccnt, rcnt := 0, 0, 0
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !p.Client()) {
			rcnt++
			if err := t.waitByte(pollAt, byte(rcnt)); err != nil {
				return nil, err
			}
		}
		if scnt < iters {
			posted[scnt] = int64(time.Since(epoch))
			scnt++
			t.res.buf[postAt] = byte(scnt)
			wrs[0] = t.res.sendWR(0, 0, true)
			if err := t.res.qps[0].PostSend(wrs); err != nil {
				return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
		}
		if ccnt < iters {
			if err := cq.pollOne("send"); err != nil {
				return nil, err
			}
			ccnt++
		}
	}
	return posted, nil
}

// waitByte spins until buf[off] is v: the peer's WRITE has landed. It
// gives up after the idle timeout.
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
func (t *test) waitByte(off int, v byte) error {
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
		if spins%4096 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("%w: the peer's WRITE %d did not arrive in %v", ErrRun, v, t.idle)
		}
	}
	return nil
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

func (t *test) runLatRead() ([]int64, error) {
	iters := t.p.Iters
	posted := make([]int64, iters)
	cq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	for scnt := 0; scnt < iters; scnt++ {
		posted[scnt] = int64(time.Since(epoch))
		wrs[0] = t.res.sendWR(0, 0, true)
		if err := t.res.qps[0].PostSend(wrs); err != nil {
			return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
		}
		if err := cq.pollOne("send"); err != nil {
			return nil, err
		}
	}
	return posted, nil
}

// sendLat is ib_send_lat: SEND ping-pong, the client first.
func (t *test) sendLat() error {
	if err := t.establish(sendPreamble); err != nil {
		return err
	}
	err := t.measure(func() ([]int64, error) {
		if _, err := t.res.postRecvs(); err != nil {
			return nil, err
		}
		// The client must not send before the server's receives are
		// posted.
		if err := t.ex.barrier(t.res.my); err != nil {
			return nil, err
		}
		return t.runLatSend()
	}, 2)
	if err != nil {
		return err
	}
	return t.ex.close(t.res.my)
}

func (t *test) runLatSend() ([]int64, error) {
	p := t.p
	iters := p.Iters
	posted := make([]int64, iters)
	rcq := t.newPoller(t.res.recvCQ, 1)
	scq := t.newPoller(t.res.sendCQ, 1)
	wrs := make([]verbs.SendWR, 1)
	epoch := time.Now()
	scnt, rcnt := 0, 0
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && p.Client()) {
			if err := rcq.pollOne("receive"); err != nil {
				return nil, err
			}
			rcnt++
			if rcnt+p.RxDepth <= iters {
				if err := t.res.postRecv(0, 0); err != nil {
					return nil, fmt.Errorf("%w: %v", ErrRun, err)
				}
			}
		}
		if scnt < iters {
			posted[scnt] = int64(time.Since(epoch))
			scnt++
			signaled := scnt%p.CQMod == 0 || scnt == iters
			wrs[0] = t.res.sendWR(0, 0, signaled)
			if err := t.res.qps[0].PostSend(wrs); err != nil {
				return nil, fmt.Errorf("%w: post send: scnt=%d: %v", ErrRun, scnt, err)
			}
			if signaled {
				if err := scq.pollOne("send"); err != nil {
					return nil, err
				}
			}
		}
	}
	return posted, nil
}
