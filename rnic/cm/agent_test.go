package cm_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/internal/debtest"
	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/rnic"
	"github.com/rnicd/rnicd/rnic/cm"
	"github.com/rnicd/rnicd/wire/fault"
	"github.com/rnicd/rnicd/wire/ibudp"
	"github.com/rnicd/rnicd/wire/mad"
	"github.com/rnicd/rnicd/wire/pcap"
)

// The CM over real QP1s: two in-process devices on loopback, each with a
// CM agent on its GSI, connect application RC QPs through REQ/REP/RTU,
// move data over them, and disconnect; a connect to a port nobody listens
// on is refused; a lost REQ is retried.

type peer struct {
	t      testing.TB
	dev    *rnic.Device
	faulty *fault.Injector
	pd     rnic.PD
	cq     *rnic.CQ
	mem    []byte
	mr     *rnic.MR
	agent  *cm.Agent
	events chan cm.Event

	mu  sync.Mutex
	qps map[uint32]*rnic.QP
}

// ModifyQP is the CM's QPModifier: the device's ModifyQP on a QP the test made.
func (p *peer) ModifyQP(qpn uint32, attr *ib.QPAttr, mask ib.AttrMask) error {
	p.mu.Lock()
	qp := p.qps[qpn]
	p.mu.Unlock()
	if qp == nil {
		return errors.New("no such QP")
	}
	return p.dev.ModifyQP(qp, attr, mask)
}

const memVA = 0x10000

func newPeer(t testing.TB, addr string, guid uint64) *peer {
	// Short CM timers, so a lost MAD costs milliseconds: 4.096 us * 2^12
	// = 16.8 ms to answer, packet lifetime 4.096 us * 2^10.
	return newPeerTimers(t, addr, guid, 12, 10)
}

