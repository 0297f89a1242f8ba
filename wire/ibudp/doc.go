// Package ibudp models the Ethernet/UDP subsystem of an RNIC: the port
// between the transport engine and the wire. In a RoCEv2 NIC this block
// wraps each transport packet in UDP (destination port 4791), IP and
// Ethernet on the way out, strips them on the way in, and owns the invariant
// CRC, because only it knows the real headers the ICRC covers. In rxe it
// is rxe_net.c (the UDP tunnel socket, rxe_udp_encap_recv, rxe_prepare)
// with rxe_icrc.c.
//
// The package owns:
//
//   - the port (Port, opened with Open): batches of packets in and out with
//     sendmmsg and recvmmsg, waiting in Go's poller or, for a daemon's one
//     port, in poll(2) (Config.WaitInKernel), and Close wakes a blocked Recv
//     either way; buffers with Headroom in front of the RoCE part for the
//     headers (Buf, Pool); no allocation per packet;
//   - the ICRC: Send seals every packet for the headers it will carry; Recv
//     verifies every packet and drops, counting, those that fail, along with
//     anything that is not a well-formed RoCEv2 packet (short, truncated,
//     transport headers bth.Parse refuses); nothing from the wire panics;
//   - TOS and ECN in both directions (Buf.TOS, Buf.ECN, Buf.SetECN: the
//     codepoint a packet arrived with, read from IP_RECVTOS /
//     IPV6_RECVTCLASS or the IP header; the one to send, per packet), and
//     the UDP source port where the mode allows it (see SourcePortFlow and
//     SourcePortQPN for rxe's);
//   - counters (Stats, named as rxe names its counters where it has them);
//   - the sockets of receive steering (Config.Queues, Config.SocketFD):
//     the port's UDP 4791 as a SO_REUSEPORT group whose datagrams package
//     steer's eBPF program hands to the socket of their destination QPN's
//     queue; the port opens the group's sockets and hands them to its
//     steer.Group (SteeringOf), for the port's owner's own engines only,
//     never for another process;
//   - polling (Poller): a receive that never waits and a wait that takes
//     nothing, so that whichever goroutine finds packets handles them.
//
// The interface the port runs on, its MTU and GIDs are package netif's,
// which Open asks which interface holds Addr and what IB MTU it gives. The
// fault injector that stands in for netem is package fault's: it wraps a
// Port, and the port's one part in it is flipping the bit Buf.Flip names
// after sealing the ICRC.
//
// It does not own Ethernet addressing or neighbour resolution (the kernel
// routes every packet, in both modes), nor anything above the BTH: PSNs,
// QPs and ACKs are the engine's.
//
// # ModeUDP
//
// An ordinary unconnected UDP socket bound to Addr:4791; no privilege
// needed. The kernel writes the IP and UDP headers, which the port never
// sees, so it works from what Linux is known to send: with IP_PMTUDISC_DO an
// unconnected socket sends DF and IPv4 ID 0 (a test captures this off the
// wire), and the ICRC is sealed for exactly that header. IPv4 UDP checksums
// are 0, as rxe sends them; over IPv6 the kernel computes the checksum,
// which IPv6 requires, and the socket also takes rxe's zeros (csum.go).
//
// What it checks: the full 32-bit ICRC of a packet sent with IPv4 ID 0 and
// DF (by rnicd in ModeUDP, or any unconnected Linux UDP socket) and of every
// IPv6 packet. What it cannot: the socket does not show the IPv4 ID, and
// rxe (like ModePacket) sends a new ID with every packet, so such a packet
// is checked by solving for the ID (bth's CheckICRCAnyID): finding the ID
// costs 16 of the 32 bits, so the packet is verified to 16 bits only
// (ICRCVerifiedAnyID, counted in Stats.RxICRCAnyID). Nor can it
// see IPv4 options, the DF bit or the TTL: a packet sent without DF fails
// the check. It sends every packet from the one bound port, so Buf.SrcPort
// is ignored and all QPs share one UDP flow (no ECMP spreading).
//
// # ModePacket
//
// Needs CAP_NET_RAW. It receives on an AF_PACKET socket (all interfaces,
// cooked) whose classic BPF filter keeps only IPv4 or IPv6 UDP datagrams to
// Addr and the port's UDP port, unfragmented, arriving on the interface
// that holds Addr or on loopback (where this host's own packets to Addr
// come in), and never the outgoing copies lo shows of every packet. Each
// datagram's IP and UDP headers are checked again in Go (lengths, IPv4
// header checksum, destination), and its ICRC is verified over the headers
// it really came with: all 32 bits, whatever the IPv4 ID; this is how the
// port checks rxe's packets fully. It sends on a raw IP socket with a header
// it writes itself (IP_HDRINCL, or IPV6_HDRINCL for IPv6): the UDP source
// port of each Buf, an IPv4 ID that increments per packet (never 0, which
// the kernel would replace), DF, TTL 64, the Buf's TOS, IPv6 flow label 0
// (as rxe sends it), and UDP checksum 0 over IPv4 (as rxe) but computed
// over IPv6 (csum.go), with the ICRC sealed over exactly those bytes,
// built in place in the headroom. An IPv6 packet's nonzero UDP checksum is
// checked on receive, where the kernel has not already. The kernel still routes and resolves neighbours. An ordinary
// UDP socket keeps the port bound, so the kernel sends no ICMP port
// unreachable; a filter drops all it would receive.
//
// What it cannot: AF_PACKET sees a packet before netfilter's input hooks,
// so a packet nftables would drop on input still reaches the port; packets
// arriving on another interface than the one holding Addr (asymmetric
// routing) are not seen; an IPv6 packet with extension headers is dropped.
//
// Both modes bind one address; IPv4-mapped addresses are unmapped, and
// IPv6 works in both (ModePacket needs Linux 4.5 for IPV6_HDRINCL).
package ibudp
