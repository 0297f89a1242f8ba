package hostif

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/ib"
)

// seedRequests are well-formed requests of every kind.
func seedRequests() [][]byte {
	var a ib.QPAttr
	a.State, a.AH.DGID[15] = ib.QPSRTR, 1
	return [][]byte{
		abi.Encode(abi.KindQueryPort, 0, 1, &abi.Empty{}),
		abi.Encode(abi.KindAllocPD, 0, 2, &abi.Empty{}),
		abi.Encode(abi.KindDeallocPD, 0, 3, &abi.Handle{H: 1}),
		abi.Encode(abi.KindRegMR, 0, 4, &abi.RegMRReq{PD: 1, Access: 7, Offset: 4096, Length: 100, IOVA: 0x7f00}),
		abi.Encode(abi.KindRegMRShm, 0, 4, &abi.RegMRShmReq{PD: 1, Access: 7, ShmID: 3, Addr: 0x7f0000001000, Length: 100, IOVA: 0x7f00}),
		abi.Encode(abi.KindRegMRMapped, 0, 4, &abi.RegMRMappedReq{PD: 1, Access: 7, Addr: 0x7f0000001000, Length: 100, IOVA: 0x7f00}),
		abi.Encode(abi.KindCreateCQ, 0, 5, &abi.CreateCQReq{CQE: 16, Channel: 2}),
		abi.Encode(abi.KindCreateSRQ, 0, 6, &abi.CreateSRQReq{PD: 1, MaxWR: 8, MaxSGE: 1}),
		abi.Encode(abi.KindCreateQP, 0, 7, &abi.CreateQPReq{PD: 1, SendCQ: 2, RecvCQ: 2, Type: ib.QPTypeRC,
			Caps: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}),
		abi.Encode(abi.KindModifyQP, 0, 8, &abi.ModifyQPReq{H: 3, Mask: ib.AttrState, Attr: a}),
		abi.Encode(abi.KindListQPs, 0, 9, &abi.ListQPsReq{From: 17}),
		abi.Encode(abi.KindDoorbell, 0, 10, &abi.DoorbellReq{H: 3, Queue: abi.DoorbellRecv}),
		abi.Encode(abi.KindCMCreateID, 0, 11, &abi.Handle{H: 4}),
		abi.Encode(abi.KindCMListen, 0, 12, &abi.CMListenReq{H: 5, ServiceID: 0x1061c06, Backlog: 3}),
		abi.Encode(abi.KindCMConnect, 0, 13, &abi.CMConnectReq{H: 5, QP: 3, ServiceID: 0x1061c06,
			CMParams: abi.CMParams{PathMTU: 3, RetryCount: 7, RNRRetryCount: 7}, PrivateData: []byte("pd")}),
		abi.Encode(abi.KindCMConnect, 0, 13, &abi.CMConnectReq{H: 5, QP: 3, ServiceID: 0x1061c06,
			CMParams: abi.CMParams{PathMTU: 3}, PrivateData: []byte("pd"), TrafficClass: 96}),
		abi.Encode(abi.KindCMAccept, 0, 14, &abi.CMAcceptReq{H: 6, QP: 3, ResponderResources: 1, PrivateData: []byte{1}}),
		abi.Encode(abi.KindCMReject, 0, 15, &abi.CMDataReq{H: 6, Reason: 28, PrivateData: []byte{2}}),
		abi.Encode(abi.KindCMGetEvent, 0, 16, &abi.Handle{H: 4}),
		abi.Encode(abi.KindListCMIDs, 0, 17, &abi.ListCMIDsReq{From: 2}),
		abi.Encode(abi.KindAttachMcast, 0, 18, &abi.McastReq{H: 3, GID: [16]byte{10: 0xff, 11: 0xff, 12: 239, 15: 1}}),
		abi.Encode(abi.KindDetachMcast, 0, 19, &abi.McastReq{H: 3, GID: [16]byte{0: 0xff, 1: 0x0e, 15: 1}, LID: 0xc001}),
		abi.Encode(abi.KindAllocMW, 0, 20, &abi.AllocMWReq{PD: 1, Type: 2}),
		abi.Encode(abi.KindDeallocMW, 0, 21, &abi.Handle{H: 7}),
		abi.Encode(abi.KindResizeCQ, 0, 28, &abi.ResizeCQReq{H: 2, CQE: 128}),
		abi.Encode(abi.KindOpenXRCD, 0, 22, &abi.Empty{}),
		abi.Encode(abi.KindCloseXRCD, 0, 23, &abi.Handle{H: 8}),
		abi.Encode(abi.KindOpenXRCDFile, 0, 24, &abi.OpenXRCDFileReq{OFlags: 0o100}),
		abi.Encode(abi.KindCreateXRCSRQ, 0, 25, &abi.CreateXRCSRQReq{PD: 1, XRCD: 8, CQ: 2, MaxWR: 8, MaxSGE: 1, Limit: 2}),
		abi.Encode(abi.KindCreateXRCQP, 0, 26, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCSend, PD: 1, SendCQ: 2,
			Caps: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}),
		abi.Encode(abi.KindCreateXRCQP, 0, 27, &abi.CreateXRCQPReq{Type: ib.QPTypeXRCRecv, XRCD: 8}),
	}
}

