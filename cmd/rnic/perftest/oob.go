package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/verbs"
)

// Version is the perftest version this package speaks and advertises. It
// is the version string of Debian 12's perftest 4.5-0.18; perftest 6.28
// and later add a binary parameter negotiation after the version exchange
// when both sides are 6.28 or newer, which a version below 6.28 skips.
const Version = "6.06"

// minPeerVersion is the oldest peer perftest itself accepts
// (check_version_compatibility).
const minPeerVersion = 5.70

// Sizes of the fixed messages of the exchange, in bytes.
const (
	versionLen = 16  // MAX_VERSION: NUL-padded version string
	destLen    = 108 // KEY_MSG_SIZE_GID: the per-QP text with a GID
	mtuLen     = 2   // "%d" of the ibv_mtu enum, NUL-terminated (peers >= 5.31)
)

// doneMsg ends the exchange: each side writes it after the last
// handshake and closes (ctx_close_connection); nobody reads it.
var doneMsg = []byte("done\x00")

// Dest is what each side tells the other about one QP (perftest's
// pingpong_dest), sent as the text
// lid:out_reads:qpn:psn:rkey:vaddr:gid[0]:...:gid[15]:srqn: in hex.
type Dest struct {
	LID      uint16
	OutReads uint32
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      verbs.GID
	SRQN     uint32
}

// Marshal returns the 108-byte message for d.
func (d *Dest) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	for _, g := range d.GID {
		fmt.Fprintf(&b, ":%02x", g)
	}
	fmt.Fprintf(&b, ":%08x:", d.SRQN)
	msg := make([]byte, destLen)
	copy(msg, b.String()) // the rest stays NUL
	return msg
}

// cmDestLen is sizeof(struct pingpong_dest) on x86-64, what perftest
// SENDs for a QP over rdma_cm (rdma_write_keys): lid, out_reads, qpn,
// psn, rkey as big-endian 32-bit words, 4 bytes of padding, vaddr (64),
// the GID, srqn and gid_index.
const cmDestLen = 56

