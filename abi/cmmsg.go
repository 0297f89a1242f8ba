package abi

import "net/netip"

// The bodies of the connection manager's requests (KindCMCreateChannel
// and after): rdma_cm's calls as the daemon's CM agent serves them. A CM
// ID and a CM event channel are objects of the client like a QP, so a
// handle of another client or of another kind is refused the same way.

// CMConnectReq starts a connection from CM ID H with QP (a handle of an
// RC QP of this client, in RESET or INIT) to the port whose GID is DGID,
// on ServiceID (rdma_connect after rdma_resolve_route). A ServiceID in
// rdma_cm's UDP port space (mad.PSUDP) asks instead, by SIDR_REQ, for
// the UD QP and Q_Key behind it: QP is then a UD QP, which the CM does
// not move, and only ServiceID, DGID and PrivateData count.
type CMConnectReq struct {
	H, QP       uint32
	DGID        [16]byte
	ServiceID   uint64
	StartingPSN uint32
	CMParams
	PrivateData []byte
	// TrafficClass is the connection's IP TOS byte (rdma_set_option's
	// RDMA_OPTION_ID_TOS), sent in the REQ and put in both QPs' AH. It
	// comes last, and only when it is not 0, so that a client that knows
	// no TOS (clib) sends the body it always sent: one encoding a value.
	TrafficClass uint8
}

// CMParams are a connection's parameters (struct rdma_conn_param, with
// the path MTU as IBTA code, as ib.MTU).
type CMParams struct {
	PathMTU, ResponderResources, InitiatorDepth, RetryCount, RNRRetryCount uint8
}

func (m *CMParams) encode(e *encoder) {
	for _, v := range []uint8{m.PathMTU, m.ResponderResources, m.InitiatorDepth, m.RetryCount, m.RNRRetryCount} {
		e.u8(v)
	}
}

func (m *CMParams) decode(d *decoder) {
	for _, p := range []*uint8{&m.PathMTU, &m.ResponderResources, &m.InitiatorDepth, &m.RetryCount, &m.RNRRetryCount} {
		*p = d.u8()
	}
}

func (m *CMConnectReq) encode(e *encoder) {
	e.u32(m.H)
	e.u32(m.QP)
	e.bytes(m.DGID[:])
	e.u64(m.ServiceID)
	e.u32(m.StartingPSN)
	m.CMParams.encode(e)
	e.str(string(m.PrivateData))
	if m.TrafficClass != 0 {
		e.u8(m.TrafficClass)
	}
}

func (m *CMConnectReq) decode(d *decoder) {
	m.H, m.QP = d.u32(), d.u32()
	d.bytes(m.DGID[:])
	m.ServiceID = d.u64()
	m.StartingPSN = d.u32()
	m.CMParams.decode(d)
	m.PrivateData = []byte(d.str())
	if d.err == nil && len(d.b) > 0 {
		if m.TrafficClass = d.u8(); m.TrafficClass == 0 {
			d.fail("traffic class 0 sent as a byte (it is sent as none)")
		}
	}
}

func (m *CMConnectReq) Target() uint32 { return m.H }

// CMAcceptReq answers a connect request's CM ID H with QP (rdma_accept).
// For a SIDR_REQ (a UD connect) QP is a UD QP, named in the SIDR_REP with
// rdma_cm's Q_Key (mad.RDMAUDPQKey), and only PrivateData counts besides.
type CMAcceptReq struct {
	H, QP                                             uint32
	StartingPSN                                       uint32
	ResponderResources, InitiatorDepth, RNRRetryCount uint8
	PrivateData                                       []byte
}

func (m *CMAcceptReq) encode(e *encoder) {
	e.u32(m.H)
	e.u32(m.QP)
	e.u32(m.StartingPSN)
	e.u8(m.ResponderResources)
	e.u8(m.InitiatorDepth)
	e.u8(m.RNRRetryCount)
	e.str(string(m.PrivateData))
}

func (m *CMAcceptReq) decode(d *decoder) {
	m.H, m.QP, m.StartingPSN = d.u32(), d.u32(), d.u32()
	m.ResponderResources, m.InitiatorDepth, m.RNRRetryCount = d.u8(), d.u8(), d.u8()
	m.PrivateData = []byte(d.str())
}

func (m *CMAcceptReq) Target() uint32 { return m.H }

// CMListenReq makes CM ID H listen on ServiceID (rdma_listen after
// rdma_bind_addr); CMDataReq carries private data for Reject (with the
// REJ reason) and Disconnect.
//
// Backlog is rdma_listen's: how many connect requests may wait for
// rdma_get_cm_event (0: the most, maxBacklog).
type CMListenReq struct {
	H         uint32
	ServiceID uint64
	Backlog   uint32
	// QPType is the listening ID's QP type (an ib.QPType): it hears the
	// requests of that type only, as the kernel's rdma_cm listener
	// (cma_ib_check_req_qp_type); 0 hears every type.
	QPType uint8
}

func (m *CMListenReq) encode(e *encoder) {
	e.u32(m.H)
	e.u64(m.ServiceID)
	e.u32(m.Backlog)
	e.u8(m.QPType)
}
func (m *CMListenReq) decode(d *decoder) {
	m.H, m.ServiceID, m.Backlog, m.QPType = d.u32(), d.u64(), d.u32(), d.u8()
}
func (m *CMListenReq) Target() uint32 { return m.H }

// CMDataReq is the body of Reject (Reason: the REJ reason; rdma_reject
// sends 28, consumer defined) and Disconnect (Reason unused).
type CMDataReq struct {
	H           uint32
	Reason      uint16
	PrivateData []byte
}

