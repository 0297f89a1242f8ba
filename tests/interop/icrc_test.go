package interop

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// icrcOf is the suite's own ICRC, written from the IBTA's definition
// (RoCEv2 annex A17.3.3) and not from wire/bth, so that a bug there
// cannot hide itself: CRC-32 over eight 0xFF bytes, the IPv4 header with
// TOS, TTL and checksum set to ones, the UDP header with its checksum set
// to ones, the BTH with its reserved byte 4 set to ones, and the rest of
// the packet up to the ICRC (crc32.ChecksumIEEE, which inverts its
// result), stored least significant byte first.
func icrcOf(ip, udpAndRoCE []byte) uint32 {
	buf := make([]byte, 0, 8+len(ip)+len(udpAndRoCE))
	buf = append(buf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	h := append([]byte(nil), ip...)
	h[1] = 0xff               // TOS
	h[8] = 0xff               // TTL
	h[10], h[11] = 0xff, 0xff // header checksum
	buf = append(buf, h...)
	u := append([]byte(nil), udpAndRoCE[:len(udpAndRoCE)-4]...)
	u[6], u[7] = 0xff, 0xff // UDP checksum
	u[8+4] = 0xff           // BTH reserved byte
	buf = append(buf, u...)
	return crc32.ChecksumIEEE(buf)
}

// icrcStats are the RoCE packets of a capture by sender and verdict.
type icrcStats struct {
	good, bad map[string]int // by source address
	oversized int            // GSO super-frames seen before segmentation
}

// checkCapture reads a pcap of the tap and checks every RoCE packet's ICRC.
func checkCapture(path string, mtu int) (icrcStats, error) {
	st := icrcStats{good: map[string]int{}, bad: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip4, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip4 == nil || udp == nil || udp.DstPort != 4791 {
			continue
		}
		whole := append(append([]byte(nil), udp.Contents...), udp.Payload...)
		if len(whole) < 8+12+4 {
			st.bad[ip4.SrcIP.String()]++
			continue
		}
		if int(ip4.Length) > mtu+80 {
			st.oversized++
			continue
		}
		want := binary.LittleEndian.Uint32(whole[len(whole)-4:])
		if icrcOf(ip4.Contents, whole) == want {
			st.good[ip4.SrcIP.String()]++
		} else {
			st.bad[ip4.SrcIP.String()]++
		}
	}
	return st, nil
}

// The suite's ICRC is right: it verifies every packet real rxe sent in a
// capture of ib_read_bw between two rxe hosts, and refuses a flipped bit.
func TestOwnICRCOnRxeCapture(t *testing.T) {
	st, err := checkCapture("testdata/rxe_read_bw.pcap", 1024)
	if err != nil {
		t.Fatal(err)
	}
	if st.good["198.18.0.2"] != 24 || st.good["198.18.0.3"] != 8 || len(st.bad) != 0 {
		t.Fatalf("capture: %+v, want 24 and 8 good packets, none bad", st)
	}
	ip := []byte{0x45, 0, 0, 44, 0, 1, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 18, 0, 3}
	pkt := make([]byte, 8+12+4)
	pkt[8] = 0x11 // BTH opcode: ACKNOWLEDGE
	sum := icrcOf(ip, pkt)
	pkt[len(pkt)-4], pkt[len(pkt)-3], pkt[len(pkt)-2], pkt[len(pkt)-1] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	for bit := 0; bit < 8*(len(pkt)-4); bit++ {
		if bit/8 == 6 || bit/8 == 7 || bit/8 == 12 {
			continue // masked: UDP checksum, BTH reserved byte
		}
		pkt[bit/8] ^= 1 << (bit % 8)
		if icrcOf(ip, pkt) == sum {
			t.Fatalf("flipping bit %d leaves the ICRC unchanged", bit)
		}
		pkt[bit/8] ^= 1 << (bit % 8)
	}
}
