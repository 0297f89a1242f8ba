package lend

import (
	"bytes"
	"maps"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// answerWait bounds how long the daemon waits for borrowers to publish a
// snapshot: a borrower that does not answer in time (stopped in a
// debugger, hostile) is shown as it last published.
const answerWait = 100 * time.Millisecond

// maxDepartedNames bounds the counter names kept of borrowers that have
// gone: a device has about 60, and every borrower the same ones.
const maxDepartedNames = 4 * MaxCounters

// drainIdle is how long the drainer sleeps when the rings were empty,
// while a trace or capture is on: the rings hold 10 ms of a busy QP.
const drainIdle = time.Millisecond

// Registry is the daemon's end of every area it lent: it tells the
// borrowers whether the daemon traces or captures and which faults to
// apply, drains their rings into the daemon's tracer and capture, and
// collects their state for the daemon's listings. The zero value is not
// usable; it is safe for concurrent use.
type Registry struct {
	probe *trace.Probe // the daemon NIC's: borrowers' events join its trace

	mu      sync.Mutex
	lents   map[*Lent]struct{}
	traceOn bool
	capture ibudp.Tap
	tx, rx  ibudp.Faults // what every borrower applies (new ones too)
	// departed sums the last counters of borrowers that have gone, so
	// that the daemon's counters, theirs included, never go back.
	departed Snapshot
	wake     chan struct{}
	done     chan struct{}
	closed   bool

	snapMu sync.Mutex // one collection at a time
	wg     sync.WaitGroup
}

// Lent is one borrower's area, as the daemon holds it.
type Lent struct {
	a           *Area
	PID         uint32 // the borrower's process
	Comm        string // and its name
	First, Last uint32 // its QPN block

	mu      sync.Mutex // held while the area is used; Remove takes it to unmap
	gone    bool
	last    Snapshot // the newest consistent snapshot read
	scratch []byte
	errs    uint64 // corrupt rings and snapshots seen
}

// Snapshot is what a borrower published.
type Snapshot struct {
	PID      uint32
	Comm     string
	Counters map[string]uint64
	QPs      []QPRow
	Faults   ibudp.FaultStats
}

// NewRegistry returns a registry whose borrowers' trace events join
// probe's (the daemon's device's; nil: the daemon traces nothing).
func NewRegistry(probe *trace.Probe) *Registry {
	r := &Registry{probe: probe, lents: map[*Lent]struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		departed: Snapshot{Counters: map[string]uint64{}}}
	if probe != nil {
		probe.Tracer().OnSwitch(r.setTrace)
	}
	r.wg.Add(1)
	go r.drainer()
	return r
}

// Close stops the drainer and unmaps every area.
func (r *Registry) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	lents := r.lents
	r.lents = map[*Lent]struct{}{}
	r.mu.Unlock()
	if r.probe != nil {
		r.probe.Tracer().OnSwitch(func(bool) {})
	}
	close(r.done)
	r.wg.Wait()
	for l := range lents {
		l.unmap()
	}
}

// Add creates the area of a new borrower of QPN block first..last and
// returns its memfd, to hand out and then close.
func (r *Registry) Add(pid uint32, comm string, first, last uint32) (int, *Lent, error) {
	fd, a, err := Create()
	if err != nil {
		return -1, nil, err
	}
	l := &Lent{a: a, PID: pid, Comm: comm, First: first, Last: last, scratch: make([]byte, maxRecord)}
	l.last = Snapshot{PID: pid, Comm: comm, Counters: map[string]uint64{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		a.Close()
		unix.Close(fd)
		return -1, nil, errClosed
	}
	r.setWords(l)
	writeFaults(a, r.tx, r.rx)
	r.lents[l] = struct{}{}
	return fd, l, nil
}

// Remove forgets a borrower that hung up and unmaps its area; its
// counters, as it last published them (at its close, or before it died),
// stay in the daemon's.
func (r *Registry) Remove(l *Lent) {
	r.mu.Lock()
	delete(r.lents, l)
	on, capture := r.traceOn || r.capture != nil, r.capture
	r.mu.Unlock()
	if on {
		// Its last packets and events, written before it hung up.
		r.drain(l, capture, false)
	}
	l.mu.Lock()
	if !l.gone {
		l.read()
	}
	last := l.last
	l.mu.Unlock()
	l.unmap()
	r.snapMu.Lock()
	// Names a borrower made up are kept only while few: a hostile one
	// per connection must not grow the map without bound.
	for k := range last.Counters {
		if _, ok := r.departed.Counters[k]; !ok && len(r.departed.Counters) >= maxDepartedNames {
			delete(last.Counters, k)
		}
	}
	AddCounters(r.departed.Counters, []Snapshot{last})
	AddFaults(&r.departed.Faults, []Snapshot{last})
	r.snapMu.Unlock()
}

func (l *Lent) unmap() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.gone {
		l.gone = true
		l.a.Close()
	}
}

