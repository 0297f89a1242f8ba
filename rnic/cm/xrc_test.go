package cm

import (
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/mad"
)

// XRC over the CM as Linux's cm.c formats it (cm_req_set_qp_type,
// cm_format_req, cm_format_rep, cm_rep_get_qpn) and moves the QPs
// (cm_init_qp_rtr_attr, cm_init_qp_rts_attr): rdma_xclient's initiator
// connecting to rdma_xserver's target.

var xrcService = mad.ServiceID(mad.PSIB, 7471)

const qpnXTGT = 0x2a

func xrcConnect() ConnectParam {
	p := rpingConnect()
	p.ServiceID, p.Transport = xrcService, mad.TransportXRC
	return p
}

// xrcREQ returns the REQ a's Connect put on the wire.
func xrcREQ(t *testing.T, w *world) mad.REQ {
	t.Helper()
	if len(w.wire) != 1 || w.wire[0].attr() != mad.AttrREQ {
		t.Fatalf("wire after Connect: %v", attrs(w.wire))
	}
	return mad.REQ(mad.MAD(w.wire[0].b).Data())
}

// The whole set-up, field by field: the REQ says transport 3, extended
// transport 1, and offers no responder resources nor retry counts; the
// REP carries the target's QPN in the local EECN with SRQ set and no
// initiator depth; the target's QP gets RTR's responder values and RTS's
// timeout only, the initiator's RTR no responder values and RTS its
// retry counts and READ depth.
func TestXRCConnect(t *testing.T) {
	w := newWorld(t, nil)
	if _, err := w.b.cm.Listen(xrcService, "rdma_xserver"); err != nil {
		t.Fatal(err)
	}
	a, err := w.a.cm.Connect(xrcConnect())
	if err != nil {
		t.Fatal(err)
	}
	req := xrcREQ(t, w).Fields()
	wantREQ := mad.REQFields{
		LocalCommID: a.LocalCommID(), ServiceID: 0x00000000013f1d2f, LocalCAGUID: guidA,
		LocalQPN: qpnA, InitiatorDepth: 1, RemoteCMResponseTimeout: 20, TransportType: 3,
		StartingPSN: psnA, LocalCMResponseTimeout: 20, PKey: 0xffff, PathMTU: 3,
		MaxCMRetries: 15, ExtendedTransport: 1, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: gidA, PrimaryRemoteGID: gidB, PrimaryFlowLabel: 0x6cc87, PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: 19,
	}
	if req != wantREQ {
		t.Errorf("XRC REQ\n got %+v\nwant %+v", req, wantREQ)
	}
	// An initiator answers no READ: WRITE only at INIT.
	if c := w.a.qp.calls; len(c) != 1 || c[0].attr.State != ib.QPSInit || c[0].attr.AccessFlags != ib.AccessRemoteWrite {
		t.Errorf("a's QP calls after Connect: %+v", c)
	}
	w.deliver()
	if len(w.b.events) != 1 || w.b.events[0].Type != EventConnectRequest {
		t.Fatalf("b events %v", eventTypes(w.b.events))
	}
	cr := w.b.events[0]
	b := cr.ID
	if b.Transport() != mad.TransportXRC || cr.Remote.TransportType != mad.TransportXRC || cr.Remote.QPN != qpnA ||
		cr.Remote.ResponderResources != 0 || cr.Remote.InitiatorDepth != 1 {
		t.Fatalf("ConnectRequest %+v, transport %d", cr.Remote, b.Transport())
	}
	acc := rpingAccept()
	acc.QPN = qpnXTGT
	if err := b.Accept(acc); err != nil {
		t.Fatal(err)
	}
	if len(w.wire) != 1 || w.wire[0].attr() != mad.AttrREP {
		t.Fatalf("wire after Accept: %v", attrs(w.wire))
	}
	rep := mad.REP(mad.MAD(w.wire[0].b).Data()).Fields()
	wantREP := mad.REPFields{LocalCommID: b.LocalCommID(), RemoteCommID: a.LocalCommID(), LocalEECN: qpnXTGT,
		StartingPSN: psnB, ResponderResources: 1, TargetACKDelay: 15, RNRRetryCount: 7, SRQ: true,
		LocalCAGUID: guidB}
	if rep != wantREP {
		t.Errorf("XRC REP\n got %+v\nwant %+v", rep, wantREP)
	}
	c := w.b.qp.calls
	if !equal(w.b.qp.states(), []ib.QPState{ib.QPSInit, ib.QPSRTR, ib.QPSRTS}) {
		t.Fatalf("target QP states %v", w.b.qp.states())
	}
	if c[0].qpn != qpnXTGT || c[0].attr.AccessFlags != ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic {
		t.Errorf("target INIT %+v", c[0])
	}
	if rtr := c[1]; rtr.attr.DestQPN != qpnA || rtr.attr.RQPSN != psnB || rtr.attr.MaxDestRdAtomic != 1 ||
		rtr.mask != ib.AttrState|ib.AttrAV|ib.AttrPathMTU|ib.AttrDestQPN|ib.AttrRQPSN|ib.AttrMaxDestRdAtomic|ib.AttrMinRNRTimer {
		t.Errorf("target RTR %+v", rtr)
	}
	if rts := c[2]; rts.attr.SQPSN != psnA || rts.attr.Timeout != 19 || rts.mask != ib.AttrState|ib.AttrSQPSN|ib.AttrTimeout {
		t.Errorf("target RTS %+v", rts)
	}

	w.deliver() // REP to a, RTU to b
	if a.State() != StateEstablished || b.State() != StateEstablished {
		t.Fatalf("a %v, b %v", a.State(), b.State())
	}
	c = w.a.qp.calls
	if !equal(w.a.qp.states(), []ib.QPState{ib.QPSInit, ib.QPSRTR, ib.QPSRTS}) {
		t.Fatalf("initiator QP states %v", w.a.qp.states())
	}
	if rtr := c[1]; rtr.attr.DestQPN != qpnXTGT || rtr.attr.RQPSN != psnA ||
		rtr.mask != ib.AttrState|ib.AttrAV|ib.AttrPathMTU|ib.AttrDestQPN|ib.AttrRQPSN {
		t.Errorf("initiator RTR %+v", rtr)
	}
	if rts := c[2]; rts.attr.SQPSN != psnB || rts.attr.Timeout != 19 || rts.attr.RetryCnt != 7 || rts.attr.RNRRetry != 7 ||
		rts.attr.MaxRdAtomic != 1 ||
		rts.mask != ib.AttrState|ib.AttrSQPSN|ib.AttrTimeout|ib.AttrRetryCnt|ib.AttrRNRRetry|ib.AttrMaxQPRdAtomic {
		t.Errorf("initiator RTS %+v", rts)
	}
	if e := w.a.events; len(e) != 1 || e[0].Type != EventEstablished || e[0].Remote.QPN != qpnXTGT ||
		e[0].Remote.TransportType != mad.TransportXRC {
		t.Errorf("a events %+v", e)
	}

	// The DREQ names the target's QPN, which the target checks.
	if err := a.Disconnect(nil); err != nil {
		t.Fatal(err)
	}
	if len(w.wire) != 1 || mad.DREQ(mad.MAD(w.wire[0].b).Data()).RemoteQPN() != qpnXTGT {
		t.Fatalf("DREQ: %v", attrs(w.wire))
	}
	if seen := w.deliver(); !equal(attrs(seen), []mad.AttrID{mad.AttrDREQ, mad.AttrDREP}) {
		t.Fatalf("disconnect exchange %v", attrs(seen))
	}
}

