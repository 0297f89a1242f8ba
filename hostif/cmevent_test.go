package hostif

import (
	"testing"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic/cm"
)

// TestCMEventCodes holds the host interface's CM event codes equal to
// the daemon's CM agent's, which the server sends as they are.
func TestCMEventCodes(t *testing.T) {
	for _, c := range []struct {
		wire  uint8
		agent cm.EventType
	}{
		{abi.CMEventConnectRequest, cm.EventConnectRequest}, {abi.CMEventEstablished, cm.EventEstablished},
		{abi.CMEventRejected, cm.EventRejected}, {abi.CMEventUnreachable, cm.EventUnreachable},
		{abi.CMEventConnectError, cm.EventConnectError}, {abi.CMEventDisconnected, cm.EventDisconnected},
		{abi.CMEventTimewaitExit, cm.EventTimewaitExit},
	} {
		if c.wire != uint8(c.agent) {
			t.Errorf("%v: host interface code %d, CM agent's %d", c.agent, c.wire, uint8(c.agent))
		}
	}
}
