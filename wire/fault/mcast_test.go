//go:build linux

package fault

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// The injector passes multicast to a port that joins groups: a datagram
// sent through one injector to the group arrives, unimpaired, at the
// other's RecvMulticast, though every unicast packet would be dropped;
// over a port that cannot join groups it answers ErrNoMulticast.
func TestMulticastPassesThrough(t *testing.T) {
	ipA, ipB := looptest.Get(t), looptest.Get(t)
	a := New(openPort(t, ibudp.Config{Addr: ipA, Mode: ibudp.ModeUDP}), 1)
	b := New(openPort(t, ibudp.Config{Addr: ipB, Mode: ibudp.ModeUDP}), 2)
	t.Cleanup(func() { a.Close(); b.Close() })
	b.SetRX(Faults{Drop: 1})
	b4 := ipB.As4()
	group := netip.AddrFrom4([4]byte{239, b4[1], b4[2], b4[3]})
	if err := b.JoinMulticast(group); err != nil {
		t.Fatal(err)
	}
	sent := sendBatch(t, a, group, 1, 1, []int{64}, 0, 0)
	bufs := []*ibudp.Buf{ibudp.NewBuf()}
	n, err := b.RecvMulticast(bufs)
	if err != nil || n != 1 || !bytes.Equal(bufs[0].RoCE(), sent[0].roce) || bufs[0].Dst != group {
		t.Fatalf("RecvMulticast: %d %v, dst %v", n, err, bufs[0].Dst)
	}
	if err := b.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}

	c := New(notMulticaster{a}, 3)
	t.Cleanup(func() { c.Close() })
	if err := c.JoinMulticast(group); !errors.Is(err, ibudp.ErrNoMulticast) {
		t.Fatalf("join over a port that cannot: %v", err)
	}
	if _, err := c.RecvMulticast(bufs); !errors.Is(err, ibudp.ErrNoMulticast) {
		t.Fatalf("receive over a port that cannot: %v", err)
	}
}

// notMulticaster hides a port's multicast methods, as a ModePacket
// port has none.
type notMulticaster struct{ ibudp.Port }
