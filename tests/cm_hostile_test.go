package tests

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rdmacm"
	rnicdev "github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/trace"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/bth"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/mad"
)

// cmEnd is one end of a test connection: its QP and a registered buffer
// whose first half it sends from and second half it receives into.
type cmEnd struct {
	id  *rdmacm.ID
	cq  *verbs.CQ
	mr  *verbs.MR
	mem []byte
}

const cmMsgLen = 4096

func newCMEnd(t *testing.T, s *cmSide, id *rdmacm.ID) *cmEnd {
	t.Helper()
	s.qp(id)
	e := &cmEnd{id: id, cq: s.cq, mem: must[[]byte](t)(s.ctx.Alloc(2 * cmMsgLen))}
	e.mr = must[*verbs.MR](t)(s.pd.RegMR(e.mem, verbs.AccessLocalWrite))
	t.Cleanup(func() { e.mr.Dereg() })
	return e
}

// cmSend sends cmMsgLen fresh random bytes from one end to the other and
// checks them byte for byte on arrival, with both completions.
func cmSend(t *testing.T, from, to *cmEnd) {
	t.Helper()
	rand.Read(from.mem[:cmMsgLen])
	clear(to.mem[cmMsgLen:])
	if err := to.id.QP.PostRecv([]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{to.mr.SGE(cmMsgLen, cmMsgLen)}}}); err != nil {
		t.Fatal(err)
	}
	if err := from.id.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{from.mr.SGE(0, cmMsgLen)}}}); err != nil {
		t.Fatal(err)
	}
	for _, wc := range append(pollN(t, from.cq, 1), pollN(t, to.cq, 1)...) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
		}
	}
	if !bytes.Equal(from.mem[:cmMsgLen], to.mem[cmMsgLen:]) {
		t.Fatal("the bytes received are not those sent")
	}
}

// cmConnect connects cli to the listener at dst (served by srv) through
// rdma_cm and returns both ends.
func cmConnect(t *testing.T, srv, cli *cmSide, src netip.Addr, dst netip.AddrPort) (server, client *cmEnd) {
	t.Helper()
	param := &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	id := cli.ch.CreateID()
	if err := id.ResolveAddr(src, dst); err != nil {
		t.Fatal(err)
	}
	cli.event(0, rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	cli.event(0, rdmacm.EventRouteResolved)
	client = newCMEnd(t, cli, id)
	if err := id.Connect(param); err != nil {
		t.Fatal(err)
	}
	conn := srv.event(0, rdmacm.EventConnectRequest).ID
	server = newCMEnd(t, srv, conn)
	if err := conn.Accept(param); err != nil {
		t.Fatal(err)
	}
	cli.event(0, rdmacm.EventEstablished)
	srv.event(0, rdmacm.EventEstablished)
	return server, client
}

// cmListen makes s listen on a fresh port of addr with backlog.
func cmListen(t *testing.T, s *cmSide, addr netip.Addr, backlog int) (*rdmacm.ID, netip.AddrPort) {
	t.Helper()
	port, _ := strconv.Atoi(freePort(t))
	dst := netip.AddrPortFrom(addr, uint16(port))
	l := s.ch.CreateID()
	if err := l.BindAddr(dst); err != nil {
		t.Fatal(err)
	}
	if err := l.ListenBacklog(backlog); err != nil {
		t.Fatal(err)
	}
	return l, dst
}

// madSender sends CM MADs to QP1 of rnicd ports as RoCEv2 UD SENDs from
// QP1 with the GSI Q_Key, ICRC sealed, from address from: a host's own
// address, or another host's (the port binds another UDP port than 4791
// there, so a daemon may own 4791 on it).
type madSender struct {
	t    *testing.T
	port ibudp.Port
}

func newMADSender(t *testing.T, from netip.Addr) *madSender {
	t.Helper()
	p, err := ibudp.Open(ibudp.Config{Addr: from, Port: uint16(looptest.Port(t)), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &madSender{t: t, port: p}
}

func (s *madSender) send(to netip.Addr, mads ...[]byte) {
	s.t.Helper()
	bufs := make([]*ibudp.Buf, len(mads))
	for i, m := range mads {
		b := ibudp.NewBuf()
		p, err := bth.Build(b.Room(), bth.UDSendOnly, mad.MADLen)
		if err != nil {
			s.t.Fatal(err)
		}
		p.BTH().Encode(&bth.BTHFields{Opcode: bth.UDSendOnly, PKey: bth.DefaultPKey, DestQP: rnicdev.GSIQPN})
		p.DETH().Encode(rnicdev.GSIQKey, rnicdev.GSIQPN)
		copy(p.Payload(), m)
		b.N, b.Peer = p.Len(), to
		bufs[i] = b
	}
	if err := s.port.Send(bufs); err != nil {
		s.t.Fatal(err)
	}
}

func cmMAD(attr mad.AttrID, tid uint64, enc func(d []byte)) []byte {
	b := make([]byte, mad.MADLen)
	m := mad.MAD(b)
	h := mad.CMHeader(attr, tid)
	m.EncodeHeader(&h)
	enc(m.Data())
	return b
}

// commID reads a daemon's trace at path for the local comm ID of the
// connection that drives QP qpn (the CM's events carry it as WRID).
func commID(t *testing.T, path string, qpn uint32) uint32 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var id uint32
		trace.ReadJSON(f, func(e *trace.Event) error {
			if e.Module == trace.ModCM && e.QPN == qpn && e.WRID != 0 {
				id = uint32(e.WRID)
			}
			return nil
		})
		f.Close()
		if id != 0 {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no CM event of QP %d", path, qpn)
		}
	}
}

// waitCounters polls a daemon's counters until ok says so.
func waitCounters(t *testing.T, c *verbs.Context, what string, ok func(m map[string]uint64) bool) map[string]uint64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := must[map[string]uint64](t)(c.Counters())
		if ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; counters: %v", what, cmCounterSubset(m))
		}
	}
}

