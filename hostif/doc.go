// Package hostif is the NIC's host interface: what the PCIe side of an RNIC
// is to a driver. It owns the command interface (a control protocol over a
// unix SOCK_SEQPACKET socket), the queues in host memory (rings in memfds
// both the daemon and the application map), and the doorbells.
//
// Control protocol. Every message is one SOCK_SEQPACKET datagram: a 16-byte
// little-endian header (kind uint16, flags uint16, request id uint32, body
// length uint32, reserved uint32) and a per-kind body (package abi, messages.go).
// Descriptors travel as SCM_RIGHTS: the memfd of RegMR (sealed with
// F_SEAL_SHRINK) from the client; the ring memfd of CreateCQ, CreateSRQ
// and CreateQP (sealed at its size) and the read end of a wake pipe
// (CreateCompChannel, CreateCQ after its memfd, CMCreateChannel) from the
// daemon, which keeps the pipe's write end, so that no flag a client sets
// on a descriptor it holds can make a daemon thread block. Every request gets one
// reply with the same kind and id and FlagReply set, whose body starts
// with an error code (0: success, then the kind's reply fields; else a
// length-prefixed message). The doorbell is the exception: it has no reply
// unless it is refused. The server decodes every message as hostile:
// lengths, counts, handles and descriptors are checked before use, and a
// bad message gets an error reply and changes nothing.
//
// Objects. Every handle belongs to the connection that created it and
// names one object of one kind (objects.go): the request table (server.go)
// says which kind each request acts on, and one check refuses a handle of
// another kind or another client before any handler runs. Each kind's
// type, release and handlers share a file named for it (pd.go, mr.go and
// shm.go, channel.go, cq.go, srq.go, qp.go, cm.go); queues.go holds the
// doorbell and the WQE fetch that QPs and SRQs share, device.go the
// queries of the device itself. When
// the connection closes (the application exits or is killed) everything it
// created is destroyed: QPs moved to ERR and destroyed, MRs deregistered
// and unmapped, CQs, SRQs, channels and descriptors closed.
//
// Rings. The daemon creates the memfd of an object's rings, sized from the
// caps it granted, and hands it to the client: it then knows the memory is
// as big as it thinks and cannot be shrunk under it, and the client learns
// the final caps and the slot sizes in the same reply. Memory for MRs is
// the client's: a memfd sealed with F_SEAL_SHRINK, which the daemon maps
// (zero copies; the MR's iova is the client's address), or a System V
// shared memory segment the client has attached, which the daemon
// attaches (RegMRShm, shm.go). The ring layout and the slot formats
// are package abi's (ring.go). Once made, a ring is the device's, as a
// NIC's queue context holds its queue's address: hostif hands each over
// (rnic.Device.AttachQPRings, AttachSRQRing, CQ.AttachRing with the
// write ends of the CQ's wake pipes) and the device reads WQEs from it,
// retires them and writes CQEs into it itself, with no call back up into
// hostif. A doorbell names a QP (send or receive queue) or an SRQ whose
// producer index moved; hostif asks the device to fetch (rnic.QPRings'
// SendDoorbell and RecvDoorbell, rnic.SRQRing's Doorbell), which decodes
// the new WQEs from the ring (rnic.SendRing, rnic.RecvRing, whose
// decoders check only that a WQE fits its slot), validates each with its
// one validator and queues it. A WQE that fails completes with
// LOC_QP_OP_ERR and the QP goes to ERR through the device (its WQE
// fetch, rnic/fetch.go), as a NIC does at WQE fetch. The consumer
// index of a work queue advances as the engine retires its WQEs, before
// their completions are visible, so a client never has more WQEs
// outstanding than the queue holds. With the device's polling engine
// (rnic.Config.PollIdle) the doorbell is mostly unneeded: the engine
// polls every QP's and SRQ's producer indexes itself (QPRings and
// SRQRing, the NIC's doorbell records) and fetches as a doorbell would,
// calling nothing in hostif. A modify goes through QPRings.Modify, which
// holds the engine's fetch off until a modify to RESET has reset the
// rings too; what the engine's fetch refuses is reported as a NIC
// reports it, by the WQE's error completion, the QP in ERR and
// hostif_bad_wqe, with no message to the client (a doorbell's refusal
// still gets its error reply). Each work ring's
// asleep word tells the client whether it must still send one
// (Ring.EngineAsleep; virtio's event index). Completions go straight from
// the engine's CQ into the completion ring; an armed CQ writes its
// channel's wake pipe; a full ring sets the overrun flag (counted in
// hostif_cq_overrun).
//
// Asynchronous events (asyncev.go). A client that opens its event queue
// (KindOpenAsync; clib does at ibv_open_device) gets the read end of one
// more wake pipe, its async_fd. The device's QPs, CQs and SRQs raise
// their events (COMM_EST, QP_FATAL/REQ_ERR/ACCESS_ERR,
// LAST_WQE_REACHED, SRQ_LIMIT_REACHED, CQ_ERR) through handlers set at
// creation, each a closure over its owner's connection and handle, so an
// event can reach no other client; port events (the netdev's link, which
// rnicd watches over netlink) go to every client. The queue holds at
// most 256 events, the rest dropped and counted, and the client takes
// them one by one (KindGetAsyncEvent); DEVICE_FATAL is the pipe's end of
// file when the daemon goes.
//
// No client is ever handed a descriptor of the port: the daemon alone
// holds UDP 4791, as a NIC alone holds its wire, so no client can read
// another's packets or change how they are steered. In a client's own
// process (verbs.OpenLocal, a NIC on an address of its own) the server's
// end is a Local, whose doorbells are calls.
//
// Where it lives. hostif is the host side of the NIC, not one of its
// blocks: it imports the device (rnic) and its CM agent and serves them to
// clients, as a driver stands above the hardware it drives. So it sits at
// the top of the tree beside verbs, its client, and not under rnic/, where
// the device's blocks are and which must never import it
// (ib/imports_test.go holds that). The ABI, which clib/src/rnic.h
// repeats, is the top-level package abi, not a part of hostif: the
// device reads and writes the rings in its formats, so it imports it,
// and under hostif/ the tree would show the NIC importing its host side.
// It imports nothing of the project but ib: a client links the contract,
// not the daemon.
package hostif
