package bth

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The gopacket face of the package, for tools, tests and capture files. It
// is a thin layer over the views: decoding runs Parse and reads the views,
// serializing writes through the views' Encode methods, so the opcode
// table and the wire layout are defined once, in opcode.go and headers.go.

// LayerTypeRoCE is the gopacket layer type of the RoCEv2 transport packet
// (BTH through ICRC). Its number is the RoCEv2 UDP port, which is clear of
// gopacket's own layer numbers (below 2000).
var LayerTypeRoCE = gopacket.RegisterLayerType(UDPPort, gopacket.LayerTypeMetadata{
	Name:    "RoCE",
	Decoder: gopacket.DecodeFunc(decodeRoCE),
})

// LayerTypeGSI is what follows a UD SEND ONLY to QP1 when a whole packet
// is decoded (gopacket.NewPacket): a 256-byte MAD of the General Services
// Interface (IBTA 13.5). This package decodes it as a raw payload; wire/mad
// installs its MAD decoder for this layer type when a program imports it,
// so bth needs to know nothing of MADs. NextLayerType, which
// DecodingLayerParser chains follow, still says Payload.
var LayerTypeGSI = gopacket.RegisterLayerType(UDPPort+1, gopacket.LayerTypeMetadata{
	Name:    "GSI",
	Decoder: gopacket.DecodePayload,
})

func init() {
	// UDP hands its payload to LayerTypeRoCE when either port is 4791.
	layers.RegisterUDPPortLayerType(layers.UDPPort(UDPPort), LayerTypeRoCE)
}

// RETHFields are the values of a RETH.
type RETHFields struct {
	VA        uint64
	RKey      uint32
	DMALength uint32
}

// AtomicETHFields are the values of an AtomicETH.
type AtomicETHFields struct {
	VA          uint64
	RKey        uint32
	SwapAddData uint64
	CompareData uint64
}

// AETHFields are the values of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

// DETHFields are the values of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

// RoCE is a decoded RoCEv2 transport packet. Contents holds the BTH and the
// extension headers, Payload the data payload without pad and ICRC. Only
// the extension headers that BTH.Opcode carries (Opcode.Has) are meaningful;
// the others are zero after decoding and ignored when serializing.
//
// Serializing writes reserved bits, the pad bytes and the 16 reserved bytes
// of a CNP as zero, as every sender seen in the golden captures does, and
// writes ICRC as stored: set it with FixICRC after changing any field.
type RoCE struct {
	layers.BaseLayer

	BTH          BTHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH uint64 // original data at the target address
	ImmDt        uint32 // immediate data, in network order as on the wire
	IETH         uint32 // R_Key to invalidate
	DETH         DETHFields
	XRCSRQN      uint32 // the XRCETH's SRQ number
	ICRC         uint32
}

// LayerType returns LayerTypeRoCE.
func (r *RoCE) LayerType() gopacket.LayerType { return LayerTypeRoCE }

// CanDecode returns LayerTypeRoCE.
func (r *RoCE) CanDecode() gopacket.LayerClass { return LayerTypeRoCE }

// NextLayerType is gopacket's raw payload: what a RoCE payload means
// depends on the QP's state, not on the packet.
func (r *RoCE) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes decodes data, the UDP payload, with Parse. It does not
// check the ICRC, which needs the IP and UDP headers (see ICRCFor). Errors
// are *DecodeError; a truncated packet also sets df's truncated flag.
func (r *RoCE) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	p, err := Parse(data)
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) && (de.Reason == ReasonShort || de.Reason == ReasonTruncated) {
			df.SetTruncated()
		}
		return err
	}
	*r = RoCE{BTH: p.BTH().Fields(), ICRC: p.ICRC()}
	op := p.Opcode()
	if op.Has(HdrRETH) {
		h := p.RETH()
		r.RETH = RETHFields{VA: h.VA(), RKey: h.RKey(), DMALength: h.DMALength()}
	}
	if op.Has(HdrAtomicETH) {
		h := p.AtomicETH()
		r.AtomicETH = AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAddData: h.SwapAddData(), CompareData: h.CompareData()}
	}
	if op.Has(HdrAETH) {
		h := p.AETH()
		r.AETH = AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()}
	}
	if op.Has(HdrAtomicAckETH) {
		r.AtomicAckETH = p.AtomicAckETH().OrigData()
	}
	if op.Has(HdrImmDt) {
		r.ImmDt = p.ImmDt().Imm()
	}
	if op.Has(HdrIETH) {
		r.IETH = p.IETH().RKey()
	}
	if op.Has(HdrDETH) {
		h := p.DETH()
		r.DETH = DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()}
	}
	if op.Has(HdrXRCETH) {
		r.XRCSRQN = p.XRCETH().SRQN()
	}
	r.Contents = data[:op.HdrLen()]
	r.Payload = p.Payload()
	return nil
}

