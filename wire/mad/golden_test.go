package mad

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/wire/bth"
)

// The golden captures are rxe to rxe, copied from ../shared/golden (see its
// README): rping -C 3 and ib_write_bw -R. The server is 198.18.0.2, the
// client 198.18.0.3. The values asserted here were read once with tshark
// (except the REQ's flow label, which tshark 4.x reads a byte early; the
// offsets used here are Linux's, and the hex bytes 6c c8 70 00 at REQ
// offset 88 of rping's REQ are flow label 0x6cc87, packet rate 0).

// gsiMAD is one CM MAD of a capture, with its RoCE layer.
type gsiMAD struct {
	index int // packet number, from 1, as Wireshark counts
	roce  *bth.RoCE
	mad   *Layer
	raw   []byte // the 256 bytes of the MAD as captured
}

// readPackets reads capture testdata/name.pcap; packet i is frame i+1.
// Every RoCE packet's ICRC must be right.
func readPackets(t testing.TB, name string) []gopacket.Packet {
	t.Helper()
	f, err := os.Open("testdata/" + name + ".pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []gopacket.Packet
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if p.Layer(bth.LayerTypeRoCE) != nil {
			if err := bth.VerifyICRC(p); err != nil {
				t.Fatalf("%s #%d: %v", name, len(out)+1, err)
			}
		}
		out = append(out, p)
	}
}

func readGSI(t testing.TB, name string) []gsiMAD {
	t.Helper()
	var out []gsiMAD
	for n, p := range readPackets(t, name) {
		i := n + 1
		roce, _ := p.Layer(bth.LayerTypeRoCE).(*bth.RoCE)
		if roce == nil || roce.BTH.DestQP != GSIQPN {
			continue
		}
		l, ok := p.Layer(LayerTypeMAD).(*Layer)
		if !ok {
			t.Fatalf("%s #%d: QP1 packet without a MAD layer: %v", name, i, p)
		}
		if roce.BTH.Opcode != bth.UDSendOnly || roce.DETH.QKey != GSIQKey || roce.DETH.SrcQP != GSIQPN {
			t.Errorf("%s #%d: %v Q_Key %#x from QP %d, want UD SEND ONLY, GSI Q_Key, QP1",
				name, i, roce.BTH.Opcode, roce.DETH.QKey, roce.DETH.SrcQP)
		}
		out = append(out, gsiMAD{index: i, roce: roce, mad: l, raw: roce.Payload})
	}
	return out
}

var (
	gidClient = GIDFromAddr(netip.MustParseAddr("198.18.0.3"))
	gidServer = GIDFromAddr(netip.MustParseAddr("198.18.0.2"))
)

// wantREQ is what rxe's active side sends for rdma_connect on both
// captures; the callers fill in what differs.
func wantREQ(commID uint32, port uint16, qpn, psn, flowLabel uint32, res uint8) REQFields {
	return REQFields{
		LocalCommID: commID, ServiceID: ServiceID(PSTCP, port),
		LocalCAGUID: 0x505400fffec61203, LocalQKey: 0, LocalQPN: qpn,
		ResponderResources: res, InitiatorDepth: res,
		RemoteCMResponseTimeout: 20, TransportType: TransportRC,
		StartingPSN: psn, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: gidClient, PrimaryRemoteGID: gidServer,
		PrimaryFlowLabel: flowLabel, PrimaryHopLimit: 64, PrimaryLocalACKTimeout: 19,
	}
}

func wantREP(local, remote, qpn, psn uint32, res uint8) REPFields {
	return REPFields{LocalCommID: local, RemoteCommID: remote, LocalQPN: qpn, StartingPSN: psn,
		ResponderResources: res, InitiatorDepth: res, TargetACKDelay: 15, RNRRetryCount: 7,
		LocalCAGUID: 0x505400fffec61202}
}

// goldenMsg is the expected content of one MAD of a capture.
type goldenMsg struct {
	index   int
	attr    AttrID
	tid     uint64
	req     REQFields
	srcPort uint16 // cma_hdr's source port, for a REQ
	rep     REPFields
	ids     [2]uint32 // local and remote comm ID of RTU, DREQ, DREP
	dreqQPN uint32
}

