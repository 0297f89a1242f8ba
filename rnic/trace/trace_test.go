package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/bth"
	"strings"
	"testing"
)

func TestProbeOff(t *testing.T) {
	var p *Probe
	if p.On() {
		t.Fatal("nil probe is on")
	}
	tr := New(4)
	p = tr.Probe("rnic0")
	if p.On() {
		t.Fatal("probe on with no reader")
	}
	s := tr.Subscribe(Filter{})
	if !p.On() {
		t.Fatal("probe off with a reader")
	}
	s.Close()
	s.Close()
	if p.On() {
		t.Fatal("probe on after the last reader left")
	}
	if (*Tracer)(nil).Probe("x") != nil {
		t.Fatal("nil tracer gave a probe")
	}
}

// TestRingLoss overruns a 4-event ring: the reader gets a mark of the
// six it lost, timed as the first it did not, then the newest four in
// order, and counts the lost ones.
func TestRingLoss(t *testing.T) {
	tr := New(3) // rounds up to 4
	p := tr.Probe("rnic0")
	s := tr.Subscribe(Filter{})
	defer s.Close()
	for i := range 10 {
		p.Emit(Event{Step: StepPost, WRID: uint64(i)})
	}
	buf := make([]Event, 16)
	n := s.TryRead(buf)
	if n != 5 || s.Lost() != 6 {
		t.Fatalf("read %d, lost %d; want the mark and 4, 6 lost", n, s.Lost())
	}
	if m := buf[0]; m != (Event{Seq: 6, Time: buf[1].Time, Module: ModTrace, Step: StepLost, Arg: 6}) {
		t.Fatalf("mark %+v: want seq 6 (the last lost), the next event's time, trace/lost, arg 6", m)
	} else if d := m.Detail(); d != "6 events went unread here: this reader fell more than the tracer's ring behind" {
		t.Fatalf("mark's detail %q", d)
	}
	for i, e := range buf[1:n] {
		if e.WRID != uint64(6+i) || e.Seq != uint64(7+i) || e.NIC != "rnic0" || e.Time == 0 {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if n := s.TryRead(buf); n != 0 {
		t.Fatalf("read %d more", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Read(ctx, buf); err == nil {
		t.Fatal("Read returned with nothing to read and ctx done")
	}
}

func TestFilter(t *testing.T) {
	tr := New(16)
	a, b := tr.Probe("rnic0"), tr.Probe("rnic1")
	s := tr.Subscribe(Filter{QPN: 0x12, NIC: "rnic0"})
	defer s.Close()
	a.Emit(Event{Step: StepHeaders, QPN: 0x12, PSN: 1})
	a.Emit(Event{Step: StepHeaders, QPN: 0x13, PSN: 2})
	b.Emit(Event{Step: StepHeaders, QPN: 0x12, PSN: 3})
	a.Emit(Event{Step: StepTransmit, QPN: 0x12, DestQPN: 0x99, PSN: 4})
	// A packet another QP sent to a peer QP of the same number.
	a.Emit(Event{Step: StepTransmit, QPN: 0x13, DestQPN: 0x12, PSN: 5})
	buf := make([]Event, 16)
	n := s.TryRead(buf)
	if n != 2 || buf[0].PSN != 1 || buf[1].PSN != 4 {
		t.Fatalf("filter kept %d: %+v", n, buf[:n])
	}
}

// TestFilterAtEmit: the events no reader selects take no slot of the
// ring, so that a reader of one QP, or of the packets only, is not
// overrun by a busy QP it does not follow; a reader of everything puts
// them back in the ring.
func TestFilterAtEmit(t *testing.T) {
	tr := New(32) // the 20 events the two readers select, not the 1,000 they do not
	p := tr.Probe("rnic0")
	qp := tr.Subscribe(Filter{QPN: 0x12})
	defer qp.Close()
	pkts := tr.Subscribe(Filter{Packets: true})
	defer pkts.Close()
	for i := range 1000 {
		p.Emit(Event{Step: StepHeaders, QPN: 0x13, PSN: uint32(i)}) // neither reader's
		if i%100 == 0 {
			p.Emit(Event{Step: StepPost, QPN: 0x12, PSN: uint32(i)})
			p.Emit(Event{Step: StepTransmit, QPN: 0x14, DestQPN: 0x99, PSN: uint32(i)})
		}
	}
	buf := make([]Event, 32)
	if n := qp.TryRead(buf); n != 10 || qp.Lost() != 0 {
		t.Fatalf("QP reader: %d events, %d lost; want the 10 posts of QP 0x12, none lost", n, qp.Lost())
	} else {
		for i, e := range buf[:n] {
			if e.QPN != 0x12 || e.PSN != uint32(100*i) {
				t.Fatalf("QP reader's event %d: %+v", i, e)
			}
		}
	}
	if n := pkts.TryRead(buf); n != 10 || pkts.Lost() != 0 {
		t.Fatalf("packet reader: %d events, %d lost; want the 10 transmits, none lost", n, pkts.Lost())
	} else {
		for i, e := range buf[:n] {
			if e.Step != StepTransmit || e.PSN != uint32(100*i) {
				t.Fatalf("packet reader's event %d: %+v", i, e)
			}
		}
	}
	// Once nobody takes everything, the ring is back to what the readers
	// select: everything, while this reader is there.
	all := tr.Subscribe(Filter{})
	for i := range 40 {
		p.Emit(Event{Step: StepHeaders, QPN: 0x13, PSN: uint32(i)})
	}
	if n := all.TryRead(buf); n != 32 || all.Lost() != 8 {
		t.Fatalf("reader of all: %d events, %d lost; want the ring's 32 of 40, 8 lost", n, all.Lost())
	}
	all.Close()
	p.Emit(Event{Step: StepHeaders, QPN: 0x13})
	p.Emit(Event{Step: StepPost, QPN: 0x12, PSN: 7})
	// The QP reader was overrun by the other's 40 (none of them its own,
	// which it cannot know): a mark, then its event.
	if n := qp.TryRead(buf); n != 2 || buf[0].Step != StepLost || buf[1].PSN != 7 || buf[1].NIC != "rnic0" || buf[1].Time == 0 {
		t.Fatalf("QP reader after the other left: %d events %+v", n, buf[:n])
	}
}

// TestWriteJSONMarksLoss: a JSON reader that fell behind (rnicd
// -trace's file, /api/trace, rnic trace) gets a line where its gap is,
// which reads back and renders as one.
func TestWriteJSONMarksLoss(t *testing.T) {
	tr := New(4)
	p := tr.Probe("rnic0")
	s := tr.Subscribe(Filter{})
	defer s.Close()
	for i := range 10 {
		p.Emit(Event{Module: ModVerbs, Step: StepPost, QPN: 0x11, WRID: uint64(i), WROp: ib.WRSend})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // WriteJSON drains what is there, then returns
	var buf bytes.Buffer
	if err := WriteJSON(ctx, s, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], `"module":"trace","step":"lost",`) || !strings.Contains(lines[0], `"arg":6,`) {
		t.Fatalf("want a loss line, then 4 events:\n%s", buf.String())
	}
	var out []Event
	if err := ReadJSON(&buf, func(e *Event) error { out = append(out, *e); return nil }); err != nil {
		t.Fatal(err)
	}
	if out[0].Step != StepLost || out[0].Module != ModTrace || out[0].Arg != 6 || out[1].WRID != 6 {
		t.Fatalf("read back %+v", out[:2])
	}
	if f := Format(&out[0], out[0].Time); !strings.Contains(f, " trace ") || !strings.HasSuffix(f, "6 events went unread here: this reader fell more than the tracer's ring behind") {
		t.Fatalf("timeline line %q", f)
	}
}

// TestJSONRoundTrip writes events as JSON lines and reads them back.
func TestJSONRoundTrip(t *testing.T) {
	tr := New(64)
	p := tr.Probe("rnic0")
	s := tr.Subscribe(Filter{})
	in := []Event{
		{Module: ModVerbs, Step: StepPost, QPN: 0x11, WRID: 7, WROp: ib.WRRDMAWrite, Len: 3072},
		{Module: ModWQE, Step: StepFetch, QPN: 0x11, PSN: 0x111, WRID: 7, WROp: ib.WRRDMAWrite, Len: 3072, Arg: 3},
		{Module: ModWQE, Step: StepHeaders, QPN: 0x11, PSN: 0x111, Opcode: bth.RCRDMAWriteFirst, Len: 1024, Flags: FlagAckReq | FlagRetransmit},
		{Module: ModRX, Step: StepPSNCheck, QPN: 0x11, PSN: 0x113, Opcode: bth.RCRDMAWriteLast, Arg: uint32(PSNOutOfOrder), Aux: 0x112},
		{Module: ModCompleter, Step: StepComplete, QPN: 0x11, WRID: 7, WROp: ib.WRRDMAWrite, Arg: uint32(ib.WCSuccess), Flags: FlagCQE},
	}
	for _, e := range in {
		p.Emit(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var buf bytes.Buffer
	cancel() // WriteJSON drains what is there, then returns
	if err := WriteJSON(ctx, s, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"detail":"RDMA_WRITE_LAST psn out of sequence (expected 0x000112)"`) {
		t.Fatalf("JSON lacks the rendered detail:\n%s", buf.String())
	}
	// A fetch names its work request's opcode; it has a PSN but no packet.
	if fetch := strings.Split(buf.String(), "\n")[1]; !strings.Contains(fetch, `"wr_opcode":"RDMA_WRITE"`) || strings.Contains(fetch, `"opcode"`) {
		t.Fatalf("fetch event names the wrong opcode: %s", fetch)
	}
	var out []Event
	if err := ReadJSON(&buf, func(e *Event) error { out = append(out, *e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read back %d events, wrote %d", len(out), len(in))
	}
	for i := range in {
		want := in[i]
		want.NIC, want.Seq, want.Time = "rnic0", out[i].Seq, out[i].Time
		if out[i] != want || out[i].Seq != uint64(i+1) {
			t.Fatalf("event %d\n got %+v\nwant %+v", i, out[i], want)
		}
	}
	if err := ReadJSON(strings.NewReader(`{"module":"nope","step":"post"}`), func(*Event) error { return nil }); err == nil {
		t.Fatal("unknown module accepted")
	}
}

// AppendJSON writes what encoding/json makes of the event's fields, byte
// for byte, for every kind of event and for names that need escaping.
func TestAppendJSON(t *testing.T) {
	evs := []Event{
		{Module: ModVerbs, Step: StepPost, QPN: 0x11, WRID: 7, WROp: ib.WRRDMAWrite, Len: 3072, NIC: "rnic0", Seq: 1, Time: 1700000000123456789},
		{Module: ModWQE, Step: StepFetch, QPN: 0x11, PSN: 0x111, WRID: 1<<64 - 1, WROp: ib.WRSend, Arg: 3},
		{Module: ModPort, Step: StepTransmit, DestQPN: 0xffffff, PSN: 0xffffff, Opcode: bth.RCAcknowledge, Aux: 0x1f, Len: 48},
		{Module: ModRX, Step: StepDrop, QPN: 0x12, Arg: 99999, Flags: 0xff},
		{Module: Module(200), Step: Step(250), Time: -5},
		{Module: ModCompleter, Step: StepComplete, NIC: "a\"b\\c<d>&e\x01\b\f\n\r\t\u2028\u2029\xff\xfeé"},
	}
	for i := range evs {
		got := evs[i].AppendJSON([]byte("prefix"))
		want, err := json.Marshal(evs[i].fields())
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+string(want) {
			t.Errorf("event %d\n got %s\nwant prefix%s", i, got, want)
		}
	}
}

// BenchmarkAppendJSON renders the events a bulk WRITE's packet makes at
// its sender (segment, DMA read, headers, ICRC, transmit), as the trace
// file's writer does, one line at a time into a reused buffer.
func BenchmarkAppendJSON(b *testing.B) {
	at := int64(1795830518605990323)
	evs := []Event{
		{Seq: 1, Time: at, NIC: "rnicA", Module: ModWQE, Step: StepSegment, QPN: 0x11, PSN: 0x1011, Len: 4096, Arg: 4096, Aux: 65536},
		{Seq: 2, Time: at + 80, NIC: "rnicA", Module: ModDMA, Step: StepDMARead, QPN: 0x11, WRID: 7, Len: 4096, Arg: 4096},
		{Seq: 3, Time: at + 150, NIC: "rnicA", Module: ModWQE, Step: StepHeaders, QPN: 0x11, PSN: 0x1011, Opcode: bth.RCRDMAWriteMiddle, Len: 4096},
		{Seq: 4, Time: at + 900, NIC: "rnicA", Module: ModPort, Step: StepICRC, QPN: 0x11, DestQPN: 0x12, PSN: 0x1011, Opcode: bth.RCRDMAWriteMiddle, Arg: 0xdeadbeef},
		{Seq: 5, Time: at + 950, NIC: "rnicA", Module: ModPort, Step: StepTransmit, QPN: 0x11, DestQPN: 0x12, PSN: 0x1011, Opcode: bth.RCRDMAWriteMiddle, Len: 4180},
	}
	var line []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		line = evs[i%len(evs)].AppendJSON(line[:0])
	}
}

// FuzzReadJSON feeds ReadJSON what a daemon (or anything on its port)
// might send: it must return an error or events, never panic, and every
// event it returns renders.
func FuzzReadJSON(f *testing.F) {
	e := Event{Module: ModWQE, Step: StepHeaders, QPN: 0x11, PSN: 5, Opcode: bth.RCSendOnly, NIC: "rnic0"}
	b, _ := json.Marshal(e)
	f.Add(b)
	f.Add([]byte(`{"module":"port","step":"icrc_check","arg":255}` + "\n" + `{"module":"rx","step":"drop","arg":99999}`))
	f.Add([]byte(`{"module":"comp","step":"complete","arg":4294967295,"flags":255,"wr_op":200}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = ReadJSON(bytes.NewReader(data), func(e *Event) error {
			_ = Format(e, 0)
			want, err := json.Marshal(e.fields())
			if err != nil {
				return err
			}
			if got := e.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("AppendJSON\n got %s\nwant %s", got, want)
			}
			return nil
		})
	})
}
