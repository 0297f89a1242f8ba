package bth

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Every golden packet, read with pcapgo and decoded by gopacket, gets a
// RoCE layer whose fields match the views', whose ICRC verifies, and whose
// layers serialize back to the captured frame byte for byte.
func TestLayerGolden(t *testing.T) {
	for _, frames := range goldenFrames(t) {
		for _, f := range frames {
			pkt := gopacket.NewPacket(f.frame, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("%v: %v", f, el.Error())
			}
			r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
			if !ok {
				t.Fatalf("%v: no RoCE layer in %v", f, pkt)
			}
			ip, err := ParseIP(f.ip)
			if err != nil {
				t.Fatal(err)
			}
			checkLayerFields(t, f, r, ip.Packet)
			if err := VerifyICRC(pkt); err != nil {
				t.Errorf("%v: %v", f, err)
			}

			// Re-serialize the decoded layers as they are.
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializePacket(buf, gopacket.SerializeOptions{}, pkt); err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			if !bytes.Equal(buf.Bytes(), f.frame) {
				t.Errorf("%v: serialized\n% x\nwant\n% x", f, buf.Bytes(), f.frame)
			}

			// ICRCFor over the decoded IP and UDP layers, lengths and
			// checksums recomputed, agrees with the stored ICRC; so
			// does FixICRC after it is cleared.
			ip4 := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
			if err := udp.SetNetworkLayerForChecksum(ip4); err != nil {
				t.Fatal(err)
			}
			stored := r.ICRC
			r.ICRC = 0
			if err := r.FixICRC(ip4, udp, opts); err != nil || r.ICRC != stored {
				t.Errorf("%v: FixICRC %#x (%v), stored %#x", f, r.ICRC, err, stored)
			}
		}
	}
}

func checkLayerFields(t *testing.T, f capFrame, r *RoCE, p Packet) {
	t.Helper()
	op := p.Opcode()
	if r.BTH != p.BTH().Fields() || r.ICRC != p.ICRC() || !bytes.Equal(r.Payload, p.Payload()) ||
		!bytes.Equal(r.Contents, p.Bytes()[:op.HdrLen()]) {
		t.Errorf("%v: layer %+v", f, r)
	}
	ok := true
	if op.Has(HdrRETH) {
		v := p.RETH()
		ok = ok && r.RETH == RETHFields{v.VA(), v.RKey(), v.DMALength()}
	}
	if op.Has(HdrAtomicETH) {
		v := p.AtomicETH()
		ok = ok && r.AtomicETH == AtomicETHFields{v.VA(), v.RKey(), v.SwapAddData(), v.CompareData()}
	}
	if op.Has(HdrAETH) {
		ok = ok && r.AETH == AETHFields{p.AETH().Syndrome(), p.AETH().MSN()}
	}
	if op.Has(HdrAtomicAckETH) {
		ok = ok && r.AtomicAckETH == p.AtomicAckETH().OrigData()
	}
	if op.Has(HdrDETH) {
		ok = ok && r.DETH == DETHFields{p.DETH().QKey(), p.DETH().SrcQP()}
	}
	if !ok {
		t.Errorf("%v: extension headers %+v", f, r)
	}
}