func cmCounterSubset(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if strings.HasPrefix(k, "cm_") {
			out[k] = v
		}
	}
	return out
}

// A host on the network that is neither end of a connection sends what
// Linux's CM would act on: DREQs with comm IDs 0 and 1 (a fresh daemon's
// first ID was 1, and a remote comm ID of 0 skipped the peer's check),
// with a guessed ID, and with both of the connection's real comm IDs
// (read from the daemons' traces) from its own address; a REJ and an MRA
// with both; a REQ carrying the client's QPN and CA GUID (a stale
// connection, IBTA 12.9.8.3.1). The same DREQs also come with the
// client's address forged (its address, another UDP port). None changes
// the connection: it moves data both ways byte for byte, rnic res shows
// it connected on both sides, and each MAD is counted by what gave it
// away (cm_rx_dropped_comm_id, cm_rx_dropped_source,
// cm_rx_dropped_stale). Last, the one DREQ that names both comm IDs from
// the client's address ends it, as it must: the forgeries reached the CM.
func TestCMForgedMADs(t *testing.T) {
	dir := t.TempDir()
	trA, trB := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	a, b := daemonsWith(t, dir, []string{"-trace", trA}, []string{"-trace", trB})
	srv, cli := newCMSide(t, "rnicA"), newCMSide(t, "rnicB")
	listen, dst := cmListen(t, srv, a.addr, 0)
	port := dst.Port()
	s, c := cmConnect(t, srv, cli, b.addr, dst)
	cmSend(t, c, s)
	cmSend(t, s, c)
	sQPN, cQPN := s.id.QP.QPN, c.id.QP.QPN
	sID, cID := commID(t, trA, sQPN), commID(t, trB, cQPN)
	t.Logf("server QP %d comm ID %#x, client QP %d comm ID %#x", sQPN, sID, cQPN, cID)
	ctxA := open(t, "rnicA")
	before := must[map[string]uint64](t)(ctxA.Counters())

	dreq := func(local, remote uint32) []byte {
		return cmMAD(mad.AttrDREQ, 0x55, func(d []byte) {
			mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: local, RemoteCommID: remote, RemoteQPN: sQPN})
		})
	}
	var guess [4]byte
	rand.Read(guess[:])
	guessed := uint32(guess[0])<<24 | uint32(guess[1])<<16 | uint32(guess[2])<<8 | uint32(guess[3])
	caGUID := func(a netip.Addr) uint64 { // verbs.NodeGUID's rule, written out: 02:00:00:00 and the IPv4 address
		v := a.As4()
		return 0x02<<56 | uint64(v[0])<<24 | uint64(v[1])<<16 | uint64(v[2])<<8 | uint64(v[3])
	}
	x := netip.MustParseAddr(ownAddr(t))
	stale := mad.REQFields{LocalCommID: guessed, ServiceID: mad.ServiceID(mad.PSTCP, port), LocalCAGUID: caGUID(b.addr),
		LocalQPN: cQPN, PathMTU: 3, LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20, MaxCMRetries: 15,
		PrimaryLocalGID: mad.GIDFromAddr(x), PrimaryRemoteGID: mad.GIDFromAddr(a.addr)}
	fromX, fromB := newMADSender(t, x), newMADSender(t, b.addr)
	// From a host that is neither end: 4 DREQs, a REJ, an MRA, the stale REQ.
	fromX.send(a.addr,
		dreq(0, 1), dreq(0, guessed), dreq(guessed, sID), dreq(cID, sID),
		cmMAD(mad.AttrREJ, 0x55, func(d []byte) {
			mad.REJ(d).Encode(&mad.REJFields{LocalCommID: cID, RemoteCommID: sID, MessageRejected: mad.MsgKindOther, Reason: mad.RejConsumerDefined})
		}),
		cmMAD(mad.AttrMRA, 0x55, func(d []byte) {
			mad.MRA(d).Encode(&mad.MRAFields{LocalCommID: cID, RemoteCommID: sID, MessageMRAed: mad.MsgKindREP, ServiceTimeout: 31})
		}),
		cmMAD(mad.AttrREQ, 0x56, func(d []byte) { mad.REQ(d).Encode(&stale) }))
	// With the client's address: its comm ID unknown (0), or guessed.
	fromB.send(a.addr, dreq(0, 1), dreq(0, sID), dreq(guessed, sID))
	m := waitCounters(t, ctxA, "the forged MADs", func(m map[string]uint64) bool {
		return m["cm_rx_msgs_dreq"]-before["cm_rx_msgs_dreq"] == 7 && m["cm_rx_msgs_req"]-before["cm_rx_msgs_req"] == 1 &&
			m["cm_rx_msgs_rej"]-before["cm_rx_msgs_rej"] == 1 && m["cm_rx_msgs_mra"]-before["cm_rx_msgs_mra"] == 1
	})
	for k, want := range map[string]uint64{
		// dreq(0, guessed), dreq(0, 1) twice: no such connection (a
		// guessed 32-bit ID that hits one is the 1 in 2^32 the check
		// leaves); dreq(guessed, sID) twice and dreq(0, sID): the
		// peer's comm ID is not the connection's.
		"cm_rx_dropped_comm_id": 3,
		// dreq(cID, sID), the REJ and the MRA from x.
		"cm_rx_dropped_source": 3,
		"cm_rx_dropped_stale":  1,
		"cm_rx_stale_conn":     0,
		"cm_rx_dropped":        10,
		// Every DREQ that names no connection of its sender is answered
		// with a DREP to that sender, as cm_dreq_handler's cm_issue_drep.
		"cm_tx_msgs_drep": 7,
		"cm_tx_msgs_rej":  0,
		"cm_tx_msgs_dreq": 0,
	} {
		if got := m[k] - before[k]; got != want {
			t.Errorf("rnicA %s +%d, want +%d", k, got, want)
		}
	}
	// The connection is untouched: data both ways, CONNECT on both sides.
	for range 3 {
		cmSend(t, c, s)
		cmSend(t, s, c)
	}
	bin := filepath.Join(binDir, "rnic")
	for _, dev := range []string{"rnicA", "rnicB"} {
		if out := runTool(t, bin, "res", "-d", dev, "show", "cm_id"); !strings.Contains(out, "state CONNECT") {
			t.Errorf("%s's CM IDs:\n%s", dev, out)
		}
	}
	// The client's own DREQ (both comm IDs, from its address) is what
	// disconnects the server.
	fromB.send(a.addr, dreq(cID, sID))
	srv.event(0, rdmacm.EventDisconnected)
	listen.Destroy()
}

