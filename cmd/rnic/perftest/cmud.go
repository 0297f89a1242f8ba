package perftest

// UD QPs over rdma_cm (-R -c UD): the IDs are in rdma_cm's UDP port
// space, so each "connection" is a service ID resolution (SIDR_REQ and
// SIDR_REP) that moves no QP: rdma_create_qp has put the UD QP in RTS
// with RDMA_UDP_QKEY already. What each side sends to, as perftest 4.5
// learns it (perftest_communication.c, rdma_cm_establish_ud_connection
// and the functions around it):
//
//   - the client, from ESTABLISHED: the server's QPN and Q_Key and an
//     address handle to it (rdma_ud_param);
//   - the server of a latency test, which sends too, from a datagram: the
//     client, once ESTABLISHED, sends a SEND with immediate of 4 bytes whose
//     immediate is its QPN; the server, which posted a receive of 44 bytes
//     (the GRH area and 4) before rdma_accept, builds its address handle
//     from the GRH as ibv_create_ah_from_wc does, and takes its own QP's
//     Q_Key as the client's (both are RDMA_UDP_QKEY).
//
// A bandwidth test's server only receives and needs neither. At the end
// nothing is disconnected: a UD ID has no connection (perftest's
// rdma_cm_disconnect_nodes returns at once for UD).

import (
	"fmt"
	"net/netip"

	"github.com/rnicd/rnicd/rdmacm"
	"github.com/rnicd/rnicd/verbs"
)

// udTarget is the remote QP and Q_Key a UD QP sends to.
type udTarget struct{ qpn, qkey uint32 }

// udQPNWRID is the WR ID perftest gives the QPN's SEND and its receive.
const udQPNWRID = 0

// udQPNMsgLen is the QPN's SEND: 4 bytes (the QPN itself goes as the
// immediate).
const udQPNMsgLen = 4

// udSendsQPN says whether the client tells the server its QPN: when the
// server sends too, in latency tests (perftest: LAT, or a duplex BW test,
// which this package does not run).
func (c *cmQPs) udSendsQPN() bool { return c.ud && c.lat }

// udEstablished takes the server's QP, Q_Key and address handle from
// QP i's ESTABLISHED and, in a latency test, sends it this QP's QPN.
func (c *cmQPs) udEstablished(res *resources, i int, id *rdmacm.ID, e *rdmacm.Event) error {
	if e.UD == nil {
		return fmt.Errorf("perftest: ESTABLISHED of UD QP %#x without its UD parameters", id.QP.QPN)
	}
	ah := e.UD.AH
	res.ahs[i], res.udTo[i] = &ah, udTarget{qpn: e.UD.QPN, qkey: e.UD.QKey}
	if !c.udSendsQPN() {
		return nil
	}
	wr := verbs.SendWR{WRID: udQPNWRID, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: id.QP.QPN,
		SGL: []verbs.SGE{res.mr.SGE(i*res.bufLen, udQPNMsgLen)}, AH: res.ahs[i], RemoteQPN: e.UD.QPN, RemoteQKey: e.UD.QKey}
	if err := id.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("perftest: send the QPN of UD QP %#x: %w", id.QP.QPN, err)
	}
	wcs, err := c.poll(res.sendCQ).poll(1)
	if err != nil {
		return err
	}
	if wc := &wcs[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend || wc.WRID != udQPNWRID {
		return wcError(wc, "UD connection parameters SEND")
	}
	return nil
}

// udAHRecvAddr is where QP i's receive of the client's QPN lands: the
// start of its receive area, GRH area first.
func (res *resources) udAHRecvAddr(i int) uint64 { return res.recvAddr(i, 0) }

// udPostQPNRecv posts, before rdma_accept, the receive the client's QPN
// will take on the server's QP i.
func (c *cmQPs) udPostQPNRecv(res *resources, i int, qp *verbs.QP) error {
	if !c.udSendsQPN() {
		return nil
	}
	sge := verbs.SGE{Addr: res.udAHRecvAddr(i), Length: udAddition + udQPNMsgLen, LKey: res.mr.LKey}
	if err := qp.PostRecv([]verbs.RecvWR{{WRID: udQPNWRID, SGL: []verbs.SGE{sge}}}); err != nil {
		return fmt.Errorf("perftest: post the receive for the client's QPN on UD QP %#x: %w", qp.QPN, err)
	}
	return nil
}

// udTakeQPN waits, after rdma_accept, for the client's QPN on the
// server's QP i and builds the address handle back to it.
func (c *cmQPs) udTakeQPN(res *resources, i int, qp *verbs.QP) error {
	if !c.udSendsQPN() {
		return nil
	}
	wcs, err := c.poll(res.recvCQ).poll(1)
	if err != nil {
		return err
	}
	wc := &wcs[0]
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != udQPNWRID || wc.WCFlags&verbs.WCFlagWithImm == 0 {
		return wcError(wc, "UD connection parameters receive")
	}
	off := int(res.udAHRecvAddr(i) - res.mr.Addr)
	ah, err := ahFromGRH(res.buf[off:off+udAddition], uint8(res.gidIndex))
	if err != nil {
		return err
	}
	attr, err := qp.Query()
	if err != nil {
		return err
	}
	res.ahs[i], res.udTo[i] = &ah, udTarget{qpn: wc.Imm & 0xffffff, qkey: attr.QKey}
	return nil
}

// ahFromGRH is ibv_init_ah_from_wc for RoCEv2: the address handle back
// to a UD datagram's sender, from the GRH area of its receive, which
// holds an IPv4 header in its last 20 bytes (as rxe writes it) or an IPv6
// header. The hop limit is 0xff, the traffic class the packet's.
func ahFromGRH(grh []byte, sgidIndex uint8) (verbs.AH, error) {
	ah := verbs.AH{SGIDIndex: sgidIndex, HopLimit: 0xff}
	// IPv6 first: for IPv4 the first 20 bytes are zero, while an IPv6
	// header's byte 20 is part of its source address.
	switch {
	case grh[0]>>4 == 6:
		ah.DGID = [16]byte(grh[8:24])
		ah.TrafficClass = grh[0]<<4 | grh[1]>>4
		ah.FlowLabel = uint32(grh[1]&0xf)<<16 | uint32(grh[2])<<8 | uint32(grh[3])
	case grh[20]>>4 == 4:
		ah.DGID = netip.AddrFrom4([4]byte(grh[32:36])).As16()
		ah.TrafficClass = grh[21]
	default:
		return ah, fmt.Errorf("perftest: the client's datagram came without a GRH (first bytes %x)", grh[:4])
	}
	return ah, nil
}
