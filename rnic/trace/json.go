package trace

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rnicd/rnicd/ib"
	"github.com/rnicd/rnicd/wire/bth"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// jsonEvent is an Event as one JSON line: every field under a plain name,
// the numbers (to read the event back) and their names (for a person, or
// jq), and the rendered detail.
type jsonEvent struct {
	Seq     uint64 `json:"seq"`
	Time    string `json:"time"`
	TimeNS  int64  `json:"time_ns"`
	NIC     string `json:"nic"`
	Module  string `json:"module"`
	Step    string `json:"step"`
	QPN     uint32 `json:"qpn,omitempty"`
	DestQPN uint32 `json:"dest_qpn,omitempty"`
	PSN     uint32 `json:"psn"`
	WRID    uint64 `json:"wr_id"`
	Opcode  string `json:"opcode,omitempty"`
	Op      uint8  `json:"op"`
	WROp    string `json:"wr_opcode,omitempty"`
	WROpN   uint8  `json:"wr_op"`
	Len     uint32 `json:"len"`
	Flags   uint8  `json:"flags,omitempty"`
	Arg     uint32 `json:"arg,omitempty"`
	Aux     uint32 `json:"aux,omitempty"`
	Detail  string `json:"detail"`
}

// MarshalJSON renders e as a JSON object (see jsonEvent).
func (e Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// AppendJSON appends e as MarshalJSON renders it, byte for byte what
// encoding/json makes of e's jsonEvent (the tests build it and compare),
// several times faster and without an allocation: a trace file is
// written at the NIC's pace.
func (e *Event) AppendJSON(b []byte) []byte {
	num := func(b []byte, key string, v uint64) []byte {
		b = append(b, `,"`...)
		b = append(b, key...)
		b = append(b, `":`...)
		return strconv.AppendUint(b, v, 10)
	}
	str := func(b []byte, key, v string) []byte {
		b = append(b, `,"`...)
		b = append(b, key...)
		b = append(b, `":`...)
		return appendJSONString(b, v)
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	// RFC 3339 is digits, dashes, colons, a dot, T and Z: nothing to
	// escape.
	b = append(b, `,"time":"`...)
	b = time.Unix(0, e.Time).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","time_ns":`...)
	b = strconv.AppendInt(b, e.Time, 10)
	b = str(b, "nic", e.NIC)
	b = str(b, "module", e.Module.String())
	b = str(b, "step", e.Step.String())
	if e.QPN != 0 {
		b = num(b, "qpn", uint64(e.QPN))
	}
	if e.DestQPN != 0 {
		b = num(b, "dest_qpn", uint64(e.DestQPN))
	}
	b = num(b, "psn", uint64(e.PSN))
	b = num(b, "wr_id", e.WRID)
	wrOp := e.namesWROp()
	if !wrOp && e.HasPSN() {
		b = str(b, "opcode", e.Opcode.String())
	}
	b = num(b, "op", uint64(e.Opcode))
	if wrOp {
		b = str(b, "wr_opcode", e.WROp.String())
	}
	b = num(b, "wr_op", uint64(e.WROp))
	b = num(b, "len", uint64(e.Len))
	if e.Flags != 0 {
		b = num(b, "flags", uint64(e.Flags))
	}
	if e.Arg != 0 {
		b = num(b, "arg", uint64(e.Arg))
	}
	if e.Aux != 0 {
		b = num(b, "aux", uint64(e.Aux))
	}
	// The detail is rendered in place and escaped only if it must be:
	// its text is plain ASCII but for what an event's names bring.
	b = append(b, `,"detail":"`...)
	start := len(b)
	b = e.AppendDetail(b)
	if n := jsonSafePrefix(b[start:]); n < len(b)-start {
		d := string(b[start:])
		b = appendJSONBody(b[:start], d)
	}
	return append(b, `"}`...)
}

// namesWROp reports whether e names a work request's opcode rather than
// a packet's: a post, a fetch (which has a PSN, the first, but no packet)
// and a send completion.
func (e *Event) namesWROp() bool {
	return e.Step == StepPost || e.Step == StepFetch || (e.Step == StepComplete && e.Flags&FlagRecv == 0)
}

// appendJSONString appends s quoted as encoding/json quotes it: control
// characters, quotes and backslashes escaped, and <, >, & and U+2028/9
// too; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONBody(b, s)
	return append(b, '"')
}

// jsonSafePrefix is how many bytes at the start of s encoding/json
// copies as they are: printable ASCII but for ", \, <, > and &.
func jsonSafePrefix[T string | []byte](s T) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= utf8.RuneSelf, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return i
		}
	}
	return len(s)
}

