package monitor

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/wire/bth"
)

// Packet is one row of the sequence diagram: a packet between two ends,
// or a run of like packets (Count of them, from PSN to LastPSN; see
// diagram.go).
type Packet struct {
	// Seq numbers the rows; Ver is the version of the row's last change
	// (a run grows after it is first served).
	Seq    uint64 `json:"seq"`
	Ver    uint64 `json:"ver"`
	TimeNS int64  `json:"time_ns"`
	From   string `json:"from"`
	To     string `json:"to"`
	Opcode string `json:"opcode"`
	PSN    uint32 `json:"psn"`
	QPN    uint32 `json:"dest_qpn"`
	// FromQPN and ToQPN are the QPs at either end, as far as the
	// device's QP table tells (0: unknown, a UD peer say).
	FromQPN uint32 `json:"from_qpn,omitempty"`
	ToQPN   uint32 `json:"to_qpn,omitempty"`
	Len     uint32 `json:"len"`
	// Kind is "request", "response" (READ response, atomic ACK), "ack",
	// "nak", "rnr" or "cnp".
	Kind       string `json:"kind"`
	Syndrome   string `json:"syndrome,omitempty"`
	Retransmit bool   `json:"retransmit,omitempty"`
	Lost       bool   `json:"lost,omitempty"` // dropped by the fault injector or its link's full queue
	// The run: its opcode class (RDMA_WRITE for every RDMA_WRITE_*), how
	// many packets and bytes, and the last packet's opcode, PSN and time.
	Class      string `json:"class"`
	Count      int    `json:"count"`
	Bytes      uint64 `json:"bytes"`
	LastOpcode string `json:"last_opcode"`
	LastPSN    uint32 `json:"last_psn"`
	LastTimeNS int64  `json:"last_time_ns"`
}

// Lane is one end of the sequence diagram: a device of this monitor, or
// the far end its QPs talk to, named by its address, with the QPs seen
// there.
type Lane struct {
	Name   string `json:"name"`   // what Packet.From and To say
	Detail string `json:"detail"` // "device", or "qp 0x12, 0x13"
}

// packetsReply is /api/packets.
type packetsReply struct {
	Lanes []Lane `json:"lanes"`
	// Packets are the rows added or grown since ?after=VER, oldest
	// first; the page replaces a row it has by Seq.
	Packets []Packet `json:"packets"`
	Next    uint64   `json:"next"` // ask with after=Next for newer changes
	// Rates are the rate steps newer than ?rates_after=SEQ.
	Rates []RateStep `json:"rates"`
	// Recording is false while the monitor was not following the trace
	// (it starts on this request).
	Recording bool `json:"recording"`
}

// servePackets returns the diagram's rows changed since ?after=VER, and
// keeps recording for packetIdle more.
func (m *Monitor) servePackets(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	ratesAfter, _ := strconv.ParseUint(r.URL.Query().Get("rates_after"), 10, 64)
	writeJSON(w, m.packetsSince(after, ratesAfter, m.keepFollowing()))
}

// packetsSince is /api/packets: the lanes, the rows changed since
// version after and the rate steps after ratesAfter.
func (m *Monitor) packetsSince(after, ratesAfter uint64, rec bool) packetsReply {
	m.mu.Lock()
	defer m.mu.Unlock()
	lanes := m.lanes()
	m.diagram.keep(lanes)
	reply := packetsReply{Lanes: lanes, Packets: m.diagram.changed(after), Next: m.diagram.ver, Recording: rec, Rates: []RateStep{}}
	for _, r := range m.rates {
		if r.Seq > ratesAfter {
			reply.Rates = append(reply.Rates, r)
		}
	}
	return reply
}

// firstLook is how long the page's first request (/api/boot.js) looks at
// the NIC before answering: long enough for rates measured over a few
// hundred thousand packets at full speed and, on a busy NIC, rows in the
// diagram (the trace starts with the request); short enough not to be
// seen as a wait.
const firstLook = 300 * time.Millisecond

