package hostif

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// seedRequests are well-formed requests of every kind.
func seedRequests() [][]byte {
	var a ib.QPAttr
	a.State, a.AH.DGID[15] = ib.QPSRTR, 1
	return [][]byte{
		Encode(KindQueryPort, 0, 1, &Empty{}),
		Encode(KindAllocPD, 0, 2, &Empty{}),
		Encode(KindDeallocPD, 0, 3, &Handle{H: 1}),
		Encode(KindRegMR, 0, 4, &RegMRReq{PD: 1, Access: 7, Offset: 4096, Length: 100, IOVA: 0x7f00}),
		Encode(KindRegMRShm, 0, 4, &RegMRShmReq{PD: 1, Access: 7, ShmID: 3, Addr: 0x7f0000001000, Length: 100, IOVA: 0x7f00}),
		Encode(KindCreateCQ, 0, 5, &CreateCQReq{CQE: 16, Channel: 2}),
		Encode(KindCreateSRQ, 0, 6, &CreateSRQReq{PD: 1, MaxWR: 8, MaxSGE: 1}),
		Encode(KindCreateQP, 0, 7, &CreateQPReq{PD: 1, SendCQ: 2, RecvCQ: 2, Type: ib.QPTypeRC,
			Caps: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}),
		Encode(KindModifyQP, 0, 8, &ModifyQPReq{H: 3, Mask: ib.AttrState, Attr: a}),
		Encode(KindListQPs, 0, 9, &ListQPsReq{From: 17}),
		Encode(KindDoorbell, 0, 10, &DoorbellReq{H: 3, Queue: DoorbellRecv}),
		Encode(KindCMCreateID, 0, 11, &Handle{H: 4}),
		Encode(KindCMListen, 0, 12, &CMListenReq{H: 5, ServiceID: 0x1061c06, Backlog: 3}),
		Encode(KindCMConnect, 0, 13, &CMConnectReq{H: 5, QP: 3, ServiceID: 0x1061c06,
			CMParams: CMParams{PathMTU: 3, RetryCount: 7, RNRRetryCount: 7}, PrivateData: []byte("pd")}),
		Encode(KindCMConnect, 0, 13, &CMConnectReq{H: 5, QP: 3, ServiceID: 0x1061c06,
			CMParams: CMParams{PathMTU: 3}, PrivateData: []byte("pd"), TrafficClass: 96}),
		Encode(KindCMAccept, 0, 14, &CMAcceptReq{H: 6, QP: 3, ResponderResources: 1, PrivateData: []byte{1}}),
		Encode(KindCMReject, 0, 15, &CMDataReq{H: 6, Reason: 28, PrivateData: []byte{2}}),
		Encode(KindCMGetEvent, 0, 16, &Handle{H: 4}),
		Encode(KindListCMIDs, 0, 17, &ListCMIDsReq{From: 2}),
	}
}

// FuzzDecode drives the server's request decoder with any bytes: it
// must return a request or an error, never panic, and a request it
// accepts must encode back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s, 0)
	}
	f.Add([]byte{1, 2, 3}, 1)
	f.Fuzz(func(t *testing.T, msg []byte, nfds int) {
		h, body, err := DecodeRequest(msg, nfds)
		if err != nil {
			return
		}
		if got := Encode(h.Kind, h.Flags, h.ID, body); !bytes.Equal(got, msg) {
			t.Fatalf("decoded %T %+v re-encodes as %x, was %x", body, body, got, msg)
		}
	})
}

// FuzzDecodeReply drives the client's reply decoder for every body kind.
func FuzzDecodeReply(f *testing.F) {
	f.Add(encodeReply(KindListQPs, 1, &ListQPsReply{Rows: []QPRow{{QPN: 17, Comm: "x"}}, More: true, Next: 18})[HeaderLen:])
	f.Add(encodeReply(KindListCMIDs, 1, &ListCMIDsReply{Rows: []CMIDRow{{IDN: 3, State: "LISTEN", PS: 0x106,
		Src: netip.MustParseAddrPort("198.18.0.1:7174"), Dst: netip.MustParseAddrPort("[2001:db8::2]:9")}}})[HeaderLen:])
	f.Add(encodeReply(KindCounters, 1, &CountersReply{Counters: map[string]uint64{"a": 1}})[HeaderLen:])
	f.Add(encodeError(KindAllocPD, 1, CodeInvalid, "no")[HeaderLen:])
	f.Add(encodeReply(KindCMGetEvent, 1, &CMEvent{Type: 2, ID: 4, RemoteQPN: 0x11, PrivateData: []byte("ok"), QKey: 0x01234567})[HeaderLen:])
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, b := range []Body{&PortReply{}, &RegMRReply{}, &RingReply{}, &QPAttrReply{}, &ListQPsReply{}, &ListCMIDsReply{}, &CountersReply{}, &Handle{}, &CMEvent{}} {
			DecodeReply(KindQueryPort, body, b)
		}
	})
}

