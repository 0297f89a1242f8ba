package main

// What tells the four pingpong tools apart: facts (ppFacts, for the
// command line, the buffer and the output) and a transport strategy
// (ppTransport, for the QPs). Everything else is shared.

import "github.com/rnicd/rnicd/verbs"

// ppKind is which of the four tools runs.
type ppKind int

const (
	ppRC  ppKind = iota // ibv_rc_pingpong
	ppUC                // ibv_uc_pingpong
	ppUD                // ibv_ud_pingpong
	ppSRQ               // ibv_srq_pingpong: RC QPs sharing one SRQ
)

// ppFacts are a tool's differences that are data.
type ppFacts struct {
	tool string
	size int  // default -s
	fill byte // the buffer's fill: 0x7b ('{'), srq_pingpong's is zeros
	// grh is the room in front of the message: a UD receive starts with
	// the GRH.
	grh int
	// addrSep follows the PSN in the local address line: ud_pingpong
	// prints a colon there.
	addrSep string
	// wireDests is how many destinations go over TCP: srq_pingpong always
	// sends ppSRQMaxQP, the unused ones zero; 0 means one per QP.
	wireDests int
	// onePacket: a message is one packet, at most the port's MTU (UD).
	onePacket bool
	// pollWholeCQ: the loop polls as many completions as the CQ holds
	// (srq_pingpong); the others poll two at a time.
	pollWholeCQ bool
	// Flags the tool has: -m (UD has none: a message is one packet), -q,
	// -o (on-demand paging), and rc_pingpong's -O -P -t -j -N.
	mtuFlag, numQPFlag, odpFlag, rcFlags bool
	transport                            func() ppTransport
}

var ppKinds = [...]ppFacts{
	ppRC: {tool: "ibv_rc_pingpong", size: 4096, fill: 0x7b, addrSep: ",",
		mtuFlag: true, odpFlag: true, rcFlags: true, transport: func() ppTransport { return rcTransport{} }},
	ppUC: {tool: "ibv_uc_pingpong", size: 4096, fill: 0x7b, addrSep: ",",
		mtuFlag: true, transport: func() ppTransport { return ucTransport{} }},
	ppUD: {tool: "ibv_ud_pingpong", size: 1024, fill: 0x7b, grh: ppGRHSize, addrSep: ":", onePacket: true,
		transport: func() ppTransport { return &udTransport{} }},
	ppSRQ: {tool: "ibv_srq_pingpong", size: 4096, fill: 0, addrSep: ",", wireDests: ppSRQMaxQP, pollWholeCQ: true,
		mtuFlag: true, numQPFlag: true, odpFlag: true, transport: func() ppTransport { return srqTransport{} }},
}

func (k ppKind) facts() *ppFacts { return &ppKinds[k] }

func (k ppKind) tool() string { return k.facts().tool }

// ppTransport is how a tool's QPs are made, connected and addressed
// (rdma-core's pp_init_ctx and pp_connect_ctx, per tool).
type ppTransport interface {
	qpType() verbs.QPType
	// recvQueue creates the queue the QPs share for receives, if they
	// share one (srq_pingpong's SRQ); nil means each QP has its own.
	recvQueue(pd *verbs.PD, rxDepth int) (*verbs.SRQ, error)
	// initAttr adds the INIT transition's own attributes to a.
	initAttr(a *verbs.QPAttr) verbs.AttrMask
	// connectAttr adds the RTR and RTS transitions' own attributes
	// towards rem, over the path ah with path MTU mtu.
	connectAttr(rtr, rts *verbs.QPAttr, rem ppDest, ah verbs.AH, mtu verbs.MTU) (rtrMask, rtsMask verbs.AttrMask)
	// address adds to a SEND what the QP does not hold (UD: the AH).
	address(wr *verbs.SendWR)
}

// pathAttr is the RTR path of a connected QP: MTU, peer QPN and PSN.
func pathAttr(rtr *verbs.QPAttr, rem ppDest, ah verbs.AH, mtu verbs.MTU) verbs.AttrMask {
	rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.AH = mtu, rem.QPN, rem.PSN, ah
	return verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
}

// rcTransport is rc_pingpong's: RC with max_dest_rd_atomic 1,
// min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic 1.
type rcTransport struct{}

func (rcTransport) qpType() verbs.QPType                         { return verbs.QPTypeRC }
func (rcTransport) recvQueue(*verbs.PD, int) (*verbs.SRQ, error) { return nil, nil }
func (rcTransport) initAttr(*verbs.QPAttr) verbs.AttrMask        { return verbs.AttrAccessFlags } // 0: SENDs only
func (rcTransport) address(*verbs.SendWR)                        {}
func (rcTransport) connectAttr(rtr, rts *verbs.QPAttr, rem ppDest, ah verbs.AH, mtu verbs.MTU) (verbs.AttrMask, verbs.AttrMask) {
	rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 1, 12
	rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = 14, 7, 7, 1
	return pathAttr(rtr, rem, ah, mtu) | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer,
		verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
}

// srqTransport is srq_pingpong's: rc_pingpong's QPs, receiving from one
// SRQ.
type srqTransport struct{ rcTransport }

func (srqTransport) recvQueue(pd *verbs.PD, rxDepth int) (*verbs.SRQ, error) {
	return pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: rxDepth, MaxSGE: 1})
}

// ucTransport is uc_pingpong's: only the path and the PSNs.
type ucTransport struct{}

func (ucTransport) qpType() verbs.QPType                         { return verbs.QPTypeUC }
func (ucTransport) recvQueue(*verbs.PD, int) (*verbs.SRQ, error) { return nil, nil }
func (ucTransport) initAttr(*verbs.QPAttr) verbs.AttrMask        { return verbs.AttrAccessFlags }
func (ucTransport) address(*verbs.SendWR)                        {}
func (ucTransport) connectAttr(rtr, rts *verbs.QPAttr, rem ppDest, ah verbs.AH, mtu verbs.MTU) (verbs.AttrMask, verbs.AttrMask) {
	return pathAttr(rtr, rem, ah, mtu), 0
}

// udTransport is ud_pingpong's: a Q_Key at INIT, only the states and the
// SQ PSN after; the peer's address goes in an AH on every SEND.
type udTransport struct {
	ah  verbs.AH
	qpn uint32
}

func (*udTransport) qpType() verbs.QPType                         { return verbs.QPTypeUD }
func (*udTransport) recvQueue(*verbs.PD, int) (*verbs.SRQ, error) { return nil, nil }
func (*udTransport) initAttr(a *verbs.QPAttr) verbs.AttrMask {
	a.QKey = ppUDQKey
	return verbs.AttrQKey
}
func (u *udTransport) connectAttr(_, _ *verbs.QPAttr, rem ppDest, ah verbs.AH, _ verbs.MTU) (verbs.AttrMask, verbs.AttrMask) {
	u.ah, u.qpn = ah, rem.QPN
	return 0, 0
}
func (u *udTransport) address(wr *verbs.SendWR) {
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = &u.ah, u.qpn, ppUDQKey
}