var goldenCM = map[string][]goldenMsg{
	"rping": {
		{index: 1, attr: AttrREQ, tid: 0x20f806743, srcPort: 0xbb5f,
			req: wantREQ(0x4367800f, 7174, 0x11, 0x173280, 0x6cc87, 1)},
		{index: 2, attr: AttrREP, tid: 0x20f806743, rep: wantREP(0x341a9178, 0x4367800f, 0x11, 0x96ea7b, 1)},
		{index: 3, attr: AttrRTU, tid: 0x20f806743, ids: [2]uint32{0x4367800f, 0x341a9178}},
		{index: 40, attr: AttrDREQ, tid: 0x20f806743, ids: [2]uint32{0x4367800f, 0x341a9178}, dreqQPN: 0x11},
		{index: 41, attr: AttrDREP, tid: 0x20f806743, ids: [2]uint32{0x341a9178, 0x4367800f}},
	},
	// perftest -R: the control connection (QPN 0x11) and the data QP
	// (0x12) on the same port; the client closes the data QP, the server
	// the control QP (a DREQ with the server's own TID).
	"write_bw_rdmacm": {
		{index: 1, attr: AttrREQ, tid: 0x26f8a33cb, srcPort: 0xa6e4,
			req: wantREQ(0xcb338a6f, 18515, 0x11, 0xac6156, 0x47def, 0)},
		{index: 2, attr: AttrREP, tid: 0x26f8a33cb, rep: wantREP(0x76e6bc54, 0xcb338a6f, 0x11, 0xe710a3, 0)},
		{index: 3, attr: AttrRTU, tid: 0x26f8a33cb, ids: [2]uint32{0xcb338a6f, 0x76e6bc54}},
		{index: 24, attr: AttrREQ, tid: 0x26f8a33ca, srcPort: 0xe674,
			req: wantREQ(0xca338a6f, 18515, 0x12, 0x7c2f66, 0xc305f, 0)},
		{index: 25, attr: AttrREP, tid: 0x26f8a33ca, rep: wantREP(0x74e6bc54, 0xca338a6f, 0x12, 0xa51774, 0)},
		{index: 26, attr: AttrRTU, tid: 0x26f8a33ca, ids: [2]uint32{0xca338a6f, 0x74e6bc54}},
		{index: 103, attr: AttrDREQ, tid: 0x26f8a33ca, ids: [2]uint32{0xca338a6f, 0x74e6bc54}, dreqQPN: 0x12},
		{index: 104, attr: AttrDREP, tid: 0x26f8a33ca, ids: [2]uint32{0x74e6bc54, 0xca338a6f}},
		{index: 105, attr: AttrDREQ, tid: 0x254bce676, ids: [2]uint32{0x76e6bc54, 0xcb338a6f}, dreqQPN: 0x11},
		{index: 106, attr: AttrDREP, tid: 0x254bce676, ids: [2]uint32{0xcb338a6f, 0x76e6bc54}},
	},
}

