package main

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
	"github.com/rnicd/rnicd/wire/bth"
)

// golden is what a capture of rdma-core's pingpong between two rxe hosts
// holds: the TCP bytes each way and the RoCE payloads each side sent.
type ppGolden struct {
	c2s, s2c          []byte   // TCP payload, client to server and back
	clientPayloads    [][]byte // RoCE payloads (after BTH and DETH, before ICRC) the client sent
	clientOut, srvOut []string
}

func ppLoadGolden(t *testing.T, name string) ppGolden {
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
	const client = "198.18.0.3" // the README of the captures
	var g ppGolden
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		ip, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			continue
		}
		fromClient := ip.SrcIP.String() == client
		if tcp, ok := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
			if fromClient {
				g.c2s = append(g.c2s, tcp.Payload...)
			} else {
				g.s2c = append(g.s2c, tcp.Payload...)
			}
			continue
		}
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || udp.DstPort != 4791 || !fromClient {
			continue
		}
		p, err := bth.Parse(udp.Payload)
		if err != nil {
			t.Fatalf("golden RoCE packet: %v", err)
		}
		if p.Opcode().Is(bth.FlagSend) {
			g.clientPayloads = append(g.clientPayloads, bytes.Clone(p.Payload()))
		}
	}
	g.clientOut = ppReadLines(t, "testdata/"+name+".client.txt")
	g.srvOut = ppReadLines(t, "testdata/"+name+".server.txt")
	return g
}

func ppReadLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// maskDest blanks the fields of a destination message that differ between
// runs and hosts (QPN, PSN, GID), keeping the LID, the separators, the
// lengths and the NUL padding.
func maskDest(b []byte) []byte {
	m := bytes.Clone(b)
	for i := 5; i < 51; i++ {
		if m[i] != ':' {
			m[i] = 'x'
		}
	}
	return m
}

