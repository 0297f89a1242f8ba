package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/internal/looptest"
)

// Memory windows are charged to the client (-client-max-mw): past its
// share alloc_mw is refused and nothing changes; a window holds its PD;
// its handle is the client's own; dealloc_mw and the client's hang-up
// give the charges back and free the device's windows.
func TestMWLimit(t *testing.T) {
	n := limitedNIC(t, looptest.Get(t).String(), Limits{Client: Quota{ResMWs: 2}})
	c := n.client(t)
	var pd abi.Handle
	call(t, c, abi.KindAllocPD, &abi.Empty{}, nil, &pd)
	_, err := c.Call(abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H + 100, Type: 1}, nil, &abi.AllocMWReply{})
	wantCode(t, "no such PD", err, abi.CodeNoHandle)
	var w1, w2 abi.AllocMWReply
	call(t, c, abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 1}, nil, &w1)
	call(t, c, abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 2}, nil, &w2)
	if w1.RKey>>8 == 0 || w2.RKey>>8 == 0 || w1.RKey>>8 == w2.RKey>>8 || w1.H == w2.H {
		t.Fatalf("windows %+v and %+v: want distinct handles and key indexes", w1, w2)
	}
	_, err = c.Call(abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 1}, nil, &abi.AllocMWReply{})
	wantLimit(t, "a third window", err, "-client-max-mw")
	if h := held(n); h["hostif_held_mw"] != 2 || h["hostif_over_limit"] != 1 {
		t.Fatalf("held %v, want 2 windows and 1 refusal", h)
	}
	_, err = c.Call(abi.KindDeallocPD, &abi.Handle{H: pd.H}, nil, &abi.Empty{})
	wantCode(t, "dealloc_pd with windows", err, abi.CodeBusy)

	// Another client cannot free this one's window, nor name its PD.
	c2 := n.client(t)
	_, err = c2.Call(abi.KindDeallocMW, &abi.Handle{H: w1.H}, nil, &abi.Empty{})
	wantCode(t, "another client's window", err, abi.CodeNoHandle)

	call(t, c, abi.KindDeallocMW, &abi.Handle{H: w1.H}, nil, &abi.Empty{})
	if h := held(n); h["hostif_held_mw"] != 1 {
		t.Fatalf("after dealloc_mw: held %v, want 1 window", h)
	}
	// (Connections of one process share one account: under the limit
	// again before c2 asks.)
	_, err = c2.Call(abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 1}, nil, &abi.AllocMWReply{})
	wantCode(t, "another client's PD", err, abi.CodeNoHandle)
	_, err = c.Call(abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 3}, nil, &abi.AllocMWReply{})
	wantCode(t, "type 3", err, abi.CodeInvalid)
	var w3 abi.AllocMWReply
	call(t, c, abi.KindAllocMW, &abi.AllocMWReq{PD: pd.H, Type: 2}, nil, &w3)
	if w3.RKey == w1.RKey {
		t.Fatalf("a new window got the freed one's rkey %#x", w3.RKey)
	}
	c.Close()
	eventually(t, "the client's windows to go", func() bool {
		m := n.srv.Counters()
		return m["hostif_held_mw"] == 0 && m["hostif_objects_mw"] == 0 && m["hostif_objects_pd"] == 0
	})
}