func (m *CMDataReq) encode(e *encoder) { e.u32(m.H); e.u16(m.Reason); e.str(string(m.PrivateData)) }
func (m *CMDataReq) decode(d *decoder) {
	m.H, m.Reason = d.u32(), d.u16()
	m.PrivateData = []byte(d.str())
}
func (m *CMDataReq) Target() uint32 { return m.H }

// CMEvent answers KindCMGetEvent: the channel's oldest event, or
// Type 0 if there is none (rdma_get_cm_event would block; the client
// waits on the channel's wake pipe and asks again).
type CMEvent struct {
	// Type is one of the CMEvent* codes, 0 for none.
	Type uint8
	// ID is the CM ID's handle; for CONNECT_REQUEST a new CM ID of this
	// client, and Listen the listening one's.
	ID, Listen uint32
	// RejectReason is the REJ reason of a REJECTED event (8: connection
	// refused), or the SIDR_REP status of an UNREACHABLE event that
	// answered a UD connect (1: nobody listens, 2: rejected), 0 otherwise.
	RejectReason uint16
	// Err is the event's error text ("" for none).
	Err string
	// The peer's values (CONNECT_REQUEST: from the REQ; ESTABLISHED on
	// the active side: from the REP).
	RemoteGID              [16]byte
	RemoteQPN, StartingPSN uint32
	CMParams
	PrivateData []byte
	// QKey is the peer's UD Q_Key from a SIDR_REP (ESTABLISHED of a UD
	// connect: rdma_ud_param's qkey, with RemoteQPN its qp_num and
	// RemoteGID its AH's DGID); 0 on other events. It goes last, so that
	// a decoder of the fields before it reads them where they were.
	QKey uint32
}

func (m *CMEvent) encode(e *encoder) {
	e.u8(m.Type)
	e.u32(m.ID)
	e.u32(m.Listen)
	e.u16(m.RejectReason)
	e.str(m.Err)
	e.bytes(m.RemoteGID[:])
	e.u32(m.RemoteQPN)
	e.u32(m.StartingPSN)
	m.CMParams.encode(e)
	e.str(string(m.PrivateData))
	e.u32(m.QKey)
}

func (m *CMEvent) decode(d *decoder) {
	m.Type = d.u8()
	m.ID, m.Listen = d.u32(), d.u32()
	m.RejectReason = d.u16()
	m.Err = d.str()
	d.bytes(m.RemoteGID[:])
	m.RemoteQPN, m.StartingPSN = d.u32(), d.u32()
	m.CMParams.decode(d)
	m.PrivateData = []byte(d.str())
	m.QKey = d.u32()
}

// The CM IDs of every client as `rdma res show cm_id` lists the kernel's
// (iproute2's rdma/res-cmid.c prints the fields; Linux's cma.c keeps
// them): the rdma_cm state, port space, owner, cm-idn, the source and
// destination address and port, and the QP bound. The daemon sees only
// what reaches it (listen, connect, a connect request), so an ID that
// has only resolved addresses in its client shows IDLE with none.

// ListCMIDsReq asks for the CM IDs from cm-idn From up.
type ListCMIDsReq struct{ From uint32 }

func (m *ListCMIDsReq) encode(e *encoder) { e.u32(m.From) }
func (m *ListCMIDsReq) decode(d *decoder) { m.From = d.u32() }

// CMIDRow is one CM ID of ListCMIDsReply.
type CMIDRow struct {
	IDN, QPN uint32 // QPN 0: no QP bound
	State    string // rdma_cm's state name: IDLE, LISTEN, CONNECT, DISCONNECT
	PS       uint16 // mad.PortSpace
	PID      uint32
	Comm     string
	Src, Dst netip.AddrPort // invalid: not known
}

// ListCMIDsReply answers KindListCMIDs; More says a further request
// from Next is needed.
type ListCMIDsReply struct {
	Rows []CMIDRow
	More bool
	Next uint32
}

func (m *ListCMIDsReply) encode(e *encoder) {
	e.u32(uint32(len(m.Rows)))
	for i := range m.Rows {
		r := &m.Rows[i]
		e.u32(r.IDN)
		e.u32(r.QPN)
		e.str(r.State)
		e.u16(r.PS)
		e.u32(r.PID)
		e.str(r.Comm)
		encodeAddrPort(e, r.Src)
		encodeAddrPort(e, r.Dst)
	}
	e.u8(b2u(m.More))
	e.u32(m.Next)
}

func (m *ListCMIDsReply) decode(d *decoder) {
	n := d.u32()
	if n > MaxRows {
		d.fail("%d CM ID rows", n)
		return
	}
	m.Rows = make([]CMIDRow, n)
	for i := range m.Rows {
		r := &m.Rows[i]
		r.IDN, r.QPN = d.u32(), d.u32()
		r.State = d.str()
		r.PS = d.u16()
		r.PID = d.u32()
		r.Comm = d.str()
		r.Src, r.Dst = decodeAddrPort(d), decodeAddrPort(d)
	}
	m.More = u2b(d, d.u8())
	m.Next = d.u32()
}

// An address and port go as a family byte (0 none, 4, 6), 16 bytes of
// address and the port.
func encodeAddrPort(e *encoder, a netip.AddrPort) {
	switch {
	case !a.IsValid():
		e.u8(0)
	case a.Addr().Is4():
		e.u8(4)
	default:
		e.u8(6)
	}
	b := a.Addr().As16()
	e.bytes(b[:])
	e.u16(a.Port())
}

func decodeAddrPort(d *decoder) netip.AddrPort {
	fam := d.u8()
	var b [16]byte
	d.bytes(b[:])
	port := d.u16()
	switch fam {
	case 0:
		return netip.AddrPort{}
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), port)
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(b), port)
	}
	d.fail("address family %d", fam)
	return netip.AddrPort{}
}