func decodeRoCE(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCE{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	if r.BTH.Opcode == UDSendOnly && r.BTH.DestQP == 1 { // QP1 is the GSI (IBTA 10.2.4)
		return p.NextDecoder(LayerTypeGSI)
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// SerializeTo writes the packet around what b already holds, which is its
// data payload, as gopacket layers do: the headers go in front, pad and ICRC
// after. So a decoded packet's layers serialize back to its bytes; to build
// one, serialize the RoCE layer followed by a gopacket.Payload. With
// opts.FixLengths the pad count is set from the payload length. The ICRC is
// written as stored (see FixICRC).
func (r *RoCE) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	op := r.BTH.Opcode
	n := len(b.Bytes())
	if opts.FixLengths {
		r.BTH.PadCount = PadFor(n)
	}
	if r.BTH.PadCount < 0 || r.BTH.PadCount > 3 {
		return fmt.Errorf("bth: pad count %d does not fit in two bits", r.BTH.PadCount)
	}
	if !op.Valid() {
		return &DecodeError{Reason: ReasonUnknownOpcode, Opcode: op}
	}
	hdr, err := b.PrependBytes(op.HdrLen())
	if err != nil {
		return err
	}
	trailer, err := b.AppendBytes(r.BTH.PadCount + ICRCLen)
	if err != nil {
		return err
	}
	clear(hdr)
	clear(trailer)
	// Nothing follows the trailer: the layers after this one are its payload.
	p := Packet{b: b.Bytes()[:op.HdrLen()+n+len(trailer)], op: op}
	p.BTH().Encode(&r.BTH)
	if op.Has(HdrRETH) {
		p.RETH().Encode(r.RETH.VA, r.RETH.RKey, r.RETH.DMALength)
	}
	if op.Has(HdrAtomicETH) {
		a := &r.AtomicETH
		p.AtomicETH().Encode(a.VA, a.RKey, a.SwapAddData, a.CompareData)
	}
	if op.Has(HdrAETH) {
		p.AETH().Encode(r.AETH.Syndrome, r.AETH.MSN)
	}
	if op.Has(HdrAtomicAckETH) {
		p.AtomicAckETH().Encode(r.AtomicAckETH)
	}
	if op.Has(HdrImmDt) {
		p.ImmDt().Encode(r.ImmDt)
	}
	if op.Has(HdrIETH) {
		p.IETH().Encode(r.IETH)
	}
	if op.Has(HdrDETH) {
		p.DETH().Encode(r.DETH.QKey, r.DETH.SrcQP)
	}
	if op.Has(HdrXRCETH) {
		p.XRCETH().Encode(r.XRCSRQN)
	}
	p.SetICRC(r.ICRC)
	// The same checks a receiver makes: a payload on an opcode that
	// carries none, a nonzero version.
	_, err = Parse(p.b)
	return err
}

// ICRCFor returns the ICRC of the packet r (with its Payload) under the
// given IP layer (*layers.IPv4 or *layers.IPv6) and UDP layer, as they
// serialize with opts. FixLengths in opts updates the length fields of ip
// and udp, as gopacket.SerializeLayers would.
func (r *RoCE) ICRCFor(ip gopacket.SerializableLayer, udp *layers.UDP, opts gopacket.SerializeOptions) (uint32, error) {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ip, udp, r, gopacket.Payload(r.Payload)); err != nil {
		return 0, err
	}
	b := buf.Bytes()
	var hlen int
	switch ip.LayerType() {
	case layers.LayerTypeIPv4:
		hlen = int(b[0]&0x0f)*4 + UDPHeaderLen
	case layers.LayerTypeIPv6:
		hlen = IPv6HeaderLen + UDPHeaderLen
	default:
		return 0, errEnvelope
	}
	if len(b) < hlen+BTHLen+ICRCLen {
		return 0, errEnvelope
	}
	return ComputeICRC(b[:hlen], b[hlen:len(b)-ICRCLen])
}

// FixICRC sets r.ICRC to ICRCFor(ip, udp, opts).
func (r *RoCE) FixICRC(ip gopacket.SerializableLayer, udp *layers.UDP, opts gopacket.SerializeOptions) error {
	v, err := r.ICRCFor(ip, udp, opts)
	if err != nil {
		return err
	}
	r.ICRC = v
	return nil
}

// VerifyICRC checks the ICRC of a decoded packet's RoCE layer against the
// IP and UDP headers exactly as they were received.
func VerifyICRC(pkt gopacket.Packet) error {
	r, _ := pkt.Layer(LayerTypeRoCE).(*RoCE)
	u, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	var ip []byte
	switch l := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		ip = l.Contents
	case *layers.IPv6:
		ip = l.Contents
	}
	if r == nil || u == nil || ip == nil {
		return errors.New("bth: packet has no IP, UDP and RoCE layers")
	}
	var hdr [MaxEnvelopeLen]byte
	if len(ip)+len(u.Contents) > len(hdr) {
		return errEnvelope
	}
	n := copy(hdr[:], ip)
	n += copy(hdr[n:], u.Contents)
	// The RoCE part is contiguous in the packet: headers, payload, pad and
	// ICRC follow the UDP header.
	roce := u.Payload
	if len(roce) < ICRCLen {
		return errEnvelope
	}
	crc, err := ComputeICRC(hdr[:n], roce[:len(roce)-ICRCLen])
	if err != nil {
		return err
	}
	if crc != binary.LittleEndian.Uint32(roce[len(roce)-ICRCLen:]) {
		return &DecodeError{Reason: ReasonBadICRC, Opcode: r.BTH.Opcode, Len: len(roce)}
	}
	return nil
}