// serveBoot is the script the page loads before its own (index.html):
// two looks at the devices firstLook apart and the packets between
// them, as `const boot = {prev, state, packets}`. The page draws it
// before the browser's load event, so that its first frame (the one
// `chromium --screenshot` takes) is the NIC with measured rates, where
// it used to be "connecting..." over an empty page.
func (m *Monitor) serveBoot(w http.ResponseWriter, r *http.Request) {
	first := m.State()
	rec := m.keepFollowing()
	select {
	case <-time.After(firstLook):
	case <-r.Context().Done():
		return
	}
	boot := struct {
		Prev    State        `json:"prev"`
		State   State        `json:"state"`
		Packets packetsReply `json:"packets"`
	}{first, m.State(), m.packetsSince(0, 0, rec)}
	b, err := json.Marshal(boot)
	if err != nil {
		http.Error(w, "boot: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// JSON is a JavaScript expression; encoding/json escapes <, > and &,
	// so no device name can close the script.
	w.Write([]byte("const boot = "))
	w.Write(b)
	w.Write([]byte(";\n"))
}

// Packets returns the diagram's rows, oldest first.
func (m *Monitor) Packets() []Packet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Packet(nil), m.diagram.rows...)
}

// unknownEnd names the far end of a packet whose QP the table does not
// know (gone, or UD, whose peer is per work request).
const unknownEnd = "other end"

// lanes are the ends of the diagram: the devices, then, in the order
// first seen, the far ends the devices' QPs are connected to now, by
// address, with those QPs; a far end goes with the last QP connected to
// it (a lane of the previous run stayed, drawn empty, before). The
// caller holds m.mu.
func (m *Monitor) lanes() []Lane {
	var l []Lane
	for _, d := range m.cfg.Devices {
		l = append(l, Lane{Name: d.Dev.Name(), Detail: "device"})
	}
	if len(m.cfg.Devices) >= 2 {
		return l
	}
	live := map[string][]uint32{}
	for _, d := range m.cfg.Devices {
		for _, q := range d.Dev.Observer().QPInfo() {
			if q.Dest.IsValid() {
				name := q.Dest.String()
				m.notePeer(name)
				if !slices.Contains(live[name], q.DestQPN) {
					live[name] = append(live[name], q.DestQPN)
				}
			}
		}
	}
	// The anonymous far end (a UD peer, a QP gone between its packet and
	// the table's reading) stays while the diagram has rows of it.
	for _, r := range m.diagram.rows {
		if r.From == unknownEnd || r.To == unknownEnd {
			live[unknownEnd] = nil
			break
		}
	}
	kept := m.peers[:0]
	for _, p := range m.peers {
		qpns, ok := live[p.name]
		if !ok {
			continue
		}
		p.qpns, p.more = qpns, false
		if len(qpns) > maxPeerQPNs {
			p.qpns, p.more = qpns[:maxPeerQPNs], true
		}
		kept = append(kept, p)
	}
	clear(m.peers[len(kept):])
	m.peers = kept
	for _, p := range m.peers {
		d := "qp"
		for i, q := range p.qpns {
			if i > 0 {
				d += ","
			}
			d += " " + "0x" + strconv.FormatUint(uint64(q), 16)
		}
		if p.more {
			d += ", ..."
		}
		if len(p.qpns) == 0 {
			d = "QPs unknown"
		}
		l = append(l, Lane{Name: p.name, Detail: d})
	}
	if len(l) < 2 {
		l = append(l, Lane{Name: unknownEnd, Detail: "no connected QP yet"})
	}
	return l
}

// farEnd is a lane of the diagram outside the monitor's devices.
type farEnd struct {
	name string   // the address
	qpns []uint32 // its QPs the devices' QPs are connected to, the first few
	more bool     // more QPs than qpns holds
}

// maxPeers and maxPeerQPNs bound the lanes a hostile or busy NIC can
// make the page draw.
const maxPeers, maxPeerQPNs = 8, 4

// notePeer records that the far end name was seen, for the lanes'
// order; lanes says which QPs it has. The caller holds m.mu.
func (m *Monitor) notePeer(name string) {
	if len(m.peers) >= maxPeers || slices.ContainsFunc(m.peers, func(p farEnd) bool { return p.name == name }) {
		return
	}
	m.peers = append(m.peers, farEnd{name: name})
}

// qpBook finds a device's QP by its QPN, from the QP table, read again
// at most once per batch of events (a read locks every QP).
type qpBook struct {
	devs  []Device
	qps   map[qpKey]rnic.QPInfo
	fresh bool // read during this batch
}

