package verbs

import (
	"context"
	"testing"
	"time"
)

// A deadline left on the eventfd by an earlier wait (its context ended as
// its read succeeded) must not end a later wait: the write is seen.
func TestEventFDStaleDeadline(t *testing.T) {
	e, err := newEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer e.f.Close()
	e.f.SetReadDeadline(time.Unix(1, 0))
	var one = [8]byte{1}
	if _, err := e.f.Write(one[:]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.wait(ctx); err != nil {
		t.Fatalf("wait after a stale deadline: %v", err)
	}
}
