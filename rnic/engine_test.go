package rnic_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/netif"
)

var sizes = []int{0, 1, 3, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 12345, 65536, 1 << 20}

// TestRCWriteReadSend moves every size at every path MTU with RDMA WRITE,
// RDMA READ and SEND over real UDP, and checks the bytes and the CQEs.
func TestRCWriteReadSend(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			// A 1 MiB READ at MTU 256 is a burst of 4096 responses, which
			// can overrun a socket buffer on a loaded machine: retries on.
			p := newPair(t, pairOpts{mtu: mtu, memLen: 4 << 20, retry: 7})
			a, b := p.a, p.b
			const half = 2 << 20
			for i, n := range sizes {
				wrid := uint64(i * 10)
				// WRITE: a's [0,n) to b's [half, half+n).
				fill(a.mem[:n], i+1)
				mustPost(t, a, p.qa, ib.SendWR{WRID: wrid, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
					SGL: []ib.SGE{sge(a, 0, n)}, RemoteAddr: memVA + half, RKey: b.mr.RKey})
				wc := a.poll(1, 10*time.Second)[0]
				checkWC(t, wc, ib.WC{WRID: wrid, Opcode: ib.WCRDMAWrite, ByteLen: uint32(n), QPNum: p.qa.QPN})
				sameBytes(t, fmt.Sprintf("WRITE %d", n), b.mem[half:half+n], a.mem[:n])

				// READ: b's [half, half+n) back into a's [half, half+n).
				clear(a.mem[half : half+n])
				mustPost(t, a, p.qa, ib.SendWR{WRID: wrid + 1, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
					SGL: []ib.SGE{sge(a, half, n)}, RemoteAddr: memVA + half, RKey: b.mr.RKey})
				wc = a.poll(1, 10*time.Second)[0]
				checkWC(t, wc, ib.WC{WRID: wrid + 1, Opcode: ib.WCRDMARead, ByteLen: uint32(n), QPNum: p.qa.QPN})
				sameBytes(t, fmt.Sprintf("READ %d", n), a.mem[half:half+n], b.mem[half:half+n])

				// SEND: a's [0,n) into a receive WQE of b at offset 0.
				fill(a.mem[:n], i+100)
				mustRecv(t, b, p.qb, ib.RecvWR{WRID: wrid + 2, SGL: []ib.SGE{sge(b, 0, n+16)}})
				mustPost(t, a, p.qa, ib.SendWR{WRID: wrid + 3, Opcode: ib.WRSend, Flags: ib.SendSignaled,
					SGL: []ib.SGE{sge(a, 0, n)}})
				wc = a.poll(1, 10*time.Second)[0]
				checkWC(t, wc, ib.WC{WRID: wrid + 3, Opcode: ib.WCSend, ByteLen: uint32(n), QPNum: p.qa.QPN})
				wc = b.poll(1, 10*time.Second)[0]
				checkWC(t, wc, ib.WC{WRID: wrid + 2, Opcode: ib.WCRecv, ByteLen: uint32(n), QPNum: p.qb.QPN})
				sameBytes(t, fmt.Sprintf("SEND %d", n), b.mem[:n], a.mem[:n])
			}
			t.Logf("retransmitted_pkts %d", counter(a, "retransmitted_pkts"))
		})
	}
}

