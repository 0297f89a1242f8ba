package bth

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

// The loss captures are megabytes; testdata keeps a window of them around
// the first recovery. Regenerate with
//
//	go test ./wire/bth -run TestTrimLossCaptures -trim /work/shared/golden
var trimFrom = flag.String("trim", "", "directory of the full golden captures to cut testdata/*_loss_trim.pcap from")

const (
	trimBefore = 100 // packets kept before the first recovery
	trimAfter  = 200 // and from it on
)

func TestTrimLossCaptures(t *testing.T) {
	if *trimFrom == "" {
		t.Skip("no -trim directory")
	}
	for _, name := range []string{"write_bw_loss", "read_bw_loss"} {
		src := filepath.Join(*trimFrom, name+".pcap")
		frames, _ := readCapture(t, src)
		at := firstRecovery(t, frames)
		if at < 0 {
			t.Fatalf("%s: no NAK or retransmission", name)
		}
		writeWindow(t, src, filepath.Join("testdata", name+"_trim.pcap"), at-trimBefore, at+trimAfter)
	}
}

// firstRecovery returns the packet number of the first NAK (AETH syndrome
// 0x60-0x7f) or, in a capture without NAKs such as a READ whose responses
// were lost, of the first request that goes back to a PSN already sent:
// the requester's retry.
func firstRecovery(t *testing.T, frames []capFrame) int {
	maxPSN := map[uint32]uint32{} // per destination QP
	for _, f := range frames {
		ip, err := ParseIP(f.ip)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		p := ip.Packet
		if p.Opcode().Has(HdrAETH) && p.AETH().Syndrome().IsNAK() {
			return f.index
		}
		if !p.Opcode().Is(FlagRequest) {
			continue
		}
		qp, psn := p.BTH().DestQP(), p.BTH().PSN()
		if last, ok := maxPSN[qp]; ok && PSNDiff(psn, last) <= 0 {
			return f.index
		}
		// A READ request stands for as many PSNs as it has responses;
		// only its first matters here.
		maxPSN[qp] = psn
	}
	return -1
}

// writeWindow copies packets number from through to-1 of src to dst.
func writeWindow(t *testing.T, src, dst string, from, to int) {
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, err := pcapgo.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w := pcapgo.NewWriter(out)
	if err := w.WriteFileHeader(r.Snaplen(), r.LinkType()); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for n := 1; n < to; n++ {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if n < from {
			continue
		}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
		kept++
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d packets", dst, kept)
}