type qpKey struct {
	nic string
	qpn uint32
}

func (b *qpBook) refresh() {
	b.qps, b.fresh = map[qpKey]rnic.QPInfo{}, true
	for _, d := range b.devs {
		for _, q := range d.Dev.Observer().QPInfo() {
			b.qps[qpKey{d.Dev.Name(), q.QPN}] = q
		}
	}
}

// find returns device nic's QP numbered qpn.
func (b *qpBook) find(nic string, qpn uint32) (rnic.QPInfo, bool) {
	for {
		if q, ok := b.qps[qpKey{nic, qpn}]; ok || b.fresh {
			return q, ok
		}
		b.refresh()
	}
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
	book := &qpBook{devs: m.cfg.Devices}
	mine := map[string]bool{}
	for _, d := range m.cfg.Devices {
		mine[d.Dev.Name()] = true
	}
	// far names the other end of a packet of device nic's QP q and says
	// its QPN: the other device when the monitor has two, else the
	// address the QP is connected to.
	far := func(nic string, q rnic.QPInfo, known bool) (string, uint32) {
		if multi {
			for _, d := range m.cfg.Devices {
				if d.Dev.Name() != nic {
					return d.Dev.Name(), q.DestQPN
				}
			}
		}
		if !known || !q.Dest.IsValid() {
			return unknownEnd, 0
		}
		return q.Dest.String(), q.DestQPN
	}
	// sent and rcvd make the arrow of a packet device nic sent from its
	// QP local to QP dest, or received for its QP local. A sent packet's
	// event names its QP; by the destination alone two QPs connected to
	// peers that number their QPs alike (rxe and rnicd both start at
	// 0x11) would be one.
	sent := func(nic string, local, dest uint32) Packet {
		q, ok := book.find(nic, local)
		to, _ := far(nic, q, ok)
		return Packet{From: nic, To: to, FromQPN: local, ToQPN: dest}
	}
	rcvd := func(nic string, local uint32) Packet {
		q, ok := book.find(nic, local)
		from, qpn := far(nic, q, ok)
		return Packet{From: from, To: nic, FromQPN: qpn, ToQPN: local}
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
		var steps []RateStep
		book.fresh = false
		for i := range buf[:n] {
			e := &buf[i]
			if !mine[e.NIC] { // a tracer shared with devices not shown
				continue
			}
			if r, ok := rateStep(e); ok {
				steps = append(steps, r)
				continue
			}
			var p Packet
			switch {
			case e.Step == trace.StepHeaders && e.Flags&trace.FlagRetransmit != 0:
				retx[key{e.NIC, e.PSN, e.Opcode}] = true
				continue
			case e.Step == trace.StepTransmit:
				p = sent(e.NIC, e.QPN, e.DestQPN)
				k := key{e.NIC, e.PSN, e.Opcode}
				p.Retransmit = retx[k]
				delete(retx, k)
			case (e.Step == trace.StepFaultDrop || e.Step == trace.StepLinkDrop) && e.Arg == 0:
				// Lost before the port (the injector's drop, or its
				// link's full queue): never sent.
				p = sent(e.NIC, e.QPN, e.DestQPN)
				p.Lost = true
				k := key{e.NIC, e.PSN, e.Opcode}
				p.Retransmit = retx[k]
				delete(retx, k)
			case e.Step == trace.StepFaultDrop || (e.Step == trace.StepLinkDrop && e.Arg == 1):
				p = rcvd(e.NIC, e.QPN)
				p.Lost = true
			case e.Step == trace.StepReceive && !multi:
				p = rcvd(e.NIC, e.QPN)
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
			case e.Opcode == bth.CNP:
				p.Kind = "cnp"
			}
			out = append(out, p)
		}
		if len(retx) > 4096 { // sends the port never saw (closed): forget them
			clear(retx)
		}
		m.record(out)
		m.recordRates(steps)
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

// record adds packets to the diagram.
func (m *Monitor) record(ps []Packet) {
	if len(ps) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		if len(m.cfg.Devices) == 1 {
			if p.From == m.cfg.Devices[0].Dev.Name() {
				m.notePeer(p.To)
			} else {
				m.notePeer(p.From)
			}
		}
		m.diagram.add(p)
	}
}