// TestRCImmediate checks WRITE_WITH_IMM and SEND_WITH_IMM: data, the
// receiver's CQE with its immediate, and the sender's.
func TestRCImmediate(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 1024})
	a, b := p.a, p.b
	fill(a.mem[:5000], 7)
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 70, SGL: []ib.SGE{sge(b, 0, 0)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 71, Opcode: ib.WRRDMAWriteWithImm, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 5000)}, RemoteAddr: memVA + 8192, RKey: b.mr.RKey, Imm: 0xdeadbeef})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 71, Opcode: ib.WCRDMAWrite, ByteLen: 5000,
		QPNum: p.qa.QPN, WCFlags: ib.WCFlagWithImm})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 70, Opcode: ib.WCRecvRDMAWithImm, ByteLen: 5000,
		QPNum: p.qb.QPN, WCFlags: ib.WCFlagWithImm, Imm: 0xdeadbeef})
	sameBytes(t, "WRITE_WITH_IMM", b.mem[8192:8192+5000], a.mem[:5000])

	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 72, SGL: []ib.SGE{sge(b, 0, 3000)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 73, Opcode: ib.WRSendWithImm, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 2500)}, Imm: 42})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 73, Opcode: ib.WCSend, ByteLen: 2500,
		QPNum: p.qa.QPN, WCFlags: ib.WCFlagWithImm})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 72, Opcode: ib.WCRecv, ByteLen: 2500,
		QPNum: p.qb.QPN, WCFlags: ib.WCFlagWithImm, Imm: 42})
	sameBytes(t, "SEND_WITH_IMM", b.mem[:2500], a.mem[:2500])
}

// TestRCAtomics runs CMP_AND_SWP (hit and miss) and FETCH_AND_ADD and
// checks the remote word and the original value returned.
func TestRCAtomics(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	word := func(n *node, off int) uint64 { return binary.NativeEndian.Uint64(n.mem[off:]) }
	binary.NativeEndian.PutUint64(b.mem[64:], 1000)
	b.fence()
	steps := []struct {
		wr        ib.SendWR
		op        ib.WCOpcode
		orig, now uint64
	}{
		{ib.SendWR{Opcode: ib.WRAtomicFetchAdd, CompareAdd: 5}, ib.WCFetchAdd, 1000, 1005},
		{ib.SendWR{Opcode: ib.WRAtomicCmpAndSwp, CompareAdd: 1005, Swap: 77}, ib.WCCompSwap, 1005, 77},
		{ib.SendWR{Opcode: ib.WRAtomicCmpAndSwp, CompareAdd: 1, Swap: 99}, ib.WCCompSwap, 77, 77},
		{ib.SendWR{Opcode: ib.WRAtomicFetchAdd, CompareAdd: ^uint64(76)}, ib.WCFetchAdd, 77, 0},
	}
	for i, s := range steps {
		wr := s.wr
		wr.WRID, wr.Flags = uint64(i), ib.SendSignaled
		wr.SGL = []ib.SGE{sge(a, 128+8*i, 8)}
		wr.RemoteAddr, wr.RKey = memVA+64, b.mr.RKey
		mustPost(t, a, p.qa, wr)
		checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: uint64(i), Opcode: s.op, ByteLen: 8, QPNum: p.qa.QPN})
		if got := word(a, 128+8*i); got != s.orig {
			t.Errorf("step %d: original value %d, want %d", i, got, s.orig)
		}
		if got := word(b, 64); got != s.now {
			t.Errorf("step %d: remote word %d, want %d", i, got, s.now)
		}
	}
}

// TestRCSendWithInvalidate checks that SEND_WITH_INV invalidates the rkey
// at the responder: the CQE says which, and a WRITE with it then fails.
func TestRCSendWithInvalidate(t *testing.T) {
	p := newPair(t, pairOpts{})
	a, b := p.a, p.b
	buf := make([]byte, 4096)
	mr2, err := b.dev.RegMR(b.pd, buf, 0x5000, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 1, SGL: []ib.SGE{sge(b, 0, 64)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRSendWithInv, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, InvRKey: mr2.RKey})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 2, Opcode: ib.WCSend, ByteLen: 16, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRecv, ByteLen: 16, QPNum: p.qb.QPN,
		WCFlags: ib.WCFlagWithInv, Imm: mr2.RKey})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 16)}, RemoteAddr: 0x5000, RKey: mr2.RKey})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 3, Status: ib.WCRemAccessErr, Opcode: ib.WCRDMAWrite, QPNum: p.qa.QPN})
}

