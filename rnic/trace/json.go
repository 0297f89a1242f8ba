package trace

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rnicd/rnicd/rnic/qpmgr"
	"github.com/rnicd/rnicd/wire/bth"
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
func (e Event) MarshalJSON() ([]byte, error) {
	j := jsonEvent{
		Seq: e.Seq, Time: time.Unix(0, e.Time).UTC().Format(time.RFC3339Nano), TimeNS: e.Time,
		NIC: e.NIC, Module: e.Module.String(), Step: e.Step.String(), QPN: e.QPN, DestQPN: e.DestQPN,
		PSN: e.PSN, WRID: e.WRID, Op: uint8(e.Opcode), WROpN: uint8(e.WROp), Len: e.Len,
		Flags: uint8(e.Flags), Arg: e.Arg, Aux: e.Aux, Detail: e.Detail(),
	}
	// A fetch has a PSN (the first) but a work request's opcode, no
	// packet's.
	switch {
	case e.Step == StepPost || e.Step == StepFetch || (e.Step == StepComplete && e.Flags&FlagRecv == 0):
		j.WROp = e.WROp.String()
	case e.HasPSN():
		j.Opcode = e.Opcode.String()
	}
	return json.Marshal(j)
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
		Opcode: bth.Opcode(j.Op), WROp: qpmgr.WROpcode(j.WROpN), QPN: j.QPN, DestQPN: j.DestQPN,
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
// flushing after every batch read. It is what `rnicd --trace FILE` runs.
func WriteJSON(ctx context.Context, s *Sub, w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	buf := make([]Event, 256)
	for {
		n, err := s.Read(ctx, buf)
		for i := range buf[:n] {
			if werr := enc.Encode(buf[i]); werr != nil {
				return fmt.Errorf("trace: writing JSON: %w", werr)
			}
		}
		// Drain what arrived meanwhile (all of it when ctx is done)
		// before flushing.
		for n > 0 || err != nil {
			if n = s.TryRead(buf); n == 0 {
				break
			}
			for i := range buf[:n] {
				if werr := enc.Encode(buf[i]); werr != nil {
					return fmt.Errorf("trace: writing JSON: %w", werr)
				}
			}
		}
		if ferr := bw.Flush(); ferr != nil {
			return fmt.Errorf("trace: writing JSON: %w", ferr)
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
