package bth

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// mkPacket builds a packet of op with an n-byte payload (bytes 0, 1, 2...)
// and the given BTH, RETH and DETH fields, sealed for env.
func mkPacket(t testing.TB, env *Envelope, op Opcode, n int) []byte {
	t.Helper()
	b := make([]byte, PacketLen(op, n))
	p, err := Build(b, op, n)
	if err != nil {
		t.Fatal(err)
	}
	f := BTHFields{Opcode: op, PadCount: PadFor(n), PKey: DefaultPKey, DestQP: 0x11, PSN: 0x123456, AckReq: true}
	p.BTH().Encode(&f)
	if op.Has(HdrRETH) {
		p.RETH().Encode(0x7f00_1234_5678, 0xabcd, uint32(n))
	}
	if op.Has(HdrDETH) {
		p.DETH().Encode(0x11111111, 0x22)
	}
	for i := range p.Payload() {
		p.Payload()[i] = byte(i)
	}
	if env != nil {
		p.Seal(env)
	}
	return b
}

var testEnv4 = Envelope{
	Src: netip.MustParseAddr("198.18.0.3"), Dst: netip.MustParseAddr("198.18.0.2"),
	SrcPort: 0xc001, DstPort: UDPPort, TTL: 64, ID: 0x1234,
}

var testEnv6 = Envelope{
	Src: netip.MustParseAddr("fd00::3"), Dst: netip.MustParseAddr("fd00::2"),
	SrcPort: 0xc001, DstPort: UDPPort, TTL: 64, TOS: 0x02, FlowLabel: 0x12345,
}

// datagram returns env's IP and UDP headers followed by roce.
func datagram(env *Envelope, roce []byte) []byte {
	b := make([]byte, env.Len()+len(roce))
	n := env.Put(b, len(roce))
	copy(b[n:], roce)
	return b
}

func wantReason(t *testing.T, name string, err error, want Reason) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Errorf("%s: error %v (%T), want a *DecodeError %v", name, err, err, want)
		return
	}
	if de.Reason != want {
		t.Errorf("%s: reason %v (%v), want %v", name, de.Reason, err, want)
	}
	// The message names what is wrong, not just the reason's number.
	if msg := err.Error(); !strings.HasPrefix(msg, "bth: ") || strings.Contains(msg, "reason(") {
		t.Errorf("%s: message %q", name, msg)
	}
}

func TestParseErrors(t *testing.T) {
	good := mkPacket(t, &testEnv4, RCRDMAWriteFirst, 5) // pad 3
	with := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	tests := []struct {
		name string
		b    []byte
		want Reason
	}{
		{"empty", nil, ReasonShort},
		{"15 bytes", make([]byte, 15), ReasonShort},
		{"unknown RC opcode 0x15", with(func(b []byte) []byte { b[0] = 0x15; return b }), ReasonUnknownOpcode},
		{"RD opcode", with(func(b []byte) []byte { b[0] = 0x40; return b }), ReasonUnknownOpcode},
		{"UC READ", with(func(b []byte) []byte { b[0] = 0x2c; return b }), ReasonUnknownOpcode},
		{"UD SEND_FIRST", with(func(b []byte) []byte { b[0] = 0x60; return b }), ReasonUnknownOpcode},
		{"opcode 0xff", with(func(b []byte) []byte { b[0] = 0xff; return b }), ReasonUnknownOpcode},
		{"version 1", with(func(b []byte) []byte { b[1] |= 1; return b }), ReasonBadVersion},
		{"version 15", with(func(b []byte) []byte { b[1] |= 0xf; return b }), ReasonBadVersion},
		// WRITE_FIRST needs BTH+RETH+ICRC = 32 bytes.
		{"RETH cut", good[:31], ReasonTruncated},
		{"ACK without AETH", mkPacket(t, nil, RCAcknowledge, 0)[:BTHLen+ICRCLen], ReasonTruncated},
		{"AtomicETH cut", mkPacket(t, nil, RCFetchAdd, 0)[:BTHLen+20+ICRCLen], ReasonTruncated},
		{"DETH cut", mkPacket(t, nil, UDSendOnly, 0)[:BTHLen+4+ICRCLen], ReasonTruncated},
		{"pad 3, payload 1", good[:BTHLen+RETHLen+1+ICRCLen], ReasonPadTooLarge},
		{"pad 3, no payload", good[:BTHLen+RETHLen+ICRCLen], ReasonPadTooLarge},
		{"ACK with payload", append(mkPacket(t, nil, RCAcknowledge, 0), 0, 0, 0, 0), ReasonUnexpectedPayload},
		{"READ request with payload", append(mkPacket(t, nil, RCRDMAReadRequest, 0), 0), ReasonUnexpectedPayload},
		{"CNP with payload", append(mkPacket(t, nil, CNP, 0), 0, 0, 0, 0), ReasonUnexpectedPayload},
	}
	for _, tt := range tests {
		_, err := Parse(tt.b)
		wantReason(t, tt.name, err, tt.want)
	}

	p, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.PayloadLen() != 5 || len(p.Payload()) != 5 || p.BTH().PadCount() != 3 || p.Len() != len(good) {
		t.Fatalf("payload %d pad %d len %d", p.PayloadLen(), p.BTH().PadCount(), p.Len())
	}
}

