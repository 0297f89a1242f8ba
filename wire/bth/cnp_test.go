package bth

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/debtest"
)

// cnpRef is the envelope and destination QP of the reference CNP in
// testdata/cnp.txt (NVIDIA's "RoCEv2 CNP packet format example").
var cnpRef = struct {
	env Envelope
	qpn uint32
}{
	env: Envelope{
		Src: netip.MustParseAddr("22.22.22.8"), Dst: netip.MustParseAddr("22.22.22.7"),
		SrcPort: 56238, DstPort: UDPPort, TOS: 0x89, TTL: 0x20, ID: 0x98c6,
	},
	qpn: 0xd2,
}

// goldenCNP reads the reference CNP: hex lines after the # comments.
func goldenCNP(t testing.TB) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "cnp.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hexText strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			hexText.WriteString(line)
		}
	}
	b, err := hex.DecodeString(hexText.String())
	if err != nil || len(b) != IPv4HeaderLen+UDPHeaderLen+CNPPacketLen {
		t.Fatalf("testdata/cnp.txt: %d bytes, %v", len(b), err)
	}
	return b
}

// buildCNPDatagram builds a CNP to qpn and its IP and UDP headers under e.
func buildCNPDatagram(t testing.TB, e *Envelope, qpn uint32) []byte {
	t.Helper()
	n := e.Len()
	buf := bytes.Repeat([]byte{0xaa}, n+CNPPacketLen) // garbage BuildCNP must overwrite
	p, err := BuildCNP(buf[n:], qpn)
	if err != nil {
		t.Fatal(err)
	}
	p.Seal(e)
	e.Put(buf, p.Len())
	return buf
}

// A CNP built from the reference packet's fields is the reference packet,
// byte for byte, ICRC included.
func TestCNPGolden(t *testing.T) {
	want := goldenCNP(t)
	env := cnpRef.env
	if got := buildCNPDatagram(t, &env, cnpRef.qpn); !bytes.Equal(got, want) {
		t.Fatalf("built\n% x\nwant\n% x", got, want)
	}

	ip, err := ParseIP(want)
	if err != nil {
		t.Fatal(err)
	}
	p := ip.Packet
	h := p.BTH()
	if !p.IsCNP() || p.Len() != CNPPacketLen || h.PKey() != CNPPKey || !h.BECN() || h.FECN() ||
		h.DestQP() != cnpRef.qpn || h.PSN() != 0 || h.AckReq() || h.PadCount() != 0 || p.PayloadLen() != 0 {
		t.Fatalf("reference decodes to %+v, len %d", h.Fields(), p.Len())
	}
	if ip.Envelope != cnpRef.env {
		t.Fatalf("envelope %+v, want %+v", ip.Envelope, cnpRef.env)
	}
	if !bytes.Equal(p.Bytes()[BTHLen:BTHLen+CNPLen], make([]byte, CNPLen)) {
		t.Fatalf("reserved bytes % x", p.Bytes()[BTHLen:BTHLen+CNPLen])
	}
}

// What is not a CNP: an ACK, and opcode 0x81 without BECN.
func TestCNPRecognise(t *testing.T) {
	ack, err := Parse(mkPacket(t, &testEnv4, RCAcknowledge, 0))
	if err != nil {
		t.Fatal(err)
	}
	if ack.IsCNP() {
		t.Fatal("an ACK is a CNP")
	}
	b := make([]byte, CNPPacketLen)
	p, err := BuildCNP(b, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !p.IsCNP() {
		t.Fatal("BuildCNP's packet is not a CNP")
	}
	b[4] &^= 0x40 // BECN
	if q, err := Parse(b); err != nil || q.IsCNP() {
		t.Fatalf("opcode 0x81 without BECN: IsCNP %v, %v", q.IsCNP(), err)
	}
	if _, err := BuildCNP(make([]byte, CNPPacketLen-1), 7); err == nil {
		t.Fatal("BuildCNP fits a CNP in 31 bytes")
	}
	// IPv6: the same 32 bytes under a 40-byte header, and it verifies.
	env := testEnv6
	d := buildCNPDatagram(t, &env, 0xabcdef)
	ip, err := ParseIP(d)
	if err != nil || !ip.Packet.IsCNP() || ip.Packet.BTH().DestQP() != 0xabcdef || len(d) != 48+CNPPacketLen {
		t.Fatalf("IPv6 CNP: %v, % x", err, d)
	}
}

// The reference packet decodes as a CNP in the gopacket layer, its ICRC
// verifies there, and the layers built from its fields serialize back to
// it.
func TestCNPLayer(t *testing.T) {
	want := goldenCNP(t)
	pkt := gopacket.NewPacket(want, layers.LayerTypeIPv4, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatal(el.Error())
	}
	r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
	if !ok {
		t.Fatalf("no RoCE layer: %v", pkt)
	}
	if !r.IsCNP() || r.BTH.Opcode.String() != "ROCE_CNP" || r.BTH.DestQP != cnpRef.qpn || r.BTH.PKey != CNPPKey ||
		r.BTH.PSN != 0 || len(r.Payload) != 0 || len(r.Contents) != BTHLen+CNPLen {
		t.Fatalf("layer %+v", r)
	}
	if err := VerifyICRC(pkt); err != nil {
		t.Fatal(err)
	}

	ip := &layers.IPv4{Version: 4, IHL: 5, TOS: 0x89, Id: 0x98c6, Flags: layers.IPv4DontFragment, TTL: 0x20,
		Protocol: layers.IPProtocolUDP, SrcIP: []byte{22, 22, 22, 8}, DstIP: []byte{22, 22, 22, 7}}
	udp := &layers.UDP{SrcPort: 56238, DstPort: UDPPort}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	rl := &RoCE{BTH: BTHFields{Opcode: CNP, PKey: CNPPKey, BECN: true, DestQP: cnpRef.qpn}}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := rl.FixICRC(ip, udp, opts); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ip, udp, rl); err != nil {
		t.Fatal(err)
	}
	// gopacket computes a UDP checksum; RoCEv2 sends 0.
	got := buf.Bytes()
	got[26], got[27] = 0, 0
	if !bytes.Equal(got, want) {
		t.Fatalf("serialized\n% x\nwant\n% x", got, want)
	}
}