// Every CM MAD of the captures decodes field by field to what rxe sent.
func TestGoldenDecode(t *testing.T) {
	for name, want := range goldenCM {
		got := readGSI(t, name)
		if len(got) != len(want) {
			t.Fatalf("%s: %d MADs on QP1, want %d", name, len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			l := g.mad
			if g.index != w.index || l.Header != CMHeader(w.attr, w.tid) || !l.IsCM() {
				t.Errorf("%s #%d: header %+v, want #%d %v TID %#x", name, g.index, l.Header, w.index, w.attr, w.tid)
				continue
			}
			switch w.attr {
			case AttrREQ:
				checkGoldenREQ(t, name, g, w)
			case AttrREP:
				rep := l.REP
				if rep.PrivateData != [REPPrivateDataLen]byte{} {
					t.Errorf("%s #%d: REP private data %x, want none", name, g.index, rep.PrivateData)
				}
				if rep != w.rep {
					t.Errorf("%s #%d: REP\n got %+v\nwant %+v", name, g.index, rep, w.rep)
				}
			case AttrRTU:
				if l.RTU != (RTUFields{LocalCommID: w.ids[0], RemoteCommID: w.ids[1]}) {
					t.Errorf("%s #%d: RTU %+v, want IDs %x", name, g.index, l.RTU, w.ids)
				}
			case AttrDREQ:
				if l.DREQ != (DREQFields{LocalCommID: w.ids[0], RemoteCommID: w.ids[1], RemoteQPN: w.dreqQPN}) {
					t.Errorf("%s #%d: DREQ %+v, want IDs %x QPN %#x", name, g.index, l.DREQ, w.ids, w.dreqQPN)
				}
			case AttrDREP:
				if l.DREP != (DREPFields{LocalCommID: w.ids[0], RemoteCommID: w.ids[1]}) {
					t.Errorf("%s #%d: DREP %+v, want IDs %x", name, g.index, l.DREP, w.ids)
				}
			}
		}
	}
}

func checkGoldenREQ(t *testing.T, name string, g gsiMAD, w goldenMsg) {
	t.Helper()
	req := g.mad.REQ
	ps, port, ok := SplitServiceID(req.ServiceID)
	if !ok || ps != PSTCP || req.ServiceID != ServiceID(PSTCP, port) {
		t.Errorf("%s #%d: service ID %#x is not rdma_cm's TCP space", name, g.index, req.ServiceID)
	}
	h, err := ParseCMAHdr(req.PrivateData[:])
	if err != nil {
		t.Fatalf("%s #%d: %v", name, g.index, err)
	}
	if h.IPVersion() != 4 || h.SrcPort() != w.srcPort ||
		h.SrcAddr() != netip.MustParseAddr("198.18.0.3") || h.DstAddr() != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("%s #%d: cma_hdr IPv%d %v:%#x -> %v, want IPv4 198.18.0.3:%#x -> 198.18.0.2",
			name, g.index, h.IPVersion(), h.SrcAddr(), h.SrcPort(), h.DstAddr(), w.srcPort)
	}
	// Neither rping nor perftest puts data of its own after the header.
	if u := h.UserData(req.PrivateData[:]); !bytes.Equal(u, make([]byte, CMAUserPrivateDataLen)) {
		t.Errorf("%s #%d: private data after cma_hdr %x, want zeros", name, g.index, u)
	}
	// The GIDs are the IPv4-mapped addresses of the cma_hdr.
	if req.PrimaryLocalGID.Addr() != h.SrcAddr() || req.PrimaryRemoteGID.Addr() != h.DstAddr() {
		t.Errorf("%s #%d: GIDs %v, %v do not match the cma_hdr", name, g.index,
			req.PrimaryLocalGID.Addr(), req.PrimaryRemoteGID.Addr())
	}
	// The view's accessors agree with Fields.
	v, err := ParseREQ(MAD(g.raw).Data())
	if err != nil || v.LocalQPN() != w.req.LocalQPN || v.StartingPSN() != w.req.StartingPSN ||
		v.PathMTU() != w.req.PathMTU || v.ServiceID() != w.req.ServiceID || !bytes.Equal(v.PrivateData(), req.PrivateData[:]) {
		t.Errorf("%s #%d: REQ view disagrees with its fields (%v)", name, g.index, err)
	}
	req.PrivateData = [REQPrivateDataLen]byte{}
	if req != w.req {
		t.Errorf("%s #%d: REQ\n got %+v\nwant %+v", name, g.index, req, w.req)
	}
}

// Re-encoding every decoded MAD gives the captured bytes, through the
// gopacket layer and through the views' Encode.
func TestGoldenReencode(t *testing.T) {
	for name := range goldenCM {
		for _, g := range readGSI(t, name) {
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, g.mad); err != nil {
				t.Fatalf("%s #%d: %v", name, g.index, err)
			}
			if !bytes.Equal(buf.Bytes(), g.raw) {
				t.Errorf("%s #%d: layer re-encodes to\n%x\nwant\n%x", name, g.index, buf.Bytes(), g.raw)
			}
			out := make([]byte, MADLen)
			for i := range out {
				out[i] = 0xa5 // Encode must write every byte, reserved ones too
			}
			m := MAD(out)
			in := MAD(g.raw)
			h := in.Header()
			m.EncodeHeader(&h)
			reencodeView(t, in.AttrID(), in.Data(), m.Data())
			if !bytes.Equal(out, g.raw) {
				t.Errorf("%s #%d: views re-encode to\n%x\nwant\n%x", name, g.index, out, g.raw)
			}
		}
	}
}

// reencodeView decodes src as attr's message and encodes it into dst.
func reencodeView(t *testing.T, attr AttrID, src, dst []byte) {
	t.Helper()
	switch attr {
	case AttrREQ:
		f := REQ(src).Fields()
		REQ(dst).Encode(&f)
	case AttrMRA:
		f := MRA(src).Fields()
		MRA(dst).Encode(&f)
	case AttrREJ:
		f := REJ(src).Fields()
		REJ(dst).Encode(&f)
	case AttrREP:
		f := REP(src).Fields()
		REP(dst).Encode(&f)
	case AttrRTU:
		f := RTU(src).Fields()
		RTU(dst).Encode(&f)
	case AttrDREQ:
		f := DREQ(src).Fields()
		DREQ(dst).Encode(&f)
	case AttrDREP:
		f := DREP(src).Fields()
		DREP(dst).Encode(&f)
	case AttrSIDRReq:
		f := SIDRReq(src).Fields()
		SIDRReq(dst).Encode(&f)
	case AttrSIDRRep:
		f := SIDRRep(src).Fields()
		SIDRRep(dst).Encode(&f)
	default:
		t.Fatalf("no view for %v", attr)
	}
}
