package perftest

// The test's QPs over rdma_cm (-R, create_rdma_cm_connection): between
// two handshakes of the exchange, the client connects one RC QP per -q to
// the server's port through rdma_cm, and the CM moves them through
// INIT/RTR/RTS with the values of the REQ and REP; no QP attribute goes
// through the exchange. Responder resources and initiator depth are the
// outstanding reads for READ and atomic tests, 0 otherwise; retry and RNR
// retry counts are 7. At the end the client disconnects each QP and waits
// for DISCONNECTED, the server disconnects its own (rdma_cm_disconnect_nodes,
// destroy_ctx). With -c UD the QPs are UD QPs of rdma_cm's UDP port space,
// resolved by SIDR instead and never disconnected (cmud.go).

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

const (
	// cmConnectTries and cmConnectDelay are perftest's for the test's
	// QPs (rdma_cm_client_connection): the server opens its listener only
	// after the handshake both pass, so a first REQ may find none.
	cmConnectTries = 10
	cmConnectDelay = 100 * time.Millisecond
	// cmMinRNRTimer is what perftest's server sets on an accepted RC QP
	// (MIN_RNR_TIMER, code 12: 0.64 ms) over the CM's 0 (655 ms): a
	// SEND test's RNR NAKs would otherwise stall the sender.
	cmMinRNRTimer = 12
	// cmServerDisconnectWait is how long the server waits for the
	// client's DREQs before it disconnects itself: the client sends them
	// as soon as its last handshake is over.
	cmServerDisconnectWait = 2 * time.Second
)

// cmQPs are the test's QPs' CM IDs, on an event channel of their own.
type cmQPs struct {
	ch     *rdmacm.EventChannel
	listen *rdmacm.ID // the server's, until every QP is connected
	ids    []*rdmacm.ID
	client bool
	// ud: the IDs are in the UDP port space (cmud.go); lat: a latency
	// test, whose server sends too.
	ud, lat bool
	// poll makes a poller on a CQ (test.newPoller).
	poll func(*verbs.CQ) *poller
}

// ps is the port space of the test's IDs: UDP for UD QPs, as perftest
// creates them (rdma_cm_allocate_nodes).
func (c *cmQPs) ps() rdmacm.PortSpace {
	if c.ud {
		return rdmacm.PSUDP
	}
	return rdmacm.PSTCP
}

// cmAddr is the server's address for rdma_cm: an IPv4 address or a name
// that resolves to one (perftest 4.5 resolves -R's server with AF_INET).
func cmAddr(name string, port int) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(name)
	if err != nil {
		ips, lerr := net.LookupIP(name)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("perftest: resolve %q: %w", name, lerr)
		}
		for _, ip := range ips {
			if ip4 := ip.To4(); ip4 != nil {
				a = netip.AddrFrom4([4]byte(ip4))
				break
			}
		}
		if !a.IsValid() {
			return netip.AddrPort{}, fmt.Errorf("perftest: %q has no IPv4 address", name)
		}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}

// connectCM connects the test's QPs through rdma_cm between the two
// handshakes perftest makes around it, and describes them in res.my.
func (t *test) connectCM() error {
	ch, err := rdmacm.CreateEventChannelOn(t.ctx)
	if err != nil {
		return err
	}
	t.cm = &cmQPs{ch: ch, client: t.p.Client(), ud: t.p.Conn == verbs.QPTypeUD, lat: t.p.Tool.Kind == Lat,
		poll: func(cq *verbs.CQ) *poller { return t.newPoller(cq, 1) }}
	if !t.p.Client() {
		// Listening before the handshake, not after as perftest does: a
		// client that sends its REQ as soon as the handshake is over finds
		// the listener there (perftest 4.5's retries after a REJ reuse
		// destroyed IDs and fail).
		if err := t.cm.listenOn(uint16(t.p.Port)); err != nil {
			return err
		}
	}
	zero := []Dest{{}}
	if err := t.ex.barrier(zero); err != nil {
		return err
	}
	if t.p.Client() {
		addr, err := cmAddr(t.p.ServerName, t.p.Port)
		if err != nil {
			return err
		}
		err = t.cm.dial(t.res, addr, t.connParam())
		if err != nil {
			return err
		}
	} else if err := t.cm.accept(t.res, t.connParam()); err != nil {
		return err
	}
	return t.ex.barrier(zero)
}

