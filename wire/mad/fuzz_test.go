package mad

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
)

// seedMADs adds the CM MADs of the golden captures to f's corpus.
func seedMADs(f *testing.F) {
	for name := range goldenCM {
		for _, g := range readGSI(f, name) {
			f.Add(bytes.Clone(g.raw))
		}
	}
	f.Add(make([]byte, MADLen-1))
}

// Any input either is refused or decodes; decoding, encoding and decoding
// again gives the same fields (encoding only drops reserved bits).
func FuzzParseMAD(f *testing.F) {
	seedMADs(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMAD(data)
		if err != nil {
			if len(data) >= MADLen {
				t.Fatalf("refused %d bytes: %v", len(data), err)
			}
			return
		}
		h := m.Header()
		out := MAD(make([]byte, MADLen))
		out.EncodeHeader(&h)
		if out.Header() != h {
			t.Fatalf("header %+v re-encodes to %+v", h, out.Header())
		}
		for _, attr := range []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRReq, AttrSIDRRep} {
			reencodeView(t, attr, m.Data(), out.Data())
			again := make([]byte, DataLen)
			reencodeView(t, attr, out.Data(), again)
			if !bytes.Equal(again, out.Data()) {
				t.Fatalf("%v is not stable under decode and encode", attr)
			}
		}
	})
}

// The gopacket layer never panics and round-trips what it decodes.
func FuzzLayer(f *testing.F) {
	seedMADs(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Layer
		if err := l.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		buf := gopacket.NewSerializeBuffer()
		if err := l.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
			t.Fatal(err)
		}
		var again Layer
		if err := again.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if again.Header != l.Header || again.REQ != l.REQ || again.REP != l.REP || again.REJ != l.REJ ||
			again.MRA != l.MRA || again.RTU != l.RTU || again.DREQ != l.DREQ || again.DREP != l.DREP ||
			again.SIDRReq != l.SIDRReq || again.SIDRRep != l.SIDRRep || !bytes.Equal(again.Data, l.Data) {
			t.Fatalf("layer does not survive serialize and decode")
		}
	})
}

// rdma_cm's header parser refuses or decodes; what it decodes re-encodes.
func FuzzCMAHdr(f *testing.F) {
	seedMADs(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseCMAHdr(data)
		if err != nil {
			return
		}
		src, dst := h.SrcAddr(), h.DstAddr()
		b := make([]byte, CMAHdrLen)
		if err := EncodeCMAHdr(b, src, h.SrcPort(), dst); err != nil {
			// An IPv6 header whose addresses are IPv4-mapped re-encodes as
			// IPv4, as rdma_cm would send it; anything else must encode.
			if h.IPVersion() == 6 && src.Is4In6() != dst.Is4In6() {
				return
			}
			t.Fatal(err)
		}
		g, err := ParseCMAHdr(b)
		if err != nil || g.SrcAddr() != src.Unmap() || g.DstAddr() != dst.Unmap() || g.SrcPort() != h.SrcPort() {
			t.Fatalf("cma_hdr %x re-encodes to %x (%v)", []byte(h), b, err)
		}
	})
}
