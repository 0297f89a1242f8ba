package rx_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/rnic/wqe"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// rxeReader answers READ requests as rxe's responder does (rxe_resp.c):
// one request at a time, in the order they came, each from its PSN and
// VA to the end of its length, a duplicate as much as a new one; while
// it serves one the others wait.
type rxeReader struct {
	mem    []byte // the remote region, at VA remoteVA
	qpn    uint32 // the requester's QP
	first  uint32 // the READ's first PSN: a replay from it starts with FIRST
	queue  []readReq
	sent   int // response packets sent
	asked  int // READ requests received
	replay int // response packets asked for by the duplicates
}

type readReq struct {
	psn uint32
	off int // into mem
	n   int
}

const remoteVA = 0x2000

// take queues the READ requests among bufs.
func (x *rxeReader) take(t *testing.T, bufs []*ibudp.Buf, lose func(req int) bool) {
	t.Helper()
	for _, b := range bufs {
		p, err := bth.Parse(b.RoCE())
		if err != nil {
			t.Fatal(err)
		}
		if p.Opcode() != bth.RCRDMAReadRequest {
			continue
		}
		x.asked++
		if lose(x.asked) {
			continue
		}
		r := readReq{psn: p.BTH().PSN(), off: int(p.RETH().VA() - remoteVA), n: int(p.RETH().DMALength())}
		if x.asked > 1 {
			x.replay += (r.n + 1023) / 1024
		}
		x.queue = append(x.queue, r)
	}
}

// next is the next response packet, false when nothing is asked.
func (x *rxeReader) next() ([]byte, bool) {
	if len(x.queue) == 0 {
		return nil, false
	}
	r := &x.queue[0]
	n := min(r.n, 1024)
	start := r.psn == x.first
	op := bth.RCRDMAReadResponseMiddle
	switch {
	case start && n == r.n:
		op = bth.RCRDMAReadResponseOnly
	case start:
		op = bth.RCRDMAReadResponseFirst
	case n == r.n:
		op = bth.RCRDMAReadResponseLast
	}
	buf := make([]byte, bth.PacketLen(op, n))
	p, _ := bth.Build(buf, op, n)
	p.BTH().Encode(&bth.BTHFields{Opcode: op, PadCount: bth.PadFor(n), PKey: bth.DefaultPKey, DestQP: x.qpn, PSN: r.psn})
	if op.Has(bth.HdrAETH) {
		p.AETH().Encode(bth.SyndromeACK, 1)
	}
	copy(p.Payload(), x.mem[r.off:r.off+n])
	r.psn, r.off, r.n = bth.PSNAdd(r.psn, 1), r.off+n, r.n-n
	if r.n == 0 {
		x.queue = x.queue[1:]
	}
	x.sent++
	return buf, true
}

// A READ whose response was lost, against rxe's responder, with the
// retransmission timer coming early every few responses, as it did
// against rxe in qemu (an RTO of 13 ms, rxe there sending 1 MiB in about
// 50 ms). Each early expiry that went back sent the READ again from the
// lost PSN, rxe queued a replay to the READ's end behind the one it was
// sending, and the queue grew faster than rxe drained it: 1,362 READ
// requests for 8 READs of 1 MiB, 1009 MiB of replays, and the last READ
// failed with RETRY_EXC_ERR while rxe, seconds behind, still sent.
// A probe asks again only once the responder fell silent, and once per
// silence: here the gap costs one retry (lost), the silence after the
// responses one probe (lost too), and the rest of the silence nothing
// until the ACK timeout, whose retry completes the READ.
func TestReadRetryWaitsForBusyResponder(t *testing.T) {
	const size = 32 * 1024
	r := newRCQPMem(t, make([]byte, size))
	qp := r.qp
	// Timeout 20 (4.3 s): every expiry below comes early, a probe, and
	// none is the ACK timeout however slow the host, but the one the
	// test makes.
	qp.Attr.Timeout = 20
	req := wqe.Engine{DMA: r.tab, FC: newFC(t, 0)}
	x := &rxeReader{mem: make([]byte, size), qpn: qp.QPN, first: 0x10}
	for i := range x.mem {
		x.mem[i] = byte(i*7 + i>>8)
	}
	if _, err := qp.PostSend([]qpmgr.SendWQE{{Len: size, WR: ib.SendWR{WRID: 9, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: 0x1000, Length: size, LKey: r.mr.LKey}}, RemoteAddr: remoteVA, RKey: 5}}}); err != nil {
		t.Fatal(err)
	}
	// The response at PSN 0x15 is lost, and so are the READ requests
	// that ask for it again, the gap's retry and the probe's.
	lostResp := map[uint32]bool{0x15: true}
	loseReq := func(n int) bool { return n == 2 || n == 3 }
	var tx sent
	run := func() {
		tx.bufs = tx.bufs[:0]
		req.Run(qp, &tx, 64)
		x.take(t, tx.bufs, loseReq)
	}
	run()
	var wc [1]ib.WC
	silent, timedOut := 0, false
	for step := 0; r.cq.Poll(wc[:]) == 0; step++ {
		if step > 2000 || x.asked > 10 {
			t.Fatalf("READ not complete after %d steps: %d requests, the responder sent %d responses (%d asked again)", step, x.asked, x.sent, x.replay)
		}
		pkt, ok := x.next()
		if ok {
			psn, _ := bth.Parse(pkt)
			if lostResp[psn.BTH().PSN()] {
				delete(lostResp, psn.BTH().PSN())
			} else {
				b := ibudp.NewBuf()
				if !b.SetRoCE(pkt) {
					t.Fatal("response does not parse")
				}
				b.Peer = r.peer
				r.h.Receive(b, &tx)
				r.h.Resp.Ack.Flush(&tx)
			}
		} else if !timedOut {
			silent++
		}
		switch {
		case silent == 20 && !timedOut:
			timedOut = true
			// A long silence: the probe's request was the last.
			if x.asked != 3 {
				t.Fatalf("%d READ requests after 20 early expiries of silence, want 3: the first, the gap's retry, one probe", x.asked)
			}
			// Its ACK timeout runs out.
			qp.Attr.Timeout = 1
			qp.RestartTimer()
			time.Sleep(time.Millisecond)
			r.h.Comp.Timeout(qp)
			qp.Attr.Timeout = 20
			qp.RestartTimer()
		case !ok || step%4 == 3:
			// The timer comes early every fourth response, and every
			// step once the responder is silent.
			r.h.Comp.Timeout(qp)
		}
		run()
	}
	if wc[0] != (ib.WC{WRID: 9, Status: ib.WCSuccess, Opcode: ib.WCRDMARead, ByteLen: size, QPNum: qp.QPN}) {
		t.Fatalf("completion %+v", wc[0])
	}
	if !bytes.Equal(r.mr.Bytes(), x.mem) {
		t.Fatal("the READ's buffer differs from the remote region")
	}
	// Four requests, each to the end of the READ; the responder sent the
	// READ once and the rest of it (0x15 to 0x2f, 27 packets) once more,
	// for the ACK timeout's retry.
	if x.asked != 4 || x.sent != 32+27 || x.replay != 27 {
		t.Fatalf("%d READ requests, %d responses sent, %d of them asked again; want 4, 59, 27", x.asked, x.sent, x.replay)
	}
	if c := r.h.Counters.Get(ib.LocalAckTimeoutErr); c != 1 {
		t.Fatalf("local_ack_timeout_err = %d, want 1", c)
	}
}