// appendJSONBody appends s escaped, without the quotes.
func appendJSONBody(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	i := jsonSafePrefix(s)
	b = append(b, s[:i]...)
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}

// UnmarshalJSON reads an event MarshalJSON wrote; the names are checked
// against the numbers' tables.
func (e *Event) UnmarshalJSON(b []byte) error {
	var j jsonEvent
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	m, ok := lookup(moduleNames[:], j.Module)
	if !ok {
		return fmt.Errorf("trace: unknown module %q", j.Module)
	}
	s, ok := lookup(stepNames[:], j.Step)
	if !ok {
		return fmt.Errorf("trace: unknown step %q", j.Step)
	}
	*e = Event{
		Seq: j.Seq, Time: j.TimeNS, NIC: j.NIC, Module: Module(m), Step: Step(s), Flags: Flags(j.Flags),
		Opcode: bth.Opcode(j.Op), WROp: ib.WROpcode(j.WROpN), QPN: j.QPN, DestQPN: j.DestQPN,
		PSN: j.PSN, WRID: j.WRID, Len: j.Len, Arg: j.Arg, Aux: j.Aux,
	}
	return nil
}

func lookup(names []string, s string) (int, bool) {
	for i, n := range names {
		if n != "" && n == s {
			return i, true
		}
	}
	return 0, false
}

// WriteJSON drains s into w as JSON lines until ctx is done or w fails,
// flushing after every batch read (and flushing w too if it has a Flush
// method, as a bufio.Writer does). Every Write to w holds whole lines, so
// a w that starts a new file between Writes (package rotate, as `rnicd
// --trace FILE` runs it) leaves each file JSON lines of its own.
func WriteJSON(ctx context.Context, s *Sub, w io.Writer) error {
	bw := bufio.NewWriter(w)
	fl, _ := w.(interface{ Flush() error })
	buf := make([]Event, 256)
	var line []byte
	write := func(evs []Event) error {
		for i := range evs {
			line = append(evs[i].AppendJSON(line[:0]), '\n')
			// A line that does not fit what is left of the buffer would
			// be split between two writes: write out the buffer first.
			if len(line) > bw.Available() && bw.Buffered() > 0 {
				if err := bw.Flush(); err != nil {
					return fmt.Errorf("trace: writing JSON: %w", err)
				}
			}
			if _, err := bw.Write(line); err != nil {
				return fmt.Errorf("trace: writing JSON: %w", err)
			}
		}
		return nil
	}
	for {
		n, err := s.Read(ctx, buf)
		if werr := write(buf[:n]); werr != nil {
			return werr
		}
		// Drain what arrived meanwhile (all of it when ctx is done)
		// before flushing.
		for n > 0 || err != nil {
			if n = s.TryRead(buf); n == 0 {
				break
			}
			if werr := write(buf[:n]); werr != nil {
				return werr
			}
		}
		if ferr := bw.Flush(); ferr != nil {
			return fmt.Errorf("trace: writing JSON: %w", ferr)
		}
		if fl != nil {
			if ferr := fl.Flush(); ferr != nil {
				return fmt.Errorf("trace: writing JSON: %w", ferr)
			}
		}
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}

// ReadJSON reads JSON-lines events from r and calls f with each, until
// r ends (nil), a line does not parse, or f returns an error.
func ReadJSON(r io.Reader, f func(*Event) error) error {
	dec := json.NewDecoder(r)
	for {
		var e Event
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("trace: reading JSON: %w", err)
		}
		if err := f(&e); err != nil {
			return err
		}
	}
}
