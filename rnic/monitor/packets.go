package monitor

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
)

// Packet is one arrow of the sequence diagram: a packet between two ends.
type Packet struct {
	Seq    uint64 `json:"seq"`
	TimeNS int64  `json:"time_ns"`
	From   string `json:"from"`
	To     string `json:"to"`
	Opcode string `json:"opcode"`
	PSN    uint32 `json:"psn"`
	QPN    uint32 `json:"dest_qpn"`
	Len    uint32 `json:"len"`
	// Kind is "request", "response" (READ response, atomic ACK), "ack",
	// "nak" or "rnr".
	Kind       string `json:"kind"`
	Syndrome   string `json:"syndrome,omitempty"`
	Retransmit bool   `json:"retransmit,omitempty"`
	Lost       bool   `json:"lost,omitempty"` // dropped by the fault injector
}

// packetsReply is /api/packets.
type packetsReply struct {
	Lanes   []string `json:"lanes"`
	Packets []Packet `json:"packets"`
	Next    uint64   `json:"next"` // ask with after=Next-1 for newer ones
	// Recording is false while the monitor was not following the trace
	// (it starts on this request).
	Recording bool `json:"recording"`
}

// servePackets returns the recorded packets newer than ?after=SEQ, and
// keeps recording for packetIdle more.
func (m *Monitor) servePackets(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	rec := m.keepFollowing()
	m.mu.Lock()
	reply := packetsReply{Lanes: m.lanes(), Packets: []Packet{}, Next: m.nextSeq, Recording: rec}
	for _, p := range m.packets {
		if p.Seq > after {
			reply.Packets = append(reply.Packets, p)
		}
	}
	m.mu.Unlock()
	writeJSON(w, reply)
}

// Packets returns the recorded packets, oldest first.
func (m *Monitor) Packets() []Packet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Packet(nil), m.packets...)
}

// lanes are the ends of the diagram: the devices, and "peer" when one
// device talks to the outside.
func (m *Monitor) lanes() []string {
	var l []string
	for _, d := range m.cfg.Devices {
		l = append(l, d.Dev.Name())
	}
	if len(l) < 2 {
		l = append(l, "peer")
	}
	return l
}

// keepFollowing starts following the trace if it is not, and reports
// whether it already was.
func (m *Monitor) keepFollowing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastAsk = time.Now()
	if m.follow != nil || m.closed || m.cfg.Tracer == nil {
		return m.follow != nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.follow = cancel
	sub := m.cfg.Tracer.Subscribe(trace.Filter{})
	m.followWG.Add(1)
	go m.followTrace(ctx, sub)
	return false
}

// followTrace turns trace events into diagram packets until nobody has
// asked for packetIdle, or the monitor closes.
func (m *Monitor) followTrace(ctx context.Context, sub *trace.Sub) {
	defer m.followWG.Done()
	defer sub.Close()
	// retx remembers the packets the requester built as retransmissions
	// until the port sends them.
	type key struct {
		nic string
		psn uint32
		op  bth.Opcode
	}
	retx := map[key]bool{}
	buf := make([]trace.Event, 512)
	multi := len(m.cfg.Devices) >= 2
	other := func(nic string) string {
		if !multi {
			return "peer"
		}
		for _, d := range m.cfg.Devices {
			if d.Dev.Name() != nic {
				return d.Dev.Name()
			}
		}
		return "peer"
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, packetIdle/4)
		n, err := sub.Read(rctx, buf)
		cancel()
		if ctx.Err() != nil || m.stopIfIdle() {
			return
		}
		if err != nil {
			continue // no packets for a while
		}
		var out []Packet
		for i := range buf[:n] {
			e := &buf[i]
			var p Packet
			switch {
			case e.Step == trace.StepHeaders && e.Flags&trace.FlagRetransmit != 0:
				retx[key{e.NIC, e.PSN, e.Opcode}] = true
				continue
			case e.Step == trace.StepTransmit:
				p = Packet{From: e.NIC, To: other(e.NIC)}
				k := key{e.NIC, e.PSN, e.Opcode}
				p.Retransmit = retx[k]
				delete(retx, k)
			case e.Step == trace.StepFaultDrop && e.Arg == 0:
				p = Packet{From: e.NIC, To: other(e.NIC), Lost: true}
				k := key{e.NIC, e.PSN, e.Opcode}
				p.Retransmit = retx[k]
				delete(retx, k)
			case e.Step == trace.StepFaultDrop:
				p = Packet{From: other(e.NIC), To: e.NIC, Lost: true}
			case e.Step == trace.StepReceive && !multi:
				p = Packet{From: "peer", To: e.NIC}
			default:
				continue
			}
			p.TimeNS, p.Opcode, p.PSN, p.QPN, p.Len = e.Time, e.OpName(), e.PSN, e.DestQPN, e.Len
			p.Kind = "request"
			switch {
			case e.Opcode == bth.RCAcknowledge:
				s := bth.Syndrome(e.Aux)
				p.Syndrome = s.String()
				switch {
				case s.IsACK():
					p.Kind = "ack"
				case s.IsRNRNAK():
					p.Kind = "rnr"
				default:
					p.Kind = "nak"
				}
			case e.Opcode.Is(bth.FlagReadResp) || e.Opcode == bth.RCAtomicAcknowledge:
				p.Kind = "response"
			}
			out = append(out, p)
		}
		if len(retx) > 4096 { // sends the port never saw (closed): forget them
			clear(retx)
		}
		m.record(out)
	}
}

// stopIfIdle stops following the trace if no page asked for packets
// for packetIdle, and reports whether it did.
func (m *Monitor) stopIfIdle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.lastAsk) <= packetIdle || m.follow == nil {
		return false
	}
	m.follow()
	m.follow = nil
	return true
}

// record appends packets to the ring, numbering them.
func (m *Monitor) record(ps []Packet) {
	if len(ps) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		p.Seq = m.nextSeq
		m.nextSeq++
		m.packets = append(m.packets, p)
	}
	if extra := len(m.packets) - keepPackets; extra > 0 {
		m.packets = append(m.packets[:0], m.packets[extra:]...)
	}
}