// FuzzDecode drives the server's request decoder with any bytes: it
// must return a request or an error, never panic, and a request it
// accepts must encode back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s, 0)
		f.Add(s, 1) // reg_mr and open_xrcd_file take a descriptor
	}
	f.Add([]byte{1, 2, 3}, 1)
	f.Fuzz(func(t *testing.T, msg []byte, nfds int) {
		h, body, err := DecodeRequest(msg, nfds)
		if err != nil {
			return
		}
		if got := abi.Encode(h.Kind, h.Flags, h.ID, body); !bytes.Equal(got, msg) {
			t.Fatalf("decoded %T %+v re-encodes as %x, was %x", body, body, got, msg)
		}
	})
}

// FuzzDecodeReply drives the client's reply decoder for every body kind.
func FuzzDecodeReply(f *testing.F) {
	f.Add(abi.EncodeReply(abi.KindListQPs, 1, &abi.ListQPsReply{Rows: []abi.QPRow{{QPN: 17, Comm: "x"}}, More: true, Next: 18})[abi.HeaderLen:])
	f.Add(abi.EncodeReply(abi.KindListCMIDs, 1, &abi.ListCMIDsReply{Rows: []abi.CMIDRow{{IDN: 3, State: "LISTEN", PS: 0x106,
		Src: netip.MustParseAddrPort("198.18.0.1:7174"), Dst: netip.MustParseAddrPort("[2001:db8::2]:9")}}})[abi.HeaderLen:])
	f.Add(abi.EncodeReply(abi.KindCounters, 1, &abi.CountersReply{Counters: map[string]uint64{"a": 1}})[abi.HeaderLen:])
	f.Add(abi.EncodeError(abi.KindAllocPD, 1, abi.CodeInvalid, "no")[abi.HeaderLen:])
	f.Add(abi.EncodeReply(abi.KindAllocMW, 1, &abi.AllocMWReply{H: 3, RKey: 0x1234})[abi.HeaderLen:])
	f.Add(abi.EncodeReply(abi.KindCMGetEvent, 1, &abi.CMEvent{Type: 2, ID: 4, RemoteQPN: 0x11, PrivateData: []byte("ok"), QKey: 0x01234567})[abi.HeaderLen:])
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, b := range []abi.Body{&abi.PortReply{}, &abi.RegMRReply{}, &abi.RingReply{}, &abi.QPAttrReply{}, &abi.ListQPsReply{}, &abi.ListCMIDsReply{}, &abi.CountersReply{}, &abi.Handle{}, &abi.CMEvent{}, &abi.AllocMWReply{}} {
			abi.DecodeReply(abi.KindQueryPort, body, b)
		}
	})
}
