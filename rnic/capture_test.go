package rnic_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/pcap"
)

// TestCaptureTshark captures one device's traffic (WRITE, READ, SEND and
// both atomics between two devices over loopback) and has tshark read the
// file: every frame must decode as InfiniBand over UDP 4791 with the
// opcode, PSN and destination QP our own parser reads from the same bytes,
// no frame may be malformed, and the ICRC tshark shows must be the one
// computed over the frame's own IP and UDP headers.
func TestCaptureTshark(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	path := filepath.Join(t.TempDir(), "rnic0.pcap")
	w, err := pcap.Create(pcap.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	p := newPair(t, pairOpts{mtu: 1024, retry: 7})
	a, b := p.a, p.b
	a.dev.Observer().SetCapture(w)

	fill(a.mem[:8192], 1)
	fill(b.mem[8192:16384], 2)
	a.fence()
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 9, SGL: []ib.SGE{sge(b, 32768, 4096)}})
	mustPost(t, a, p.qa,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 0, 3000)},
			RemoteAddr: memVA, RKey: b.mr.RKey},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 16384, 2500)},
			RemoteAddr: memVA + 8192, RKey: b.mr.RKey},
		ib.SendWR{WRID: 3, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 0, 100)}},
		ib.SendWR{WRID: 4, Opcode: ib.WRAtomicFetchAdd, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 24576, 8)},
			RemoteAddr: memVA + 40960, RKey: b.mr.RKey, CompareAdd: 5},
		ib.SendWR{WRID: 5, Opcode: ib.WRAtomicCmpAndSwp, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 24584, 8)},
			RemoteAddr: memVA + 40960, RKey: b.mr.RKey, CompareAdd: 5, Swap: 7},
	)
	for i, wc := range a.poll(5, 30*time.Second) {
		if wc.Status != ib.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %v", i, &wc)
		}
	}
	sameBytes(t, "READ data", a.mem[16384:16384+2500], b.mem[8192:8192+2500])
	// The last ACK may still be on its way into the capture: stop
	// capturing only once the device has seen it (the completions say so).
	a.dev.Observer().SetCapture(nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Errors != 0 || st.Packets < 12 {
		t.Fatalf("capture stats %+v", st)
	}

	// Our own reading of the file.
	type pkt struct {
		op        bth.Opcode
		psn, dqp  uint32
		icrc      uint32 // as stored, read least significant byte first
		computed  uint32
		ipv4Total int
	}
	var want []pkt
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdr, roce := data[14:14+28], data[14+28:]
		pp, err := bth.Parse(roce)
		if err != nil {
			t.Fatalf("frame %d: %v", len(want)+1, err)
		}
		c, err := bth.ComputeICRC(hdr, roce[:len(roce)-bth.ICRCLen])
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, pkt{op: pp.Opcode(), psn: pp.BTH().PSN(), dqp: pp.BTH().DestQP(), icrc: pp.ICRC(),
			computed: c, ipv4Total: int(binary.BigEndian.Uint16(hdr[2:]))})
	}
	if uint64(len(want)) != st.Packets {
		t.Fatalf("%d frames in the file, writer wrote %d", len(want), st.Packets)
	}

	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-E", "separator=,",
		"-e", "udp.dstport", "-e", "ip.len", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
		"-e", "infiniband.bth.destqp", "-e", "infiniband.invariant.crc").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("tshark read %d frames, the file has %d:\n%s", len(lines), len(want), out)
	}
	seen := map[bth.Opcode]bool{}
	for i, line := range lines {
		f := strings.Split(line, ",")
		num := func(k int) uint64 {
			v, err := strconv.ParseUint(f[k], 0, 64)
			if err != nil {
				t.Fatalf("frame %d: field %d of %q: %v", i+1, k, line, err)
			}
			return v
		}
		w := want[i]
		got := pkt{op: bth.Opcode(num(2)), psn: uint32(num(3)), dqp: uint32(num(4)), ipv4Total: int(num(1))}
		if num(0) != 4791 || got.op != w.op || got.psn != w.psn || got.dqp != w.dqp || got.ipv4Total != w.ipv4Total {
			t.Fatalf("frame %d: tshark reads %q, we read %+v", i+1, line, w)
		}
		// tshark shows the ICRC bytes as one big-endian number.
		if crc := bits.ReverseBytes32(uint32(num(5))); crc != w.icrc || crc != w.computed {
			t.Fatalf("frame %d: ICRC %#x in tshark, %#x stored, %#x computed over the captured headers", i+1, crc, w.icrc, w.computed)
		}
		seen[w.op] = true
	}
	for _, op := range []bth.Opcode{bth.RCRDMAWriteFirst, bth.RCRDMAWriteLast, bth.RCRDMAReadRequest,
		bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseLast, bth.RCSendOnly, bth.RCFetchAdd,
		bth.RCCompareSwap, bth.RCAtomicAcknowledge, bth.RCAcknowledge} {
		if !seen[op] {
			t.Errorf("no %v in the capture", op)
		}
	}
	bad, err := exec.Command(tshark, "-r", path, "-Y", "_ws.malformed || !infiniband").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if s := strings.TrimSpace(string(bad)); s != "" {
		t.Fatalf("tshark finds malformed or undecoded frames:\n%s", s)
	}
	t.Logf("%d frames, all decoded as InfiniBand by %s", len(lines), fmt.Sprint(tshark))
}