// tshark decodes the CNP we build as InfiniBand: opcode 129, the
// destination QP, P_Key, PSN and ICRC we wrote, nothing malformed.
func TestCNPTshark(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	path := filepath.Join(t.TempDir(), "cnp.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeRaw); err != nil {
		t.Fatal(err)
	}
	env := cnpRef.env
	pkts := [][]byte{buildCNPDatagram(t, &env, cnpRef.qpn)}
	env.Src, env.Dst, env.TOS, env.ID = netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1"), CNPDSCP<<2, 0
	pkts = append(pkts, buildCNPDatagram(t, &env, 0x123456))
	for _, d := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(d), Length: len(d)}
		if err := w.WritePacket(ci, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// tshark 4.0 (Debian 12, what CI installs) names no opcode 0x81: it
	// shows the BTH, byte 4 (BECN) as "Reserved: 40", and what follows as
	// vendor data: four bytes it looks at, then the 16 reserved bytes and
	// the ICRC. Later versions show the ICRC as infiniband.invariant.crc.
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-E", "separator=;",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.p_key", "-e", "infiniband.reserved",
		"-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "ip.dsfield",
		"-e", "infiniband.vendor", "-e", "infiniband.invariant.crc").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark reads %d frames, want %d:\n%s", len(lines), len(pkts), out)
	}
	for i, line := range lines {
		d := pkts[i]
		p, err := Parse(d[IPv4HeaderLen+UDPHeaderLen:])
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Split(line, ";")
		want := fmt.Sprintf("129;65535;40;0x%06x;0;0x%02x", p.BTH().DestQP(), d[1])
		if got := strings.Join(f[:6], ";"); got != want {
			t.Errorf("frame %d: tshark reads %s, want %s", i+1, got, want)
		}
		icrc := hex.EncodeToString(d[len(d)-ICRCLen:])
		tail := strings.Repeat("00", CNPLen) + icrc
		if !strings.HasSuffix(f[6], tail) && f[7] != "0x"+icrc {
			t.Errorf("frame %d: tshark shows neither the reserved bytes and ICRC %s nor the ICRC: %q", i+1, tail, line)
		}
	}
	bad, err := exec.Command(tshark, "-r", path, "-Y", "_ws.malformed || !infiniband || _ws.expert.severity >= warning").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if s := strings.TrimSpace(string(bad)); s != "" {
		t.Fatalf("tshark finds malformed frames:\n%s", s)
	}
}

// FuzzCNP: the gopacket layer and the view agree on what is a CNP, and
// whatever ParseIP accepts as a CNP, rebuilt with BuildCNP and Seal from
// its envelope and destination QP, is again that CNP; when its reserved
// fields are as BuildCNP writes them, it is the same bytes.
func FuzzCNP(f *testing.F) {
	f.Add(goldenCNP(f))
	fuzzSeeds(f, false)
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, err := ParseIP(b)
		if err != nil {
			return // ParseIP's errors are FuzzParseIP's business
		}
		p := ip.Packet
		var r RoCE
		if err := r.DecodeFromBytes(p.Bytes(), gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if r.IsCNP() != p.IsCNP() {
			t.Fatalf("layer says CNP %v, view %v", r.IsCNP(), p.IsCNP())
		}
		if !p.IsCNP() || len(ip.Hdr) != ip.Envelope.Len() {
			return // not a CNP, or IPv4 options Envelope.Put does not write
		}
		env := ip.Envelope
		got := buildCNPDatagram(t, &env, p.BTH().DestQP())
		q, err := ParseIP(got)
		if err != nil || !q.Packet.IsCNP() || q.Envelope != ip.Envelope || q.Packet.BTH().DestQP() != p.BTH().DestQP() {
			t.Fatalf("rebuilt CNP % x: %v", got, err)
		}
		roce := p.Bytes()
		canonical := roce[1] == 0 && BTH(roce).PKey() == CNPPKey && roce[4]&0xbf == 0 && BTH(roce).PSN() == 0 && roce[8] == 0 &&
			bytes.Equal(roce[BTHLen:BTHLen+CNPLen], make([]byte, CNPLen))
		// The IPv4 header checksum and the UDP checksum are the builder's
		// to compute (the ICRC masks both, so a CNP with wrong ones still
		// parses): compare the rest.
		want := b[:len(ip.Hdr)+p.Len()]
		if canonical && !bytes.Equal(maskChecksums(got, len(ip.Hdr)), maskChecksums(want, len(ip.Hdr))) {
			t.Fatalf("rebuilt\n% x\nwant\n% x", got, want)
		}
	})
}

// maskChecksums returns a copy of datagram d, whose IP and UDP headers are
// hdrLen bytes, with its IPv4 header checksum and its UDP checksum zeroed.
func maskChecksums(d []byte, hdrLen int) []byte {
	c := bytes.Clone(d)
	if len(c) >= 20 && c[0]>>4 == 4 {
		c[10], c[11] = 0, 0
	}
	if hdrLen >= 8 && hdrLen <= len(c) {
		c[hdrLen-2], c[hdrLen-1] = 0, 0
	}
	return c
}