// MarshalCM returns d as perftest's rdma_cm exchange sends it.
func (d *Dest) MarshalCM() []byte {
	b := make([]byte, cmDestLen)
	for i, v := range []uint32{uint32(d.LID), d.OutReads, d.QPN, d.PSN, d.RKey} {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	binary.BigEndian.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	binary.BigEndian.PutUint32(b[48:], d.SRQN)
	return b // gid_index (52) stays 0: perftest's reader ignores it
}

// ParseCMDest reads a peer's Dest from the rdma_cm exchange as perftest's
// rdma_read_keys does: every field but srqn and gid_index, which it
// leaves alone. The peer's widths are taken as they come: a QPN or PSN
// beyond 24 bits is refused, as no QP has one.
func ParseCMDest(b []byte) (Dest, error) {
	var d Dest
	if len(b) != cmDestLen {
		return d, fmt.Errorf("perftest: QP message of %d bytes, want %d", len(b), cmDestLen)
	}
	lid := binary.BigEndian.Uint32(b)
	d.OutReads = binary.BigEndian.Uint32(b[4:])
	d.QPN = binary.BigEndian.Uint32(b[8:])
	d.PSN = binary.BigEndian.Uint32(b[12:])
	d.RKey = binary.BigEndian.Uint32(b[16:])
	d.VAddr = binary.BigEndian.Uint64(b[24:])
	copy(d.GID[:], b[32:48])
	if lid > 0xffff || d.QPN > 0xffffff || d.PSN > 0xffffff {
		return d, fmt.Errorf("perftest: QP message with LID %#x, QPN %#x, PSN %#x", lid, d.QPN, d.PSN)
	}
	d.LID = uint16(lid)
	return d, nil
}

// ParseDest reads a 108-byte message from the peer. It accepts any field
// widths (perftest parses with strtol) but nothing that is not hex.
func ParseDest(msg []byte) (Dest, error) {
	var d Dest
	if len(msg) != destLen {
		return d, fmt.Errorf("perftest: QP message of %d bytes, want %d", len(msg), destLen)
	}
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	f := strings.Split(string(msg), ":")
	// 6 fields, 16 GID bytes, srqn, and the empty field after the last ':'.
	if len(f) < 6+16+1 {
		return d, fmt.Errorf("perftest: QP message %q has %d fields, want %d", msg, len(f), 6+16+1)
	}
	// Field widths in bits: lid, out_reads, qpn, psn, rkey, vaddr, the
	// GID's 16 bytes, srqn.
	bits := [6 + 16 + 1]int{16, 32, 24, 24, 32, 64}
	for i := 6; i < 22; i++ {
		bits[i] = 8
	}
	bits[22] = 32
	var v [len(bits)]uint64
	for i, n := range bits {
		x, err := strconv.ParseUint(f[i], 16, n)
		if err != nil {
			return d, fmt.Errorf("perftest: QP message field %d %q: %w", i, f[i], err)
		}
		v[i] = x
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	d.SRQN = uint32(v[22])
	return d, nil
}

// BWReport is what a bandwidth test's client sends the server at the end
// (bw_report_data as xchg_bw_reports sends it): each field in its own
// exchange, in network byte order.
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// Conn is the out-of-band connection of one test: perftest's "Ethernet"
// data exchange method over TCP, or its rdma_cm method over a control RC
// QP (-R, cmpipe.go). In every exchange the client writes first and then
// reads; the server reads first and then writes.
type Conn struct {
	p      pipe
	client bool
	// cm: the exchange runs over rdma_cm's control QP, where perftest
	// sends a QP's Dest as its binary struct pingpong_dest and ends
	// without "done".
	cm bool
	// PeerVersion is the version the peer advertised.
	PeerVersion string
}

// pipe carries the exchange's messages, each of a size both sides know.
type pipe interface {
	write(b []byte) error
	read(b []byte) error
	Close() error
}

// tcpPipe is the exchange over TCP.
type tcpPipe struct{ c net.Conn }

func (t tcpPipe) write(b []byte) error {
	if _, err := t.c.Write(b); err != nil {
		return fmt.Errorf("perftest: write to peer: %w", err)
	}
	return nil
}

func (t tcpPipe) read(b []byte) error {
	if _, err := io.ReadFull(t.c, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("perftest: peer closed the connection: %w", err)
		}
		return fmt.Errorf("perftest: read from peer: %w", err)
	}
	return nil
}

func (t tcpPipe) Close() error { return t.c.Close() }

// NewConn wraps an established connection; client says which side we are.
func NewConn(c net.Conn, client bool) *Conn { return &Conn{p: tcpPipe{c}, client: client} }

// Dial connects to a perftest server at host:port (ethernet_client_connect),
// resolving the host as getaddrinfo with AF_UNSPEC does: an IPv4 or IPv6
// literal (fe80::1%eth0 with its zone) or a name, trying each address.
func Dial(addr string) (*Conn, error) { return DialFrom(netip.Addr{}, addr) }

// DialFrom is Dial from local address src, if valid (perftest's
// --source_ip binds the exchange's socket to it).
func DialFrom(src netip.Addr, addr string) (*Conn, error) {
	var d net.Dialer
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("perftest: couldn't connect to %s: %w", addr, err)
	}
	return NewConn(c, true), nil
}

// Listen opens the server's listening socket on port
// (ethernet_server_connect): every address of both families, one IPv6
// socket that also takes IPv4 clients as mapped addresses, as a dual-stack
// host answers either; on a host without IPv6, IPv4 only.
func Listen(port int) (net.Listener, error) { return ListenOn(netip.Addr{}, port) }

// ListenOn is Listen on address src only, if valid (--source_ip on the
// server, as perftest listens on it).
func ListenOn(src netip.Addr, port int) (net.Listener, error) {
	host := ""
	if src.IsValid() {
		host = src.String()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("perftest: couldn't listen to port %d: %w", port, err)
	}
	return ln, nil
}

// Accept waits for one client on ln (ethernet_server_connect) and closes
// the listener, as perftest does.
func Accept(ln net.Listener) (*Conn, error) {
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("perftest: accept: %w", err)
	}
	return NewConn(c, false), nil
}

// Close closes the connection without the closing handshake.
func (c *Conn) Close() error { return c.p.Close() }

// xchg sends mine and receives len(theirs) bytes, in the order of the
// side (ctx_xchg_data_ethernet, ctx_xchg_data_rdma).
func (c *Conn) xchg(mine, theirs []byte) error {
	if c.client {
		if err := c.p.write(mine); err != nil {
			return err
		}
		return c.p.read(theirs)
	}
	if err := c.p.read(theirs); err != nil {
		return err
	}
	return c.p.write(mine)
}

// ExchangeVersions swaps the 16-byte version strings and checks the
// peer's is one perftest accepts (exchange_versions,
// check_version_compatibility).
func (c *Conn) ExchangeVersions() error {
	mine := make([]byte, versionLen)
	copy(mine, Version)
	theirs := make([]byte, versionLen)
	if err := c.xchg(mine, theirs); err != nil {
		return err
	}
	if i := bytes.IndexByte(theirs, 0); i >= 0 {
		theirs = theirs[:i]
	}
	c.PeerVersion = string(theirs)
	v := atof(c.PeerVersion)
	if v < minPeerVersion {
		return fmt.Errorf("perftest: peer version %q: not compatible with versions older than %.2f", c.PeerVersion, minPeerVersion)
	}
	return nil
}

