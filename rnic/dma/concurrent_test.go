package dma

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// TestConcurrentUse runs what the device does at once: a send pipeline
// gathering, a receive pipeline scattering and answering remote writes,
// reads and atomics, and the verbs side registering, invalidating and
// deregistering other MRs. Run with -race.
func TestConcurrentUse(t *testing.T) {
	tab := NewTable()
	const pd = 1
	src := mustRegister(t, tab, pd, 4096, 0x10000, ib.AccessLocalWrite, 1)
	dst := mustRegister(t, tab, pd, 4096, 0x20000, allRemote, 2)
	var stop atomic.Bool
	var wg sync.WaitGroup
	// Send pipeline: only reads src.
	wg.Go(func() {
		sgl := []ib.SGE{{Addr: 0x10000, Length: 2048, LKey: src.LKey}, {Addr: 0x10800, Length: 2048, LKey: src.LKey}}
		buf := make([]byte, 1024)
		for off := 0; !stop.Load(); off = (off + 1024) % 4096 {
			if err := tab.Gather(pd, sgl, off, buf); err != nil {
				t.Error(err)
				return
			}
		}
	})
	// Receive pipeline: writes only the first half of dst, atomics on the last word.
	wg.Go(func() {
		sgl := []ib.SGE{{Addr: 0x20000, Length: 1024, LKey: dst.LKey}}
		buf := make([]byte, 512)
		for i := 0; !stop.Load(); i++ {
			if err := tab.Scatter(pd, sgl, 512*(i%2), buf); err != nil {
				t.Error(err)
				return
			}
			mem, err := tab.Remote(pd, 0, dst.RKey, 0x20400, 1024, ib.AccessRemoteWrite)
			if err != nil {
				t.Error(err)
				return
			}
			copy(mem, buf)
			if _, err := tab.AtomicFetchAdd(pd, 0, dst.RKey, 0x20ff8, 1); err != nil {
				t.Error(err)
				return
			}
		}
	})
	// Verbs side: churn other MRs, and throw accesses at the churned keys.
	for range 2000 {
		mr := mustRegister(t, tab, pd, 64, 0x30000, allRemote, 0)
		if _, err := tab.Remote(pd, 0, mr.RKey, 0x30000, 64, ib.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		if err := tab.Invalidate(pd, mr.RKey); err != nil {
			t.Fatal(err)
		}
		if err := tab.Deregister(mr.LKey); err != nil {
			t.Fatal(err)
		}
		if _, err := tab.Remote(pd, 0, mr.RKey, 0x30000, 64, ib.AccessRemoteRead); !errors.Is(err, ErrBadKey) {
			t.Fatalf("after deregister: %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
}
