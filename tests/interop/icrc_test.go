package interop

import (
	"fmt"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/tests/icrcref"
)

// icrcStats are the RoCE packets of a capture by sender and verdict.
type icrcStats struct {
	good, bad map[string]int // by source address
	cnp       map[string]int // CNPs (BTH opcode 0x81) with a good ICRC, by source address
	oversized int            // GSO super-frames seen before segmentation
}

// checkCapture reads a pcap of the tap and checks every RoCE packet's ICRC.
func checkCapture(path string, mtu int) (icrcStats, error) {
	st := icrcStats{good: map[string]int{}, bad: map[string]int{}, cnp: map[string]int{}}
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
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		var ip []byte
		var src string
		var length int // of the IP datagram
		if ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			ip, src, length = ip4.Contents, ip4.SrcIP.String(), int(ip4.Length)
		} else if ip6, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			ip, src, length = ip6.Contents, ip6.SrcIP.String(), len(ip6.Contents)+int(ip6.Length)
		}
		if ip == nil || udp == nil || udp.DstPort != 4791 {
			continue
		}
		whole := append(append([]byte(nil), udp.Contents...), udp.Payload...)
		if length > mtu+80 {
			st.oversized++
			continue
		}
		// Over IPv6 the UDP checksum counts too: a receiver other than
		// rxe drops a packet without a right one.
		if icrcref.OK(ip, whole) && (len(ip) == 20 || icrcref.UDP6OK(ip, whole)) {
			st.good[src]++
			if len(udp.Payload) > 0 && udp.Payload[0] == 0x81 {
				st.cnp[src]++
			}
		} else {
			st.bad[src]++
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
	sum := icrcref.Of(ip, pkt)
	pkt[len(pkt)-4], pkt[len(pkt)-3], pkt[len(pkt)-2], pkt[len(pkt)-1] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	for bit := 0; bit < 8*(len(pkt)-4); bit++ {
		if bit/8 == 6 || bit/8 == 7 || bit/8 == 12 {
			continue // masked: UDP checksum, BTH reserved byte
		}
		pkt[bit/8] ^= 1 << (bit % 8)
		if icrcref.Of(ip, pkt) == sum {
			t.Fatalf("flipping bit %d leaves the ICRC unchanged", bit)
		}
		pkt[bit/8] ^= 1 << (bit % 8)
	}
}
