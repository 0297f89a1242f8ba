package trace

import "time"

// fields is e as the JSON object's fields: the reference AppendJSON's
// output must equal, marshalled by encoding/json (TestAppendJSON,
// FuzzReadJSON).
func (e *Event) fields() jsonEvent {
	j := jsonEvent{
		Seq: e.Seq, Time: time.Unix(0, e.Time).UTC().Format(time.RFC3339Nano), TimeNS: e.Time,
		NIC: e.NIC, Module: e.Module.String(), Step: e.Step.String(), QPN: e.QPN, DestQPN: e.DestQPN,
		PSN: e.PSN, WRID: e.WRID, Op: uint8(e.Opcode), WROpN: uint8(e.WROp), Len: e.Len,
		Flags: uint8(e.Flags), Arg: e.Arg, Aux: e.Aux, Detail: e.Detail(),
	}
	switch {
	case e.namesWROp():
		j.WROp = e.WROp.String()
	case e.HasPSN():
		j.Opcode = e.Opcode.String()
	}
	return j
}
