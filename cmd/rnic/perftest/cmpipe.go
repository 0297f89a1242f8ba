package perftest

// The exchange over rdma_cm (-R): perftest's "rdma_cm" data exchange
// method. Before any test QP exists the client connects one control RC QP
// to the server through rdma_cm on the test's port (establish_connection:
// rdma_client_connect, rdma_server_connect), and every message of the
// exchange that would go over TCP goes as one SEND of its own size on it
// (ctx_xchg_data_rdma): 16 bytes of version, 4 of page size, 4 of cache
// line, 2 of MTU, 56 of each QP's struct pingpong_dest, 8 of each report
// figure. Each side keeps one receive posted, reposted after each message
// it reads, so a SEND always finds one. The golden capture
// write_bw_rdmacm.pcap shows it all: REQ/REP/RTU for QP 0x11, SENDs of 16,
// 4, 4, 2 (padded to 4) and 56 bytes, then the test QP's REQ/REP/RTU.

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

const (
	// syncSpecID is perftest's SYNC_SPEC_ID, the WR ID of the exchange's
	// SENDs and receives; a completion with another is not the exchange's.
	syncSpecID = 5
	// cmMsgMax is the largest message of the exchange, a pingpong_dest:
	// the receive's length, as perftest posts it (post_one_recv_wqe).
	cmMsgMax = cmDestLen
	// cmSendOff is where the send area starts in the control buffer,
	// after the receive area.
	cmSendOff = 64
	// cmEventWait bounds the wait for a CM event that must come: a REQ's
	// retries under rdma_cm's timers (15 of 4.3 s) end within it.
	cmEventWait = 90 * time.Second
)

// cmPipe is the exchange's control QP and the objects around it.
type cmPipe struct {
	ch     *rdmacm.EventChannel
	id     *rdmacm.ID
	pd     *verbs.PD
	mr     *verbs.MR
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	send   *poller
	recv   *poller
}

// dialCM connects the control QP to the server at addr from the device of
// ctx (rdma_client_connect): resolve address and route, make the QP, post
// its receive, connect with retry count 7 and RNR retry 7 and no
// responder resources (the control QP only SENDs).
func dialCM(ctx *verbs.Context, src netip.Addr, tos int, addr netip.AddrPort, idle time.Duration) (*cmPipe, error) {
	ch, err := rdmacm.CreateEventChannelOn(ctx)
	if err != nil {
		return nil, err
	}
	c := &cmPipe{ch: ch, id: ch.CreateID()}
	if tos >= 0 {
		// -T: perftest sets the TOS on the control connection's ID too.
		c.id.SetTOS(uint8(tos))
	}
	if err := c.dial(src, addr, idle); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *cmPipe) dial(src netip.Addr, addr netip.AddrPort, idle time.Duration) error {
	if err := c.id.ResolveAddr(src, addr); err != nil {
		return fmt.Errorf("perftest: rdma_resolve_addr: %w", err)
	}
	if _, err := expectEvent(c.ch, rdmacm.EventAddrResolved, cmEventWait); err != nil {
		return err
	}
	if err := c.id.ResolveRoute(); err != nil {
		return fmt.Errorf("perftest: rdma_resolve_route: %w", err)
	}
	if _, err := expectEvent(c.ch, rdmacm.EventRouteResolved, cmEventWait); err != nil {
		return err
	}
	if err := c.setup(c.id, idle); err != nil {
		return err
	}
	if err := c.id.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return fmt.Errorf("perftest: rdma_connect: %w", err)
	}
	_, err := expectEvent(c.ch, rdmacm.EventEstablished, cmEventWait)
	return err
}

// acceptCM listens on port on the device of ctx for the client's control
// QP, accepts it as rdma_server_connect does and stops listening: the
// test's QPs connect to a listener of their own on the same port later.
// It waits for the client as long as it takes, as the TCP accept does.
func acceptCM(ctx *verbs.Context, port uint16, idle time.Duration) (*cmPipe, error) {
	ch, err := rdmacm.CreateEventChannelOn(ctx)
	if err != nil {
		return nil, err
	}
	c := &cmPipe{ch: ch}
	if err := c.accept(port, idle); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *cmPipe) accept(port uint16, idle time.Duration) error {
	listen := c.ch.CreateID()
	defer listen.Destroy()
	if err := listen.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)); err != nil {
		return fmt.Errorf("perftest: rdma_bind_addr: %w", err)
	}
	if err := listen.Listen(); err != nil {
		return fmt.Errorf("perftest: rdma_listen on port %d: %w", port, err)
	}
	e, err := expectEvent(c.ch, rdmacm.EventConnectRequest, 0)
	if err != nil {
		return err
	}
	c.id = e.ID
	if err := c.setup(c.id, idle); err != nil {
		c.id.Reject(nil)
		return err
	}
	if err := c.id.Accept(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return fmt.Errorf("perftest: rdma_accept: %w", err)
	}
	// perftest goes on at once; the QP is in RTS when Accept returns, and
	// ESTABLISHED (the RTU) brings that state to this side's QP.
	_, err = expectEvent(c.ch, rdmacm.EventEstablished, cmEventWait)
	return err
}

