package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rnicd/rnicd/verbs"
)

// ppDest is what the ibv_*_pingpong tools tell each other about a QP over
// TCP before they connect it: LID (0 on RoCE), QPN, first PSN, and GID.
type ppDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID verbs.GID
}

// ppMsgLen is the size of one destination message: rdma-core sends the
// whole char array "0000:000000:000000:" plus 32 GID digits plus its NUL,
// whatever the text's length.
const ppMsgLen = 52

// ppDone is the client's last message, "done" with its NUL, after which
// both sides close the connection.
var ppDone = []byte("done\x00")

// marshal gives d as rdma-core writes it: "%04x:%06x:%06x:" and the GID in
// its wire form (the 16 bytes as 32 lowercase hex digits, first byte
// first), NUL-terminated and padded to ppMsgLen.
func (d ppDest) marshal() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(d.GID[:]))
	b := make([]byte, ppMsgLen)
	copy(b, s)
	return b
}

// parseDest reads a destination message from a peer, which may send
// anything: every field must be hex of its size, the GID exactly 32 hex
// digits, and the text must end with a NUL inside the message.
func parseDest(b []byte) (ppDest, error) {
	var d ppDest
	if len(b) != ppMsgLen {
		return d, fmt.Errorf("destination message of %d bytes, want %d", len(b), ppMsgLen)
	}
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return d, errors.New("destination message has no terminating NUL")
	}
	f := strings.Split(string(b[:end]), ":")
	if len(f) != 4 {
		return d, fmt.Errorf("destination message %q: want LID:QPN:PSN:GID", b[:end])
	}
	fields := []struct {
		name string
		bits int
		dst  *uint32
	}{{"LID", 16, new(uint32)}, {"QPN", 24, &d.QPN}, {"PSN", 24, &d.PSN}}
	for i, fl := range fields {
		v, err := strconv.ParseUint(f[i], 16, fl.bits)
		if err != nil || f[i] == "" {
			return ppDest{}, fmt.Errorf("destination message %q: bad %s %q", b[:end], fl.name, f[i])
		}
		*fl.dst = uint32(v)
	}
	d.LID = uint16(*fields[0].dst)
	if len(f[3]) != 32 {
		return ppDest{}, fmt.Errorf("destination message %q: GID %q is not 32 hex digits", b[:end], f[3])
	}
	if _, err := hex.Decode(d.GID[:], []byte(f[3])); err != nil {
		return ppDest{}, fmt.Errorf("destination message %q: bad GID: %v", b[:end], err)
	}
	return d, nil
}

// ppClientExchange is the client's side of the TCP exchange: send every
// local destination, read as many from the server, then say "done".
func ppClientExchange(rw io.ReadWriter, mine []ppDest) ([]ppDest, error) {
	for _, d := range mine {
		if _, err := rw.Write(d.marshal()); err != nil {
			return nil, fmt.Errorf("couldn't send local address: %w", err)
		}
	}
	rem, err := readDests(rw, len(mine))
	if err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if _, err := rw.Write(ppDone); err != nil {
		return nil, fmt.Errorf("couldn't send done: %w", err)
	}
	return rem, nil
}

// ppServerExchange is the server's side: read the client's destinations,
// connect the local QPs to them (before answering, so that the client's
// first SEND finds them ready), send the local destinations, and wait for
// the client's "done".
func ppServerExchange(rw io.ReadWriter, mine []ppDest, connect func([]ppDest) error) ([]ppDest, error) {
	rem, err := readDests(rw, len(mine))
	if err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if err := connect(rem); err != nil {
		return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	for _, d := range mine {
		if _, err := rw.Write(d.marshal()); err != nil {
			return nil, fmt.Errorf("couldn't send local address: %w", err)
		}
	}
	done := make([]byte, len(ppDone))
	if _, err := io.ReadFull(rw, done); err != nil {
		return nil, fmt.Errorf("couldn't read done: %w", err)
	}
	if !bytes.Equal(done, ppDone) {
		return nil, fmt.Errorf("peer sent %q instead of \"done\"", done)
	}
	return rem, nil
}

func readDests(r io.Reader, n int) ([]ppDest, error) {
	out := make([]ppDest, n)
	buf := make([]byte, ppMsgLen)
	for i := range out {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i+1, n, err)
		}
		d, err := parseDest(buf)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}
