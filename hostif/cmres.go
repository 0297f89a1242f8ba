package hostif

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/mad"
)

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

func (c *conn) listCMIDs(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	if err := c.cmReady(); err != nil {
		return nil, nil, err
	}
	from := b.(*abi.ListCMIDsReq).From
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
	out := &abi.ListCMIDsReply{}
	if len(ids) > abi.MaxRows {
		out.More, out.Next = true, ids[abi.MaxRows].o.idn
		ids = ids[:abi.MaxRows]
	}
	c.s.cmAgent.Do(func(*cm.CM) {
		for _, h := range ids {
			o := h.o
			out.Rows = append(out.Rows, abi.CMIDRow{IDN: o.idn, QPN: h.qpn, State: o.cmaState(), PS: uint16(o.ps),
				PID: uint32(o.owner.pid), Comm: o.owner.comm, Src: o.src, Dst: o.dst})
		}
	})
	return out, nil, nil
}
