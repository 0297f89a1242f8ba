package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

// rping is librdmacm's example, with its flags and output, connected
// through rdma_cm (package rdmacm): the client advertises its buffer,
// the server RDMA READs it, the client advertises a sink, the server
// RDMA WRITEs back, each step acknowledged by a SEND of 16 bytes
// {be64 addr, be32 rkey, be32 len} (/work/shared/cm.md).

func rpingCommands() []command {
	return []command{{name: "rping", short: "RDMA ping through rdma_cm (librdmacm's rping)", run: runRping}}
}

// rping's message format and its smallest buffer: the format and the
// widest ping number, as RPING_MIN_BUFSIZE is.
const (
	rpingMsgFmt  = "rdma-ping-%d: "
	rpingMinSize = 26
	rpingInfoLen = 16
	// rpingEventWait bounds the wait for one CM event: a REQ's retries
	// under rdma_cm's timers (15 of 4.3 s) end within it. A server
	// waits for its client's connect request as long as rping's does,
	// for ever: a server started with 56 others for the rxe interop
	// suite's clients, which come in turn, gave up before its client
	// came, 295 s into a loaded phase.
	rpingEventWait = 90 * time.Second
)

type rpingOpts struct {
	server, verbose, validate, debug, quiet bool
	persistent                              bool
	addr, src                               string
	port, count, size                       int
}

func runRping(args []string, stdout, stderr io.Writer) int {
	var o rpingOpts
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := fs.Bool("c", false, "client")
	fs.BoolVar(&o.server, "s", false, "server")
	fs.StringVar(&o.addr, "a", "", "address: the server's to connect to, or the one the server binds")
	fs.StringVar(&o.src, "I", "", "source address to bind to (client)")
	fs.IntVar(&o.port, "p", 7174, "port")
	fs.IntVar(&o.count, "C", 0, "ping count (0: forever)")
	fs.IntVar(&o.size, "S", 64, "ping data size")
	fs.BoolVar(&o.verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&o.validate, "V", false, "validate ping data")
	fs.BoolVar(&o.debug, "d", false, "debug printfs")
	fs.BoolVar(&o.quiet, "q", false, "quiet")
	fs.BoolVar(&o.persistent, "P", false, "persistent server: serve client after client, several at once, until killed")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if o.server == *client || o.addr == "" && *client {
		fmt.Fprintln(stderr, "rping: one of -s or -c, and -a for the client")
		return 2
	}
	if o.size < rpingMinSize || o.size > 1<<20 || o.port < 0 || o.port > 0xffff || o.count < 0 {
		fmt.Fprintf(stderr, "rping: invalid size %d (min %d, max %d), port or count\n", o.size, rpingMinSize, 1<<20)
		return 2
	}
	if o.persistent && !o.server {
		fmt.Fprintln(stderr, "rping: -P is a server's (-s)")
		return 2
	}
	// A persistent server's connections print from goroutines of their
	// own: one line at a time.
	stdout = &syncWriter{w: stdout}
	r := &rping{o: o, stdout: stdout, stderr: stderr}
	var err error
	if o.server {
		err = r.runServer()
	} else {
		err = r.runClient()
	}
	if err != nil {
		fmt.Fprintf(stderr, "rping: %v\n", err)
		return 1
	}
	return 0
}

// rping is one side's state: the CM, the buffers (one MR: receive and
// send of 16 bytes, then rdma_buf, then start_buf) and the completions.
type rping struct {
	o              rpingOpts
	stdout, stderr io.Writer

	ch     *rdmacm.EventChannel
	events chan *rdmacm.Event
	id     *rdmacm.ID
	cq     *verbs.CQ
	mr     *verbs.MR
	pd     *verbs.PD
	buf    []byte                 // the MR's memory
	seen   map[verbs.WCOpcode]int // completions that came before they were awaited
}

const (
	rpRecv = 0
	rpSend = rpingInfoLen
	rpRDMA = 2 * rpingInfoLen
)

func (r *rping) debugf(format string, a ...any) {
	if r.o.debug {
		fmt.Fprintf(r.stdout, format+"\n", a...)
	}
}

