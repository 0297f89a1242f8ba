package rx_test

import (
	"bytes"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/dma"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// writeOnly builds an RDMA WRITE ONLY of payload to (va, rkey) at PSN psn
// for r's QP, as any host on the network may send one.
func (r *rcQP) writeOnly(psn uint32, va uint64, rkey uint32, payload []byte) *ibudp.Buf {
	buf := make([]byte, bth.PacketLen(bth.RCRDMAWriteOnly, len(payload)))
	p, _ := bth.Build(buf, bth.RCRDMAWriteOnly, len(payload))
	p.BTH().Encode(&bth.BTHFields{Opcode: bth.RCRDMAWriteOnly, PadCount: bth.PadFor(len(payload)), PKey: bth.DefaultPKey,
		DestQP: r.qp.QPN, PSN: psn, AckReq: true})
	p.RETH().Encode(va, rkey, uint32(len(payload)))
	copy(p.Payload(), payload)
	b := ibudp.NewBuf()
	b.SetRoCE(buf)
	b.Peer = r.peer
	return b
}

// A WRITE naming a memory window's rkey lands inside the window and
// only there: the packet one byte outside the window, inside its MR, is
// NAKed with REMOTE ACCESS ERROR (counted in naks_sent), the QP goes to
// ERR and not a byte of the region changes.
func TestResponderWindowBounds(t *testing.T) {
	mem := make([]byte, 4096)
	for i := range mem {
		mem[i] = byte(i*5 + 1)
	}
	r := newRCQPMem(t, make([]byte, 64))
	r.qp.Attr.AccessFlags = ib.AccessRemoteWrite
	tab := r.tab
	mr, err := tab.Register(1, mem, 0x10000, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := tab.AllocMW(1, dma.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key := mw.RKey&^0xff | uint32(uint8(mw.RKey+1))
	if err := tab.Bind(1, r.qp.QPN, &ib.MWBind{MWRKey: mw.RKey, RKey: key, MRLKey: mr.LKey, Addr: 0x10100, Length: 256,
		Access: ib.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), mem...)
	payload := bytes.Repeat([]byte{0xAB}, 32)
	var tx sent
	epsn := r.qp.Resp.EPSN
	r.h.Receive(r.writeOnly(epsn, 0x10100+224, key, payload), &tx) // the window's last 32 bytes
	r.h.Resp.Ack.Flush(&tx)
	copy(want[0x100+224:], payload)
	if !bytes.Equal(mem, want) {
		t.Fatal("the WRITE inside the window landed elsewhere")
	}
	naks := r.h.Counters.Get(ib.NAKsSent)
	r.h.Receive(r.writeOnly(epsn+1, 0x10100+225, key, payload), &tx) // one byte past the window
	r.h.Resp.Ack.Flush(&tx)
	if !bytes.Equal(mem, want) {
		t.Fatal("a WRITE past the window changed the region")
	}
	last, err := bth.Parse(tx.bufs[len(tx.bufs)-1].RoCE())
	if err != nil || last.Opcode() != bth.RCAcknowledge || last.AETH().Syndrome() != bth.NAKRemoteAccessError || last.BTH().PSN() != epsn+1 {
		t.Fatalf("the responder's last packet %v (%v), want a REMOTE ACCESS ERROR NAK for PSN %#x", last.Opcode(), err, epsn+1)
	}
	if n := r.h.Counters.Get(ib.NAKsSent) - naks; n != 1 {
		t.Fatalf("naks_sent grew by %d, want 1", n)
	}
	if st := r.qp.State(); st != ib.QPSErr {
		t.Fatalf("QP in %v after the access error, want ERR", st)
	}
}