// TestRCMultiSGE gathers from three SGEs and scatters into three others.
func TestRCMultiSGE(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 256})
	a, b := p.a, p.b
	fill(a.mem[:1<<16], 3)
	src := []ib.SGE{sge(a, 100, 300), sge(a, 5000, 1), sge(a, 9000, 700)}
	want := append(append(append([]byte{}, a.mem[100:400]...), a.mem[5000:5001]...), a.mem[9000:9700]...)
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 1, SGL: []ib.SGE{sge(b, 0, 17), sge(b, 1000, 500), sge(b, 3000, 1000)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: src})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 2, Opcode: ib.WCSend, ByteLen: 1001, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCRecv, ByteLen: 1001, QPNum: p.qb.QPN})
	got := append(append(append([]byte{}, b.mem[0:17]...), b.mem[1000:1500]...), b.mem[3000:3484]...)
	sameBytes(t, "3-SGE SEND", got, want)

	// READ scattering into three SGEs.
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 20000, 10), sge(a, 30000, 1000), sge(a, 40000, 14)}, RemoteAddr: memVA + 1000, RKey: b.mr.RKey})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 3, Opcode: ib.WCRDMARead, ByteLen: 1024, QPNum: p.qa.QPN})
	got = append(append(append([]byte{}, a.mem[20000:20010]...), a.mem[30000:31000]...), a.mem[40000:40014]...)
	sameBytes(t, "3-SGE READ", got, b.mem[1000:2024])
}

// TestRCInlineUnsignaled posts inline sends, all but the last unsignaled:
// one CQE at the sender, every message at the receiver.
func TestRCInlineUnsignaled(t *testing.T) {
	p := newPair(t, pairOpts{maxInline: 256})
	a, b := p.a, p.b
	const n = 20
	var wrs []ib.SendWR
	for i := range n {
		mustRecv(t, b, p.qb, ib.RecvWR{WRID: uint64(100 + i), SGL: []ib.SGE{sge(b, 256*i, 256)}})
		data := []byte(fmt.Sprintf("inline message %02d", i))
		wr := ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Flags: ib.SendInline, InlineData: data}
		if i == n-1 {
			wr.Flags |= ib.SendSignaled
		}
		wrs = append(wrs, wr)
	}
	mustPost(t, a, p.qa, wrs...)
	for i := range wrs {
		clear(wrs[i].InlineData) // the NIC copied it at post time
	}
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: n - 1, Opcode: ib.WCSend, ByteLen: 17, QPNum: p.qa.QPN})
	a.noMore(50 * time.Millisecond)
	wcs := b.poll(n, 5*time.Second)
	for i, wc := range wcs {
		checkWC(t, wc, ib.WC{WRID: uint64(100 + i), Opcode: ib.WCRecv, ByteLen: 17, QPNum: p.qb.QPN})
		sameBytes(t, "inline", b.mem[256*i:256*i+17], []byte(fmt.Sprintf("inline message %02d", i)))
	}
	if err := a.dev.PostSend(p.qa, []ib.SendWR{{Opcode: ib.WRSend, Flags: ib.SendInline, InlineData: make([]byte, 257)}}); err == nil {
		t.Fatal("257 bytes inline on a QP with max_inline_data 256 was accepted")
	}
}

// TestRCSRQ receives on a shared receive queue.
func TestRCSRQ(t *testing.T) {
	p := newPair(t, pairOpts{srq: true})
	a, b := p.a, p.b
	for i := range 8 {
		mustRecv(t, b, p.qb, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{sge(b, 4096*i, 4096)}})
	}
	if err := b.dev.PostRecv(p.qb, []ib.RecvWR{{WRID: 1}}); err == nil {
		t.Fatal("PostRecv on a QP with an SRQ succeeded")
	}
	fill(a.mem[:8*3000], 9)
	for i := range 8 {
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 3000*i, 3000)}})
	}
	a.poll(8, 5*time.Second)
	for i, wc := range b.poll(8, 5*time.Second) {
		checkWC(t, wc, ib.WC{WRID: uint64(i), Opcode: ib.WCRecv, ByteLen: 3000, QPNum: p.qb.QPN})
		sameBytes(t, "SRQ", b.mem[4096*i:4096*i+3000], a.mem[3000*i:3000*i+3000])
	}
	if p.qb.SRQ.Len() != 0 {
		t.Fatalf("SRQ holds %d WRs after 8 receives", p.qb.SRQ.Len())
	}
}

