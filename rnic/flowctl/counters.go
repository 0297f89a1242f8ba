package flowctl

import "sync/atomic"

// Counter names one of the flow-control counters, with mlx5's names
// (cong.c's statistics, `ethtool -S` and the hw_counters of rdma
// statistic).
type Counter int

const (
	NPECNMarkedRoCEPackets Counter = iota // np_ecn_marked_roce_packets: RoCE packets received with ECN = CE
	NPCNPSent                             // np_cnp_sent: CNPs sent
	RPCNPHandled                          // rp_cnp_handled: CNPs received and fed to a reaction point
	RPCNPIgnored                          // rp_cnp_ignored: CNPs received and ignored (congestion control off, no such QP, not a CNP)
	NumCounters
)

var counterNames = [NumCounters]string{
	"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored",
}

func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "counter(?)"
}

// Counters are the flow-control counters of a device. The zero value is
// ready to use and safe for concurrent use.
type Counters struct{ c [NumCounters]atomic.Uint64 }

// Inc adds one to counter k.
func (s *Counters) Inc(k Counter) { s.c[k].Add(1) }

// Get reads counter k.
func (s *Counters) Get(k Counter) uint64 { return s.c[k].Load() }

// Each calls f with every counter's name and value.
func (s *Counters) Each(f func(name string, v uint64)) {
	for k := Counter(0); k < NumCounters; k++ {
		f(counterNames[k], s.c[k].Load())
	}
}