// As the client, rnic sends the bytes rdma-core's client sent (but for
// QPN, PSN and GID), in the same order, reads the golden server's answer
// into the values the server printed, and ends with "done".
func TestGoldenExchangeClient(t *testing.T) {
	for _, name := range []string{"rc_pingpong", "ud_pingpong"} {
		t.Run(name, func(t *testing.T) {
			g := ppLoadGolden(t, name)
			if len(g.c2s) != ppMsgLen+len(ppDone) || len(g.s2c) != ppMsgLen {
				t.Fatalf("golden exchange of %d and %d bytes", len(g.c2s), len(g.s2c))
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() { // the real server, replayed
				c, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				defer c.Close()
				first := make([]byte, ppMsgLen)
				if _, err := io.ReadFull(c, first); err != nil {
					got <- nil
					return
				}
				c.Write(g.s2c)
				rest, _ := io.ReadAll(c)
				got <- append(first, rest...)
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			mine := ppDest{QPN: 0x12, PSN: 0xabcdef, GID: verbs.GID(netip.MustParseAddr("::ffff:127.5.0.2").As16())}
			rem, err := ppClientExchange(conn, []ppDest{mine})
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
			sent := <-got
			if !bytes.Equal(maskDest(sent[:ppMsgLen]), maskDest(g.c2s[:ppMsgLen])) || !bytes.Equal(sent[ppMsgLen:], g.c2s[ppMsgLen:]) {
				t.Errorf("sent %q\nrdma-core sent %q", sent, g.c2s)
			}
			if want := "0000:000012:abcdef:00000000000000000000ffff7f050002\x00"; string(sent[:ppMsgLen]) != want {
				t.Errorf("destination %q, want %q", sent[:ppMsgLen], want)
			}
			// The server's own line says what its message meant.
			wantRem := destFromLine(t, g.srvOut[0])
			if len(rem) != 1 || rem[0] != wantRem {
				t.Errorf("read %+v, the server printed %+v", rem, wantRem)
			}
		})
	}
}

// As the server, rnic reads rdma-core's client message, connects its QP
// before answering, answers with the golden server's bytes (but for QPN,
// PSN and GID), and waits for "done".
func TestGoldenExchangeServer(t *testing.T) {
	for _, name := range []string{"rc_pingpong", "ud_pingpong"} {
		t.Run(name, func(t *testing.T) {
			g := ppLoadGolden(t, name)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() { // the real client, replayed
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					got <- nil
					return
				}
				defer c.Close()
				c.Write(g.c2s[:ppMsgLen])
				answer := make([]byte, ppMsgLen)
				if _, err := io.ReadFull(c, answer); err != nil {
					got <- nil
					return
				}
				c.Write(g.c2s[ppMsgLen:])
				got <- answer
			}()
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			connected := false
			var connectedTo []ppDest
			mine := ppDest{QPN: 0x11, PSN: 0x123456, GID: verbs.GID(netip.MustParseAddr("::ffff:127.5.0.1").As16())}
			rem, err := ppServerExchange(conn, []ppDest{mine}, func(d []ppDest) error {
				connected, connectedTo = true, d
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			answer := <-got
			if !connected {
				t.Fatal("answered before connecting the QP")
			}
			if !bytes.Equal(maskDest(answer), maskDest(g.s2c)) {
				t.Errorf("answered %q\nrdma-core answered %q", answer, g.s2c)
			}
			if want := "0000:000011:123456:00000000000000000000ffff7f050001\x00"; string(answer) != want {
				t.Errorf("answered %q, want %q", answer, want)
			}
			wantRem := destFromLine(t, g.clientOut[0])
			if len(rem) != 1 || rem[0] != wantRem || len(connectedTo) != 1 || connectedTo[0] != wantRem {
				t.Errorf("read %+v and connected to %+v, the client printed %+v", rem, connectedTo, wantRem)
			}
		})
	}
}

var ppAddrLine = regexp.MustCompile(`LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)

// destFromLine reads a "local address:" or "remote address:" line.
func destFromLine(t *testing.T, line string) ppDest {
	t.Helper()
	m := ppAddrLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("not an address line: %q", line)
	}
	var v [3]uint64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(m[i+1], 16, 32); err != nil {
			t.Fatal(err)
		}
	}
	a, err := netip.ParseAddr(m[4])
	if err != nil {
		t.Fatalf("GID %q: %v", m[4], err)
	}
	return ppDest{LID: uint16(v[0]), QPN: uint32(v[1]), PSN: uint32(v[2]), GID: a.As16()}
}

func TestParseDestHostile(t *testing.T) {
	good := "0000:000011:76cb57:00000000000000000000ffffc6120002\x00"
	d, err := parseDest([]byte(good))
	if err != nil || d.QPN != 0x11 || d.PSN != 0x76cb57 || netip.AddrFrom16(d.GID).String() != "::ffff:198.18.0.2" {
		t.Fatalf("parse %q = %+v, %v", good, d, err)
	}
	for _, bad := range []string{
		"",
		strings.Repeat("\x00", ppMsgLen),
		strings.Repeat("a", ppMsgLen), // no NUL
		"0000:000011:76cb57:00000000000000000000ffffc612000\x00\x00", // 31 GID digits
		"0000:1000000:76cb5:00000000000000000000ffffc6120002\x00",    // QPN of 25 bits
		"10000:00011:76cb57:00000000000000000000ffffc6120002\x00",    // LID of 20 bits
		"0000:000011:76cb57:0000000000000000000gffffc6120002\x00",    // not hex
		"0000:000011:76cb57:00000000000000000000ffffc6120002:\x00",   // five fields
		"0000::76cb57:00000000000000000000ffffc612000200000\x00",     // empty QPN
		"-001:000011:76cb57:00000000000000000000ffffc6120002\x00",
	} {
		if len(bad) == ppMsgLen {
			if _, err := parseDest([]byte(bad)); err == nil {
				t.Errorf("parseDest(%q) accepted", bad)
			}
		} else if _, err := parseDest([]byte(bad)); err == nil {
			t.Errorf("parseDest of %d bytes accepted", len(bad))
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:76cb57:00000000000000000000ffffc6120002\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDest(b)
		if err != nil {
			return
		}
		// What parses must read back from its own marshalling.
		if d2, err := parseDest(d.marshal()); err != nil || d2 != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", b, d, d.marshal(), d2, err)
		}
	})
}

// shape blanks the values of a tool's output line (numbers, GIDs) so that
// lines of two runs compare by their wording and punctuation.
func ppShape(s string) string {
	s = regexp.MustCompile(`GID \S+`).ReplaceAllString(s, "GID <gid>")
	s = regexp.MustCompile(`0x[0-9a-f]+`).ReplaceAllString(s, "0x<hex>")
	return regexp.MustCompile(`[0-9]+(\.[0-9]+)?`).ReplaceAllString(s, "<n>")
}

// ppRunPair runs a server on srvAddr and a client on cliAddr of kind k,
// two in-process NICs, with the same flags and returns both results and
// outputs.
func ppRunPair(t *testing.T, srvAddr, cliAddr string, k ppKind, flags ...string) (srv, cli *ppResult, srvOut, cliOut []string) {
	t.Helper()
	parse := func(addr string, extra ...string) ppConfig {
		cfg, err := parsePingpong(k, append(append([]string{"--local", addr, "-g", "0", "--timeout", "2m"}, flags...), extra...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ln, err := net.Listen("tcp", srvAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	type res struct {
		r   *ppResult
		out bytes.Buffer
		err error
	}
	var s, c res
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.r, s.err = runPingpong(parse(srvAddr), ln, &s.out)
	}()
	c.r, c.err = runPingpong(parse(cliAddr, "-p", port, srvAddr), nil, &c.out)
	if c.err != nil {
		ln.Close() // unblocks a server still waiting for the client
	}
	<-done
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", s.err, s.out.String(), c.err, c.out.String())
	}
	lines := func(b *bytes.Buffer) []string { return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") }
	return s.r, c.r, lines(&s.out), lines(&c.out)
}

// Each pingpong against itself between two NICs: the output has rdma-core's
// lines, each side prints the other's destination as the other printed it,
// and with -c the client ends with the server's pattern, byte for byte.
func TestPingpongLocal(t *testing.T) {
	page := os.Getpagesize()
	cases := []struct {
		kind   ppKind
		golden string // capture whose output lines ours must match in shape
		flags  []string
	}{
		{ppRC, "rc_pingpong", []string{"-n", "40", "-s", "2000", "-c"}},
		{ppRC, "rc_pingpong", []string{"-n", "20", "-s", "1", "-c", "-e"}},
		{ppRC, "rc_pingpong", []string{"-n", "10", "-s", "2*page+5", "-m", "4096", "-c", "-r", "3"}},
		{ppUC, "rc_pingpong", []string{"-n", "40", "-s", "4096", "-c"}},
		{ppUC, "rc_pingpong", []string{"-n", "20", "-s", "100", "-c", "-e", "-m", "256"}},
		{ppUD, "ud_pingpong", []string{"-n", "40", "-s", "512", "-c"}},
		{ppUD, "ud_pingpong", []string{"-n", "20", "-s", "1024", "-c", "-e", "-r", "2"}},
		{ppSRQ, "", []string{"-n", "60", "-s", "3000", "-q", "4", "-c"}},
		{ppSRQ, "", []string{"-n", "30", "-s", "2*page+5", "-q", "3", "-c", "-e", "-r", "8"}},
	}
	for _, tc := range cases {
		flags := strings.Join(tc.flags, " ")
		size := 0
		for i, f := range tc.flags {
			if f == "2*page+5" {
				tc.flags[i] = strconv.Itoa(2*page + 5)
			}
			if f == "-s" {
				size, _ = strconv.Atoi(tc.flags[i+1])
				if tc.flags[i+1] == "2*page+5" {
					size = 2*page + 5
				}
			}
		}
		t.Run(tc.kind.tool()+" "+flags, func(t *testing.T) {
			srvAddr := looptest.Get(t).String()
			srv, cli, srvOut, cliOut := ppRunPair(t, srvAddr, looptest.Get(t).String(), tc.kind, tc.flags...)
			nqp := len(srv.Local)
			if len(srvOut) != 2*nqp+2 || len(cliOut) != 2*nqp+2 {
				t.Fatalf("server said:\n%s\nclient said:\n%s", strings.Join(srvOut, "\n"), strings.Join(cliOut, "\n"))
			}
			if tc.golden != "" {
				g := ppLoadGolden(t, tc.golden)
				for i := range srvOut {
					if ppShape(srvOut[i]) != ppShape(g.srvOut[i]) || ppShape(cliOut[i]) != ppShape(g.clientOut[i]) {
						t.Errorf("line %d: server %q client %q\nrdma-core: %q %q", i, srvOut[i], cliOut[i], g.srvOut[i], g.clientOut[i])
					}
				}
			}
			for i := 0; i < nqp; i++ {
				if destFromLine(t, srvOut[i]) != srv.Local[i] || destFromLine(t, cliOut[nqp+i]) != srv.Local[i] ||
					destFromLine(t, cliOut[i]) != cli.Local[i] || destFromLine(t, srvOut[nqp+i]) != cli.Local[i] {
					t.Errorf("QP %d: the sides disagree:\n%s\n%s", i, strings.Join(srvOut, "\n"), strings.Join(cliOut, "\n"))
				}
				if want := ("::ffff:" + srvAddr); gidText(srv.Local[i].GID) != want || srv.Local[i].QPN < 0x11 {
					t.Errorf("server QP %d: %+v", i, srv.Local[i])
				}
			}
			iters, _ := strconv.Atoi(tc.flags[1])
			for _, out := range [][]string{srvOut, cliOut} {
				if want := strconv.Itoa(2*iters*size) + " bytes in "; !strings.HasPrefix(out[2*nqp], want) {
					t.Errorf("%q, want %q...", out[2*nqp], want)
				}
				if want := tc.flags[1] + " iters in "; !strings.HasPrefix(out[2*nqp+1], want) {
					t.Errorf("%q, want %q...", out[2*nqp+1], want)
				}
			}
			want := make([]byte, size)
			for i := range want {
				if i%page == 0 {
					want[i] = 0
				} else {
					want[i] = checkByte(i)
				}
			}
			if !bytes.Equal(cli.Data, want) || !bytes.Equal(srv.Data, want) {
				t.Errorf("client data % x...\nserver data % x...\nwant % x...", ppHead(cli.Data), ppHead(srv.Data), ppHead(want))
			}
		})
	}
}

func ppHead(b []byte) []byte { return b[:min(len(b), 16)] }

// Connected to the golden peer, the QPs have the attributes rdma-core's
// pp_connect_ctx gives them, and the message is what rdma-core's client
// sent in the capture, byte for byte.
func TestPingpongQPAttributes(t *testing.T) {
	for _, tc := range []struct {
		kind   ppKind
		golden string
		flags  []string
	}{
		{ppRC, "rc_pingpong", []string{"-s", "2000"}},
		{ppUC, "rc_pingpong", []string{"-s", "2000", "-m", "512"}},
		{ppUD, "ud_pingpong", []string{"-s", "512"}},
		{ppSRQ, "rc_pingpong", []string{"-s", "2000", "-q", "2"}},
	} {
		t.Run(tc.kind.tool(), func(t *testing.T) {
			g := ppLoadGolden(t, tc.golden)
			cfg, err := parsePingpong(tc.kind, append([]string{"--local", looptest.Get(t).String(), "-g", "0", "-n", "4"}, append(tc.flags, "198.18.0.2")...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			ctx, err := cfg.dev.open()
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Close()
			p := newPingpong(cfg, ctx)
			if err := p.init(); err != nil {
				t.Fatal(err)
			}
			defer p.close()
			// The message is rdma-core's 0x7b fill (srq_pingpong: zeros).
			sent := bytes.Join(g.clientPayloads[:len(g.clientPayloads)/4], nil) // the capture has 4 iterations
			if tc.kind == ppSRQ {
				sent = make([]byte, len(sent))
			}
			if !bytes.Equal(p.msg(), sent) {
				t.Errorf("message % x..., rdma-core sent % x... (%d bytes)", ppHead(p.msg()), ppHead(sent), len(sent))
			}
			rem := destFromLine(t, g.clientOut[1])
			mine := make([]ppDest, len(p.qps))
			rems := make([]ppDest, len(p.qps))
			for i, qp := range p.qps {
				mine[i] = ppDest{QPN: qp.QPN, PSN: 0x100 + uint32(i)}
				rems[i] = rem
				rems[i].QPN += uint32(i)
			}
			if err := p.connect(mine, rems); err != nil {
				t.Fatal(err)
			}
			for i, qp := range p.qps {
				a, err := qp.Query()
				if err != nil {
					t.Fatal(err)
				}
				want := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: mine[i].PSN, PortNum: 1}
				switch tc.kind {
				case ppUD:
					want.QKey = ppUDQKey
					ud := p.transport.(*udTransport)
					if ud.ah.DGID != rem.GID || ud.ah.HopLimit != 1 || ud.qpn != rems[0].QPN {
						t.Errorf("AH %+v to QPN %#x, want DGID %v hop limit 1 to QPN %#x", ud.ah, ud.qpn, rem.GID, rems[0].QPN)
					}
				case ppUC:
					want.PathMTU, want.DestQPN, want.RQPSN = verbs.MTU512, rems[i].QPN, rem.PSN
					want.AH = verbs.AH{DGID: rem.GID, HopLimit: 1}
				default:
					want.PathMTU, want.DestQPN, want.RQPSN = verbs.MTU1024, rems[i].QPN, rem.PSN
					want.AH = verbs.AH{DGID: rem.GID, HopLimit: 1}
					want.MaxDestRdAtomic, want.MinRNRTimer = 1, 12
					want.Timeout, want.RetryCnt, want.RNRRetry, want.MaxRdAtomic = 14, 7, 7, 1
				}
				if a != want {
					t.Errorf("QP %d attributes\n%+v\nwant\n%+v", i, a, want)
				}
			}
		})
	}
}

// -g picks the GID by index; one past the table is refused before any
// exchange with rdma-core's message and the table's size, on every kind.
func TestPingpongGIDIndexOutOfTable(t *testing.T) {
	for _, k := range []ppKind{ppRC, ppUC, ppUD, ppSRQ} {
		srvAddr := looptest.Get(t).String()
		ln, err := net.Listen("tcp", srvAddr+":0")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := parsePingpong(k, []string{"--local", srvAddr, "-g", "2", "--timeout", "5s"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, err = runPingpong(cfg, ln, &out)
		ln.Close()
		const want = "can't read sgid of index 2 (the GID table has 2 entries)"
		if err == nil || err.Error() != want || out.Len() != 0 {
			t.Errorf("%s -g 2: %v, want %q; printed %q", k.tool(), err, want, out.String())
		}
	}
}