func (r *rping) open() error {
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		return err
	}
	r.ch, r.events, r.seen = ch, make(chan *rdmacm.Event, 16), make(map[verbs.WCOpcode]int)
	go func() {
		for {
			e, err := ch.GetEvent(context.Background())
			if err != nil {
				close(r.events)
				return
			}
			r.debugf("cma_event type %s cma_id %p (%s)", e.Event, e.ID, map[bool]string{true: "parent", false: "child"}[e.ListenID == nil])
			r.events <- e
		}
	}()
	return nil
}

func (r *rping) event(want rdmacm.EventType) (*rdmacm.Event, error) {
	var limit <-chan time.Time
	if want != rdmacm.EventConnectRequest {
		limit = time.After(rpingEventWait)
	}
	select {
	case e, ok := <-r.events:
		if !ok {
			return nil, errors.New("event channel closed")
		}
		if e.Event != want {
			if e.Status != nil {
				return nil, fmt.Errorf("%v: %v", e.Event, e.Status)
			}
			return nil, fmt.Errorf("unexpected event %v, waiting for %v", e.Event, want)
		}
		return e, nil
	case <-limit:
		return nil, fmt.Errorf("no %v in %v", want, rpingEventWait)
	}
}

// setup makes the QP's resources on id's device and posts the first
// receive, before the connection as rping does.
func (r *rping) setup(id *rdmacm.ID) error {
	r.id = id
	pd, err := id.Verbs.AllocPD()
	if err != nil {
		return err
	}
	buf, err := id.Verbs.Alloc(rpRDMA + 2*r.o.size)
	if err != nil {
		return err
	}
	if r.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		return err
	}
	if r.cq, err = id.Verbs.CreateCQ(16, nil); err != nil {
		return err
	}
	if err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	r.pd, r.buf = pd, buf
	r.debugf("created pd %p, cq %p, qp %d", pd, r.cq, id.QP.QPN)
	return r.postRecv()
}

// free destroys what setup made, the QP first (rping's free_qp and
// free_buffers): a persistent server makes them once per client.
func (r *rping) free() {
	ctx := r.id.Verbs
	r.id.QP.Destroy()
	r.mr.Dereg()
	r.cq.Destroy()
	r.pd.Dealloc()
	ctx.Free(r.buf)
}

func (r *rping) postRecv() error {
	return r.id.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{r.mr.SGE(rpRecv, rpingInfoLen)}}})
}

func (r *rping) rdmaBuf() []byte  { return r.mr.Buf[rpRDMA : rpRDMA+r.o.size] }
func (r *rping) startBuf() []byte { return r.mr.Buf[rpRDMA+r.o.size : rpRDMA+2*r.o.size] }

// post posts one WR and waits for its completion.
func (r *rping) post(wr verbs.SendWR, want verbs.WCOpcode) error {
	wr.Flags |= verbs.SendSignaled
	if err := r.id.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	return r.await(want, nil)
}

// sendInfo SENDs {addr, rkey, len} of the buffer at off.
func (r *rping) sendInfo(off, n int) error {
	b := r.mr.Buf[rpSend : rpSend+rpingInfoLen]
	binary.BigEndian.PutUint64(b, r.mr.Addr+uint64(off))
	binary.BigEndian.PutUint32(b[8:], r.mr.RKey)
	binary.BigEndian.PutUint32(b[12:], uint32(n))
	return r.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{r.mr.SGE(rpSend, rpingInfoLen)}}, verbs.WCSend)
}

// recvInfo waits for the peer's SEND and reposts the receive; stop, if
// set, ends the wait with errDisconnected when it yields DISCONNECTED.
func (r *rping) recvInfo(stop chan *rdmacm.Event) (addr uint64, rkey, n uint32, err error) {
	if err := r.await(verbs.WCRecv, stop); err != nil {
		return 0, 0, 0, err
	}
	b := r.mr.Buf[rpRecv : rpRecv+rpingInfoLen]
	addr, rkey, n = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	return addr, rkey, n, r.postRecv()
}

var errDisconnected = errors.New("disconnected")

