package lend

import (
	"sync"
	"sync/atomic"

	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// Borrower is the borrower's end of an area: the NIC in the client's
// process reports through it and takes the daemon's fault injection from
// it. Build it before the device (its Tracer and Port go into the
// device's config), then Start it with the device.
type Borrower struct {
	a      *Area
	faulty *ibudp.FaultyPoller // nil: the port takes no faults
	tracer *trace.Tracer

	mu      sync.Mutex // serializes the ring's producers
	scratch [eventLen]byte
	pkt     [packetHdrLen]byte

	dev      *rnic.Device
	faultGen uint32 // generation of the faults in force
	closed   atomic.Bool
	done     chan struct{}
}

// NewBorrower returns the borrower's end of a. faulty, if not nil, is the
// injector in front of the borrower's port, which the daemon's
// impairments are applied to.
func NewBorrower(a *Area, faulty *ibudp.FaultyPoller) *Borrower {
	b := &Borrower{a: a, faulty: faulty, done: make(chan struct{})}
	b.tracer = trace.NewForward(a.TraceWord(), b.putEvent)
	return b
}

// Tracer is the tracer for the borrower's device (rnic.Config.Trace): on
// while the daemon's trace has a reader, its events going to the daemon.
func (b *Borrower) Tracer() *trace.Tracer { return b.tracer }

// Capture is the tap for the borrower's device (rnic.Device.SetCapture):
// while the daemon captures, it copies each packet to the daemon.
func (b *Borrower) Capture() ibudp.Tap { return captureTap{b} }

func (b *Borrower) putEvent(e *trace.Event) {
	b.mu.Lock()
	putEvent(b.scratch[:], e)
	b.a.put(recEvent, b.scratch[:])
	b.mu.Unlock()
}

type captureTap struct{ b *Borrower }

// WantsPayload reports whether the daemon captures: only then does a sent
// packet's payload, lent from registered memory, need copying in for the
// tap (ibudp.PayloadTap). Wanting it always made the borrower copy every
// payload it sent: 16% of the requesting tool's CPU at 1024 QPs.
func (t captureTap) WantsPayload() bool { return t.b.a.u32(offCapture).Load() != 0 }

func (t captureTap) Packet(at ibudp.TapPoint, hdr, roce []byte, icrc ibudp.ICRCStatus) {
	b := t.b
	if at == ibudp.TapSentHeaders || b.a.u32(offCapture).Load() == 0 {
		return // no capture, or a packet whose payload is not in roce
	}
	b.mu.Lock()
	putPacketHdr(b.pkt[:], at, icrc, hdr, roce)
	b.a.put(recPacket, b.pkt[:], hdr, roce)
	b.mu.Unlock()
}

// Start serves the daemon's requests for dev's state, and applies its
// faults, until Close.
func (b *Borrower) Start(dev *rnic.Device) {
	b.dev = dev
	b.applyFaults()
	go b.serve()
}

// serve waits on the request word; each new generation gets the faults
// applied if they changed and a snapshot published, then the answer.
func (b *Borrower) serve() {
	defer close(b.done)
	req, ans := b.a.u32(offReq), b.a.u32(offAns)
	answered := ans.Load()
	for {
		g := req.Load()
		if b.closed.Load() {
			return
		}
		if g != answered {
			b.applyFaults()
			b.publish()
			ans.Store(g)
			futexWake(ans)
			answered = g
		}
		futexWait(req, g, 0)
	}
}

// applyFaults sets the faults the daemon wrote, if they changed.
func (b *Borrower) applyFaults() {
	if b.faulty == nil {
		return
	}
	w := b.a.u32(offFault)
	for range 100 {
		g := w.Load()
		if g == b.faultGen {
			return
		}
		if g&1 != 0 {
			continue // the daemon is writing them
		}
		tx := decodeFaults(b.a.mem[offFaults:])
		rx := decodeFaults(b.a.mem[offFaults+faultsLen:])
		if w.Load() != g {
			continue
		}
		b.faulty.SetTX(tx)
		b.faulty.SetRX(rx)
		b.faultGen = g
		return
	}
}

// publish writes the device's counters, QP table and injector counters
// under the sequence lock.
func (b *Borrower) publish() {
	a := b.a
	seq := a.u32(offPubSeq)
	seq.Add(1) // odd: being written
	defer seq.Add(1)
	i := 0
	for name, v := range b.dev.Counters() {
		if i == MaxCounters || !validName([]byte(name)) {
			continue
		}
		e := a.mem[offCounters+i*counterLen : offCounters+(i+1)*counterLen]
		clear(e[:counterNameLen])
		copy(e, name)
		le.PutUint64(e[counterNameLen:], v)
		i++
	}
	a.u32(offNCounters).Store(uint32(i))
	if b.faulty != nil {
		st := b.faulty.FaultStats()
		for d, c := range []*ibudp.FaultCounts{&st.TX, &st.RX} {
			for k, p := range faultFields(c) {
				le.PutUint64(a.mem[offFaultStats+d*faultCountsLen+8*k:], *p)
			}
		}
	}
	n := 0
	for _, qp := range b.dev.QPs() {
		if n == MaxQPs {
			break
		}
		st := b.dev.Status(qp)
		r := QPRow{QPN: qp.QPN, SQPSN: st.SQPSN, UnaPSN: st.UnaPSN, RQPSN: st.RQPSN, DestQPN: st.Attr.DestQPN,
			SQUsed: uint32(st.SQUsed), SQCap: uint32(st.SQCap), SQInFlight: uint32(st.SQInFlight), RQUsed: uint32(st.RQUsed),
			PathMTUBytes: uint32(st.PathMTU), Type: qp.Type, State: st.Attr.State, PathMTU: st.Attr.PathMTU, Dest: st.Attr.AH.DGID}
		if qp.SRQ == nil {
			r.RQCap = uint32(qp.Caps.MaxRecvWR)
		}
		putQPRow(a.mem[offQPs+n*qpRowLen:], &r)
		n++
	}
	a.u32(offNQPs).Store(uint32(n))
}

// Close stops serving the daemon, publishes the device's final state and
// unmaps the area. Call it after closing the device.
func (b *Borrower) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if b.dev != nil {
		b.a.u32(offReq).Add(1)
		futexWake(b.a.u32(offReq))
		<-b.done
		// The last word: the daemon keeps these counters once this
		// borrower has gone, so that its counters never go back.
		b.publish()
	}
	return b.a.Close()
}