// TestUC sends and writes on UC: completion at the sender once sent, data
// and CQEs at the receiver.
func TestUC(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUC, mtu: 1024})
	a, b := p.a, p.b
	fill(a.mem[:100000], 11)
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 5, SGL: []ib.SGE{sge(b, 0, 10000)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Flags: ib.SendSignaled, SGL: []ib.SGE{sge(a, 0, 9999)}})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 1, Opcode: ib.WCSend, ByteLen: 9999, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 5, Opcode: ib.WCRecv, ByteLen: 9999, QPNum: p.qb.QPN})
	sameBytes(t, "UC SEND", b.mem[:9999], a.mem[:9999])

	mustPost(t, a, p.qa, ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 100000)}, RemoteAddr: memVA + 200000, RKey: b.mr.RKey})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 2, Opcode: ib.WCRDMAWrite, ByteLen: 100000, QPNum: p.qa.QPN})
	// UC has no ACK: the data's arrival is seen by a WRITE_WITH_IMM behind it.
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 6})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWriteWithImm, RemoteAddr: memVA, RKey: b.mr.RKey, Imm: 9})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 6, Opcode: ib.WCRecvRDMAWithImm, QPNum: p.qb.QPN, WCFlags: ib.WCFlagWithImm, Imm: 9})
	sameBytes(t, "UC WRITE", b.mem[200000:300000], a.mem[:100000])
	if err := a.dev.PostSend(p.qa, []ib.SendWR{{Opcode: ib.WRRDMARead}}); err == nil {
		t.Fatal("RDMA READ on a UC QP was accepted")
	}
}

// TestUCBackToBack: several UC SENDs in a row, one-packet and multi-packet,
// each land in their own receive WQE. ibv_uc_pingpong found the responder
// starting the second message at the first one's end offset.
func TestUCBackToBack(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUC, mtu: 1024})
	a, b := p.a, p.b
	fill(a.mem[:20000], 13)
	sizes := []int{100, 100, 100, 3000, 3000, 1}
	for i := range sizes {
		mustRecv(t, b, p.qb, ib.RecvWR{WRID: uint64(10 + i), SGL: []ib.SGE{sge(b, i*4096, 4096)}})
	}
	for i, n := range sizes {
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{sge(a, i*4096, n)}})
	}
	got := b.poll(len(sizes), 5*time.Second)
	for i, n := range sizes {
		checkWC(t, got[i], ib.WC{WRID: uint64(10 + i), Opcode: ib.WCRecv, ByteLen: uint32(n), QPNum: p.qb.QPN})
		sameBytes(t, fmt.Sprintf("UC SEND %d", i), b.mem[i*4096:i*4096+n], a.mem[i*4096:i*4096+n])
	}
	if c := b.dev.Observer().Counters()["drop_uc_message"]; c != 0 {
		t.Fatalf("drop_uc_message = %d", c)
	}
}

