package bth

import (
	"fmt"
	"testing"
)

var benchSizes = []int{1024, 4096}

// benchDatagram is an RDMA WRITE FIRST datagram with an n-byte payload, as a
// 1024- or 4096-MTU path carries them.
func benchDatagram(b testing.TB, n int) []byte {
	return datagram(&testEnv4, mkPacket(b, &testEnv4, RCRDMAWriteFirst, n))
}

// Receive path: IP/UDP and transport header checks plus ICRC.
func BenchmarkDecodeVerify(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			d := benchDatagram(b, n)
			b.SetBytes(int64(len(d)))
			b.ReportAllocs()
			for b.Loop() {
				ip, err := ParseIP(d)
				if err != nil || ip.Packet.PayloadLen() != n {
					b.Fatal(err)
				}
			}
		})
	}
}

// Send path: lay out the packet, write BTH and RETH, copy the payload in,
// seal the ICRC.
func BenchmarkBuildICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			payload := make([]byte, n)
			buf := make([]byte, PacketLen(RCRDMAWriteFirst, n))
			f := BTHFields{Opcode: RCRDMAWriteFirst, PKey: DefaultPKey, DestQP: 0x11, PSN: 1}
			env := testEnv4
			b.SetBytes(int64(len(buf) + env.Len()))
			b.ReportAllocs()
			for b.Loop() {
				p, err := Build(buf, RCRDMAWriteFirst, n)
				if err != nil {
					b.Fatal(err)
				}
				p.BTH().Encode(&f)
				p.RETH().Encode(0x1000, 0x42, uint32(n))
				copy(p.Payload(), payload)
				p.Seal(&env)
				f.PSN++
			}
		})
	}
}

// The ModeUDP receive check of a packet whose IPv4 ID is unknown.
func BenchmarkCheckICRCAnyID(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			roce := mkPacket(b, &testEnv4, RCRDMAWriteFirst, n)
			p, _ := Parse(roce)
			env := testEnv4
			env.ID = 0
			b.SetBytes(int64(len(roce)))
			b.ReportAllocs()
			for b.Loop() {
				if id, ok := p.CheckICRCAnyID(&env); !ok || id != testEnv4.ID {
					b.Fatal(id, ok)
				}
			}
		})
	}
}

// The view path allocates nothing: decode and verify, build and seal,
// the any-ID check.
func TestViewPathAllocs(t *testing.T) {
	d := benchDatagram(t, 1024)
	roce := d[28:]
	p, err := Parse(roce)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv4
	buf := make([]byte, len(roce))
	checks := map[string]func(){
		"ParseIP": func() { ParseIP(d) },
		"Parse":   func() { Parse(roce) },
		"ComputeICRC": func() {
			ComputeICRC(d[:28], roce[:len(roce)-ICRCLen])
		},
		"Build+Seal": func() {
			q, _ := Build(buf, RCRDMAWriteFirst, 1024)
			q.Seal(&env)
		},
		"CheckICRC":      func() { p.CheckICRC(&env) },
		"CheckICRCAnyID": func() { p.CheckICRCAnyID(&env) },
	}
	for name, f := range checks {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}