func sendSlot(wr *ib.SendWR, maxSGE, maxInline int) []byte {
	slot := make([]byte, SendSlotBytes(maxSGE, maxInline))
	if err := EncodeSendWQE(slot, wr); err != nil {
		panic(err)
	}
	return slot
}

// FuzzDecodeSendWQE: any slot content decodes to a WR whose SGEs and
// inline bytes lie inside the slot, or to an error; never a panic.
func FuzzDecodeSendWQE(f *testing.F) {
	f.Add(sendSlot(&ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{{Addr: 1, Length: 2, LKey: 3}}}, 2, 16))
	f.Add(sendSlot(&ib.SendWR{WRID: 2, Opcode: ib.WRSend, Flags: ib.SendInline, InlineData: []byte("abc")}, 1, 16))
	f.Add(sendSlot(&ib.SendWR{WRID: 3, Opcode: ib.WRSend, AH: &ib.AH{HopLimit: 64}, RemoteQPN: 5}, 1, 0))
	f.Fuzz(func(t *testing.T, slot []byte) {
		wr, err := DecodeSendWQE(slot)
		if err != nil {
			return
		}
		if sendFixed+sgeBytes*len(wr.SGL)+len(wr.InlineData) > len(slot) {
			t.Fatalf("decoded %d SGEs, %d inline bytes from a %d-byte slot", len(wr.SGL), len(wr.InlineData), len(slot))
		}
	})
}

// FuzzDecodeRecvWQE: the same for receive slots.
func FuzzDecodeRecvWQE(f *testing.F) {
	slot := make([]byte, RecvSlotBytes(2))
	EncodeRecvWQE(slot, &ib.RecvWR{WRID: 9, SGL: []ib.SGE{{Addr: 1, Length: 2, LKey: 3}}})
	f.Add(slot, 2)
	f.Fuzz(func(t *testing.T, slot []byte, maxSGE int) {
		wr, err := DecodeRecvWQE(slot, maxSGE)
		if err == nil && len(wr.SGL) > max(maxSGE, 0) {
			t.Fatalf("decoded %d SGEs past %d", len(wr.SGL), maxSGE)
		}
	})
}

// Send and receive WQEs survive the slot format field by field.
func TestWQESlotRoundTrip(t *testing.T) {
	wrs := []ib.SendWR{
		{WRID: 1 << 60, Opcode: ib.WRAtomicCmpAndSwp, Flags: ib.SendSignaled | ib.SendFence,
			SGL: []ib.SGE{{Addr: 0x7f0000001000, Length: 8, LKey: 0x1234}}, RemoteAddr: 0xdead0000, RKey: 0x99,
			CompareAdd: 5, Swap: 9},
		{WRID: 2, Opcode: ib.WRSendWithImm, Flags: ib.SendInline | ib.SendSolicited, Imm: 0xabcdef01,
			InlineData: bytes.Repeat([]byte{7}, 64), AH: &ib.AH{DGID: [16]byte{15: 2}, FlowLabel: 0xfffff,
				HopLimit: 3, TrafficClass: 4, SGIDIndex: 1}, RemoteQPN: 0x11, RemoteQKey: 0x22},
		{WRID: 3, Opcode: ib.WRSendWithInv, InvRKey: 0x55, SGL: []ib.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}},
	}
	for _, wr := range wrs {
		got, err := DecodeSendWQE(sendSlot(&wr, 2, 64))
		if err != nil {
			t.Fatal(err)
		}
		if wr.SGL == nil && len(got.SGL) == 0 {
			got.SGL = nil
		}
		if !reflect.DeepEqual(got, wr) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, wr)
		}
	}
	slot := make([]byte, RecvSlotBytes(2))
	rwr := ib.RecvWR{WRID: 77, SGL: []ib.SGE{{Addr: 10, Length: 20, LKey: 30}, {Addr: 40, Length: 50, LKey: 60}}}
	if err := EncodeRecvWQE(slot, &rwr); err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeRecvWQE(slot, 2); err != nil || !reflect.DeepEqual(got, rwr) {
		t.Fatalf("receive round trip: %+v, %v", got, err)
	}
	// Past the slot: refused. (Past the QP's caps but inside the slot is
	// the engine's validator's to refuse: TestHostileWQEs.)
	if _, err := DecodeSendWQE(sendSlot(&wrs[2], 2, 64)[:sendFixed+sgeBytes]); err == nil {
		t.Fatal("2 SGEs accepted from a slot with room for 1")
	}
	if _, err := DecodeSendWQE(sendSlot(&wrs[1], 2, 64)[:sendFixed+63]); err == nil {
		t.Fatal("64 inline bytes accepted from a slot with room for 63")
	}
	if _, err := DecodeRecvWQE(slot, 1); err == nil {
		t.Fatal("2 receive SGEs accepted on a 1-SGE queue")
	}
	bad := sendSlot(&wrs[0], 2, 64)
	bad[11] = 2 // has_ah is 0 or 1
	if _, err := DecodeSendWQE(bad); err == nil {
		t.Fatal("has_ah 2 accepted")
	}
}
