package verbs

import (
	"testing"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/rnic/hostif"
)

// BenchmarkEncodeSendWQE is the post path's work for one WR: the
// conversion to the NIC's WR and the encoding into a ring slot, against
// the encoding alone, so the conversion's cost shows by itself.
func BenchmarkEncodeSendWQE(b *testing.B) {
	slot := make([]byte, 256)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{{Addr: 0x1000, Length: 8, LKey: 7}}, RemoteAddr: 0x2000, RKey: 9}
	b.Run("convert+encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := wr.toIB()
			if err := hostif.EncodeSendWQE(slot, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
	iw := wr.toIB()
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := hostif.EncodeSendWQE(slot, &iw); err != nil {
				b.Fatal(err)
			}
		}
	})
	cqe := make([]byte, 32)
	hostif.PutCQE(cqe, &ib.WC{WRID: 1, Opcode: ib.WCRecv, ByteLen: 8})
	b.Run("poll:decode+convert", func(b *testing.B) {
		b.ReportAllocs()
		var out WC
		for b.Loop() {
			var w ib.WC
			hostif.GetCQE(cqe, &w)
			out = wcFromIB(&w)
		}
		_ = out
	})
}
