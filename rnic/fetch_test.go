package rnic_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
)

// ring stands in for a host's send ring as the device sees it
// (qpmgr.SendSource, which qpmgr.SendRing implements over a real ring):
// what the next fetch hands over, and how many WQEs were retired.
type ring struct {
	mu      sync.Mutex // Retire runs on the pipelines' goroutines
	wrs     []ib.SendWR
	bad     []error
	err     error
	retired int
}

func (r *ring) Fetch() ([]qpmgr.SendWQE, []error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, b, err := r.wrs, r.bad, r.err
	r.wrs, r.bad, r.err = nil, nil, nil
	if w == nil {
		return nil, b, err
	}
	wqes := make([]qpmgr.SendWQE, len(w))
	for i := range w {
		wqes[i].WR = w[i]
	}
	return wqes, b, err
}

func (r *ring) Retire(n int) {
	r.mu.Lock()
	r.retired += n
	r.mu.Unlock()
}

func (r *ring) post(wrs []ib.SendWR, bad []error, err error) {
	r.mu.Lock()
	r.wrs, r.bad, r.err = wrs, bad, err
	r.mu.Unlock()
}

func (r *ring) retiredCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retired
}

// The send doorbell of a QP fed from a host ring: the device fetches,
// validates with its one validator and queues; a WQE that did not decode
// or does not validate completes with LOC_QP_OP_ERR (WR_FLUSH_ERR once the
// QP is in ERR) and takes the QP to ERR, later ones flush; every WQE is
// retired to the ring before its completion shows; a garbage ring takes
// the QP to ERR.
func TestFetchSend(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := p.a
	src := &ring{}
	p.qa.SetSendSource(src)
	write := func(id uint64) ib.SendWR {
		return ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 0, 8)},
			RemoteAddr: memVA, RKey: p.b.mr.RKey}
	}
	fetch := func(wantFailed int) error {
		t.Helper()
		failed, err := a.dev.FetchSend(p.qa)
		if failed != wantFailed {
			t.Fatalf("FetchSend failed %d WQEs, want %d (%v)", failed, wantFailed, err)
		}
		return err
	}
	wantRetired := func(n int) {
		t.Helper()
		if got := src.retiredCount(); got != n {
			t.Fatalf("%d WQEs retired to the ring, want %d", got, n)
		}
	}

	src.post([]ib.SendWR{write(1)}, []error{nil}, nil)
	if err := fetch(0); err != nil {
		t.Fatal(err)
	}
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Status: ib.WCSuccess, Opcode: ib.WCRDMAWrite, ByteLen: 8, QPNum: p.qa.QPN})
	wantRetired(1)

	// Unknown send flags: the validator refuses the WR, the one after it
	// flushes.
	odd := write(2)
	odd.Flags |= 0x40
	src.post([]ib.SendWR{odd, write(3)}, []error{nil, nil}, nil)
	if err := fetch(1); err == nil {
		t.Fatal("no error for a WR with unknown flags")
	}
	wcs := a.poll(2, 5*time.Second)
	checkWC(t, wcs[0], ib.WC{WRID: 2, Status: ib.WCLocQPOpErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	checkWC(t, wcs[1], ib.WC{WRID: 3, Status: ib.WCWRFlushErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	wantRetired(3)
	if st := a.dev.QueryQP(p.qa).State; st != ib.QPSErr {
		t.Fatalf("QP in %v, want ERR", st)
	}

	// In ERR, a WQE that did not decode completes flushed, and the error
	// names it.
	garbled := errors.New("has_ah 9")
	src.post([]ib.SendWR{write(4)}, []error{garbled}, nil)
	if err := fetch(1); !errors.Is(err, garbled) {
		t.Fatalf("FetchSend: %v, want the decoder's error", err)
	}
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 4, Status: ib.WCWRFlushErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
	wantRetired(4)

	// A garbage ring: nothing fetched, nothing completes, one failure.
	broken := errors.New("producer index far ahead")
	src.post(nil, nil, broken)
	if err := fetch(1); !errors.Is(err, broken) {
		t.Fatalf("FetchSend: %v, want the ring's error", err)
	}
	a.noMore(50 * time.Millisecond)
	wantRetired(4)
}
