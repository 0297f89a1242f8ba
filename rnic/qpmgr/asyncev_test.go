package qpmgr

import (
	"slices"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// eventQP is an RC QP whose events are recorded in *got, on srq if not nil.
func eventQP(t *testing.T, srq *RecvQueue, got *[]ib.EventType) *QP {
	t.Helper()
	c := ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1, MaxRecvWR: 1, MaxRecvSGE: 1}
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	qp, err := New(Config{QPN: 0x11, Type: ib.QPTypeRC, SendCQ: NewCQ(8), RecvCQ: NewCQ(8), SRQ: srq, Caps: c,
		PortMTU: 1024, Counters: &Counters{}, Kick: func(*QP) {}})
	if err != nil {
		t.Fatal(err)
	}
	qp.SetEventHandler(func(e ib.EventType) { *got = append(*got, e) })
	return qp
}

func toRTR(t *testing.T, qp *QP) {
	t.Helper()
	for _, s := range []struct {
		a    ib.QPAttr
		mask ib.AttrMask
	}{
		{ib.QPAttr{State: ib.QPSInit, PortNum: 1}, ib.AttrState | ib.AttrPKeyIndex | ib.AttrPort | ib.AttrAccessFlags},
		{ib.QPAttr{State: ib.QPSRTR, PathMTU: ib.MTU1024, DestQPN: 0x12, AH: ib.AH{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}},
			ib.AttrState | ib.AttrAV | ib.AttrPathMTU | ib.AttrDestQPN | ib.AttrRQPSN | ib.AttrMaxDestRdAtomic | ib.AttrMinRNRTimer},
	} {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// The QP's events, by value and in order: COMM_EST once per QP in RTR
// (none in RTS, none again until a reset); the NIC's error kinds before
// LAST_WQE_REACHED, which an SRQ's QP raises however it enters ERR; a
// requester error its completion reports raises no kind; a second ERR
// raises nothing.
func TestQPEvents(t *testing.T) {
	var got []ib.EventType
	qp := eventQP(t, nil, &got)
	toRTR(t, qp)
	qp.Lock()
	qp.RequestArrived()
	qp.RequestArrived()
	qp.EnterErrorFor(ib.EventQPReqErr)
	qp.EnterError()
	qp.Unlock()
	if want := []ib.EventType{ib.EventCommEst, ib.EventQPReqErr}; !slices.Equal(got, want) {
		t.Fatalf("plain QP: %v, want %v", got, want)
	}

	srq := NewRecvQueue(4, 1)
	for _, c := range []struct {
		name  string
		enter func(qp *QP)
		want  []ib.EventType
	}{
		{"modify to ERR", func(qp *QP) {
			qp.Unlock()
			if err := qp.Modify(&ib.QPAttr{State: ib.QPSErr}, ib.AttrState); err != nil {
				t.Fatal(err)
			}
			qp.Lock()
		}, []ib.EventType{ib.EventQPLastWQEReached}},
		{"NIC's fatal error", (*QP).EnterError, []ib.EventType{ib.EventQPFatal, ib.EventQPLastWQEReached}},
		{"access violation", func(qp *QP) { qp.EnterErrorFor(ib.EventQPAccessErr) },
			[]ib.EventType{ib.EventQPAccessErr, ib.EventQPLastWQEReached}},
		{"requester's error", (*QP).EnterErrorReported, []ib.EventType{ib.EventQPLastWQEReached}},
	} {
		got = nil
		qp := eventQP(t, srq, &got)
		toRTR(t, qp)
		qp.Lock()
		c.enter(qp)
		qp.EnterError()
		qp.Unlock()
		if !slices.Equal(got, c.want) {
			t.Errorf("%s on an SRQ's QP: %v, want %v", c.name, got, c.want)
		}
	}

	got = nil
	qp = eventQP(t, nil, &got)
	qp.Lock()
	qp.RequestArrived() // RESET: nothing
	qp.Unlock()
	toRTR(t, qp)
	if err := qp.Modify(&ib.QPAttr{State: ib.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		ib.AttrState|ib.AttrSQPSN|ib.AttrTimeout|ib.AttrRetryCnt|ib.AttrRNRRetry|ib.AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	qp.Lock()
	qp.RequestArrived() // RTS: nothing
	qp.Unlock()
	if len(got) != 0 {
		t.Fatalf("events outside RTR: %v", got)
	}
}

// The SRQ limit fires once when the WQEs left fall below it, then reads
// 0 until armed again.
func TestSRQLimitOnce(t *testing.T) {
	q := NewRecvQueue(8, 1)
	fired := 0
	q.SetLimitHandler(func() { fired++ })
	wrs := make([]ib.RecvWR, 5)
	if _, err := q.Post(wrs); err != nil {
		t.Fatal(err)
	}
	q.SetLimit(3)
	for i, want := range []int{0, 0, 1, 1, 1} { // 4, 3, 2 (< 3: fires), 1, 0 left
		q.Pop()
		if fired != want {
			t.Fatalf("after pop %d: fired %d times, want %d", i+1, fired, want)
		}
	}
	if q.Limit() != 0 {
		t.Fatalf("limit %d after it fired, want 0", q.Limit())
	}
}

// A receive completion that finds the CQ full takes the QP to ERR with
// QP_FATAL (then LAST_WQE_REACHED on an SRQ's QP), once however many
// more are lost; the CQ keeps the completions it had room for.
func TestRecvCQOverrunQPFatal(t *testing.T) {
	for _, c := range []struct {
		name string
		srq  *RecvQueue
		want []ib.EventType
	}{
		{"plain QP", nil, []ib.EventType{ib.EventQPFatal}},
		{"SRQ's QP", NewRecvQueue(4, 1), []ib.EventType{ib.EventQPFatal, ib.EventQPLastWQEReached}},
	} {
		var got []ib.EventType
		qp := eventQP(t, c.srq, &got)
		toRTR(t, qp)
		qp.Lock()
		for i := range qp.RecvCQ.Cap() + 2 {
			qp.FailRecv(uint64(i), ib.WCLocProtErr)
			if want := i < qp.RecvCQ.Cap(); (qp.State() != ib.QPSErr) != want {
				t.Fatalf("%s: completion %d of a CQ of %d: state %v", c.name, i, qp.RecvCQ.Cap(), qp.State())
			}
		}
		qp.Unlock()
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		wcs := make([]ib.WC, 16)
		n := qp.RecvCQ.Poll(wcs)
		if n != qp.RecvCQ.Cap() {
			t.Fatalf("%s: the CQ holds %d completions, want %d", c.name, n, qp.RecvCQ.Cap())
		}
		for i, wc := range wcs[:n] {
			if wc.WRID != uint64(i) || wc.Status != ib.WCLocProtErr {
				t.Fatalf("%s: completion %d: wr_id %d %v, want wr_id %d LOC_PROT_ERR", c.name, i, wc.WRID, wc.Status, i)
			}
		}
	}
}
