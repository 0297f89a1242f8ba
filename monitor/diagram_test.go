package monitor

import (
	"fmt"
	"strings"
	"testing"
)

// row is what a test says of a diagram row: "FROM>TO kind class xN
// psn-lastpsn" and " retx" or " lost".
func row(r Packet) string {
	s := fmt.Sprintf("%s>%s %s %s x%d %d-%d", r.From, r.To, r.Kind, r.Class, r.Count, r.PSN, r.LastPSN)
	if r.Retransmit {
		s += " retx"
	}
	if r.Lost {
		s += " lost"
	}
	return s
}

// TestDiagramCoalesce feeds the diagram what a WRITE stream with one loss
// looks like from the requester (two lanes, data one way, ACKs and CNPs
// the other, interleaved) and checks the rows, each by value: runs of
// like packets counted with their PSN range and bytes, the loss and the
// NAK rows of their own, the retransmissions a run apart from the
// packets sent for the first time, and the order things happened in.
func TestDiagramCoalesce(t *testing.T) {
	var d diagram
	at := int64(1e9)
	send := func(op string, psn uint32, mod func(*Packet)) {
		at += 1000
		p := Packet{TimeNS: at, From: "a", To: "b", FromQPN: 0x11, ToQPN: 0x12, Opcode: op, PSN: psn, Len: 1084, Kind: "request"}
		if mod != nil {
			mod(&p)
		}
		d.add(p)
	}
	ack := func(kind string, psn uint32) {
		at += 1000
		d.add(Packet{TimeNS: at, From: "b", To: "a", FromQPN: 0x12, ToQPN: 0x11, Opcode: "ACKNOWLEDGE", PSN: psn, Len: 48, Kind: kind})
	}
	cnp := func() {
		at += 1000
		d.add(Packet{TimeNS: at, From: "b", To: "a", FromQPN: 0x12, ToQPN: 0x11, Opcode: "ROCE_CNP", Len: 60, Kind: "cnp"})
	}
	// A 4-packet WRITE, ACKs and CNPs between its packets, another WRITE.
	send("RDMA_WRITE_FIRST", 100, nil)
	send("RDMA_WRITE_MIDDLE", 101, nil)
	ack("ack", 100)
	send("RDMA_WRITE_MIDDLE", 102, nil)
	cnp()
	send("RDMA_WRITE_LAST", 103, nil)
	ack("ack", 103)
	cnp()
	send("RDMA_WRITE_ONLY", 104, nil)
	// 105 lost, 106 sent, the NAK for 105, 105 and 106 again, then new.
	send("RDMA_WRITE_FIRST", 105, func(p *Packet) { p.Lost = true })
	send("RDMA_WRITE_LAST", 106, nil)
	ack("nak", 105)
	ack("nak", 105) // a repeated NAK: a row of its own too
	send("RDMA_WRITE_FIRST", 105, func(p *Packet) { p.Retransmit = true })
	send("RDMA_WRITE_LAST", 106, func(p *Packet) { p.Retransmit = true })
	send("RDMA_WRITE_ONLY", 107, nil)
	ack("ack", 107)
	send("RDMA_WRITE_ONLY", 108, nil)
	want := []string{
		"a>b request RDMA_WRITE x5 100-104",
		"b>a ack ACKNOWLEDGE x2 100-103",
		"b>a cnp ROCE_CNP x2 0-0",
		"a>b request RDMA_WRITE x1 105-105 lost",
		"a>b request RDMA_WRITE x1 106-106",
		"b>a nak ACKNOWLEDGE x1 105-105",
		"b>a nak ACKNOWLEDGE x1 105-105",
		"a>b request RDMA_WRITE x2 105-106 retx",
		"a>b request RDMA_WRITE x2 107-108",
		"b>a ack ACKNOWLEDGE x1 107-107",
	}
	var got []string
	for _, r := range d.rows {
		got = append(got, row(r))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	first := d.rows[0]
	if first.Seq != 1 || first.Bytes != 5*1084 || first.Opcode != "RDMA_WRITE_FIRST" || first.LastOpcode != "RDMA_WRITE_ONLY" ||
		first.TimeNS != 1e9+1000 || first.LastTimeNS != 1e9+9000 {
		t.Errorf("first run %+v: want seq 1, 5 packets of 1084 B, FIRST to ONLY, 1.000001 s to 1.000009 s", first)
	}
	for i, r := range d.rows {
		if r.Seq != uint64(i+1) {
			t.Errorf("row %d has seq %d", i, r.Seq)
		}
	}

	// The page asks for what changed since the version it has: the last
	// run grew, nothing else changed.
	v := d.ver
	send("RDMA_WRITE_ONLY", 109, nil)
	ch := d.changed(v)
	if len(ch) != 1 || ch[0].Seq != 9 || ch[0].Count != 3 || ch[0].LastPSN != 109 || d.ver != v+1 {
		t.Errorf("changed since %d: %+v (version now %d), want row 9 grown to 3 packets", v, ch, d.ver)
	}
	if len(d.changed(d.ver)) != 0 {
		t.Error("rows changed since the newest version")
	}

	// A second after its first packet a run closes: a steady stream goes
	// on down the diagram.
	at += runSpan
	send("RDMA_WRITE_ONLY", 110, nil)
	if r := d.rows[len(d.rows)-1]; r.Count != 1 || r.PSN != 110 || r.Seq != 11 {
		t.Errorf("packet a second later joined an old run: %s", row(r))
	}

	// Rows of ends that are gone go; the rest keep their seq.
	d.keep([]Lane{{Name: "a"}, {Name: "c"}})
	if len(d.rows) != 0 {
		t.Errorf("rows of lane b kept: %d", len(d.rows))
	}
}

// TestDiagramBounded: however many packets, the diagram keeps keepRows
// rows, the newest.
func TestDiagramBounded(t *testing.T) {
	var d diagram
	for i := range 3 * keepRows {
		// Every packet a loss: each its own row.
		d.add(Packet{TimeNS: int64(i), From: "a", To: "b", Opcode: "SEND_ONLY", PSN: uint32(i), Kind: "request", Lost: true})
	}
	if len(d.rows) != keepRows || d.rows[0].PSN != 2*keepRows || d.rows[keepRows-1].Seq != 3*keepRows {
		t.Errorf("%d rows from psn %d to seq %d; want %d, the newest", len(d.rows), d.rows[0].PSN, d.rows[len(d.rows)-1].Seq, keepRows)
	}
}

func TestOpClass(t *testing.T) {
	for op, want := range map[string]string{
		"RDMA_WRITE_FIRST": "RDMA_WRITE", "RDMA_WRITE_LAST_WITH_IMMEDIATE": "RDMA_WRITE", "SEND_ONLY_WITH_INVALIDATE": "SEND",
		"RDMA_READ_RESPONSE_MIDDLE": "RDMA_READ_RESPONSE", "RDMA_READ_REQUEST": "RDMA_READ_REQUEST", "ACKNOWLEDGE": "ACKNOWLEDGE",
		"UD_SEND_ONLY": "UD_SEND", "ROCE_CNP": "ROCE_CNP", "COMPARE_SWAP": "COMPARE_SWAP",
	} {
		if got := opClass(op); got != want {
			t.Errorf("opClass(%q) = %q, want %q", op, got, want)
		}
	}
}
