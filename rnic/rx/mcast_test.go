package rx

import (
	"encoding/binary"
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// A group's datagram reaches an attached QP only as a UD SEND to QPN
// 0xFFFFFF of the QP's Q_Key: anything else a host on the network can
// send to the group is dropped and counted by its reason, and the QP's
// receive WQE stays posted for the good one, which lands with the group
// as the GRH's destination.
func TestReceiveMulticastDrops(t *testing.T) {
	r := newFuzzRig(t)
	r.mcast = true
	ud := r.qps[2]
	toGroup := func(pkt []byte) []byte { pkt[5], pkt[6], pkt[7] = 0xff, 0xff, 0xff; return pkt }
	badQKey := toGroup(r.seedPacket(bth.UDSendOnly, 2, 0, 64, 0, 0))
	binary.BigEndian.PutUint32(badQKey[bth.BTHLen:], 8) // the QP's is 7
	for _, c := range []struct {
		name string
		pkt  []byte
		drop ib.Counter
	}{
		{"RC SEND to the group", toGroup(r.seedPacket(bth.RCSendOnly, 0, 0, 64, 0, 0)), ib.DropBadTransport},
		{"UD SEND to the QP's own QPN", r.seedPacket(bth.UDSendOnly, 2, 0, 64, 0, 0), ib.DropUnknownQP},
		{"UD SEND of another Q_Key", badQKey, ib.DropBadQKey},
	} {
		before := r.h.Counters.Get(c.drop)
		b := ibudp.NewBuf()
		if !b.SetRoCE(c.pkt) {
			t.Fatalf("%s: no packet", c.name)
		}
		b.Peer, b.Dst = r.peer, groupAddr
		var tx sink
		r.h.ReceiveMulticast(b, ud, &tx)
		if got := r.h.Counters.Get(c.drop) - before; got != 1 {
			t.Fatalf("%s: %v moved by %d, want 1", c.name, c.drop, got)
		}
		if n := ud.RecvCQ.Poll(make([]ib.WC, 4)); n != 0 {
			t.Fatalf("%s: %d completions", c.name, n)
		}
	}
	r.feed(t, toGroup(r.seedPacket(bth.UDSendOnly, 2, 0, 64, 0, 0)))
	wcs := make([]ib.WC, 4)
	if n := ud.RecvCQ.Poll(wcs); n != 1 || wcs[0].QPNum != ud.QPN || wcs[0].Status != ib.WCSuccess || wcs[0].ByteLen != 40+64 {
		t.Fatalf("%d completions, first %v: want the UD QP's SUCCESS of 104 bytes", n, &wcs[0])
	}
	if dst := r.mem[guardLen+36 : guardLen+40]; string(dst) != string(groupAddr.AsSlice()) {
		t.Fatalf("GRH destination % x, want the group %v", dst, groupAddr)
	}
}
