package bth

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// x^8 modulo the polynomial is one zero byte through the CRC register, and
// mulModP agrees with feeding zero bytes.
func TestXPowModP(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var zeros [300]byte
	for range 100 {
		v := rng.Uint32()
		n := rng.IntN(len(zeros))
		// crc32.Update inverts before and after; undo that to get the raw
		// register.
		want := ^crc32.Update(^v, crc32.IEEETable, zeros[:n])
		if got := mulModP(v, xPowModP(8*n)); got != want {
			t.Fatalf("v %#x, %d zero bytes: %#x, want %#x", v, n, got, want)
		}
	}
	if xPowModP(0) != 1<<31 || xPowModP(1) != 1<<30 || xPowModP(32) != crcPoly {
		t.Error("small powers")
	}
}

// For random packets of every size class, IDs and envelopes, the ID found
// is the one the packet was sealed with, and a corrupted packet is caught
// unless the corruption happens to look like an ID change (2^-16).
func TestCheckICRCAnyID(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ops := []Opcode{RCAcknowledge, RCSendOnly, RCRDMAWriteFirst, UDSendOnly, RCRDMAReadRequest, CNP}
	var accepted, corrupted int
	for i := range 2000 {
		op := ops[i%len(ops)]
		n := 0
		if op.Is(FlagPayload) {
			n = rng.IntN(4200)
		}
		env := testEnv4
		env.ID = uint16(rng.Uint32())
		env.SrcPort = uint16(rng.Uint32())
		env.TOS = uint8(rng.Uint32())
		b := mkPacket(t, &env, op, n)
		p, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		want := env.ID
		env.ID = uint16(rng.Uint32()) // what the receiver does not know
		id, ok := p.CheckICRCAnyID(&env)
		if !ok || id != want {
			t.Fatalf("%v, %d bytes: got %#x %v, want %#x", op, n, id, ok, want)
		}
		// Flip one bit after the BTH's first bytes; the ICRC catches it,
		// or the packet passes with some other ID.
		bit := 8*BTHLen + rng.IntN(8*(len(b)-BTHLen))
		b[bit/8] ^= 1 << (bit % 8)
		corrupted++
		if id, ok := p.CheckICRCAnyID(&env); ok {
			accepted++
			if id == want {
				t.Fatalf("%v: bit %d flipped, accepted with the true ID", op, bit)
			}
		}
	}
	if accepted > 2 {
		t.Errorf("%d of %d corrupted packets accepted, expect about 2^-16 of them", accepted, corrupted)
	}

	// IPv6 has no ID; an empty packet has no ICRC.
	b := mkPacket(t, &testEnv6, RCSendOnly, 10)
	p, _ := Parse(b)
	if _, ok := p.CheckICRCAnyID(&testEnv6); ok {
		t.Error("IPv6 accepted")
	}
	if _, ok := (Packet{}).CheckICRCAnyID(&testEnv4); ok {
		t.Error("zero Packet accepted")
	}
}

// The sixteen ID columns are independent, so the ID found is unique.
func TestAnyIDColumnsFullRank(t *testing.T) {
	var solver IDSolver // one for all, so that it rebuilds for each length
	for _, after := range []int{0, 1, 30, 1000, 9000} {
		cols := idColumns(after)
		// Each column is the CRC difference of one flipped ID bit,
		// worked out the slow way: through crc32 itself.
		msg := make([]byte, 2+after)
		for i := range 16 {
			v := uint16(1) << i
			msg[0], msg[1] = byte(v>>8), byte(v)
			want := crc32.Update(0, crc32.IEEETable, msg) ^ crc32.Update(0, crc32.IEEETable, make([]byte, len(msg)))
			if cols[i] != want {
				t.Fatalf("after %d: column %d %#x, want %#x", after, i, cols[i], want)
			}
		}
		for x := 1; x < 1<<16; x++ {
			var d uint32
			for i := range 16 {
				if x>>i&1 != 0 {
					d ^= cols[i]
				}
			}
			if d == 0 {
				t.Fatalf("after %d: ID change %#x leaves the CRC unchanged", after, x)
			}
			if got, ok := solver.Solve(after, d); !ok || int(got) != x {
				t.Fatalf("after %d: solve(%#x) = %#x %v", after, x, got, ok)
			}
		}
	}
}