// connParam are the test QPs' connection parameters.
func (t *test) connParam() *rdmacm.ConnParam {
	cp := &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if v := t.p.Tool.Verb; v == Read || v == Atomic {
		cp.ResponderResources, cp.InitiatorDepth = uint8(t.res.outReads), uint8(t.res.outReads)
	}
	return cp
}

// dial connects one QP per -q to addr, trying again after a refusal.
func (c *cmQPs) dial(res *resources, addr netip.AddrPort, cp *rdmacm.ConnParam) error {
	var err error
	for try := 1; try <= cmConnectTries; try++ {
		if err = c.dialOnce(res, addr, cp); err == nil {
			return nil
		}
		c.destroyIDs()
		time.Sleep(cmConnectDelay)
	}
	return fmt.Errorf("perftest: failed to connect RDMA CM client, tried %d times: %w", cmConnectTries, err)
}

func (c *cmQPs) dialOnce(res *resources, addr netip.AddrPort, cp *rdmacm.ConnParam) error {
	for i := range res.p.NumQPs {
		id := c.ch.CreateIDIn(c.ps())
		c.ids = append(c.ids, id)
		// --source_ip binds the ID to that address (rdma_resolve_addr's
		// src, as perftest passes it); unset, the route's.
		if res.p.TOS >= 0 {
			id.SetTOS(uint8(res.p.TOS)) // -T, as rdma_cm_address_handler sets it
		}
		if err := id.ResolveAddr(res.p.SourceIP, addr); err != nil {
			return fmt.Errorf("perftest: rdma_resolve_addr: %w", err)
		}
		if _, err := expectEvent(c.ch, rdmacm.EventAddrResolved, cmEventWait); err != nil {
			return err
		}
		if err := id.ResolveRoute(); err != nil {
			return fmt.Errorf("perftest: rdma_resolve_route: %w", err)
		}
		if _, err := expectEvent(c.ch, rdmacm.EventRouteResolved, cmEventWait); err != nil {
			return err
		}
		if err := id.CreateQP(res.pd, res.qpInitAttr()); err != nil {
			return fmt.Errorf("perftest: rdma_create_qp: %w", err)
		}
		if err := id.Connect(cp); err != nil {
			return fmt.Errorf("perftest: rdma_connect: %w", err)
		}
		e, err := expectEvent(c.ch, rdmacm.EventEstablished, cmEventWait)
		if err != nil {
			return err
		}
		if c.ud {
			if err := c.udEstablished(res, i, id, e); err != nil {
				return err
			}
		}
	}
	for _, id := range c.ids {
		res.addQP(id.QP)
	}
	return nil
}

// listenOn opens the server's listener for the test's QPs on port.
func (c *cmQPs) listenOn(port uint16) error {
	c.listen = c.ch.CreateIDIn(c.ps())
	if err := c.listen.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)); err != nil {
		return fmt.Errorf("perftest: rdma_bind_addr: %w", err)
	}
	if err := c.listen.Listen(); err != nil {
		return fmt.Errorf("perftest: rdma_listen on port %d: %w", port, err)
	}
	return nil
}

