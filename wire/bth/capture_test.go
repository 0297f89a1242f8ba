package bth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// The golden captures of real rxe traffic (see /work/shared/golden/README.md
// for how they were made), as copied into testdata. The *_loss_trim files
// are cut from the much larger loss captures by TestTrimLossCaptures.
var goldenCaptures = []string{
	"atomic_cas", "atomic_faa", "rc_pingpong", "read_bw", "read_lat",
	"rping", "send_bw", "send_bw_uc", "send_bw_ud", "send_lat",
	"ud_pingpong", "write_bw", "write_bw_mtu4096", "write_bw_rdmacm",
	"write_lat", "write_bw_loss_trim", "read_bw_loss_trim",
}

// capFrame is one RoCE packet of a capture.
type capFrame struct {
	capture string
	index   int    // packet number in the capture, from 1, as Wireshark counts
	frame   []byte // the whole Ethernet frame
	ip      []byte // the IP datagram, Ethernet header stripped
}

func (f capFrame) String() string { return fmt.Sprintf("%s #%d", f.capture, f.index) }

// readCapture returns every UDP-to-4791 packet of an Ethernet pcap file and
// the number of packets in it.
func readCapture(t testing.TB, path string) ([]capFrame, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("%s: link type %v, want Ethernet", path, r.LinkType())
	}
	name := filepath.Base(path)
	name = name[:len(name)-len(filepath.Ext(name))]
	var out []capFrame
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		n++
		if ip, ok := roceDatagram(data); ok {
			out = append(out, capFrame{capture: name, index: n, frame: data, ip: ip})
		}
	}
	return out, n
}

// roceDatagram returns the IP datagram of an Ethernet frame that carries
// UDP to port 4791, with Ethernet padding cut off.
func roceDatagram(frame []byte) ([]byte, bool) {
	if len(frame) < 14 {
		return nil, false
	}
	ip := frame[14:]
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		if len(ip) < 28 || ip[9] != 17 {
			return nil, false
		}
		hl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if hl < 20 || total > len(ip) || total < hl+8 || binary.BigEndian.Uint16(ip[hl+2:]) != UDPPort {
			return nil, false
		}
		return ip[:total], true
	case 0x86dd:
		if len(ip) < 48 || ip[6] != 17 || binary.BigEndian.Uint16(ip[42:]) != UDPPort {
			return nil, false
		}
		total := 40 + int(binary.BigEndian.Uint16(ip[4:]))
		if total > len(ip) {
			return nil, false
		}
		return ip[:total], true
	}
	return nil, false
}

// goldenFrames reads every golden capture.
func goldenFrames(t testing.TB) map[string][]capFrame {
	t.Helper()
	m := map[string][]capFrame{}
	for _, name := range goldenCaptures {
		frames, _ := readCapture(t, filepath.Join("testdata", name+".pcap"))
		if len(frames) == 0 {
			t.Fatalf("%s: no RoCE packets", name)
		}
		m[name] = frames
	}
	return m
}
