package abi

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

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
	f.Add(sendSlot(&ib.SendWR{WRID: 4, Opcode: ib.WRBindMW, Bind: &ib.MWBind{MWRKey: 1, RKey: 2, MRLKey: 3, Addr: 4, Length: 5, Access: 6}}, 1, 0))
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
		{WRID: 4, Opcode: ib.WRBindMW, Flags: ib.SendSignaled, Bind: &ib.MWBind{MWRKey: 0x1234501, RKey: 0x1234502,
			MRLKey: 0x777, Addr: 0x7f0000002000, Length: 1 << 33, Access: ib.AccessRemoteRead | ib.AccessZeroBased}},
		{WRID: 5, Opcode: ib.WRLocalInv, InvRKey: 0x1234502},
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