// TestUD sends datagrams with the Q_Key and checks the 40-byte GRH area,
// which holds the IPv4 header in its last 20 bytes as rxe writes it, and
// the source QP in the CQE. A wrong Q_Key is dropped and counted.
func TestUD(t *testing.T) {
	p := newPair(t, pairOpts{typ: ib.QPTypeUD, mtu: 1024})
	a, b := p.a, p.b
	fill(a.mem[:1024], 12)
	ah := &ib.AH{DGID: netif.GIDFromAddr(b.dev.QueryPort().Addr), HopLimit: 64}
	for i, n := range []int{0, 1, 1000, 1024} {
		mustRecv(t, b, p.qb, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{sge(b, 0, 40+1024)}})
		mustPost(t, a, p.qa, ib.SendWR{WRID: uint64(10 + i), Opcode: ib.WRSendWithImm, Flags: ib.SendSignaled,
			SGL: []ib.SGE{sge(a, 0, n)}, AH: ah, RemoteQPN: p.qb.QPN, RemoteQKey: qkey, Imm: uint32(i)})
		checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: uint64(10 + i), Opcode: ib.WCSend, ByteLen: uint32(n),
			QPNum: p.qa.QPN, WCFlags: ib.WCFlagWithImm})
		checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: uint64(i), Opcode: ib.WCRecv, ByteLen: uint32(40 + n),
			QPNum: p.qb.QPN, SrcQP: p.qa.QPN, WCFlags: ib.WCFlagGRH | ib.WCFlagWithImm, Imm: uint32(i)})
		sameBytes(t, "UD payload", b.mem[40:40+n], a.mem[:n])
		grh := b.mem[:40]
		sameBytes(t, "GRH first 20 bytes", grh[:20], make([]byte, 20))
		if grh[20] != 0x45 || grh[29] != 17 || !bytes.Equal(grh[32:36], a.dev.QueryPort().Addr.AsSlice()) ||
			!bytes.Equal(grh[36:40], b.dev.QueryPort().Addr.AsSlice()) ||
			int(binary.BigEndian.Uint16(grh[22:])) != 20+8+12+8+4+n+(-n&3)+4 {
			t.Fatalf("GRH area % x", grh)
		}
	}
	mustRecv(t, b, p.qb, ib.RecvWR{WRID: 99, SGL: []ib.SGE{sge(b, 0, 1064)}})
	mustPost(t, a, p.qa, ib.SendWR{WRID: 20, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 8)}, AH: ah, RemoteQPN: p.qb.QPN, RemoteQKey: qkey + 1})
	a.poll(1, 5*time.Second)
	b.noMore(50 * time.Millisecond)
	if c := counter(b, "drop_bad_qkey"); c != 1 {
		t.Fatalf("drop_bad_qkey = %d, want 1", c)
	}
	if err := a.dev.PostSend(p.qa, []ib.SendWR{{Opcode: ib.WRSend, SGL: []ib.SGE{sge(a, 0, 1025)}, AH: ah}}); err == nil {
		t.Fatal("UD send larger than the MTU was accepted")
	}
	far := *ah
	far.SGIDIndex = ib.GIDTableLen
	err := a.dev.PostSend(p.qa, []ib.SendWR{{Opcode: ib.WRSend, SGL: []ib.SGE{sge(a, 0, 8)}, AH: &far, RemoteQPN: p.qb.QPN, RemoteQKey: qkey}})
	if err == nil || !strings.Contains(err.Error(), "sgid_index 2: the port's GID table has 2 entries") {
		t.Fatalf("UD send with an sgid_index past the GID table: %v", err)
	}
	// The last index is taken; the receive left by the bad Q_Key takes it.
	last := *ah
	last.SGIDIndex = ib.GIDTableLen - 1
	mustPost(t, a, p.qa, ib.SendWR{WRID: 21, Opcode: ib.WRSend, Flags: ib.SendSignaled,
		SGL: []ib.SGE{sge(a, 0, 8)}, AH: &last, RemoteQPN: p.qb.QPN, RemoteQKey: qkey})
	checkWC(t, a.poll(1, 5*time.Second)[0], ib.WC{WRID: 21, Opcode: ib.WCSend, ByteLen: 8, QPNum: p.qa.QPN})
	checkWC(t, b.poll(1, 5*time.Second)[0], ib.WC{WRID: 99, Opcode: ib.WCRecv, ByteLen: 48, QPNum: p.qb.QPN, SrcQP: p.qa.QPN, WCFlags: ib.WCFlagGRH})
}
