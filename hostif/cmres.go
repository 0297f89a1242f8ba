package hostif

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

// The CM IDs of every client as `rdma res show cm_id` lists the kernel's
// (iproute2's rdma/res-cmid.c prints the fields; Linux's cma.c keeps
// them): the rdma_cm state, port space, owner, cm-idn, the source and
// destination address and port, and the QP bound. The daemon sees only
// what reaches it (listen, connect, a connect request), so an ID that
// has only resolved addresses in its client shows IDLE with none.

// ListCMIDsReq asks for the CM IDs from cm-idn From up.
type ListCMIDsReq struct{ From uint32 }

func (m *ListCMIDsReq) encode(e *encoder) { e.u32(m.From) }
func (m *ListCMIDsReq) decode(d *decoder) { m.From = d.u32() }

// CMIDRow is one CM ID of ListCMIDsReply.
type CMIDRow struct {
	IDN, QPN uint32 // QPN 0: no QP bound
	State    string // rdma_cm's state name: IDLE, LISTEN, CONNECT, DISCONNECT
	PS       uint16 // mad.PortSpace
	PID      uint32
	Comm     string
	Src, Dst netip.AddrPort // invalid: not known
}

// ListCMIDsReply answers KindListCMIDs; More says a further request
// from Next is needed.
type ListCMIDsReply struct {
	Rows []CMIDRow
	More bool
	Next uint32
}

func (m *ListCMIDsReply) encode(e *encoder) {
	e.u32(uint32(len(m.Rows)))
	for i := range m.Rows {
		r := &m.Rows[i]
		e.u32(r.IDN)
		e.u32(r.QPN)
		e.str(r.State)
		e.u16(r.PS)
		e.u32(r.PID)
		e.str(r.Comm)
		encodeAddrPort(e, r.Src)
		encodeAddrPort(e, r.Dst)
	}
	e.u8(b2u(m.More))
	e.u32(m.Next)
}

func (m *ListCMIDsReply) decode(d *decoder) {
	n := d.u32()
	if n > maxRows {
		d.fail("%d CM ID rows", n)
		return
	}
	m.Rows = make([]CMIDRow, n)
	for i := range m.Rows {
		r := &m.Rows[i]
		r.IDN, r.QPN = d.u32(), d.u32()
		r.State = d.str()
		r.PS = d.u16()
		r.PID = d.u32()
		r.Comm = d.str()
		r.Src, r.Dst = decodeAddrPort(d), decodeAddrPort(d)
	}
	m.More = u2b(d, d.u8())
	m.Next = d.u32()
}

// An address and port go as a family byte (0 none, 4, 6), 16 bytes of
// address and the port.
func encodeAddrPort(e *encoder, a netip.AddrPort) {
	switch {
	case !a.IsValid():
		e.u8(0)
	case a.Addr().Is4():
		e.u8(4)
	default:
		e.u8(6)
	}
	b := a.Addr().As16()
	e.bytes(b[:])
	e.u16(a.Port())
}

func decodeAddrPort(d *decoder) netip.AddrPort {
	fam := d.u8()
	var b [16]byte
	d.bytes(b[:])
	port := d.u16()
	switch fam {
	case 0:
		return netip.AddrPort{}
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), port)
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(b), port)
	}
	d.fail("address family %d", fam)
	return netip.AddrPort{}
}

// setListenAddrs: a listener is bound to the device's address (rdma_cm
// chose this daemon by it) on the service ID's port, with no peer.
func (o *cmIDObj) setListenAddrs(dev netip.Addr, serviceID uint64) {
	ps, port, _ := mad.SplitServiceID(serviceID)
	o.ps = ps
	o.src = netip.AddrPortFrom(dev, port)
	o.dst = netip.AddrPortFrom(unspecified(dev), 0)
}

// setConnectAddrs: an active ID's addresses are the ones its cma_hdr
// carries (source address and port, destination address), the port the
// service ID's; without a cma_hdr, the device's address and the GID's.
func (o *cmIDObj) setConnectAddrs(dev netip.Addr, serviceID uint64, dgid netip.Addr, privateData []byte) {
	ps, port, _ := mad.SplitServiceID(serviceID)
	o.ps = ps
	if h, err := mad.ParseCMAHdr(privateData); err == nil {
		o.src = netip.AddrPortFrom(h.SrcAddr(), h.SrcPort())
		o.dst = netip.AddrPortFrom(h.DstAddr(), port)
		return
	}
	o.src = netip.AddrPortFrom(dev, 0)
	o.dst = netip.AddrPortFrom(dgid, port)
}

// setRequestAddrs: the ID of a connect request has the listener's port
// space and port, the REQ's cma_hdr the two addresses (swapped: its
// source is our destination).
func (o *cmIDObj) setRequestAddrs(listen *cmIDObj, privateData []byte) {
	o.ps = listen.ps
	o.src = listen.src
	if h, err := mad.ParseCMAHdr(privateData); err == nil {
		o.src = netip.AddrPortFrom(h.DstAddr(), listen.src.Port())
		o.dst = netip.AddrPortFrom(h.SrcAddr(), h.SrcPort())
	}
}

func unspecified(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// cmaState is the rdma_cm state (enum rdma_cm_state) an ID is in, from
// its listener or its IB CM state: CONNECT from rdma_connect or a
// connect request until a DREQ (IBTA 12.9.6, figure 8's states),
// DISCONNECT from then on.
func (o *cmIDObj) cmaState() string {
	switch {
	case o.l != nil:
		return "LISTEN"
	case o.id == nil:
		return "IDLE"
	case o.ps == mad.PSUDP:
		// A UD ID stays in CONNECT once its SIDR is sent or answered
		// (cma.c changes no state on the SIDR_REP).
		return "CONNECT"
	}
	switch o.id.State() {
	case cm.StateDREQSent, cm.StateDREQRcvd, cm.StateTimewait, cm.StateIdle:
		return "DISCONNECT"
	}
	return "CONNECT"
}

func (c *conn) listCMIDs(_ object, b Body, _ []int) (Body, []int, error) {
	if err := c.cmReady(); err != nil {
		return nil, nil, err
	}
	from := b.(*ListCMIDsReq).From
	// Every client's IDs with their QPs (bound under the owner's lock);
	// the CM fields are read on the agent's goroutine.
	type held struct {
		o   *cmIDObj
		qpn uint32
	}
	var ids []held
	c.s.mu.Lock()
	for cl := range c.s.conns {
		cl.mu.Lock()
		for _, obj := range cl.objs {
			if o, ok := obj.(*cmIDObj); ok && o.idn >= from {
				ids = append(ids, held{o, o.qpn})
			}
		}
		cl.mu.Unlock()
	}
	c.s.mu.Unlock()
	slices.SortFunc(ids, func(a, b held) int { return cmp.Compare(a.o.idn, b.o.idn) })
	out := &ListCMIDsReply{}
	if len(ids) > maxRows {
		out.More, out.Next = true, ids[maxRows].o.idn
		ids = ids[:maxRows]
	}
	c.s.cmAgent.Do(func(*cm.CM) {
		for _, h := range ids {
			o := h.o
			out.Rows = append(out.Rows, CMIDRow{IDN: o.idn, QPN: h.qpn, State: o.cmaState(), PS: uint16(o.ps),
				PID: uint32(o.owner.pid), Comm: o.owner.comm, Src: o.src, Dst: o.dst})
		}
	})
	return out, nil, nil
}
