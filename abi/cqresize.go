package abi

// KindResizeCQ changes the depth of a CQ (ibv_resize_cq): a ResizeCQReq,
// answered by a RingReply that names the CQ's new ring (Caps.MaxSendWR
// its depth, Send where it lies) and carries its memfd. The new ring
// keeps the old one's indices (producer and consumer) and header words
// (armed, flags, events, waiting), its unconsumed CQEs in the slots the
// indices name, so a client swaps views with no index to reset. Numbered
// apart from the other features' kinds, as XRC's are.
const KindResizeCQ Kind = 60

// ResizeCQReq asks that CQ H hold CQE entries.
type ResizeCQReq struct{ H, CQE uint32 }

func (m *ResizeCQReq) encode(e *encoder) { e.u32(m.H); e.u32(m.CQE) }
func (m *ResizeCQReq) decode(d *decoder) { m.H, m.CQE = d.u32(), d.u32() }

// Target is the CQ the request resizes.
func (m *ResizeCQReq) Target() uint32 { return m.H }

func init() { kindNames[KindResizeCQ] = "resize_cq" }
