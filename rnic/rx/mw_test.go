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

// FuzzWindowAccess throws requests naming a type 2 window's rkey at the
// responder, with any address, length, opcode and payload: no byte of
// the window's MR outside the window ever changes (the MR itself
// reaches further on both sides), whatever the responder answers.
func FuzzWindowAccess(f *testing.F) {
	f.Add(uint8(0), uint64(0x10100), uint32(32), []byte("inside"))
	f.Add(uint8(0), uint64(0x10100+250), uint32(16), bytes.Repeat([]byte{1}, 16))
	f.Add(uint8(1), uint64(0x100ff), uint32(512), bytes.Repeat([]byte{2}, 256))
	f.Add(uint8(2), uint64(0x10100+248), uint32(8), []byte{})
	f.Add(uint8(3), uint64(0x10100+256), uint32(8), []byte{})
	f.Add(uint8(4), uint64(0x10000), uint32(4096), []byte{})
	ops := []bth.Opcode{bth.RCRDMAWriteOnly, bth.RCRDMAWriteFirst, bth.RCFetchAdd, bth.RCCompareSwap, bth.RCRDMAReadRequest}
	f.Fuzz(func(t *testing.T, opi uint8, va uint64, dmaLen uint32, payload []byte) {
		const winOff, winLen = 0x100, 256
		op := ops[int(opi)%len(ops)]
		if !op.Has(bth.HdrRETH) || op == bth.RCRDMAReadRequest {
			payload = nil
		}
		if len(payload) > 1024 {
			payload = payload[:1024]
		}
		mem := bytes.Repeat([]byte{0x5a}, 4096)
		r := newRCQPMem(t, make([]byte, 64))
		r.qp.Attr.AccessFlags = ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
		mr, err := r.tab.Register(1, mem, 0x10000, ib.AccessLocalWrite|ib.AccessRemote|ib.AccessMWBind)
		if err != nil {
			t.Fatal(err)
		}
		mw, err := r.tab.AllocMW(1, dma.MWType2)
		if err != nil {
			t.Fatal(err)
		}
		key := mw.RKey&^0xff | uint32(uint8(mw.RKey+1))
		if err := r.tab.Bind(1, r.qp.QPN, &ib.MWBind{MWRKey: mw.RKey, RKey: key, MRLKey: mr.LKey, Addr: 0x10000 + winOff,
			Length: winLen, Access: ib.AccessRemote}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, bth.PacketLen(op, len(payload)))
		p, _ := bth.Build(buf, op, len(payload))
		p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(len(payload)), PKey: bth.DefaultPKey,
			DestQP: r.qp.QPN, PSN: r.qp.Resp.EPSN, AckReq: true})
		if op.Has(bth.HdrRETH) {
			p.RETH().Encode(va, key, dmaLen)
		}
		if op.Has(bth.HdrAtomicETH) {
			p.AtomicETH().Encode(va, key, 0x0101010101010101, 0x5a5a5a5a5a5a5a5a)
		}
		copy(p.Payload(), payload)
		b := ibudp.NewBuf()
		if !b.SetRoCE(buf) {
			return
		}
		b.Peer = r.peer
		var tx sent
		r.h.Receive(b, &tx)
		r.h.Resp.Ack.Flush(&tx)
		for i, v := range mem {
			if (i < winOff || i >= winOff+winLen) && v != 0x5a {
				t.Fatalf("%v at %#x len %d through the window wrote MR byte %#x, outside the window [%#x, %#x)",
					op, va, dmaLen, i, winOff, winOff+winLen)
			}
		}
	})
}
