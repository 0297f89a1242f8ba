package perftest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// segment is one TCP payload of a golden exchange on port 18515.
type segment struct {
	fromClient bool
	data       []byte
}

// goldenExchange reads the perftest TCP exchange out of a capture of two
// real perftest 4.5 processes on rxe (testdata/NAME.pcap, from
// /work/shared/golden).
func goldenExchange(t *testing.T, name string) []segment {
	t.Helper()
	var segs []segment
	for _, pkt := range goldenPackets(t, name) {
		tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok || len(tcp.Payload) == 0 {
			continue
		}
		if tcp.DstPort != DefaultPort && tcp.SrcPort != DefaultPort {
			continue
		}
		segs = append(segs, segment{fromClient: tcp.DstPort == DefaultPort, data: append([]byte(nil), tcp.Payload...)})
	}
	if len(segs) == 0 {
		t.Fatalf("%s: no perftest exchange in the capture", name)
	}
	return segs
}

// goldenPackets reads every packet of testdata/NAME.pcap.
func goldenPackets(t *testing.T, name string) []gopacket.Packet {
	t.Helper()
	f, err := os.Open("testdata/" + name + ".pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var pkts []gopacket.Packet
	for pkt := range gopacket.NewPacketSource(r, r.LinkType()).Packets() {
		pkts = append(pkts, pkt)
	}
	return pkts
}

// peerNIC is the RDMA side of the fake peer: a real QP on an in-process
// NIC, whose numbers replace the golden peer's in the replayed messages,
// so the test's RoCE traffic stays on loopback.
type peerNIC struct {
	ctx  *verbs.Context
	qp   *verbs.QP
	mr   *verbs.MR
	cq   *verbs.CQ
	dest Dest
	typ  verbs.QPType
}

func newPeerNIC(t *testing.T, typ verbs.QPType) *peerNIC {
	t.Helper()
	ctx, err := verbs.OpenLocal(verbs.LocalConfig{Name: "rxe0", Addr: looptest.Get(t), MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	pd, _ := ctx.AllocPD()
	mem, err := ctx.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, QKey: defQKey}
	m := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if typ == verbs.QPTypeUD {
		m |= verbs.AttrQKey
	} else {
		m |= verbs.AttrAccessFlags
	}
	if err := qp.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
	port, _ := ctx.QueryPort()
	return &peerNIC{ctx: ctx, qp: qp, mr: mr, cq: cq, typ: typ,
		dest: Dest{QPN: qp.QPN, PSN: 0x123456, RKey: mr.RKey, VAddr: mr.Addr, GID: port.GIDs[port.GIDIndex]}}
}

// connect takes the peer QP to RTS towards d.
func (n *peerNIC) connect(t *testing.T, d Dest) {
	t.Helper()
	a := verbs.QPAttr{State: verbs.QPSRTR}
	m := verbs.AttrState
	if n.typ != verbs.QPTypeUD {
		a.AH, a.PathMTU, a.DestQPN, a.RQPSN = verbs.AH{DGID: d.GID, HopLimit: 0xff}, verbs.MTU1024, d.QPN, d.PSN
		m |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if n.typ == verbs.QPTypeRC {
			a.MaxDestRdAtomic, a.MinRNRTimer = 16, minRNRTimer
			m |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
	}
	if err := n.qp.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
	a = verbs.QPAttr{State: verbs.QPSRTS, SQPSN: n.dest.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	m = verbs.AttrState | verbs.AttrSQPSN
	if n.typ == verbs.QPTypeRC {
		m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	if err := n.qp.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
}

// replayCase is one golden capture replayed against one side of ours.
type replayCase struct {
	name  string // capture
	tool  string
	flags []string // the flags the capture was made with
	// sendsAfter: the fake client SENDs iters messages of size bytes once
	// it has read this many of our 108-byte messages (send_bw: after the
	// barrier that follows the server's receive posting).
	sendsAfter int
	iters      int
	size       int
	typ        verbs.QPType
}

var replayCases = []replayCase{
	{name: "write_bw", tool: "ib_write_bw", flags: []string{"-x", "1", "-n", "8", "-s", "3000"}},
	{name: "read_bw", tool: "ib_read_bw", flags: []string{"-x", "1", "-n", "8", "-s", "3000"}},
	{name: "atomic_faa", tool: "ib_atomic_bw", flags: []string{"-x", "1", "-n", "8", "-A", "FETCH_AND_ADD"}},
	{name: "atomic_cas", tool: "ib_atomic_bw", flags: []string{"-x", "1", "-n", "8", "-A", "CMP_AND_SWAP"}},
	{name: "send_bw", tool: "ib_send_bw", flags: []string{"-x", "1", "-n", "8", "-s", "3000"}, sendsAfter: 4, iters: 8, size: 3000},
	{name: "send_bw_uc", tool: "ib_send_bw", flags: []string{"-x", "1", "-c", "UC", "-n", "8", "-s", "3000"}, sendsAfter: 4, iters: 8, size: 3000, typ: verbs.QPTypeUC},
	{name: "send_bw_ud", tool: "ib_send_bw", flags: []string{"-x", "1", "-c", "UD", "-n", "8", "-s", "512"}, sendsAfter: 4, iters: 8, size: 512, typ: verbs.QPTypeUD},
	{name: "read_lat", tool: "ib_read_lat", flags: []string{"-x", "1", "-n", "8", "-s", "64"}},
}

// TestReplayGolden runs each tool against a fake peer that replays what
// the real perftest sent in the golden capture, in both roles, and checks
// that every byte our side sends matches what the real tool sent, except
// the QP's own numbers (QPN, PSN, rkey, vaddr, GID) and the measured
// figures; then that the output matches the real tool's, line by line.
func TestReplayGolden(t *testing.T) {
	for _, rc := range replayCases {
		for _, ourClient := range []bool{true, false} {
			role := "server"
			if ourClient {
				role = "client"
			}
			t.Run(rc.name+"/our_"+role, func(t *testing.T) {
				replay(t, rc, ourClient)
			})
		}
	}
}

func replay(t *testing.T, rc replayCase, ourClient bool) {
	segs := goldenExchange(t, rc.name)
	tool, ok := Find(rc.tool)
	if !ok {
		t.Fatal("no tool", rc.tool)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	args := append([]string{"-d", "rxe0", "-p", itoa(port)}, rc.flags...)
	if ourClient {
		args = append(args, "127.0.0.1")
	}
	p, err := Parse(tool, args)
	if err != nil {
		t.Fatal(err)
	}
	typ := rc.typ
	if typ == 0 {
		typ = verbs.QPTypeRC
	}
	peer := newPeerNIC(t, typ)
	ourAddr := looptest.Get(t)
	var out, errOut bytes.Buffer
	cfg := Config{Stdout: &out, Stderr: &errOut, IdleTimeout: 20 * time.Second,
		Open: func(*Params) (*verbs.Context, error) {
			return verbs.OpenLocal(verbs.LocalConfig{Name: "rxe0", Addr: ourAddr, MTU: 1024})
		}}
	if !ourClient {
		cfg.Listener = ln
	}
	done := make(chan error, 1)
	go func() { done <- Run(p, cfg) }()

	var c net.Conn
	if ourClient {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
		c, err = ln.Accept()
	} else {
		c, err = net.Dial("tcp4", ln.Addr().String())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))

	oursFromClient := ourClient
	var reads, reports int
	for i, s := range segs {
		if s.fromClient != oursFromClient {
			// The fake peer's turn: the golden bytes, with our peer QP's
			// numbers in its QP messages.
			msg := s.data
			if len(msg) == destLen {
				g, err := ParseDest(msg)
				if err != nil {
					t.Fatalf("segment %d: golden QP message: %v", i, err)
				}
				g.QPN, g.PSN, g.VAddr, g.GID = peer.dest.QPN, peer.dest.PSN, peer.dest.VAddr, peer.dest.GID
				if g.RKey != 0 {
					g.RKey = peer.dest.RKey
				}
				msg = g.Marshal()
			}
			if _, err := c.Write(msg); err != nil {
				t.Fatalf("segment %d: write: %v (our side: %v %s)", i, err, drain(done), errOut.String())
			}
			continue
		}
		got := make([]byte, len(s.data))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("segment %d: reading our %d bytes: %v (our side: %v %s)", i, len(s.data), err, drain(done), errOut.String())
		}
		switch len(s.data) {
		case destLen:
			compareDest(t, i, got, s.data)
			d, _ := ParseDest(got)
			reads++
			if reads == 1 {
				peer.connect(t, d)
				if !ourClient && rc.sendsAfter > 0 {
					// Nothing to post: the fake client only sends.
				} else if ourClient && rc.sendsAfter > 0 {
					postPeerRecvs(t, peer, rc)
				}
			}
			if !ourClient && rc.sendsAfter > 0 && reads == rc.sendsAfter {
				peerSends(t, peer, rc, d)
			}
		case 8:
			// The bandwidth report: size and iterations exact from our
			// client; the measured figures and a server's fields (perftest
			// sends uninitialised memory there) are not compared.
			if ourClient && reports < 2 && !bytes.Equal(got, s.data) {
				t.Errorf("segment %d: report field %d is %d, the real client sent %d", i, reports,
					binary.BigEndian.Uint64(got), binary.BigEndian.Uint64(s.data))
			}
			reports++
		default:
			if !bytes.Equal(got, s.data) {
				t.Errorf("segment %d: we sent %q, the real tool sent %q", i, got, s.data)
			}
		}
	}
	if err := drain(done); err != nil {
		t.Fatalf("our side: %v\n%s", err, errOut.String())
	}
	golden := "testdata/" + rc.name + "." + map[bool]string{true: "client", false: "server"}[ourClient] + ".txt"
	compareOutput(t, out.String(), golden, ourClient || rc.sendsAfter > 0)
}

func drain(done chan error) error {
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return io.ErrNoProgress
	}
}

// compareDest checks one of our 108-byte QP messages against the real
// tool's: same layout, field for field, same LID, out_reads and SRQN; an
// rkey of 0 where the real tool sent 0.
func compareDest(t *testing.T, i int, got, want []byte) {
	t.Helper()
	if len(got) != destLen || got[destLen-1] != 0 {
		t.Errorf("segment %d: QP message %q is not %d NUL-terminated bytes", i, got, destLen)
		return
	}
	gf := strings.Split(string(bytes.TrimRight(got, "\x00")), ":")
	wf := strings.Split(string(bytes.TrimRight(want, "\x00")), ":")
	if len(gf) != len(wf) {
		t.Errorf("segment %d: %d fields in %q, the real tool sent %d in %q", i, len(gf), got, len(wf), want)
		return
	}
	for k := range gf {
		if len(gf[k]) != len(wf[k]) {
			t.Errorf("segment %d: field %d is %q, the real tool's is %q", i, k, gf[k], wf[k])
		}
	}
	g, err := ParseDest(got)
	if err != nil {
		t.Errorf("segment %d: %v", i, err)
		return
	}
	w, _ := ParseDest(want)
	if g.LID != w.LID || g.OutReads != w.OutReads || g.SRQN != w.SRQN || (w.RKey == 0) != (g.RKey == 0) {
		t.Errorf("segment %d: we sent %q, the real tool sent %q", i, got, want)
	}
}

func postPeerRecvs(t *testing.T, n *peerNIC, rc replayCase) {
	t.Helper()
	l := rc.size
	if n.typ == verbs.QPTypeUD {
		l += udAddition
	}
	for i := 0; i < rc.iters; i++ {
		wr := verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{n.mr.SGE(i*4096, l)}}
		if err := n.qp.PostRecv([]verbs.RecvWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
}

func peerSends(t *testing.T, n *peerNIC, rc replayCase, d Dest) {
	t.Helper()
	for i := 0; i < rc.iters; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{n.mr.SGE(0, rc.size)}}
		if n.typ == verbs.QPTypeUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = &verbs.AH{DGID: d.GID, HopLimit: 0xff}, d.QPN, defQKey
		}
		if err := n.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
}

// compareOutput checks our output against the real tool's, line by line,
// from the header block on: the address lines' numbers and, where we
// measured them ourselves, the figures of the result line may differ.
func compareOutput(t *testing.T, got, goldenFile string, measured bool) {
	t.Helper()
	raw, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	want := toolLines(string(raw))
	have := toolLines(got)
	if len(have) != len(want) {
		t.Fatalf("we printed %d lines, the real tool %d:\n%s\n--- real:\n%s", len(have), len(want), strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		w, h := want[i], have[i]
		switch {
		case strings.Contains(w, " address: LID"):
			w, h = w[:strings.Index(w, " QPN")], h[:min(len(h), strings.Index(w, " QPN"))]
		case strings.HasPrefix(w, " GID:"):
			w, h = "GID", h[:min(len(h), 5)]+"GID"[3:]
			if !strings.HasPrefix(have[i], " GID:") {
				t.Errorf("line %d: %q, want a GID line", i, have[i])
			}
			continue
		case len(w) > 1 && w[1] >= '0' && w[1] <= '9' && measured:
			// #bytes and #iterations must match; the figures are ours.
			wf, hf := strings.Fields(w), strings.Fields(h)
			if len(hf) != len(wf) || hf[0] != wf[0] || hf[1] != wf[1] {
				t.Errorf("result line %q, the real tool's %q", h, w)
			}
			continue
		}
		if w != h {
			t.Errorf("line %d:\n got %q\nwant %q", i, h, w)
		}
	}
}

// toolLines are the lines the tool printed, without the VM harness's.
func toolLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "=== rxe-peer") || strings.HasPrefix(l, "[") || strings.Contains(l, "\x1b") ||
			strings.HasPrefix(l, "Device not recognized") || l == "" {
			continue
		}
		out = append(out, l)
	}
	return out
}

func itoa(n int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + string(appendInt(nil, n))) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}
