package dma

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rnicd/rnicd/ib"
)

// The guard tests register a region that is a sub-slice of a larger buffer,
// with guard bytes before and after it, and throw hostile accesses at the
// table: whatever a packet says, the guard bytes must never change.
//
// Layout of the backing buffer:
//
//	[ guardLen: before ][ regionLen: the region ][ guardLen: after ]
//
// The before-guard is itself registered, in another PD, with every remote
// right; the after-guard is registered in the same PD but read-only. So keys
// that exist, with addresses that are right for their own MR, must still be
// refused when the QP's PD or the MR's rights do not allow the write.
const (
	guardLen   = 64
	regionLen  = 256
	guardVA    = 0x7ffd_0000_1000 // where the region answers
	guardPD    = PD(7)
	guardOther = PD(8)
	guardFill  = 0xa5
)

type guardFixture struct {
	tab               *Table
	backing           []byte
	mr, before, after *MR
	beforeVA, afterVA uint64
	keys              []uint32 // interesting rkeys/lkeys to draw from
	vas               []uint64 // interesting addresses to draw from
	accepted          int      // accesses the table let through
}

func newGuardFixture(t testing.TB) *guardFixture {
	t.Helper()
	fx := &guardFixture{tab: NewTable()}
	fx.backing = make([]byte, guardLen+regionLen+guardLen)
	fx.fillGuards()
	var err error
	fx.mr, err = fx.tab.Register(guardPD, fx.backing[guardLen:guardLen+regionLen], guardVA, allRemote)
	if err != nil {
		t.Fatal(err)
	}
	fx.beforeVA = guardVA - guardLen
	fx.before, err = fx.tab.Register(guardOther, fx.backing[:guardLen], fx.beforeVA, allRemote)
	if err != nil {
		t.Fatal(err)
	}
	fx.afterVA = guardVA + regionLen
	fx.after, err = fx.tab.Register(guardPD, fx.backing[guardLen+regionLen:], fx.afterVA, ib.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	// A region that was deregistered: its stale key must be refused.
	dead := mustRegister(t, fx.tab, guardPD, 8, 0, allRemote, 0)
	if err := fx.tab.Deregister(dead.LKey); err != nil {
		t.Fatal(err)
	}
	fx.keys = []uint32{fx.mr.RKey, fx.mr.RKey + 1, fx.mr.RKey - 1, fx.mr.RKey ^ 0x100,
		fx.before.RKey, fx.after.RKey, dead.RKey, 0, math.MaxUint32}
	fx.vas = []uint64{guardVA, guardVA - 1, guardVA + regionLen, guardVA + regionLen - 1,
		guardVA + regionLen - 8, fx.beforeVA, fx.afterVA, 0, math.MaxUint64, math.MaxUint64 - 7,
		guardVA + 1<<63}
	return fx
}

func (fx *guardFixture) fillGuards() {
	for i := range guardLen {
		fx.backing[i] = guardFill
		fx.backing[len(fx.backing)-1-i] = guardFill
	}
}

func (fx *guardFixture) checkGuards(t testing.TB, what string) {
	t.Helper()
	for i := range guardLen {
		if fx.backing[i] != guardFill {
			t.Fatalf("%s: guard byte %d before the region changed to %#x", what, guardLen-i, fx.backing[i])
		}
		if j := len(fx.backing) - guardLen + i; fx.backing[j] != guardFill {
			t.Fatalf("%s: guard byte %d after the region changed to %#x", what, i, fx.backing[j])
		}
	}
}

// hostile is one attack: a remote write (and an append to what it returns),
// a scatter, and the two atomics, all with the same inputs.
type hostile struct {
	rkey    uint32
	va      uint64
	length  uint32
	off     int
	sge2    ib.SGE
	payload byte
}

func (fx *guardFixture) attack(t testing.TB, h hostile) {
	t.Helper()
	tab := fx.tab
	if mem, err := tab.Remote(guardPD, 0, h.rkey, h.va, h.length, ib.AccessRemoteWrite); err == nil {
		fx.accepted++
		if len(mem) != int(h.length) {
			t.Fatalf("Remote(%#x, %#x, %d) returned %d bytes", h.rkey, h.va, h.length, len(mem))
		}
		for i := range mem {
			mem[i] = h.payload
		}
		// A careless caller appending must get a new array, not the guard.
		mem = append(mem, h.payload, h.payload)
		_ = mem
	}
	fx.checkGuards(t, "remote write")

	// The first SGE uses the attacker's key and address; the second
	// comes from the inputs too.
	sgl := []ib.SGE{{Addr: h.va, Length: h.length, LKey: h.rkey}, h.sge2}
	n := int(h.length%(2*regionLen)) + 1
	src := bytes.Repeat([]byte{h.payload}, n)
	if tab.Scatter(guardPD, sgl, h.off, src) == nil {
		fx.accepted++
	}
	fx.checkGuards(t, "scatter")

	if _, err := tab.AtomicFetchAdd(guardPD, 0, h.rkey, h.va, 0x0101010101010101); err == nil {
		fx.accepted++
	}
	_, _ = tab.AtomicCompareSwap(guardPD, 0, h.rkey, h.va, 0, uint64(h.payload)*0x0101010101010101)
	// An atomic always hits memory unless it is refused: make CAS hit too.
	_, _ = tab.AtomicCompareSwap(guardPD, 0, h.rkey, h.va, uint64(guardFill)*0x0101010101010101, 0)
	fx.checkGuards(t, "atomic")
}

func TestGuardHostile(t *testing.T) {
	fx := newGuardFixture(t)
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() uint64 {
		// Near an interesting address, or anything.
		switch rng.IntN(4) {
		case 0:
			return rng.Uint64()
		default:
			return fx.vas[rng.IntN(len(fx.vas))] + uint64(rng.IntN(33)) - 16
		}
	}
	lengths := []uint32{0, 1, 7, 8, 9, regionLen - 1, regionLen, regionLen + 1, regionLen + guardLen, math.MaxUint32}
	pickLen := func() uint32 {
		if rng.IntN(3) == 0 {
			return rng.Uint32()
		}
		return lengths[rng.IntN(len(lengths))] + uint32(rng.IntN(3)) - 1
	}
	pickKey := func() uint32 {
		if rng.IntN(5) == 0 {
			return rng.Uint32()
		}
		return fx.keys[rng.IntN(len(fx.keys))]
	}
	offs := []int{0, 1, -1, regionLen, math.MaxInt, math.MinInt}
	for i := range 200000 {
		h := hostile{
			rkey:    pickKey(),
			va:      pick(),
			length:  pickLen(),
			off:     offs[rng.IntN(len(offs))] + rng.IntN(5) - 2,
			sge2:    ib.SGE{Addr: pick(), Length: pickLen(), LKey: pickKey()},
			payload: byte(i),
		}
		fx.attack(t, h)
	}
	// Sanity: some attacks were legal and wrote the region, or the test
	// would test nothing.
	if fx.accepted < 1000 {
		t.Errorf("only %d accesses accepted", fx.accepted)
	}
	t.Logf("%d accesses accepted", fx.accepted)
}

// FuzzRemote throws fuzzed remote writes, scatters and atomics at a guarded
// region: go test -fuzz=FuzzRemote ./rnic/dma/
func FuzzRemote(f *testing.F) {
	fx := newGuardFixture(f)
	f.Add(uint8(0), uint32(0), uint64(0), uint32(8), int64(0), uint8(0), uint64(0), uint32(0))
	f.Add(uint8(1), uint32(0), uint64(regionLen-1), uint32(2), int64(0), uint8(0), uint64(0), uint32(0))
	f.Add(uint8(0), uint32(0), uint64(1<<64-1), uint32(2), int64(-1), uint8(1), uint64(regionLen), uint32(64))
	f.Add(uint8(4), uint32(0), uint64(0), uint32(regionLen+1), int64(1), uint8(5), uint64(1), uint32(regionLen))
	f.Fuzz(func(t *testing.T, keySel uint8, rawKey uint32, vaDelta uint64, length uint32,
		off int64, key2Sel uint8, va2Delta uint64, len2 uint32) {
		key := func(sel uint8, raw uint32) uint32 {
			if int(sel) < len(fx.keys) {
				return fx.keys[sel]
			}
			return raw
		}
		// Addresses are fuzzed relative to the region so the fuzzer
		// finds the edges; wrapping arithmetic reaches everything.
		h := hostile{
			rkey:    key(keySel, rawKey),
			va:      guardVA + vaDelta,
			length:  length,
			off:     int(off),
			sge2:    ib.SGE{Addr: guardVA + va2Delta, Length: len2, LKey: key(key2Sel, rawKey)},
			payload: byte(vaDelta) ^ 0x5a,
		}
		fx.attack(t, h)
	})
}
