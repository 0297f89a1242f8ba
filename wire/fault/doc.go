// Package fault is the impaired wire between two RNICs: an Injector wraps
// a port (wire/ibudp) and drops, duplicates, reorders, delays and corrupts
// its packets in either direction, at rates set while it runs, as Linux's
// netem qdisc (net/sched/sch_netem.c) does on an interface, which the
// kernels rnicd was built on lack; a Link adds a switch's egress queue, a
// bottleneck that drains at a rate, drops at the tail and marks ECN CE
// with RED's probability: DCQCN's congestion point, for which these
// kernels have no qdisc either (no red, fq_codel or netem).
//
// It models no block of the NIC: a NIC has no such thing, and the
// Injector is a pass-through, at the cost of a flag check per batch,
// while nothing is set. It stands where a test bench puts netem or a
// switch, so that rnicd's daemon (`rnic inject`), tests and lessons can
// lose, reorder and congest packets on loopback.
//
// The Injector is an ibudp.Port (and Poller, over an ibudp.Poller), so it
// depends on the port and the port knows nothing of it; TX corruption is
// the one thing the port does for it, flipping the bit a Buf's Flip names
// after sealing the ICRC.
package fault
