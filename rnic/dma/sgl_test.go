package dma

import (
	"bytes"
	"math"
	"testing"
)

func TestCheckSGL(t *testing.T) {
	tab := NewTable()
	rw := mustRegister(t, tab, 1, 100, 0x1000, AccessLocalWrite, 0)
	ro := mustRegister(t, tab, 1, 100, 0x5000, AccessRemoteRead, 0)
	otherPD := mustRegister(t, tab, 2, 100, 0x1000, AccessLocalWrite, 0)
	top := mustRegister(t, tab, 1, 16, math.MaxUint64-15, AccessLocalWrite, 0)

	for _, c := range []struct {
		name  string
		sgl   []SGE
		write bool
		total int
		want  error
	}{
		{"empty", nil, true, 0, nil},
		{"one", []SGE{{0x1000, 100, rw.LKey}}, true, 100, nil},
		{"three", []SGE{{0x1000, 10, rw.LKey}, {0x5000, 20, ro.LKey}, {0x1010, 30, rw.LKey}}, false, 60, nil},
		{"last byte", []SGE{{0x1063, 1, rw.LKey}}, true, 1, nil},
		{"one past end", []SGE{{0x1064, 1, rw.LKey}}, true, 0, ErrBounds},
		{"one too long", []SGE{{0x1000, 101, rw.LKey}}, true, 0, ErrBounds},
		{"one before start", []SGE{{0xfff, 1, rw.LKey}}, true, 0, ErrBounds},
		{"addr+len overflows", []SGE{{math.MaxUint64 - 1, 4, rw.LKey}}, true, 0, ErrBounds},
		{"huge length", []SGE{{0x1000, math.MaxUint32, rw.LKey}}, true, 0, ErrBounds},
		{"top of address space", []SGE{{math.MaxUint64 - 15, 16, top.LKey}}, true, 16, nil},
		{"top of address space + 1", []SGE{{math.MaxUint64 - 15, 17, top.LKey}}, true, 0, ErrBounds},
		{"top of address space wrap", []SGE{{math.MaxUint64, 2, top.LKey}}, true, 0, ErrBounds},
		{"bad key", []SGE{{0x1000, 1, 0xabcdef00}}, false, 0, ErrBadKey},
		{"stale key8", []SGE{{0x1000, 1, rw.LKey ^ 1}}, false, 0, ErrBadKey},
		{"bad key in 2nd", []SGE{{0x1000, 1, rw.LKey}, {0x1000, 1, 7}}, false, 0, ErrBadKey},
		{"other pd", []SGE{{0x1000, 1, otherPD.LKey}}, false, 0, ErrPD},
		{"write needs local write", []SGE{{0x5000, 1, ro.LKey}}, true, 0, ErrAccess},
		{"read needs nothing", []SGE{{0x5000, 1, ro.LKey}}, false, 1, nil},
		{"zero length not checked", []SGE{{0, 0, 0xdeadbeef}, {0x1000, 5, rw.LKey}}, true, 5, nil},
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
	a := mustRegister(t, tab, pd, 64, 0x10000, AccessLocalWrite, 1)
	b := mustRegister(t, tab, pd, 64, 0, AccessLocalWrite|AccessZeroBased, 2)
	sgl := []SGE{
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
	rw := mustRegister(t, tab, pd, 32, 0x1000, AccessLocalWrite, 0)
	ro := mustRegister(t, tab, pd, 32, 0x2000, AccessRemoteRead, 0)
	other := mustRegister(t, tab, pd+1, 32, 0x3000, AccessLocalWrite, 0)
	good := []SGE{{0x1000, 16, rw.LKey}, {0x1010, 16, rw.LKey}}

	for _, c := range []struct {
		name        string
		sgl         []SGE
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
		{"read-only mr", []SGE{{0x2000, 32, ro.LKey}}, 0, 8, nil, ErrAccess},
		{"other pd", []SGE{{0x3000, 32, other.LKey}}, 0, 8, ErrPD, ErrPD},
		{"bad key", []SGE{{0x1000, 32, 0x4200}}, 0, 8, ErrBadKey, ErrBadKey},
		{"sge outside mr", []SGE{{0x1010, 17, rw.LKey}}, 0, 1, ErrBounds, ErrBounds},
		// The second SGE is bad and the range reaches it: nothing may be
		// written to the first.
		{"bad 2nd sge", []SGE{{0x1000, 8, rw.LKey}, {0x2000, 8, ro.LKey}}, 4, 8, nil, ErrAccess},
		{"2nd sge overflows", []SGE{{0x1000, 8, rw.LKey}, {math.MaxUint64, 8, rw.LKey}}, 0, 9, ErrBounds, ErrBounds},
		// A bad SGE the range does not touch is not looked at.
		{"bad sge untouched", []SGE{{0x1000, 8, rw.LKey}, {0, 8, 0x999}}, 0, 8, nil, nil},
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