// atof reads the leading number of s as C's atof does: "6.06" is 6.06,
// "5.70abc" is 5.70, nonsense is 0.
func atof(s string) float64 {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !strings.Contains(s[:end], ".")) {
		end++
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return v
}

// ExchangeSysData swaps the cycle buffer (page) size and the cache line
// size, 4 bytes each in network order, and returns the larger of each
// pair, which both sides then use (check_sys_data).
func (c *Conn) ExchangeSysData(cycleBuffer, cacheLine int) (int, int, error) {
	var mine, theirs [4]byte
	out := [2]int{cycleBuffer, cacheLine}
	for i := range out {
		binary.BigEndian.PutUint32(mine[:], uint32(out[i]))
		if err := c.xchg(mine[:], theirs[:]); err != nil {
			return 0, 0, err
		}
		r := int(int32(binary.BigEndian.Uint32(theirs[:])))
		if r > out[i] {
			out[i] = r
		}
	}
	// A hostile peer could ask for absurd buffers; perftest would try to
	// allocate them. Refuse.
	if out[0] > 1<<30 || out[1] > 1<<20 {
		return 0, 0, fmt.Errorf("perftest: peer asks for a cycle buffer of %d and a cache line of %d bytes", out[0], out[1])
	}
	return out[0], out[1], nil
}

// ExchangeMTU swaps the active MTUs (as ibv_mtu enum values written as
// text) and returns the smaller valid one (check_mtu).
func (c *Conn) ExchangeMTU(mtu verbs.MTU) (verbs.MTU, error) {
	mine := make([]byte, mtuLen)
	copy(mine, strconv.Itoa(int(mtu))) // one digit, then NUL
	theirs := make([]byte, mtuLen)
	if err := c.xchg(mine, theirs); err != nil {
		return 0, err
	}
	n := 0
	for _, ch := range theirs {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	rem := verbs.MTU(n)
	if n >= int(verbs.MTU256) && n <= int(verbs.MTU4096) && rem < mtu {
		return rem, nil
	}
	return mtu, nil
}

// HandShake swaps one QP's Dest (ctx_hand_shake); perftest also uses it
// as a barrier, with whatever Dest is at hand.
func (c *Conn) HandShake(my *Dest) (Dest, error) {
	if c.cm {
		theirs := make([]byte, cmDestLen)
		if err := c.xchg(my.MarshalCM(), theirs); err != nil {
			return Dest{}, err
		}
		return ParseCMDest(theirs)
	}
	theirs := make([]byte, destLen)
	if err := c.xchg(my.Marshal(), theirs); err != nil {
		return Dest{}, err
	}
	return ParseDest(theirs)
}

// ExchangeBWReports swaps bandwidth reports (xchg_bw_reports for a peer
// of version 5.33 or later: 8-byte iterations).
func (c *Conn) ExchangeBWReports(my BWReport) (BWReport, error) {
	var r BWReport
	fields := []struct {
		mine   uint64
		theirs *uint64
	}{
		{my.Size, &r.Size},
		{my.Iters, &r.Iters},
		{math.Float64bits(my.BWPeak), nil},
		{math.Float64bits(my.BWAvg), nil},
		{math.Float64bits(my.MsgRate), nil},
	}
	var floats [3]uint64
	for i, f := range fields {
		var mine, theirs [8]byte
		binary.BigEndian.PutUint64(mine[:], f.mine)
		if err := c.xchg(mine[:], theirs[:]); err != nil {
			return r, err
		}
		v := binary.BigEndian.Uint64(theirs[:])
		if f.theirs != nil {
			*f.theirs = v
		} else {
			floats[i-2] = v
		}
	}
	r.BWPeak = math.Float64frombits(floats[0])
	r.BWAvg = math.Float64frombits(floats[1])
	r.MsgRate = math.Float64frombits(floats[2])
	return r, nil
}

// CloseConnection is perftest's ctx_close_connection: a last handshake,
// then, over TCP, "done" and close. The peer's "done" is not waited for.
// Over rdma_cm the handshake is all; the connection is torn down with
// the test's QPs.
func (c *Conn) CloseConnection(my *Dest) error {
	if _, err := c.HandShake(my); err != nil {
		c.p.Close()
		return err
	}
	if c.cm {
		return nil
	}
	err := c.p.write(doneMsg)
	if cerr := c.p.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("perftest: close: %w", cerr)
	}
	return err
}