// setWords writes the trace and capture words of l; r.mu is held.
func (r *Registry) setWords(l *Lent) {
	b := func(on bool) uint32 {
		if on {
			return 1
		}
		return 0
	}
	l.a.u32(offTrace).Store(b(r.traceOn))
	l.a.u32(offCapture).Store(b(r.capture != nil))
}

// setTrace is told by the daemon's tracer when it starts or stops
// recording (with the tracer's lock held).
func (r *Registry) setTrace(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.traceOn == on {
		return
	}
	r.traceOn = on
	r.switched()
}

// SetCapture makes every borrower copy its packets to c (the daemon's
// pcap), nil to stop, as rnic.Device.SetCapture does for the daemon's own.
func (r *Registry) SetCapture(c ibudp.Tap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.capture = c
	r.switched()
}

// switched writes every borrower's words and wakes the drainer; r.mu is
// held. A ring that starts being drained drops what a previous trace or
// capture left in it.
func (r *Registry) switched() {
	for l := range r.lents {
		r.setWords(l)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// SetFaults makes every borrower impair its packets as tx and rx say, as
// the daemon's own injector does, and waits (a bounded while) until they
// have.
func (r *Registry) SetFaults(tx, rx ibudp.Faults) {
	r.mu.Lock()
	r.tx, r.rx = tx, rx
	lents := make([]*Lent, 0, len(r.lents))
	for l := range r.lents {
		writeFaults(l.a, tx, rx)
		lents = append(lents, l)
	}
	r.mu.Unlock()
	r.ask(lents)
}

// writeFaults writes the faults under the fault word's sequence lock.
func writeFaults(a *Area, tx, rx ibudp.Faults) {
	w := a.u32(offFault)
	w.Add(1)
	putFaults(a.mem[offFaults:], &tx)
	putFaults(a.mem[offFaults+faultsLen:], &rx)
	w.Add(1)
}

// ask wakes every borrower of lents to answer a request, and waits for
// their answers, at most answerWait in all. It reports nothing: a
// borrower that did not answer keeps its last snapshot.
func (r *Registry) ask(lents []*Lent) {
	gens := make([]uint32, len(lents))
	for i, l := range lents {
		l.mu.Lock()
		if !l.gone {
			w := l.a.u32(offReq)
			gens[i] = w.Add(1)
			futexWake(w)
		}
		l.mu.Unlock()
	}
	deadline := time.Now().Add(answerWait)
	for i, l := range lents {
		l.mu.Lock()
		for !l.gone {
			ans := l.a.u32(offAns)
			v := ans.Load()
			left := time.Until(deadline)
			if int32(v-gens[i]) >= 0 || left <= 0 {
				break
			}
			// Waiting with l.mu held keeps the area mapped; Remove
			// waits at most answerWait.
			futexWait(ans, v, min(left, 10*time.Millisecond))
		}
		l.mu.Unlock()
	}
}

// Snapshots asks every borrower for its state and returns what each
// published, by QPN block, and last the counters of those that have gone
// (a Snapshot with no QPs and no PID).
func (r *Registry) Snapshots() []Snapshot {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	r.mu.Lock()
	lents := make([]*Lent, 0, len(r.lents))
	for l := range r.lents {
		lents = append(lents, l)
	}
	r.mu.Unlock()
	r.ask(lents)
	out := make([]Snapshot, 0, len(lents)+1)
	for _, l := range lents {
		l.mu.Lock()
		if !l.gone {
			l.read()
		}
		out = append(out, l.last)
		l.mu.Unlock()
	}
	sortByBlock(out, lents)
	gone := Snapshot{Counters: maps.Clone(r.departed.Counters), Faults: r.departed.Faults}
	return append(out, gone)
}

// read copies the borrower's snapshot, if it is consistent, into l.last;
// l.mu is held.
func (l *Lent) read() {
	a := l.a
	seq := a.u32(offPubSeq)
	for range 4 {
		s := seq.Load()
		if s&1 != 0 {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		snap := Snapshot{PID: l.PID, Comm: l.Comm, Counters: map[string]uint64{}}
		n := min(int(a.u32(offNCounters).Load()), MaxCounters)
		for i := range n {
			e := a.mem[offCounters+i*counterLen : offCounters+(i+1)*counterLen]
			name := e[:counterNameLen]
			if j := bytes.IndexByte(name, 0); j >= 0 {
				name = name[:j]
			}
			if validName(name) {
				snap.Counters[string(name)] = le.Uint64(e[counterNameLen:])
			}
		}
		for d, c := range []*ibudp.FaultCounts{&snap.Faults.TX, &snap.Faults.RX} {
			for k, p := range faultFields(c) {
				*p = le.Uint64(a.mem[offFaultStats+d*faultCountsLen+8*k:])
			}
		}
		nq := min(int(a.u32(offNQPs).Load()), MaxQPs, int(l.Last-l.First+1))
		for i := range nq {
			if row, ok := decodeQPRow(a.mem[offQPs+i*qpRowLen:offQPs+(i+1)*qpRowLen], l.First, l.Last); ok {
				snap.QPs = append(snap.QPs, row)
			}
		}
		// The daemon's own names for what the ring could not take.
		snap.Counters["lend_trace_lost"], snap.Counters["lend_capture_lost"] = a.Lost()
		if seq.Load() == s {
			l.last = snap
			return
		}
	}
	l.errs++
}

func sortByBlock(s []Snapshot, lents []*Lent) {
	// lents[i] published s[i]; order both by the block's first QPN.
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && lents[j].First < lents[j-1].First; j-- {
			s[j], s[j-1] = s[j-1], s[j]
			lents[j], lents[j-1] = lents[j-1], lents[j]
		}
	}
}

// Counters sums the borrowers' counters.
func Counters(snaps []Snapshot) map[string]uint64 {
	m := map[string]uint64{}
	for _, s := range snaps {
		for k, v := range s.Counters {
			m[k] += v
		}
	}
	return m
}

// AddCounters adds the borrowers' counters into m, the daemon's own.
func AddCounters(m map[string]uint64, snaps []Snapshot) {
	for k, v := range Counters(snaps) {
		m[k] += v
	}
}

// AddFaults adds the borrowers' injector counters into st.
func AddFaults(st *ibudp.FaultStats, snaps []Snapshot) {
	for _, s := range snaps {
		for d, c := range []*ibudp.FaultCounts{&st.TX, &st.RX} {
			from := []*ibudp.FaultCounts{&s.Faults.TX, &s.Faults.RX}[d]
			dst, src := faultFields(c), faultFields(from)
			for k := range dst {
				*dst[k] += *src[k]
			}
		}
	}
}

// drainer moves the borrowers' events and packets into the daemon's
// tracer and capture while either is on.
func (r *Registry) drainer() {
	defer r.wg.Done()
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	wasOn := false
	var lents []*Lent
	for {
		r.mu.Lock()
		on := r.traceOn || r.capture != nil
		capture := r.capture
		lents = lents[:0]
		for l := range r.lents {
			lents = append(lents, l)
		}
		r.mu.Unlock()
		if !on {
			wasOn = false
			select {
			case <-r.wake:
				continue
			case <-r.done:
				return
			}
		}
		n := 0
		for _, l := range lents {
			n += r.drain(l, capture, !wasOn)
		}
		wasOn = true
		if n > 0 {
			continue
		}
		idle.Reset(drainIdle)
		select {
		case <-idle.C:
		case <-r.wake:
			idle.Stop()
		case <-r.done:
			idle.Stop()
			return
		}
	}
}

// drain moves what l's ring holds to the tracer and capture; with stale,
// it first drops what an earlier trace or capture left.
func (r *Registry) drain(l *Lent, capture ibudp.Tap, stale bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return 0
	}
	if stale {
		l.a.skip()
		return 0
	}
	n, err := l.a.drain(l.scratch, func(typ uint16, p []byte) {
		switch typ {
		case recEvent:
			if e, ok := decodeEvent(p); ok && r.probe.On() {
				r.probe.Forward(e)
			}
		case recPacket:
			if at, icrc, hdr, roce, ok := decodePacket(p); ok && capture != nil {
				capture.Packet(at, hdr, roce, icrc)
			}
		}
	})
	if err != nil {
		l.errs++
	}
	return n
}