// 6,000 REQs from one host to one listener, whose application never
// fetches them (rdma_listen backlog 128), while another client of the
// same daemon listens on another port: the flood's connect requests
// queue up to the backlog, each charged to the flooded client; past it
// they are dropped without an answer (cm_listen_drops), and each that
// was queued is freed with a REJ "timeout" once its sender's wait is
// over (cm_req_timeouts). Meanwhile connections to the other listener
// come and go normally, moving data byte for byte. Afterwards the daemon
// holds no state of the flood: no pending REQ, no connection, nothing
// in rnic res but the listeners.
func TestCMREQFlood(t *testing.T) {
	const flood, backlog, batch = 6000, 128, 200
	a, b := daemons(t)
	ctxA := open(t, "rnicA")
	victim, other, cli := newCMSide(t, "rnicA"), newCMSide(t, "rnicA"), newCMSide(t, "rnicB")
	vl, vdst := cmListen(t, victim, a.addr, backlog)
	ol, odst := cmListen(t, other, a.addr, 0)
	before := must[map[string]uint64](t)(ctxA.Counters())

	// The flood: REQs whose sender says it waits one try (max CM retries
	// 0, response time code 0), so each queued one is freed two packet
	// lifetimes (2.1 s) after it came. Sent in batches, each waited for,
	// so that every one reaches the CM whatever the host's load.
	x := netip.MustParseAddr(ownAddr(t))
	attacker := newMADSender(t, x)
	var peak uint64
	connects := 0
	for i := 0; i < flood; i += batch {
		mads := make([][]byte, 0, batch)
		for j := i; j < i+batch; j++ {
			f := mad.REQFields{LocalCommID: uint32(j + 1), ServiceID: mad.ServiceID(mad.PSTCP, vdst.Port()),
				LocalCAGUID: 0x66, LocalQPN: uint32(j + 100), PathMTU: 3,
				PrimaryLocalGID: mad.GIDFromAddr(x), PrimaryRemoteGID: mad.GIDFromAddr(a.addr)}
			mads = append(mads, cmMAD(mad.AttrREQ, uint64(j), func(d []byte) { mad.REQ(d).Encode(&f) }))
		}
		attacker.send(a.addr, mads...)
		waitCounters(t, ctxA, fmt.Sprintf("REQ %d of the flood", i+batch), func(m map[string]uint64) bool {
			peak = max(peak, m["cm_pending"])
			return m["cm_rx_msgs_req"]-before["cm_rx_msgs_req"] >= uint64(i+batch+connects)
		})
		if (i/batch)%6 != 3 {
			continue
		}
		// Meanwhile, with the flooded listener's backlog full: a
		// connection to the other listener, moving data both ways.
		s, c := cmConnect(t, other, cli, b.addr, odst)
		connects++
		cmSend(t, c, s)
		cmSend(t, s, c)
		if err := c.id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		cli.event(i, rdmacm.EventDisconnected)
		other.event(i, rdmacm.EventDisconnected)
		for _, e := range []*cmEnd{s, c} {
			e.id.QP.Destroy()
			e.id.Destroy()
		}
	}
	// The flood's REQs all came; each was either dropped at the backlog
	// or queued and then timed out: none is left.
	m := waitCounters(t, ctxA, "the flood's state to go", func(m map[string]uint64) bool {
		peak = max(peak, m["cm_pending"])
		return m["cm_pending"] == 0 && m["cm_ids"] == 0
	})
	drops, timeouts := m["cm_listen_drops"]-before["cm_listen_drops"], m["cm_req_timeouts"]-before["cm_req_timeouts"]
	t.Logf("flood of %d: %d dropped at the backlog, %d queued and timed out; at most %d pending at once", flood, drops, timeouts, peak)
	if drops+timeouts != flood || drops == 0 || peak > backlog {
		t.Errorf("%d dropped + %d timed out, want %d in all; %d pending at most, the backlog is %d", drops, timeouts, flood, peak, backlog)
	}
	if got := m["cm_tx_msgs_rej"] - before["cm_tx_msgs_rej"]; got != timeouts {
		t.Errorf("%d REJs sent, want one per timeout (%d)", got, timeouts)
	}
	if connects != 5 {
		t.Errorf("%d connects during the flood, want 5", connects)
	}
	// Nothing of the flood in the victim's objects or in rnic res: the
	// two listeners only.
	bin := filepath.Join(binDir, "rnic")
	if out := strings.TrimSpace(runTool(t, bin, "res", "-d", "rnicA", "show", "cm_id")); strings.Count(out, "\n") != 1 ||
		strings.Count(out, "state LISTEN") != 2 {
		t.Errorf("rnic res show cm_id after the flood:\n%s", out)
	}
	// The flooded listener still takes a connection once its client
	// fetches.
	s, c := cmConnect(t, victim, cli, b.addr, vdst)
	cmSend(t, c, s)
	vl.Destroy()
	ol.Destroy()
}

