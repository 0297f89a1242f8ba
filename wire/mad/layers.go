package mad

import (
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/rnicd/rnicd/wire/bth"
)

// The gopacket face of the package: the MAD that a RoCE UD SEND ONLY to
// QP1 carries. wire/bth routes such packets to bth.LayerTypeGSI; importing
// this package installs the MAD decoder for that layer type, so
// gopacket.NewPacket on a capture of rdma_cm traffic yields Ethernet, IPv4,
// UDP, RoCE and MAD layers. Decoding and serializing go through the views.

// LayerTypeMAD is the layer type of a MAD on QP1.
var LayerTypeMAD = bth.LayerTypeGSI

func init() {
	gopacket.OverrideLayerType(int(LayerTypeMAD), gopacket.LayerTypeMetadata{
		Name:    "MAD",
		Decoder: gopacket.DecodeFunc(decodeMAD),
	})
}

// Layer is a decoded MAD. Header is always set. For a CM message (CheckCM
// passes and the attribute is one of the nine below) the matching Fields
// member holds the message and the others are zero; for any other MAD,
// Data holds the 232 bytes of class data as they were. Contents is the
// whole MAD, Payload whatever the UD payload carried past 256 bytes.
type Layer struct {
	layers.BaseLayer

	Header Header

	REQ     REQFields
	MRA     MRAFields
	REJ     REJFields
	REP     REPFields
	RTU     RTUFields
	DREQ    DREQFields
	DREP    DREPFields
	SIDRReq SIDRReqFields
	SIDRRep SIDRRepFields

	Data []byte // class data of a MAD that is not a CM message above
}

// LayerType returns LayerTypeMAD.
func (l *Layer) LayerType() gopacket.LayerType { return LayerTypeMAD }

// CanDecode returns LayerTypeMAD.
func (l *Layer) CanDecode() gopacket.LayerClass { return LayerTypeMAD }

// NextLayerType is gopacket's raw payload: a MAD ends the packet.
func (l *Layer) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// IsCM reports whether the layer decoded a CM message into its Fields.
func (l *Layer) IsCM() bool { return l.Data == nil }

// DecodeFromBytes decodes data, a UD payload to QP1. It fails on input
// shorter than a MAD and sets df's truncated flag then.
func (l *Layer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	m, err := ParseMAD(data)
	if err != nil {
		df.SetTruncated()
		return err
	}
	*l = Layer{Header: m.Header()}
	l.Contents, l.Payload = data[:MADLen], data[MADLen:]
	d := m.Data()
	if m.CheckCM() != nil {
		l.Data = d
		return nil
	}
	switch m.AttrID() {
	case AttrREQ:
		l.REQ = REQ(d).Fields()
	case AttrMRA:
		l.MRA = MRA(d).Fields()
	case AttrREJ:
		l.REJ = REJ(d).Fields()
	case AttrREP:
		l.REP = REP(d).Fields()
	case AttrRTU:
		l.RTU = RTU(d).Fields()
	case AttrDREQ:
		l.DREQ = DREQ(d).Fields()
	case AttrDREP:
		l.DREP = DREP(d).Fields()
	case AttrSIDRReq:
		l.SIDRReq = SIDRReq(d).Fields()
	case AttrSIDRRep:
		l.SIDRRep = SIDRRep(d).Fields()
	default:
		l.Data = d
	}
	return nil
}

func decodeMAD(data []byte, p gopacket.PacketBuilder) error {
	l := &Layer{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// SerializeTo writes the MAD in front of what b holds: the header from
// l.Header, the class data from the Fields member its attribute selects
// (or from Data, which must then be DataLen bytes).
func (l *Layer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if l.Data != nil && len(l.Data) != DataLen {
		return fmt.Errorf("mad: %d bytes of class data, want %d", len(l.Data), DataLen)
	}
	buf, err := b.PrependBytes(MADLen)
	if err != nil {
		return err
	}
	m := MAD(buf)
	m.EncodeHeader(&l.Header)
	d := m.Data()
	if l.Data != nil {
		copy(d, l.Data)
		return nil
	}
	switch l.Header.AttrID {
	case AttrREQ:
		REQ(d).Encode(&l.REQ)
	case AttrMRA:
		MRA(d).Encode(&l.MRA)
	case AttrREJ:
		REJ(d).Encode(&l.REJ)
	case AttrREP:
		REP(d).Encode(&l.REP)
	case AttrRTU:
		RTU(d).Encode(&l.RTU)
	case AttrDREQ:
		DREQ(d).Encode(&l.DREQ)
	case AttrDREP:
		DREP(d).Encode(&l.DREP)
	case AttrSIDRReq:
		SIDRReq(d).Encode(&l.SIDRReq)
	case AttrSIDRRep:
		SIDRRep(d).Encode(&l.SIDRRep)
	default:
		return fmt.Errorf("mad: no class data to serialize for %v", l.Header.AttrID)
	}
	return nil
}
