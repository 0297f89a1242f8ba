package dma

import (
	"bytes"
	"math"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

func TestCheckSGL(t *testing.T) {
	tab := NewTable()
	rw := mustRegister(t, tab, 1, 100, 0x1000, ib.AccessLocalWrite, 0)
	ro := mustRegister(t, tab, 1, 100, 0x5000, ib.AccessRemoteRead, 0)
	otherPD := mustRegister(t, tab, 2, 100, 0x1000, ib.AccessLocalWrite, 0)
	top := mustRegister(t, tab, 1, 16, math.MaxUint64-15, ib.AccessLocalWrite, 0)

	for _, c := range []struct {
		name  string
		sgl   []ib.SGE
		write bool
		total int
		want  error
	}{
		{"empty", nil, true, 0, nil},
		{"one", []ib.SGE{{Addr: 0x1000, Length: 100, LKey: rw.LKey}}, true, 100, nil},
		{"three", []ib.SGE{{Addr: 0x1000, Length: 10, LKey: rw.LKey}, {Addr: 0x5000, Length: 20, LKey: ro.LKey}, {Addr: 0x1010, Length: 30, LKey: rw.LKey}}, false, 60, nil},
		{"last byte", []ib.SGE{{Addr: 0x1063, Length: 1, LKey: rw.LKey}}, true, 1, nil},
		{"one past end", []ib.SGE{{Addr: 0x1064, Length: 1, LKey: rw.LKey}}, true, 0, ErrBounds},
		{"one too long", []ib.SGE{{Addr: 0x1000, Length: 101, LKey: rw.LKey}}, true, 0, ErrBounds},
		{"one before start", []ib.SGE{{Addr: 0xfff, Length: 1, LKey: rw.LKey}}, true, 0, ErrBounds},
		{"addr+len overflows", []ib.SGE{{Addr: math.MaxUint64 - 1, Length: 4, LKey: rw.LKey}}, true, 0, ErrBounds},
		{"huge length", []ib.SGE{{Addr: 0x1000, Length: math.MaxUint32, LKey: rw.LKey}}, true, 0, ErrBounds},
		{"top of address space", []ib.SGE{{Addr: math.MaxUint64 - 15, Length: 16, LKey: top.LKey}}, true, 16, nil},
		{"top of address space + 1", []ib.SGE{{Addr: math.MaxUint64 - 15, Length: 17, LKey: top.LKey}}, true, 0, ErrBounds},
		{"top of address space wrap", []ib.SGE{{Addr: math.MaxUint64, Length: 2, LKey: top.LKey}}, true, 0, ErrBounds},
		{"bad key", []ib.SGE{{Addr: 0x1000, Length: 1, LKey: 0xabcdef00}}, false, 0, ErrBadKey},
		{"stale key8", []ib.SGE{{Addr: 0x1000, Length: 1, LKey: rw.LKey ^ 1}}, false, 0, ErrBadKey},
		{"bad key in 2nd", []ib.SGE{{Addr: 0x1000, Length: 1, LKey: rw.LKey}, {Addr: 0x1000, Length: 1, LKey: 7}}, false, 0, ErrBadKey},
		{"other pd", []ib.SGE{{Addr: 0x1000, Length: 1, LKey: otherPD.LKey}}, false, 0, ErrPD},
		{"write needs local write", []ib.SGE{{Addr: 0x5000, Length: 1, LKey: ro.LKey}}, true, 0, ErrAccess},
		{"read needs nothing", []ib.SGE{{Addr: 0x5000, Length: 1, LKey: ro.LKey}}, false, 1, nil},
		{"zero length not checked", []ib.SGE{{Addr: 0, Length: 0, LKey: 0xdeadbeef}, {Addr: 0x1000, Length: 5, LKey: rw.LKey}}, true, 5, nil},
	} {
		total, err := tab.CheckSGL(1, c.sgl, c.write)
		wantErr(t, c.name, err, c.want)
		if total != c.total {
			t.Errorf("%s: total %d, want %d", c.name, total, c.total)
		}
	}
}

// TestGatherScatterAcrossSGEs moves every window [off, off+n) of a message
// spread over three SGEs in two MRs and checks each byte landed where the SGL
// says, and nothing else moved.
func TestGatherScatterAcrossSGEs(t *testing.T) {
	tab := NewTable()
	const pd = 9
	a := mustRegister(t, tab, pd, 64, 0x10000, ib.AccessLocalWrite, 1)
	b := mustRegister(t, tab, pd, 64, 0, ib.AccessLocalWrite|ib.AccessZeroBased, 2)
	sgl := []ib.SGE{
		{Addr: 0x10000 + 3, Length: 5, LKey: a.LKey},
		{Addr: 0, Length: 0, LKey: 0}, // zero-length: skipped
		{Addr: 60, Length: 4, LKey: b.LKey},
		{Addr: 0x10000 + 20, Length: 7, LKey: a.LKey},
	}
	// msg maps message offset -> (region bytes, offset).
	type loc struct {
		mem []byte
		i   int
	}
	var msg []loc
	for i := range 5 {
		msg = append(msg, loc{a.Bytes(), 3 + i})
	}
	for i := range 4 {
		msg = append(msg, loc{b.Bytes(), 60 + i})
	}
	for i := range 7 {
		msg = append(msg, loc{a.Bytes(), 20 + i})
	}
	total, err := tab.CheckSGL(pd, sgl, true)
	if err != nil || total != len(msg) {
		t.Fatalf("CheckSGL = %d, %v; want %d", total, err, len(msg))
	}

	for off := 0; off <= len(msg); off++ {
		for n := 0; off+n <= len(msg); n++ {
			// Gather.
			dst := make([]byte, n)
			if err := tab.Gather(pd, sgl, off, dst); err != nil {
				t.Fatalf("Gather(off %d, n %d): %v", off, n, err)
			}
			for i := range dst {
				l := msg[off+i]
				if dst[i] != l.mem[l.i] {
					t.Fatalf("Gather(off %d, n %d): byte %d = %#x, want %#x", off, n, i, dst[i], l.mem[l.i])
				}
			}

			// Scatter: fresh regions, then every byte is either written
			// from src or still its pattern.
			pattern(a.Bytes(), 1)
			pattern(b.Bytes(), 2)
			wantA := bytes.Clone(a.Bytes())
			wantB := bytes.Clone(b.Bytes())
			src := make([]byte, n)
			for i := range src {
				src[i] = 0xc0 | byte(i)
				l := msg[off+i]
				if &l.mem[0] == &a.Bytes()[0] {
					wantA[l.i] = src[i]
				} else {
					wantB[l.i] = src[i]
				}
			}
			if err := tab.Scatter(pd, sgl, off, src); err != nil {
				t.Fatalf("Scatter(off %d, n %d): %v", off, n, err)
			}
			if !bytes.Equal(a.Bytes(), wantA) || !bytes.Equal(b.Bytes(), wantB) {
				t.Fatalf("Scatter(off %d, n %d): a=%x want %x, b=%x want %x", off, n, a.Bytes(), wantA, b.Bytes(), wantB)
			}
		}
	}
}

func TestGatherScatterErrors(t *testing.T) {
	tab := NewTable()
	const pd = 1
	rw := mustRegister(t, tab, pd, 32, 0x1000, ib.AccessLocalWrite, 0)
	ro := mustRegister(t, tab, pd, 32, 0x2000, ib.AccessRemoteRead, 0)
	other := mustRegister(t, tab, pd+1, 32, 0x3000, ib.AccessLocalWrite, 0)
	good := []ib.SGE{{Addr: 0x1000, Length: 16, LKey: rw.LKey}, {Addr: 0x1010, Length: 16, LKey: rw.LKey}}

	for _, c := range []struct {
		name        string
		sgl         []ib.SGE
		off, n      int
		gather, sct error
	}{
		{"whole", good, 0, 32, nil, nil},
		{"to the end", good, 31, 1, nil, nil},
		{"empty at end", good, 32, 0, nil, nil},
		{"one past end", good, 31, 2, ErrBounds, ErrBounds},
		{"empty past end", good, 33, 0, ErrBounds, ErrBounds},
		{"negative offset", good, -1, 1, ErrBounds, ErrBounds},
		{"min int offset", good, math.MinInt, 1, ErrBounds, ErrBounds},
		{"huge offset", good, math.MaxInt - 3, 1, ErrBounds, ErrBounds},
		{"empty sgl", nil, 0, 1, ErrBounds, ErrBounds},
		{"read-only mr", []ib.SGE{{Addr: 0x2000, Length: 32, LKey: ro.LKey}}, 0, 8, nil, ErrAccess},
		{"other pd", []ib.SGE{{Addr: 0x3000, Length: 32, LKey: other.LKey}}, 0, 8, ErrPD, ErrPD},
		{"bad key", []ib.SGE{{Addr: 0x1000, Length: 32, LKey: 0x4200}}, 0, 8, ErrBadKey, ErrBadKey},
		{"sge outside mr", []ib.SGE{{Addr: 0x1010, Length: 17, LKey: rw.LKey}}, 0, 1, ErrBounds, ErrBounds},
		// The second SGE is bad and the range reaches it: nothing may be
		// written to the first.
		{"bad 2nd sge", []ib.SGE{{Addr: 0x1000, Length: 8, LKey: rw.LKey}, {Addr: 0x2000, Length: 8, LKey: ro.LKey}}, 4, 8, nil, ErrAccess},
		{"2nd sge overflows", []ib.SGE{{Addr: 0x1000, Length: 8, LKey: rw.LKey}, {Addr: math.MaxUint64, Length: 8, LKey: rw.LKey}}, 0, 9, ErrBounds, ErrBounds},
		// A bad SGE the range does not touch is not looked at.
		{"bad sge untouched", []ib.SGE{{Addr: 0x1000, Length: 8, LKey: rw.LKey}, {Addr: 0, Length: 8, LKey: 0x999}}, 0, 8, nil, nil},
	} {
		pattern(rw.Bytes(), 0)
		before := bytes.Clone(rw.Bytes())
		dst := make([]byte, c.n)
		wantErr(t, c.name+": gather", tab.Gather(pd, c.sgl, c.off, dst), c.gather)
		src := bytes.Repeat([]byte{0xee}, c.n)
		err := tab.Scatter(pd, c.sgl, c.off, src)
		wantErr(t, c.name+": scatter", err, c.sct)
		if err != nil && !bytes.Equal(rw.Bytes(), before) {
			t.Errorf("%s: failed scatter wrote %x", c.name, rw.Bytes())
		}
	}
}