// QP1 takes a burst of 500 MADs sent in one go (one sendmmsg from one
// host) while the CM agent is busy with them: every REQ reaches the CM
// (cm_rx_msgs_req) and is answered (REJ 8, no listener), with no
// datagram dropped for want of a receive WQE and no answer refused for
// want of a send slot. With QP1's former 64 receives most of such a burst
// was dropped.
func TestCMQP1Burst(t *testing.T) {
	const burst = 500
	a, _ := daemons(t)
	ctxA := open(t, "rnicA")
	x := netip.MustParseAddr(ownAddr(t))
	sender := newMADSender(t, x)
	sid := mad.ServiceID(mad.PSTCP, uint16(looptest.Port(t))) // nobody listens
	mads := make([][]byte, burst)
	for i := range mads {
		f := mad.REQFields{LocalCommID: uint32(i + 1), ServiceID: sid, LocalCAGUID: 0x66, LocalQPN: uint32(i + 100), PathMTU: 3,
			PrimaryLocalGID: mad.GIDFromAddr(x), PrimaryRemoteGID: mad.GIDFromAddr(a.addr)}
		mads[i] = cmMAD(mad.AttrREQ, uint64(i), func(d []byte) { mad.REQ(d).Encode(&f) })
	}
	before := must[map[string]uint64](t)(ctxA.Counters())
	sender.send(a.addr, mads...)
	m := waitCounters(t, ctxA, "the burst", func(m map[string]uint64) bool {
		return m["cm_rx_msgs_req"]-before["cm_rx_msgs_req"]+m["drop_no_recv_wqe"]-before["drop_no_recv_wqe"] == burst
	})
	for k, want := range map[string]uint64{"cm_rx_msgs_req": burst, "drop_no_recv_wqe": 0, "cm_tx_msgs_rej": burst, "cm_tx_errors": 0, "cm_ids": 0} {
		if got := m[k] - before[k]; got != want {
			t.Errorf("%s +%d, want +%d", k, got, want)
		}
	}
}