// setup makes the control QP on id's device and posts its receive
// (ctx_init with tx and rx depth 1, post_one_recv_wqe).
func (c *cmPipe) setup(id *rdmacm.ID, idle time.Duration) error {
	var err error
	if c.pd, err = id.Verbs.AllocPD(); err != nil {
		return err
	}
	buf, err := id.Verbs.Alloc(cmSendOff + cmMsgMax)
	if err != nil {
		return err
	}
	if c.mr, err = c.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.sendCQ, err = id.Verbs.CreateCQ(1, nil); err != nil {
		return err
	}
	if c.recvCQ, err = id.Verbs.CreateCQ(1, nil); err != nil {
		return err
	}
	if err := id.CreateQP(c.pd, verbs.QPInitAttr{SendCQ: c.sendCQ, RecvCQ: c.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("perftest: rdma_create_qp: %w", err)
	}
	c.send = &poller{cq: c.sendCQ, idle: idle, wcs: make([]verbs.WC, 1)}
	c.recv = &poller{cq: c.recvCQ, idle: idle, wcs: make([]verbs.WC, 1)}
	return c.postRecv()
}

func (c *cmPipe) postRecv() error {
	wr := verbs.RecvWR{WRID: syncSpecID, SGL: []verbs.SGE{c.mr.SGE(0, cmMsgMax)}}
	if err := c.id.QP.PostRecv([]verbs.RecvWR{wr}); err != nil {
		return fmt.Errorf("perftest: post receive on the rdma_cm QP: %w", err)
	}
	return nil
}

// write SENDs b and waits for its completion (rdma_write_data).
func (c *cmPipe) write(b []byte) error {
	if len(b) > cmMsgMax {
		return fmt.Errorf("perftest: a message of %d bytes does not fit the peer's receive of %d", len(b), cmMsgMax)
	}
	copy(c.mr.Buf[cmSendOff:], b)
	wr := verbs.SendWR{WRID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(cmSendOff, len(b))}}
	if err := c.id.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("perftest: post send on the rdma_cm QP: %w", err)
	}
	wcs, err := c.send.poll(1)
	if err != nil {
		return err
	}
	if wc := &wcs[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend || wc.WRID != syncSpecID {
		return wcError(wc, "rdma_cm exchange SEND")
	}
	return nil
}

// read waits for the peer's next message, takes len(b) bytes of it as
// perftest does (rdma_read_data: the sizes are agreed, not sent), and
// posts the receive again.
func (c *cmPipe) read(b []byte) error {
	wcs, err := c.recv.poll(1)
	if err != nil {
		return err
	}
	if wc := &wcs[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != syncSpecID {
		return wcError(wc, "rdma_cm exchange receive")
	}
	copy(b, c.mr.Buf[:cmMsgMax])
	return c.postRecv()
}

// Close destroys the control QP and its ID: the daemon's CM sends the
// DREQ of a connection still up, as rdma_destroy_id does at perftest's
// end (the server's DREQ in write_bw_rdmacm.pcap).
func (c *cmPipe) Close() error {
	if c.id != nil {
		if c.id.QP != nil {
			c.id.QP.Destroy()
		}
		c.id.Destroy()
	}
	for _, cq := range []*verbs.CQ{c.sendCQ, c.recvCQ} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if c.mr != nil {
		c.mr.Dereg()
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
	return c.ch.Destroy()
}

// expectEvent waits up to d (0: for ever) for ch's next event, which must
// be want. A REJECTED for REJ reason 8 says "connection refused".
func expectEvent(ch *rdmacm.EventChannel, want rdmacm.EventType, d time.Duration) (*rdmacm.Event, error) {
	e, err := nextEvent(ch, d)
	if err != nil {
		return nil, fmt.Errorf("perftest: waiting for %v: %w", want, err)
	}
	if e.Event != want {
		if e.Status != nil {
			return e, fmt.Errorf("perftest: %v instead of %v: %w", e.Event, want, e.Status)
		}
		return e, fmt.Errorf("perftest: unexpected CM event %v, waiting for %v", e.Event, want)
	}
	return e, nil
}

// nextEvent waits up to d (0: for ever) for ch's next event.
func nextEvent(ch *rdmacm.EventChannel, d time.Duration) (*rdmacm.Event, error) {
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return ch.GetEvent(ctx)
}
