package abi

// KindRegMRMapped registers memory of one shared mapping in the client's
// address space that the daemon reaches itself, through the client's
// /proc/PID/map_files: MAP_SHARED anonymous memory (hugetlb's too),
// which has no descriptor the client could send, or a memfd the client
// no longer holds open. A RegMRMappedReq, a RegMRReply. Numbered apart
// from the other features' kinds, as XRC's are.
const KindRegMRMapped Kind = 56

// RegMRMappedReq asks to register Length bytes at Addr of the client's
// address space, answering to IOVA with Access. The daemon takes only a
// mapping it can be sure cannot shrink under it (hostif's regMRMapped).
type RegMRMappedReq struct {
	PD     uint32
	Access uint32
	Addr   uint64
	Length uint64
	IOVA   uint64
}

func (m *RegMRMappedReq) encode(e *encoder) {
	e.u32(m.PD)
	e.u32(m.Access)
	e.u64(m.Addr)
	e.u64(m.Length)
	e.u64(m.IOVA)
}

func (m *RegMRMappedReq) decode(d *decoder) {
	m.PD, m.Access = d.u32(), d.u32()
	m.Addr, m.Length, m.IOVA = d.u64(), d.u64(), d.u64()
}

func init() { kindNames[KindRegMRMapped] = "reg_mr_mapped" }
