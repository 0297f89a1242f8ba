package spin

import (
	"testing"
)

// fake is a thread's involuntary switch counter the test moves.
type fake struct {
	n  int64
	ok bool
}

func (f *fake) read() (int64, bool) { return f.n, f.ok }

// polls calls Due n times and returns at which of them (1-based) it said
// to yield.
func polls(y *Yielder, n int) []int {
	var at []int
	for i := 1; i <= n; i++ {
		if y.Due() {
			at = append(at, i)
		}
	}
	return at
}

func TestYielderBacksOffOnAnUnsharedCore(t *testing.T) {
	f := &fake{ok: true}
	y := &Yielder{switches: f.read}
	if got := polls(y, CheckEvery); len(got) != CheckEvery {
		t.Fatalf("before the first check: yielded at %d of %d polls, want every one", len(got), CheckEvery)
	}
	// The counter stood still since the zero value's 0: each check halves
	// the yields, down to MaxEvery.
	for _, want := range []uint32{2, 4, 8, 16, 32, 32} {
		if got := y.Every(); got != want {
			t.Fatalf("Every = %d, want %d", got, want)
		}
		at := polls(y, CheckEvery)
		if len(at) != CheckEvery/int(want) {
			t.Fatalf("at one in %d: yielded at %v", want, at)
		}
		for _, i := range at {
			if i%int(want) != 0 {
				t.Fatalf("at one in %d: yielded at poll %d of the round (%v)", want, i, at)
			}
		}
	}
}

func TestYielderYieldsEveryPollOnceSwitched(t *testing.T) {
	f := &fake{ok: true}
	y := &Yielder{switches: f.read}
	polls(y, 4*CheckEvery)
	if got := y.Every(); got != 16 {
		t.Fatalf("after four quiet checks Every = %d, want 16", got)
	}
	f.n += 3 // another thread took the core
	polls(y, CheckEvery)
	if got := y.Every(); got != 1 {
		t.Fatalf("after a switch Every = %d, want 1", got)
	}
	if at := polls(y, CheckEvery-1); len(at) != CheckEvery-1 {
		t.Fatalf("after a switch yielded at %d of %d polls", len(at), CheckEvery-1)
	}
}

func TestYielderWithoutCounterYieldsEveryPoll(t *testing.T) {
	y := &Yielder{switches: (&fake{}).read}
	if at := polls(y, 10*CheckEvery); len(at) != 10*CheckEvery {
		t.Fatalf("without a counter: yielded at %d of %d polls", len(at), 10*CheckEvery)
	}
	if got := y.Every(); got != 1 {
		t.Fatalf("Every = %d, want 1", got)
	}
}