func TestParseIPErrors(t *testing.T) {
	roce := mkPacket(t, &testEnv4, RCSendOnly, 8)
	good := datagram(&testEnv4, roce)
	if _, err := ParseIP(good); err != nil {
		t.Fatal(err)
	}
	with := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	good6 := datagram(&testEnv6, mkPacket(t, &testEnv6, RCSendOnly, 8))
	with6 := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good6...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want Reason
	}{
		{"empty", nil, ReasonIPShort},
		{"IPv4 header only", good[:20], ReasonIPShort},
		{"IPv6 header only", good6[:40], ReasonIPShort},
		{"IP version 5", with(func(b []byte) { b[0] = 0x55 }), ReasonIPVersion},
		{"IHL 4", with(func(b []byte) { b[0] = 0x44 }), ReasonIPLength},
		{"total length past the end", with(func(b []byte) { binary.BigEndian.PutUint16(b[2:], uint16(len(b)+1)) }), ReasonIPLength},
		{"total length below IP+UDP", with(func(b []byte) { binary.BigEndian.PutUint16(b[2:], 27) }), ReasonIPLength},
		{"TCP", with(func(b []byte) { b[9] = 6 }), ReasonNotUDP},
		{"more fragments", with(func(b []byte) { b[6] |= 0x20 }), ReasonFragmented},
		{"fragment offset", with(func(b []byte) { b[7] = 1 }), ReasonFragmented},
		{"UDP length", with(func(b []byte) { binary.BigEndian.PutUint16(b[24:], uint16(len(b)-21)) }), ReasonUDPLength},
		{"port 4792", with(func(b []byte) { binary.BigEndian.PutUint16(b[22:], 4792) }), ReasonNotRoCEPort},
		{"bad ICRC", with(func(b []byte) { b[len(b)-1] ^= 1 }), ReasonBadICRC},
		{"bad payload", with(func(b []byte) { b[28+BTHLen] ^= 0x80 }), ReasonBadICRC},
		{"wrong IPv4 ID", with(func(b []byte) { b[5] ^= 1 }), ReasonBadICRC},
		{"RoCE part bad", with(func(b []byte) { b[28] = 0xff }), ReasonUnknownOpcode},
		{"IPv6 next header", with6(func(b []byte) { b[6] = 6 }), ReasonNotUDP},
		{"IPv6 payload length", with6(func(b []byte) { binary.BigEndian.PutUint16(b[4:], uint16(len(b))) }), ReasonIPLength},
		{"IPv6 bad ICRC", with6(func(b []byte) { b[8] ^= 1 }), ReasonBadICRC},
	}
	for _, tt := range tests {
		_, err := ParseIP(tt.b)
		wantReason(t, tt.name, err, tt.want)
	}

	// Ethernet padding after the datagram is ignored; the masked fields
	// (TOS, TTL, IPv4 and UDP checksums, BTH byte 4) may change in flight.
	padded := append(with(func(b []byte) {
		b[1], b[8], b[10], b[26], b[28+4] = 0x03, 1, 0, 0x55, 0xc0
	}), 0, 0, 0, 0)
	ip, err := ParseIP(padded)
	if err != nil {
		t.Fatal(err)
	}
	if ip.Envelope.TOS != 3 || ip.Envelope.TTL != 1 || ip.Packet.Len() != len(roce) || len(ip.Hdr) != 28 || !ip.Packet.BTH().FECN() {
		t.Fatalf("%+v", ip)
	}
	ip6, err := ParseIP(good6)
	if err != nil {
		t.Fatal(err)
	}
	e := ip6.Envelope
	e.Src, e.Dst = e.Src.WithZone(""), e.Dst.WithZone("")
	if e != testEnv6 {
		t.Fatalf("IPv6 envelope %+v, want %+v", e, testEnv6)
	}
}

// Every Reason has a name and every message is specific.
func TestReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for r := ReasonNone; r < numReasons; r++ {
		s := r.String()
		if s == "" || seen[s] {
			t.Errorf("reason %d: name %q", r, s)
		}
		seen[s] = true
	}
	if s := numReasons.String(); s != "reason(15)" {
		t.Errorf("out of range: %q", s)
	}
}

// Build refuses what Parse would refuse.
func TestBuildErrors(t *testing.T) {
	buf := make([]byte, 64)
	_, err := Build(buf, 0x15, 0)
	wantReason(t, "unknown opcode", err, ReasonUnknownOpcode)
	_, err = Build(buf, RCAcknowledge, 4)
	wantReason(t, "ACK with payload", err, ReasonUnexpectedPayload)
	_, err = Build(buf, RCSendOnly, 64)
	wantReason(t, "small buffer", err, ReasonTruncated)
	p, err := Build(buf, RCSendOnly, 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != BTHLen+8+ICRCLen || p.BTH().PadCount() != 3 || p.PayloadLen() != 5 {
		t.Fatalf("len %d pad %d", p.Len(), p.BTH().PadCount())
	}
}