// await polls the CQ for a completion of kind want.
func (r *rping) await(want verbs.WCOpcode, stop chan *rdmacm.Event) error {
	wcs := make([]verbs.WC, 4)
	for deadline := time.Now().Add(rpingEventWait); ; {
		if r.seen[want] > 0 {
			r.seen[want]--
			return nil
		}
		n := r.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status == verbs.WCWRFlushErr {
				// The connection went (DREQ): the QP is in ERR and its
				// receive flushed; rping takes it silently too.
				return errDisconnected
			}
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("cq completion failed status %d (%v)", int(wc.Status), wc.Status)
			}
			r.seen[wc.Opcode]++
		}
		if n > 0 {
			continue
		}
		if stop != nil {
			select {
			case e, ok := <-stop:
				if !ok || e.Event == rdmacm.EventDisconnected {
					return errDisconnected
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %v completion in %v", want, rpingEventWait)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func (r *rping) runServer() error {
	if err := r.open(); err != nil {
		return err
	}
	defer r.ch.Destroy()
	listen := r.ch.CreateID()
	defer listen.Destroy()
	addr := netip.IPv4Unspecified()
	if r.o.addr != "" {
		a, err := netip.ParseAddr(r.o.addr)
		if err != nil {
			return fmt.Errorf("-a %q: %w", r.o.addr, err)
		}
		addr = a
	}
	if err := listen.BindAddr(netip.AddrPortFrom(addr, uint16(r.o.port))); err != nil {
		return err
	}
	if err := listen.Listen(); err != nil {
		return err
	}
	r.debugf("rdma_listen")
	if r.o.persistent {
		return r.runPersistent()
	}
	e, err := r.event(rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	return r.serveConn(e.ID)
}

// rpingMaxConns bounds a persistent server's connections at once; a
// request beyond it is rejected. rping has no bound; each connection
// here holds a goroutine, a QP, a CQ and an MR of 2*size+32 bytes until
// its client goes (or 90 s without a ping), and 256 of 1 MiB pings are
// half a GiB.
const rpingMaxConns = 256

// runPersistent is rping -P: every CONNECT_REQUEST gets a connection of
// its own, served beside the others, its resources freed when its
// client disconnects; the server runs until killed (rping's
// rping_run_persistent_server). Events are handed to the connection
// whose ID they name.
func (r *rping) runPersistent() error {
	var mu sync.Mutex
	conns := map[*rdmacm.ID]chan *rdmacm.Event{}
	for e := range r.events {
		if e.Event != rdmacm.EventConnectRequest {
			mu.Lock()
			ch := conns[e.ID]
			mu.Unlock()
			if ch != nil {
				// The connection reads its events as they come; one that
				// stopped reading (ended) has left the map.
				select {
				case ch <- e:
				default:
					fmt.Fprintf(r.stderr, "rping: event %v of a connection that reads none dropped\n", e.Event)
				}
			}
			continue
		}
		mu.Lock()
		full := len(conns) >= rpingMaxConns
		var events chan *rdmacm.Event
		if !full {
			events = make(chan *rdmacm.Event, 16)
			conns[e.ID] = events
		}
		mu.Unlock()
		if full {
			fmt.Fprintf(r.stderr, "rping: %d connections already: request from %v rejected\n", rpingMaxConns, e.ID.RemoteAddr())
			e.ID.Reject(nil)
			e.ID.Destroy()
			continue
		}
		c := &rping{o: r.o, stdout: r.stdout, stderr: r.stderr, ch: r.ch, events: events, seen: map[verbs.WCOpcode]int{}}
		go func(id *rdmacm.ID) {
			if err := c.serveConn(id); err != nil {
				fmt.Fprintf(r.stderr, "rping: connection from %v: %v\n", id.RemoteAddr(), err)
			}
			mu.Lock()
			delete(conns, id)
			mu.Unlock()
		}(e.ID)
	}
	return errors.New("event channel closed")
}

// serveConn accepts the connection child asked for and serves its pings
// until the client disconnects; everything made for it goes with it.
func (r *rping) serveConn(child *rdmacm.ID) error {
	defer child.Destroy()
	if err := r.setup(child); err != nil {
		return err
	}
	defer r.free()
	if err := child.Accept(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := r.event(rdmacm.EventEstablished); err != nil {
		return err
	}
	r.debugf("accepting client connection request")
	for {
		err := r.serveOne()
		if errors.Is(err, errDisconnected) {
			// The client disconnected, or died and its daemon sent the
			// DREQ: rping's server ends there, with status 0.
			r.debugf("cq_thread: disconnected")
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// serveOne is one ping on the server: READ the client's buffer, go-ahead,
// WRITE it back to the client's sink, go-ahead.
func (r *rping) serveOne() error {
	raddr, rkey, n, err := r.recvInfo(r.events)
	if err != nil {
		return err
	}
	n = min(n, uint32(r.o.size))
	r.debugf("received rkey %x addr %x len %d from peer", rkey, raddr, n)
	if err := r.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{r.mr.SGE(rpRDMA, int(n))},
		RemoteAddr: raddr, RKey: rkey}, verbs.WCRDMARead); err != nil {
		return err
	}
	if r.o.verbose {
		fmt.Fprintf(r.stdout, "server ping data: %s\n", cstr(r.rdmaBuf()))
	}
	if err := r.sendInfo(rpRDMA, r.o.size); err != nil {
		return err
	}
	if raddr, rkey, _, err = r.recvInfo(r.events); err != nil {
		return err
	}
	wlen := len(cstr(r.rdmaBuf())) + 1
	if err := r.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{r.mr.SGE(rpRDMA, min(wlen, r.o.size))},
		RemoteAddr: raddr, RKey: rkey}, verbs.WCRDMAWrite); err != nil {
		return err
	}
	return r.sendInfo(rpRDMA, r.o.size)
}

func (r *rping) runClient() error {
	dst, err := netip.ParseAddr(r.o.addr)
	if err != nil {
		return fmt.Errorf("-a %q: %w", r.o.addr, err)
	}
	var src netip.Addr
	if r.o.src != "" {
		if src, err = netip.ParseAddr(r.o.src); err != nil {
			return fmt.Errorf("-I %q: %w", r.o.src, err)
		}
	}
	if err := r.open(); err != nil {
		return err
	}
	defer r.ch.Destroy()
	id := r.ch.CreateID()
	defer id.Destroy()
	if err := id.ResolveAddr(src, netip.AddrPortFrom(dst, uint16(r.o.port))); err != nil {
		return err
	}
	if _, err := r.event(rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(); err != nil {
		return err
	}
	if _, err := r.event(rdmacm.EventRouteResolved); err != nil {
		return err
	}
	if err := r.setup(id); err != nil {
		return err
	}
	defer r.id.QP.Destroy()
	if err := id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	if e, err := r.event(rdmacm.EventEstablished); err != nil {
		if e == nil {
			return fmt.Errorf("connect error: %w", err)
		}
		return err
	}
	r.debugf("rdma_connect successful")
	start := byte('A')
	for ping := 0; r.o.count == 0 || ping < r.o.count; ping++ {
		sb := r.startBuf()
		cc := copy(sb, fmt.Sprintf(rpingMsgFmt, ping))
		for i, c := cc, start; i < len(sb); i++ {
			sb[i] = c
			if c++; c > 'z' {
				c = 'A'
			}
		}
		if start++; start > 'z' {
			start = 'A'
		}
		sb[len(sb)-1] = 0
		if err := r.sendInfo(rpRDMA+r.o.size, r.o.size); err != nil {
			return err
		}
		if _, _, _, err := r.recvInfo(nil); err != nil {
			return err
		}
		if err := r.sendInfo(rpRDMA, r.o.size); err != nil {
			return err
		}
		if _, _, _, err := r.recvInfo(nil); err != nil {
			return err
		}
		if r.o.validate && !bytes.Equal(r.startBuf(), r.rdmaBuf()) {
			return errors.New("data mismatch!")
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "ping data: %s\n", cstr(r.rdmaBuf()))
		}
		clear(r.rdmaBuf())
	}
	if err := id.Disconnect(); err != nil {
		return err
	}
	_, err = r.event(rdmacm.EventDisconnected)
	return err
}

// syncWriter writes each Write whole, for output written by several
// goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
