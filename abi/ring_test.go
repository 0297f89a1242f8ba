package abi

import (
	"testing"
)

// The doorbell reads the producer index before the count of retired WQEs.
// Between the two reads a completion may retire a slot and the client fill
// it; read the other way round, the producer looks one past a full ring
// and a good QP is failed (found running ib_write_bw through two rnicd).
func TestNewWQEsReadsDoneAfterProducer(t *testing.T) {
	const slots = 4
	ring, err := NewRing(make([]byte, RingBytes(slots, 64)), slots, 64)
	if err != nil {
		t.Fatal(err)
	}
	ring.SetProducer(slots) // full: 4 fetched, none retired
	done := func() uint32 {
		// The completion and the client's next WQE land just after
		// this read, which returns the count from before them.
		ring.SetConsumer(1)
		ring.SetProducer(slots + 1)
		return 0
	}
	n, err := ring.NewWQEs(slots, done)
	if err != nil || n != 0 {
		t.Fatalf("newWQEs = %d, %v; want 0 new WQEs and no error (the new one is for the next doorbell)", n, err)
	}
	if n, err := ring.NewWQEs(slots, func() uint32 { return 1 }); err != nil || n != 1 {
		t.Fatalf("next doorbell: %d, %v; want the 1 new WQE", n, err)
	}
	if _, err := ring.NewWQEs(slots, func() uint32 { return 0 }); err == nil {
		t.Fatal("a producer index past a full ring was accepted")
	}
}