// accept takes the client's QPs (rdma_cm_connection_request_handler):
// a QP for each CONNECT_REQUEST, accepted, until every one is
// ESTABLISHED; then the listener goes.
func (c *cmQPs) accept(res *resources, cp *rdmacm.ConnParam) error {
	n := res.p.NumQPs
	// A peer that keeps sending REQs (each beyond -q rejected) without
	// ever completing its connections is not served for ever.
	maxEvents := 4*n + 16
	for established, events := 0, 0; established < n; events++ {
		if events == maxEvents {
			return fmt.Errorf("perftest: %d CM events and %d of %d QPs connected: giving up", events, established, n)
		}
		e, err := nextEvent(c.ch, cmEventWait)
		if err != nil {
			return fmt.Errorf("perftest: waiting for the client's QPs: %w", err)
		}
		switch e.Event {
		case rdmacm.EventConnectRequest:
			if len(c.ids) == n {
				e.ID.Reject(nil) // more QPs than -q: perftest rejects them too
				e.ID.Destroy()
				continue
			}
			i := len(c.ids)
			c.ids = append(c.ids, e.ID)
			if err := e.ID.CreateQP(res.pd, res.qpInitAttr()); err != nil {
				e.ID.Reject(nil)
				return fmt.Errorf("perftest: rdma_create_qp: %w", err)
			}
			if err := c.udPostQPNRecv(res, i, e.ID.QP); err != nil {
				e.ID.Reject(nil)
				return err
			}
			if err := e.ID.Accept(cp); err != nil {
				return fmt.Errorf("perftest: rdma_accept: %w", err)
			}
			if c.ud {
				// A UD accept is the SIDR_REP: no ESTABLISHED follows
				// on this side (cma.c), the QP is ready.
				if err := c.udTakeQPN(res, i, e.ID.QP); err != nil {
					return err
				}
				established++
			}
		case rdmacm.EventEstablished:
			established++
			// As perftest's server does after rdma_accept.
			if err := e.ID.QP.Modify(&verbs.QPAttr{MinRNRTimer: cmMinRNRTimer}, verbs.AttrMinRNRTimer); err != nil {
				return fmt.Errorf("perftest: set the RNR timer of QP %#x: %w", e.ID.QP.QPN, err)
			}
		default:
			if e.Status != nil {
				return fmt.Errorf("perftest: %v while the client's QPs connect: %w", e.Event, e.Status)
			}
			return fmt.Errorf("perftest: unexpected CM event %v while the client's QPs connect", e.Event)
		}
	}
	c.listen.Destroy()
	c.listen = nil
	for _, id := range c.ids {
		res.addQP(id.QP)
	}
	return nil
}

// close disconnects the test's QPs and destroys them with their IDs:
// the client disconnects each and waits for its DISCONNECTED, as
// perftest's does. The server waits a moment for the client's DREQs,
// which its CM answers (perftest's rdma_disconnect sends the DREP then);
// destroying a QP still connected sends the DREQ from this side.
func (c *cmQPs) close() error {
	var errs []error
	wait := cmServerDisconnectWait
	if c.ud {
		// No connection to end: the IDs and QPs go (rdma_cm_destroy_cma).
		c.destroyIDs()
		if c.listen != nil {
			c.listen.Destroy()
		}
		return c.ch.Destroy()
	}
	if c.client {
		wait = cmEventWait
		for _, id := range c.ids {
			id.Disconnect() // fails only if the server's DREQ came first: DISCONNECTED comes all the same
		}
	}
	// Each ID ends with one DISCONNECTED, whoever sent the DREQ; other
	// events (a late ESTABLISHED) do not count, and a peer that sends
	// nothing but those is not waited for beyond a few.
	for seen, events := 0, 0; seen < len(c.ids) && events < len(c.ids)+8; events++ {
		e, err := nextEvent(c.ch, wait)
		if err != nil {
			if c.client {
				errs = append(errs, fmt.Errorf("perftest: waiting for DISCONNECTED: %w", err))
			}
			break
		}
		if e.Event == rdmacm.EventDisconnected {
			seen++
		}
	}
	c.destroyIDs()
	if c.listen != nil {
		c.listen.Destroy()
	}
	errs = append(errs, c.ch.Destroy())
	return errors.Join(errs...)
}

// destroyIDs destroys the IDs made so far and their QPs.
func (c *cmQPs) destroyIDs() {
	for _, id := range c.ids {
		if id.QP != nil {
			id.QP.Destroy()
		}
		id.Destroy()
	}
	c.ids = nil
}
