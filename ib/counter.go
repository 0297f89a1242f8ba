package ib

// Counter names one of the device's counters. The first block has rxe's
// names (rdma statistic show), so a reader who knows rxe finds them; the
// rest are rnicd's own, one per drop reason.
type Counter int

const (
	SentPkts            Counter = iota // sent_pkts
	RcvdPkts                           // rcvd_pkts
	DuplicateRequest                   // duplicate_request: responder saw an old PSN
	OutOfSeqRequest                    // out_of_seq_request: responder saw a PSN ahead of the expected one
	RcvdRNRErr                         // rcvd_rnr_err: requester got an RNR NAK
	SendRNRErr                         // send_rnr_err: responder sent an RNR NAK
	RcvdSeqErr                         // rcvd_seq_err: requester got a NAK sequence error
	AckDeferred                        // ack_deferred
	RetryExceededErr                   // retry_exceeded_err
	RetryRNRExceededErr                // retry_rnr_exceeded_err
	CompleterRetryErr                  // completer_retry_err: the completer started a retry
	SendErr                            // send_err
	RDMASends                          // rdma_sends
	RDMARecvs                          // rdma_recvs
	LocalAckTimeoutErr                 // local_ack_timeout_err: the retransmission timer fired
	RetransmittedPkts                  // retransmitted_pkts: packets sent again with an old PSN
	NAKsSent                           // naks_sent: NAKs of any kind the responder sent
	ICRCErrors                         // icrc_errors: packets the port dropped for a bad ICRC
	AckHeld                            // ack_held: ACKs held back to go out with the QP's next request
	AckHoldExpired                     // ack_hold_expired: held ACKs that went alone (no request in time, or the QP was modified or destroyed)
	NAKRepeated                        // naks_repeated: sequence error NAKs sent again because their gap outlived a round trip (also in naks_sent)
	DropMalformed                      // drop_malformed: headers do not parse
	DropUnknownQP                      // drop_unknown_qp: no QP with the destination QPN
	DropBadTransport                   // drop_bad_transport: opcode of another service than the QP's
	DropBadPKey                        // drop_bad_pkey
	DropBadAddress                     // drop_bad_address: source is not the QP's peer
	DropQPState                        // drop_qp_state: QP is not in a state that accepts the packet
	DropBadQKey                        // drop_bad_qkey
	DropNoRecvWQE                      // drop_no_recv_wqe: UD/UC SEND with no receive WQE posted
	DropUnexpectedResp                 // drop_unexpected_response: ACK or response that matches no WQE
	DropUCMessage                      // drop_uc_message: UC packets of a message broken by loss
	DropCorrupted                      // drop_corrupted: marked corrupted by the fault injector
	PostDeferred                       // post_deferred: posts left for the QP's next ACK or the application's next poll to send (post coalescing)
	DropBadXRCSRQ                      // drop_bad_xrc_srq: XRC request naming no XRC SRQ of the target QP's domain (NAKed when in sequence)
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
	"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "rdma_sends", "rdma_recvs", "local_ack_timeout_err",
	"retransmitted_pkts", "naks_sent", "icrc_errors", "ack_held",
	"ack_hold_expired", "naks_repeated", "drop_malformed",
	"drop_unknown_qp", "drop_bad_transport", "drop_bad_pkey",
	"drop_bad_address", "drop_qp_state", "drop_bad_qkey", "drop_no_recv_wqe",
	"drop_unexpected_response", "drop_uc_message", "drop_corrupted",
	"post_deferred", "drop_bad_xrc_srq",
}

func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "counter(?)"
}