// newPeerTimers is newPeer with the CM's response timeout and packet
// lifetime codes.
func newPeerTimers(t testing.TB, addr string, guid uint64, respTimeout, lifeTime uint8) *peer {
	port, err := ibudp.Open(ibudp.Config{Addr: netip.MustParseAddr(addr), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, faulty: fault.New(port, 1), events: make(chan cm.Event, 16), qps: map[uint32]*rnic.QP{}}
	if p.dev, err = rnic.Open(rnic.Config{Port: p.faulty, Name: "cm" + addr}); err != nil {
		t.Fatal(err)
	}
	p.pd = p.dev.AllocPD()
	p.cq, _ = p.dev.CreateCQ(64)
	p.mem = make([]byte, 1<<16)
	if p.mr, err = p.dev.RegMR(p.pd, p.mem, memVA, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	p.agent, err = cm.NewAgent(p.dev.GSI(), cm.Config{QP: p, CAGUID: guid, CMResponseTimeout: respTimeout, PacketLifeTime: lifeTime,
		Event: func(e cm.Event) { p.events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.agent.Run(done) }()
	t.Cleanup(func() { close(done); wg.Wait(); p.dev.Close() })
	return p
}

func (p *peer) addr() netip.Addr { return p.dev.QueryPort().Addr }

func (p *peer) createQP() *rnic.QP {
	qp, err := p.dev.CreateQP(rnic.QPInitAttr{PD: p.pd, Type: ib.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Caps: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.qps[qp.QPN] = qp
	p.mu.Unlock()
	return qp
}

func (p *peer) event(want cm.EventType) cm.Event {
	p.t.Helper()
	select {
	case e := <-p.events:
		if e.Type != want {
			p.t.Fatalf("event %v (%v), want %v", e.Type, e.Err, want)
		}
		return e
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no %v", want)
	}
	return cm.Event{}
}

func (p *peer) poll() ib.WC {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var wc [1]ib.WC
	for time.Now().Before(deadline) {
		if p.cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	p.t.Fatal("no completion")
	return ib.WC{}
}

var service = mad.ServiceID(mad.PSTCP, 7174)

func (p *peer) connect(to *peer, qp *rnic.QP) *cm.ID {
	var id *cm.ID
	var err error
	p.agent.Do(func(c *cm.CM) {
		id, err = c.Connect(cm.ConnectParam{ServiceID: service, QPN: qp.QPN, Dest: cm.Dest{GID: mad.GIDFromAddr(to.addr()), PKey: 0xffff},
			LocalGID: mad.GIDFromAddr(p.addr()), StartingPSN: 0x173280, PathMTU: ib.MTU1024,
			ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return id
}

func TestAgentConnectsRealQPs(t *testing.T) {
	a, b := newPeer(t, looptest.Get(t).String(), 0xa), newPeer(t, looptest.Get(t).String(), 0xb)
	b.agent.Do(func(c *cm.CM) {
		if _, err := c.Listen(service, nil); err != nil {
			t.Fatal(err)
		}
	})
	qa, qb := a.createQP(), b.createQP()
	a.connect(b, qa)
	cr := b.event(cm.EventConnectRequest)
	if cr.Remote.QPN != qa.QPN || cr.Remote.StartingPSN != 0x173280 || cr.Remote.GID.Addr() != a.addr() {
		t.Fatalf("ConnectRequest %+v", cr.Remote)
	}
	var err error
	b.agent.Do(func(*cm.CM) {
		err = cr.ID.Accept(cm.AcceptParam{QPN: qb.QPN, StartingPSN: 0x96ea7b, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
	})
	if err != nil {
		t.Fatal(err)
	}
	ea := a.event(cm.EventEstablished)
	b.event(cm.EventEstablished)
	if ea.Remote.QPN != qb.QPN {
		t.Errorf("a sees remote QPN %#x, want %#x", ea.Remote.QPN, qb.QPN)
	}
	for _, c := range []struct {
		qp          *rnic.QP
		state       ib.QPState
		dest, sqPSN uint32
	}{{qa, ib.QPSRTS, qb.QPN, 0x96ea7b}, {qb, ib.QPSRTS, qa.QPN, 0x173280}} { // each sends from the peer's Starting PSN
		attr := a.dev.QueryQP(c.qp)
		if c.qp == qb {
			attr = b.dev.QueryQP(qb)
		}
		if attr.State != c.state || attr.DestQPN != c.dest || attr.SQPSN != c.sqPSN || attr.PathMTU != ib.MTU1024 {
			t.Errorf("QP %#x: %+v", c.qp.QPN, attr)
		}
	}

	// Data over the connection the CM made: a WRITE and a READ back.
	for i := range a.mem[:4096] {
		a.mem[i] = byte(i * 7)
	}
	if err := a.dev.PostSend(qa, []ib.SendWR{{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: memVA, Length: 4096, LKey: a.mr.LKey}}, RemoteAddr: memVA + 8192, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.poll(); wc.Status != ib.WCSuccess || wc.WRID != 1 {
		t.Fatalf("WRITE %v", &wc)
	}
	b.dev.Fence() // order the NIC's writes with this goroutine's reads
	if !bytes.Equal(b.mem[8192:8192+4096], a.mem[:4096]) {
		t.Fatal("WRITE data differs")
	}
	if err := a.dev.PostSend(qa, []ib.SendWR{{WRID: 2, Opcode: ib.WRRDMARead, Flags: ib.SendSignaled,
		SGL: []ib.SGE{{Addr: memVA + 16384, Length: 4096, LKey: a.mr.LKey}}, RemoteAddr: memVA + 8192, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	wc := a.poll()
	a.dev.Fence()
	if wc.Status != ib.WCSuccess || !bytes.Equal(a.mem[16384:16384+4096], a.mem[:4096]) {
		t.Fatalf("READ %v", &wc)
	}

	// Disconnect: DREQ, DREP, both QPs in ERR.
	var id *cm.ID = ea.ID
	a.agent.Do(func(*cm.CM) { err = id.Disconnect(nil) })
	if err != nil {
		t.Fatal(err)
	}
	b.event(cm.EventDisconnected)
	a.event(cm.EventDisconnected)
	if s := a.dev.QueryQP(qa).State; s != ib.QPSErr {
		t.Errorf("a's QP %v", s)
	}
	if s := b.dev.QueryQP(qb).State; s != ib.QPSErr {
		t.Errorf("b's QP %v", s)
	}
	a.event(cm.EventTimewaitExit)
	b.event(cm.EventTimewaitExit)
	a.agent.Do(func(c *cm.CM) {
		if c.NumIDs() != 0 {
			t.Errorf("a holds %d IDs", c.NumIDs())
		}
	})
}

func TestAgentConnectionRefused(t *testing.T) {
	a, b := newPeer(t, looptest.Get(t).String(), 0xa), newPeer(t, looptest.Get(t).String(), 0xb)
	a.connect(b, a.createQP())
	e := a.event(cm.EventRejected)
	var re *cm.RejectError
	if !errors.As(e.Err, &re) || !re.Refused() {
		t.Fatalf("%v", e.Err)
	}
	t.Logf("a's error: %v", e.Err)
}

// The first REQ is lost on the wire (the fault injector on QP1's traffic):
// the CM resends it after its timeout and the connection still forms.
func TestAgentLostREQ(t *testing.T) {
	a, b := newPeer(t, looptest.Get(t).String(), 0xa), newPeer(t, looptest.Get(t).String(), 0xb)
	b.agent.Do(func(c *cm.CM) { c.Listen(service, nil) })
	a.faulty.SetTX(fault.Faults{FilterQPN: true, QPN: rnic.GSIQPN, DropNth: 1})
	qa, qb := a.createQP(), b.createQP()
	a.connect(b, qa)
	cr := b.event(cm.EventConnectRequest)
	b.agent.Do(func(*cm.CM) { cr.ID.Accept(cm.AcceptParam{QPN: qb.QPN, StartingPSN: 1, RNRRetryCount: 7}) })
	a.event(cm.EventEstablished)
	b.event(cm.EventEstablished)
	if st := a.faulty.FaultStats().TX; st.Dropped != 1 {
		t.Errorf("fault injector dropped %+v", st)
	}
	a.agent.Do(func(c *cm.CM) {
		// At least the lost one; a loaded machine may be slower than the
		// 25 ms timer and resend more.
		if r := c.Counters().Retries; r < 1 {
			t.Errorf("a resent %d MADs, want at least 1", r)
		}
	})
}

// The CM exchange as a capture shows it: tshark decodes rnicd's QP1
// packets as CM MADs (the check that the bytes are what Linux's CM sends),
// and so does this package's gopacket layer.
func TestAgentCaptureTshark(t *testing.T) {
	tshark := debtest.Ensure(t, "tshark", "tshark")
	path := filepath.Join(t.TempDir(), "cm.pcap")
	w, err := pcap.Create(pcap.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	// rdma_cm's own timers (4.3 s, 1.1 s): no resend on a slow machine
	// adds frames to the capture.
	a, b := newPeerTimers(t, looptest.Get(t).String(), 0xa, 20, 18), newPeerTimers(t, looptest.Get(t).String(), 0xb, 20, 18)
	a.dev.Observer().SetCapture(w)
	b.agent.Do(func(c *cm.CM) { c.Listen(service, nil) })
	qa, qb := a.createQP(), b.createQP()
	id := a.connect(b, qa)
	cr := b.event(cm.EventConnectRequest)
	b.agent.Do(func(*cm.CM) { cr.ID.Accept(cm.AcceptParam{QPN: qb.QPN, StartingPSN: 5, RNRRetryCount: 7}) })
	a.event(cm.EventEstablished)
	b.event(cm.EventEstablished)
	a.agent.Do(func(*cm.CM) { id.Disconnect(nil) })
	a.event(cm.EventDisconnected)
	b.event(cm.EventDisconnected)
	a.dev.Observer().SetCapture(nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "_ws.col.Info", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"CM: ConnectRequest", "CM: ConnectReply", "CM: ReadyToUse", "CM: DisconnectRequest", "CM: DisconnectReply"}
	if len(got) != len(want) {
		t.Fatalf("tshark reads %d frames, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("frame %d: tshark says %q, want %q", i+1, got[i], want[i])
		}
	}

	// The same frames through gopacket: a MAD layer after RoCE, QP1 to QP1.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var attrs []mad.AttrID
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		l, ok := p.Layer(mad.LayerTypeMAD).(*mad.Layer)
		if !ok || !l.IsCM() {
			t.Fatalf("no CM MAD layer: %v", p)
		}
		attrs = append(attrs, l.Header.AttrID)
		if l.Header.AttrID == mad.AttrREQ && (l.REQ.LocalQPN != qa.QPN || l.REQ.ServiceID != service) {
			t.Errorf("REQ %+v", l.REQ)
		}
	}
	if fmt.Sprint(attrs) != "[REQ REP RTU DREQ DREP]" {
		t.Errorf("gopacket reads %v", attrs)
	}
}

// cycle connects qa to qb through the agents, then a disconnects, and
// both QPs go back to RESET for the next round.
func cycle(tb testing.TB, a, b *peer, qa, qb *rnic.QP) {
	id := a.connect(b, qa)
	cr := b.event(cm.EventConnectRequest)
	var err error
	b.agent.Do(func(*cm.CM) { err = cr.ID.Accept(cm.AcceptParam{QPN: qb.QPN, StartingPSN: 1, RNRRetryCount: 7}) })
	if err != nil {
		tb.Fatal(err)
	}
	a.event(cm.EventEstablished)
	b.event(cm.EventEstablished)
	a.agent.Do(func(*cm.CM) { err = id.Disconnect(nil) })
	if err != nil {
		tb.Fatal(err)
	}
	a.event(cm.EventDisconnected)
	b.event(cm.EventDisconnected)
	a.event(cm.EventTimewaitExit)
	b.event(cm.EventTimewaitExit)
	for _, x := range []struct {
		p  *peer
		qp *rnic.QP
	}{{a, qa}, {b, qb}} {
		if err := x.p.dev.ModifyQP(x.qp, &ib.QPAttr{State: ib.QPSReset}, ib.AttrState); err != nil {
			tb.Fatal(err)
		}
	}
}

// Connect/disconnect cycles on real devices leave no CM ID behind and end
// with the QPs reusable.
func TestAgentCycles(t *testing.T) {
	a, b := newPeer(t, looptest.Get(t).String(), 0xa), newPeer(t, looptest.Get(t).String(), 0xb)
	b.agent.Do(func(c *cm.CM) { c.Listen(service, nil) })
	qa, qb := a.createQP(), b.createQP()
	for range 200 {
		cycle(t, a, b, qa, qb)
	}
	for _, p := range []*peer{a, b} {
		p.agent.Do(func(c *cm.CM) {
			if n := c.NumIDs(); n != 0 {
				t.Errorf("%d IDs left", n)
			}
			// Resends and late duplicates are allowed: the timers are
			// short and a loaded machine may be slower than them. A
			// connection that failed is not.
			if ct := c.Counters(); ct.Timeouts != 0 {
				t.Errorf("counters %+v", ct)
			}
		})
		if e := p.dev.GSI().RecvErrors.Load(); e != 0 {
			t.Errorf("GSI receive errors %d", e)
		}
	}
}

// BenchmarkAgentCycle measures one connect/disconnect of an RC QP pair
// through two CM agents on loopback, TIMEWAIT included (4.096 us * 2^11 =
// 8.4 ms with the short timers of newPeer).
func BenchmarkAgentCycle(bm *testing.B) {
	a, b := newPeer(bm, looptest.Get(bm).String(), 0xa), newPeer(bm, looptest.Get(bm).String(), 0xb)
	b.agent.Do(func(c *cm.CM) { c.Listen(service, nil) })
	qa, qb := a.createQP(), b.createQP()
	for bm.Loop() {
		cycle(bm, a, b, qa, qb)
	}
}
