package bth

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// A UD SEND ONLY to QP1 is handed to LayerTypeGSI, which this package
// decodes as the raw 256-byte MAD (wire/mad installs the MAD decoder);
// other packets keep a plain payload.
func TestGSILayerRouting(t *testing.T) {
	frames, _ := readCapture(t, "testdata/rping.pcap")
	var gsi, other int
	for _, f := range frames {
		p := gopacket.NewPacket(f.frame, layers.LayerTypeEthernet, gopacket.Default)
		r, _ := p.Layer(LayerTypeRoCE).(*RoCE)
		if r == nil {
			t.Fatalf("%v: no RoCE layer", f)
		}
		pl, _ := p.Layer(gopacket.LayerTypePayload).(*gopacket.Payload)
		if r.BTH.DestQP == 1 {
			gsi++
			if r.BTH.Opcode != UDSendOnly || pl == nil || len(*pl) != 256 {
				t.Errorf("%v: QP1 packet %v with payload layer %v", f, r.BTH.Opcode, p.Layers())
			}
		} else if r.BTH.Opcode.Is(FlagPayload) && len(r.Payload) > 0 && pl == nil {
			other++
			t.Errorf("%v: no payload layer: %v", f, p.Layers())
		}
	}
	if gsi != 5 || other != 0 {
		t.Errorf("%d QP1 packets (want rping's 5: REQ, REP, RTU, DREQ, DREP)", gsi)
	}
	if LayerTypeGSI.String() != "GSI" {
		t.Error(LayerTypeGSI.String())
	}
}
