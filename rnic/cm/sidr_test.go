package cm

import (
	"errors"
	"testing"

	"github.com/rnicd/rnicd/wire/mad"
)

var udService = mad.ServiceID(mad.PSUDP, 18515)

func sidrParam() SIDRParam {
	return SIDRParam{ServiceID: udService, Dest: Dest{GID: gidB, PKey: 0xffff}, PrivateData: []byte("hdr")}
}

// SIDR: the requester learns the UD QPN and Q_Key the listener gives.
func TestSIDR(t *testing.T) {
	w := newWorld(t, nil)
	if _, err := w.b.cm.Listen(udService, nil); err != nil {
		t.Fatal(err)
	}
	a, err := w.a.cm.SIDRRequest(sidrParam())
	if err != nil {
		t.Fatal(err)
	}
	if a.State() != StateSIDRREQSent {
		t.Fatalf("%v", a.State())
	}
	req := w.deliver()[0].b
	e := w.b.events
	if len(e) != 1 || e[0].Type != EventConnectRequest || e[0].Remote.ServiceID != udService ||
		string(e[0].PrivateData[:3]) != "hdr" || e[0].ID.State() != StateSIDRREQRcvd {
		t.Fatalf("b events %+v", e)
	}
	w.inject(w.b, req) // a duplicate while b decides: dropped
	if len(w.wire) != 0 || w.b.cm.Counters().Duplicates != 1 {
		t.Fatalf("duplicate SIDR_REQ answered: %v", attrs(w.wire))
	}
	if err := e[0].ID.Accept(AcceptParam{QPN: 0x22, QKey: 0x11111111, PrivateData: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	seen := w.deliver()
	rep := mad.SIDRRep(mad.MAD(seen[0].b).Data())
	if rep.RequestID() != a.LocalCommID() || rep.Status() != mad.SIDRSuccess || rep.QPN() != 0x22 ||
		rep.QKey() != 0x11111111 || rep.ServiceID() != udService || mad.MAD(seen[0].b).TID() != mad.MAD(req).TID() {
		t.Errorf("SIDR_REP %+v", rep.Fields())
	}
	ea := w.a.events
	if len(ea) != 1 || ea[0].Type != EventEstablished || ea[0].Remote.QPN != 0x22 || ea[0].Remote.QKey != 0x11111111 ||
		string(ea[0].PrivateData[:2]) != "ok" {
		t.Fatalf("a events %+v", ea)
	}
	if w.a.cm.NumIDs()+w.b.cm.NumIDs() != 0 || len(w.a.qp.calls)+len(w.b.qp.calls) != 0 {
		t.Errorf("SIDR left IDs (%d+%d) or moved QPs", w.a.cm.NumIDs(), w.b.cm.NumIDs())
	}
}

func TestSIDRRefusedRejectedAndLost(t *testing.T) {
	t.Run("no listener", func(t *testing.T) {
		w := newWorld(t, nil)
		w.a.cm.SIDRRequest(sidrParam())
		w.deliver()
		var re *RejectError
		if e := w.a.events; len(e) != 1 || e[0].Type != EventRejected || !errors.As(e[0].Err, &re) || !re.Refused() {
			t.Fatalf("a events %+v", e)
		}
	})
	t.Run("listener rejects", func(t *testing.T) {
		w := newWorld(t, nil)
		w.b.cm.Listen(udService, nil)
		w.a.cm.SIDRRequest(sidrParam())
		w.deliver()
		w.b.events[0].ID.Reject(mad.RejConsumerDefined, nil)
		w.deliver()
		var re *RejectError
		if e := w.a.events; len(e) != 1 || !errors.As(e[0].Err, &re) || re.Refused() || re.SIDRStatus != mad.SIDRReject {
			t.Fatalf("a events %+v", e)
		}
	})
	t.Run("lost, retried, then unreachable", func(t *testing.T) {
		w := newWorld(t, nil)
		w.drop = func(packet) bool { return true }
		w.a.cm.SIDRRequest(sidrParam())
		sent := len(w.deliver())
		for i := 0; i < 16; i++ {
			w.advance(ibTime(20))
			sent += len(w.deliver())
		}
		if e := w.a.events; sent != 16 || len(e) != 1 || e[0].Type != EventUnreachable || w.a.cm.NumIDs() != 0 {
			t.Fatalf("%d sends, events %v", sent, eventTypes(e))
		}
	})
}
