package perftest

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/rnicd/rnicd/verbs"
)

// cmMessage is one SEND of perftest's rdma_cm exchange in a capture.
type cmMessage struct {
	fromClient bool
	data       []byte
}

// goldenCMExchange reads the SENDs of the control QP out of
// testdata/write_bw_rdmacm.pcap (two perftest 4.5 on rxe, ib_write_bw -R,
// client 198.18.0.3): RC SEND ONLY (opcode 0x04) to QP 0x11, the payload
// without its pad bytes and ICRC.
func goldenCMExchange(t *testing.T) []cmMessage {
	t.Helper()
	var msgs []cmMessage
	for _, pkt := range goldenPackets(t, "write_bw_rdmacm") {
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || udp.DstPort != 4791 || len(udp.Payload) < 16 {
			continue
		}
		bth := udp.Payload[:12]
		qpn := uint32(bth[5])<<16 | uint32(bth[6])<<8 | uint32(bth[7])
		if bth[0] != 0x04 || qpn != 0x11 {
			continue
		}
		pad := int(bth[1]>>4) & 3
		ip := pkt.NetworkLayer().(*layers.IPv4)
		msgs = append(msgs, cmMessage{fromClient: ip.SrcIP.Equal([]byte{198, 18, 0, 3}),
			data: append([]byte(nil), udp.Payload[12:len(udp.Payload)-4-pad]...)})
	}
	return msgs
}

// The exchange of a real ib_write_bw -R, message by message: the sizes
// and order are the TCP exchange's (client first each time), QP messages
// are the 56-byte struct pingpong_dest this package reads, and the
// client's Dest, re-encoded, gives back its bytes but for the C struct's
// padding and gid_index, which perftest's reader ignores.
func TestGoldenCMExchange(t *testing.T) {
	msgs := goldenCMExchange(t)
	// versions, page size, cache line, MTU; the two handshakes around the
	// test QP's CM connection; ib_write_bw's three (Dests, addresses,
	// RTR); the server's wait for the client; five report figures;
	// the closing handshake.
	var want []int
	pair := func(n int) { want = append(want, n, n) }
	for _, n := range []int{versionLen, 4, 4, mtuLen, cmDestLen, cmDestLen, cmDestLen, cmDestLen, cmDestLen, cmDestLen, 8, 8, 8, 8, 8, cmDestLen} {
		pair(n)
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if len(m.data) != want[i] || m.fromClient != (i%2 == 0) {
			t.Fatalf("message %d: %d bytes from the client %v, want %d from the client %v", i, len(m.data), m.fromClient, want[i], i%2 == 0)
		}
	}
	if v := string(bytes.TrimRight(msgs[0].data, "\x00")); v != Version {
		t.Fatalf("version %q, want %q", v, Version)
	}
	// The client's Dest as it printed it: QPN 0x0012 PSN 0x85ca89.
	cli := msgs[12].data
	d, err := ParseCMDest(cli)
	if err != nil {
		t.Fatal(err)
	}
	gid := netip.MustParseAddr("::ffff:198.18.0.3").As16()
	if d.QPN != 0x12 || d.PSN != 0x85ca89 || d.OutReads != 1 || d.RKey != 0x3d0 || d.VAddr != 0x556132cd4000 || d.GID != gid || d.LID != 0 {
		t.Fatalf("client's Dest %+v", d)
	}
	golden := append([]byte(nil), cli...)
	clear(golden[20:24]) // padding before vaddr
	clear(golden[52:56]) // gid_index
	if got := d.MarshalCM(); !bytes.Equal(got, golden) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", got, golden)
	}
	// The handshakes around the CM connection carry a zeroed Dest.
	if zero, err := ParseCMDest(msgs[8].data); err != nil || zero != (Dest{}) {
		t.Fatalf("first barrier %+v, %v", zero, err)
	}
}

// FuzzParseCMDest: whatever a peer SENDs, ParseCMDest returns an error
// or a Dest that encodes to a message that decodes to the same Dest.
func FuzzParseCMDest(f *testing.F) {
	f.Add(make([]byte, cmDestLen))
	f.Add(bytes.Repeat([]byte{0xff}, cmDestLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseCMDest(b)
		if err != nil {
			return
		}
		d2, err := ParseCMDest(d.MarshalCM())
		if err != nil || d2 != d {
			t.Fatalf("%+v re-encoded decodes to %+v, %v", d, d2, err)
		}
	})
}

// -R as perftest takes it: RC by default, --rdma_cm the same, UD through
// the UDP port space; UC refused as perftest refuses it ("UC is not
// supported in librdmacm"), and the in-process NICs, which have no CM
// agent, refused with a reason.
func TestParseRDMACM(t *testing.T) {
	sb, _ := Find("ib_send_bw")
	for _, c := range []struct {
		args []string
		conn verbs.QPType
	}{
		{[]string{"-R"}, verbs.QPTypeRC}, {[]string{"--rdma_cm"}, verbs.QPTypeRC}, {[]string{"-R", "-c", "RC", "host"}, verbs.QPTypeRC},
		{[]string{"-R", "-c", "UD"}, verbs.QPTypeUD}, {[]string{"--rdma_cm", "-c", "UD", "10.0.0.1"}, verbs.QPTypeUD},
	} {
		p, err := Parse(sb, c.args)
		if err != nil || !p.RDMACM || p.Conn != c.conn {
			t.Errorf("Parse(%q): %+v, %v", c.args, p, err)
		}
	}
	for args, want := range map[string]string{
		"-R -c UC":             "UC is not supported in librdmacm",
		"-R --local 127.0.0.1": "CM agent",
	} {
		_, err := Parse(sb, strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error saying %q", args, err, want)
		}
	}
}
