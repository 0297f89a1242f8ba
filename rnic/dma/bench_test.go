package dma

import (
	"fmt"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// hotPathFixture is one MR, and SGLs of 1 and 3 SGEs over it, as the
// benchmarks and the allocation test use them.
type hotPathFixture struct {
	tab  *Table
	mr   *MR
	sgl1 []ib.SGE
	sgl3 []ib.SGE
}

const hotPD = 1

func newHotPath(tb testing.TB) *hotPathFixture {
	tb.Helper()
	tab := NewTable()
	// A few other MRs so the table is not trivially small.
	for range 100 {
		mustRegister(tb, tab, hotPD, 64, 0, ib.AccessLocalWrite, 0)
	}
	mr := mustRegister(tb, tab, hotPD, 3*8192, 0x100000, allRemote, 0)
	return &hotPathFixture{
		tab:  tab,
		mr:   mr,
		sgl1: []ib.SGE{{Addr: 0x100000, Length: 3 * 8192, LKey: mr.LKey}},
		sgl3: []ib.SGE{{Addr: 0x100000, Length: 1500, LKey: mr.LKey}, {Addr: 0x102000, Length: 1000, LKey: mr.LKey}, {Addr: 0x104000, Length: 8192, LKey: mr.LKey}},
	}
}

// TestHotPathNoAlloc: the per-packet operations allocate nothing.
func TestHotPathNoAlloc(t *testing.T) {
	fx := newHotPath(t)
	buf := make([]byte, 4096)
	for name, f := range map[string]func() error{
		"Gather 1 SGE":  func() error { return fx.tab.Gather(hotPD, fx.sgl1, 100, buf) },
		"Gather 3 SGE":  func() error { return fx.tab.Gather(hotPD, fx.sgl3, 100, buf) },
		"Scatter 1 SGE": func() error { return fx.tab.Scatter(hotPD, fx.sgl1, 100, buf) },
		"Scatter 3 SGE": func() error { return fx.tab.Scatter(hotPD, fx.sgl3, 100, buf) },
		"CheckSGL": func() error {
			_, err := fx.tab.CheckSGL(hotPD, fx.sgl3, true)
			return err
		},
		"Remote": func() error {
			mem, err := fx.tab.Remote(hotPD, 0, fx.mr.RKey, 0x100000+8, 4096, ib.AccessRemoteWrite)
			copy(mem, buf)
			return err
		},
		"Remote zero length": func() error {
			_, err := fx.tab.Remote(hotPD, 0, 0, 0, 0, ib.AccessRemoteWrite)
			return err
		},
		"FetchAdd": func() error {
			_, err := fx.tab.AtomicFetchAdd(hotPD, 0, fx.mr.RKey, 0x100000, 1)
			return err
		},
		"CompareSwap": func() error {
			_, err := fx.tab.AtomicCompareSwap(hotPD, 0, fx.mr.RKey, 0x100000, 1, 2)
			return err
		},
		"Lookup": func() error {
			_, _ = fx.tab.Lookup(fx.mr.RKey)
			return nil
		},
	} {
		// The call must succeed, or the error path (which may allocate
		// its error) is what would be measured.
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a := testing.AllocsPerRun(100, func() { _ = f() }); a != 0 {
			t.Errorf("%s: %v allocations per call", name, a)
		}
	}
}

func BenchmarkGather(b *testing.B) {
	fx := newHotPath(b)
	for _, sges := range []int{1, 3} {
		for _, size := range []int{1024, 4096} {
			sgl := fx.sgl1
			if sges == 3 {
				sgl = fx.sgl3
			}
			b.Run(fmt.Sprintf("sge=%d/size=%d", sges, size), func(b *testing.B) {
				// Offset 1000 makes the 3-SGE case cross SGE boundaries.
				dst := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := fx.tab.Gather(hotPD, sgl, 1000, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkScatter(b *testing.B) {
	fx := newHotPath(b)
	for _, sges := range []int{1, 3} {
		for _, size := range []int{1024, 4096} {
			sgl := fx.sgl1
			if sges == 3 {
				sgl = fx.sgl3
			}
			b.Run(fmt.Sprintf("sge=%d/size=%d", sges, size), func(b *testing.B) {
				src := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := fx.tab.Scatter(hotPD, sgl, 1000, src); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkRemote(b *testing.B) {
	fx := newHotPath(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fx.tab.Remote(hotPD, 0, fx.mr.RKey, 0x100000+64, 4096, ib.AccessRemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAtomicFetchAdd(b *testing.B) {
	fx := newHotPath(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fx.tab.AtomicFetchAdd(hotPD, 0, fx.mr.RKey, 0x100000, 1); err != nil {
			b.Fatal(err)
		}
	}
}
