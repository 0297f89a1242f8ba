package perftest

// The test's side of the out-of-band exchange: the steps every tool takes
// over the TCP connection (oob.go speaks its messages), and the order in
// which the two sides meet once their QPs exist.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/rnicd/rnicd/verbs"
)

// link is what the two sides agree on before any QP exists.
type link struct {
	cycleBuf  int       // the cycle buffer (page size) both use
	cacheLine int       // the stride unit of messages in a buffer
	mtu       verbs.MTU // the smaller of the two sides' MTUs
	size      int       // the message size, capped at the MTU for UD
}

// exchange is the connection to the peer (perftest's "Ethernet" exchange).
type exchange struct {
	conn *Conn
	out  io.Writer
	verb Verb // printDest shows what the verb uses
	link link
}

// openExchange opens the TCP exchange and does its first steps: versions,
// system data, MTU.
func openExchange(p *Params, cfg Config, ctx *verbs.Context) (*exchange, error) {
	x := &exchange{out: cfg.Stdout, verb: p.Tool.Verb, link: link{size: p.Size}}
	var err error
	switch {
	case p.RDMACM:
		x.conn, err = openCMConn(p, cfg, ctx)
		// Over rdma_cm perftest prints the QPs as the control QP's verb,
		// a SEND: no rkey, address or reads.
		x.verb = Send
	case p.Client():
		x.conn, err = DialFrom(p.SourceIP, net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port)))
	default:
		printWaiting(x.out)
		ln := cfg.Listener
		if ln == nil {
			if ln, err = ListenOn(p.SourceIP, p.Port); err != nil {
				return nil, err
			}
		}
		x.conn, err = Accept(ln)
	}
	if err != nil {
		return nil, err
	}
	if err := x.start(p, cfg.Stderr, ctx); err != nil {
		x.conn.Close()
		return nil, err
	}
	return x, nil
}

func printWaiting(w io.Writer) {
	fmt.Fprint(w, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
}

// openCMConn connects the exchange over rdma_cm's control QP on the
// device of ctx (cmpipe.go).
func openCMConn(p *Params, cfg Config, ctx *verbs.Context) (*Conn, error) {
	idle := cfg.IdleTimeout
	if idle == 0 {
		idle = defIdle
	}
	var pipe *cmPipe
	if p.Client() {
		addr, err := cmAddr(p.ServerName, p.Port)
		if err != nil {
			return nil, err
		}
		if pipe, err = dialCM(ctx, p.SourceIP, p.TOS, addr, idle); err != nil {
			return nil, err
		}
	} else {
		printWaiting(cfg.Stdout)
		var err error
		if pipe, err = acceptCM(ctx, uint16(p.Port), idle); err != nil {
			return nil, err
		}
	}
	return &Conn{p: pipe, client: p.Client(), cm: true}, nil
}

// start exchanges versions, system data and MTU, and settles the link.
func (x *exchange) start(p *Params, stderr io.Writer, ctx *verbs.Context) error {
	if err := x.conn.ExchangeVersions(); err != nil {
		return err
	}
	var err error
	if x.link.cycleBuf, x.link.cacheLine, err = x.conn.ExchangeSysData(defPageSize, defCacheLine); err != nil {
		return err
	}
	port, err := ctx.QueryPort()
	if err != nil {
		return err
	}
	mtu := port.ActiveMTU
	if p.MTU != 0 {
		if m := mtuFromBytes(p.MTU); m < mtu {
			mtu = m
		} else if m > mtu {
			fmt.Fprintf(stderr, " Requested MTU %d is above the port's active MTU; using %d\n", p.MTU, mtu.Bytes())
		}
	}
	if x.link.mtu, err = x.conn.ExchangeMTU(mtu); err != nil {
		return err
	}
	if p.Conn == verbs.QPTypeUD && x.link.size > x.link.mtu.Bytes() {
		if p.All || !p.SizeSet {
			fmt.Fprintf(stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", x.link.mtu.Bytes())
			x.link.size = x.link.mtu.Bytes()
		} else {
			return errors.New("perftest: max message size in UD cannot be greater than MTU")
		}
	}
	return nil
}

// handShakeAll swaps every QP's Dest, keeping the peer's in rem.
func (x *exchange) handShakeAll(my, rem []Dest) error {
	for i := range my {
		r, err := x.conn.HandShake(&my[i])
		if err != nil {
			return err
		}
		rem[i] = r
	}
	return nil
}

// barrier is a handshake used only to wait for the peer.
func (x *exchange) barrier(my []Dest) error {
	_, err := x.conn.HandShake(&my[0])
	return err
}

// printAddresses prints this side's QPs, then swaps Dests again and
// prints the peer's, as every perftest test does once connected.
func (x *exchange) printAddresses(my []Dest) error {
	for i := range my {
		printDest(x.out, "local", &my[i], x.verb)
	}
	for i := range my {
		r, err := x.conn.HandShake(&my[i])
		if err != nil {
			return err
		}
		printDest(x.out, "remote", &r, x.verb)
	}
	return nil
}

// close ends the exchange with perftest's closing handshake.
func (x *exchange) close(my []Dest) error { return x.conn.CloseConnection(&my[0]) }

// preamble is the order in which a tool's two sides meet once their QPs
// exist. Each perftest tool has its own, and a peer running the real tool
// waits for exactly its own.
type preamble struct {
	// leadingBarrier: one handshake before the Dests (write_lat, read_lat).
	leadingBarrier bool
	// barrierFirst: the handshake after the QPs are connected comes before
	// the addresses are printed (the SEND tests), not after.
	barrierFirst bool
}

var (
	rdmaBWPreamble  = preamble{}
	sendPreamble    = preamble{barrierFirst: true} // send_bw, send_lat
	rdmaLatPreamble = preamble{leadingBarrier: true}
)

// establish swaps Dests, connects the QPs and meets the peer in the
// order pre gives.
func (t *test) establish(pre preamble) error {
	my := t.res.my
	if pre.leadingBarrier {
		if err := t.ex.barrier(my); err != nil {
			return err
		}
	}
	if err := t.ex.handShakeAll(my, t.res.rem); err != nil {
		return err
	}
	// Over rdma_cm the CM has connected the QPs already (cmdata.go).
	if !t.p.RDMACM {
		if err := t.res.connectQPs(t.p.Tool.Kind == Lat || t.p.Client() || t.p.Duplex); err != nil {
			return err
		}
	}
	if pre.barrierFirst {
		if err := t.ex.barrier(my); err != nil {
			return err
		}
		return t.ex.printAddresses(my)
	}
	if err := t.ex.printAddresses(my); err != nil {
		return err
	}
	return t.ex.barrier(my)
}