// A REQ of transport type 3 is XRC only with extended transport type 1
// (cm_req_get_qp_type); with any other it is RD, which nobody builds, and
// a REQ of the reserved type 2 is nothing: both get REJ "invalid
// transport type" and no ID.
func TestXRCForgedTransport(t *testing.T) {
	for _, c := range []struct{ transport, ext uint8 }{{3, 0}, {3, 2}, {3, 7}, {2, 0}, {2, 1}} {
		w := newWorld(t, nil)
		if _, err := w.b.cm.Listen(xrcService, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := w.a.cm.Connect(xrcConnect()); err != nil {
			t.Fatal(err)
		}
		p := w.take()[0]
		r := mad.REQ(mad.MAD(p.b).Data())
		f := r.Fields()
		f.TransportType, f.ExtendedTransport = c.transport, c.ext
		r.Encode(&f)
		w.inject(w.b, p.b)
		seen := w.take()
		if len(seen) != 1 || seen[0].attr() != mad.AttrREJ ||
			mad.REJ(mad.MAD(seen[0].b).Data()).Reason() != mad.RejInvalidTransportType {
			t.Errorf("transport %d, extended %d: answered %v", c.transport, c.ext, attrs(seen))
		}
		if len(w.b.events) != 0 || w.b.cm.NumIDs() != 0 {
			t.Errorf("transport %d, extended %d: events %v, %d IDs", c.transport, c.ext, eventTypes(w.b.events), w.b.cm.NumIDs())
		}
	}
}

// Connect takes XRC, and refuses the reserved transport 2 and RD.
func TestXRCConnectParams(t *testing.T) {
	w := newWorld(t, nil)
	for _, tr := range []uint8{2, 4, 255} {
		p := xrcConnect()
		p.Transport = tr
		if _, err := w.a.cm.Connect(p); err == nil {
			t.Errorf("Connect with transport %d succeeded", tr)
		}
	}
	if w.a.cm.NumIDs() != 0 || len(w.wire) != 0 {
		t.Errorf("%d IDs, wire %v", w.a.cm.NumIDs(), attrs(w.wire))
	}
}