// A packet built from scratch with gopacket, ICRC fixed from its IPv4 or
// IPv6 and UDP layers, is one ParseIP accepts with the same fields, for
// every opcode.
func TestLayerBuild(t *testing.T) {
	for i := range opcodeCount {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		for _, v6 := range []bool{false, true} {
			var payload []byte
			if op.Is(FlagPayload) {
				payload = []byte("seven b")
			}
			r := &RoCE{
				BTH:          BTHFields{Opcode: op, PKey: DefaultPKey, DestQP: 0x12, PSN: 0xabcdef, AckReq: true, SolicitedEvent: true},
				RETH:         RETHFields{VA: 0x1000, RKey: 0x77, DMALength: 7},
				AtomicETH:    AtomicETHFields{VA: 0x2000, RKey: 0x78, SwapAddData: 5, CompareData: 6},
				AETH:         AETHFields{Syndrome: RNRNAK(14), MSN: 9},
				AtomicAckETH: 0x1122334455667788,
				ImmDt:        0xcafe,
				IETH:         0x99,
				DETH:         DETHFields{QKey: 0x11111111, SrcQP: 0x33},
			}
			r.Payload = payload
			udp := &layers.UDP{SrcPort: 0xc000, DstPort: UDPPort}
			var ipl gopacket.SerializableLayer
			if v6 {
				l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
					SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
				ipl = l
			} else {
				l := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Id: 0x4242,
					Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(198, 18, 0, 3), DstIP: net.IPv4(198, 18, 0, 2)}
				ipl = l
			}
			opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
			udp.SetNetworkLayerForChecksum(ipl.(gopacket.NetworkLayer))
			if err := r.FixICRC(ipl, udp, opts); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, opts, ipl, udp, r, gopacket.Payload(payload)); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			ip, err := ParseIP(buf.Bytes())
			if err != nil {
				t.Fatalf("%v v6=%v: %v", op, v6, err)
			}
			p := ip.Packet
			if p.BTH().Fields() != r.BTH || p.BTH().PadCount() != 1 && len(payload) > 0 || !bytes.Equal(p.Payload(), payload) {
				t.Errorf("%v: % x", op, p.Bytes())
			}
			var back RoCE
			if err := back.DecodeFromBytes(p.Bytes(), gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			checkLayerFields(t, capFrame{capture: op.String()}, &back, p)
		}
	}
}

// Decoding errors are the views' *DecodeError; gopacket records them in an
// error layer, and marks truncation.
func TestLayerErrors(t *testing.T) {
	var r RoCE
	var df truncFeedback
	err := r.DecodeFromBytes(mkPacket(t, nil, RCRDMAWriteFirst, 4)[:20], &df)
	wantReason(t, "truncated", err, ReasonTruncated)
	if !df.truncated {
		t.Error("truncation not reported")
	}
	df.truncated = false
	bad := mkPacket(t, nil, RCSendOnly, 4)
	bad[1] |= 2
	wantReason(t, "version", r.DecodeFromBytes(bad, &df), ReasonBadVersion)
	if df.truncated {
		t.Error("a bad version is not truncation")
	}

	pkt := gopacket.NewPacket([]byte{0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, LayerTypeRoCE, gopacket.Default)
	el := pkt.ErrorLayer()
	var de *DecodeError
	if el == nil || !errors.As(el.Error(), &de) || de.Reason != ReasonUnknownOpcode {
		t.Fatalf("error layer %v", el)
	}

	// Serializing refuses what Parse would.
	buf := gopacket.NewSerializeBuffer()
	r = RoCE{BTH: BTHFields{Opcode: RCAcknowledge}}
	err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &r, gopacket.Payload{1, 2, 3, 4})
	wantReason(t, "ACK with payload", err, ReasonUnexpectedPayload)
	r = RoCE{BTH: BTHFields{Opcode: 0x15}}
	err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &r)
	wantReason(t, "unknown opcode", err, ReasonUnknownOpcode)
	r = RoCE{BTH: BTHFields{Opcode: RCSendOnly, PadCount: 4}}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &r); err == nil {
		t.Error("pad count 4 accepted")
	}
	// VerifyICRC needs the IP and UDP layers.
	if err := VerifyICRC(pkt); err == nil {
		t.Error("VerifyICRC without IP")
	}
}

type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

// A DecodingLayerParser chain reaches the RoCE layer through UDP port 4791
// and hands the payload on.
func TestLayerParser(t *testing.T) {
	frames, _ := readCapture(t, "testdata/write_bw.pcap")
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		udp     layers.UDP
		roce    RoCE
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &roce, &payload)
	var decoded []gopacket.LayerType
	for _, f := range frames {
		if err := parser.DecodeLayers(f.frame, &decoded); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if decoded[3] != LayerTypeRoCE {
			t.Fatalf("%v: layers %v", f, decoded)
		}
		if roce.BTH.Opcode.Is(FlagPayload) && (len(decoded) != 5 || !bytes.Equal(payload, roce.Payload)) {
			t.Fatalf("%v: layers %v", f, decoded)
		}
	}
	if LayerTypeRoCE.String() != "RoCE" {
		t.Error(LayerTypeRoCE.String())
	}
}
