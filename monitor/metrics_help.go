package monitor

import "strings"

// counterHelp says what each device counter counts, for its HELP line in
// /metrics (rnicd_NAME_total). rxe's names where rxe has the counter,
// mlx5's for DCQCN's, Linux's per-port CM counters for the CM agent's.
// TestMetricsHelp fails on a counter a device exports without a line
// here, and on two families sharing one.
var counterHelp = map[string]string{
	"sent_pkts":                  "Packets the device sent, retransmissions included (rxe's sent_pkts).",
	"rcvd_pkts":                  "Packets the device received and handled (rxe's rcvd_pkts).",
	"duplicate_request":          "Requests the responder received with a PSN it had already handled.",
	"out_of_seq_request":         "Requests the responder received with a PSN ahead of the one it expected (a gap: loss or reordering).",
	"rcvd_rnr_err":               "RNR NAKs the requester received: the peer had no receive WQE posted.",
	"send_rnr_err":               "RNR NAKs the responder sent for want of a posted receive WQE.",
	"rcvd_seq_err":               "NAK sequence errors the requester received.",
	"ack_deferred":               "ACKs the responder deferred to cover several requests with one.",
	"retry_exceeded_err":         "Work requests completed with RETRY_EXC_ERR: retry_cnt transport retries ran out.",
	"retry_rnr_exceeded_err":     "Work requests completed with RNR_RETRY_EXC_ERR: rnr_retry RNR retries ran out.",
	"completer_retry_err":        "Times the completer went back to resend from an unacknowledged PSN.",
	"send_err":                   "Work requests completed with an error on the send queue.",
	"rdma_sends":                 "SEND work requests the requester completed.",
	"rdma_recvs":                 "Receive work requests the responder completed.",
	"local_ack_timeout_err":      "Times an RC QP's retransmission timer fired for want of an ACK.",
	"retransmitted_pkts":         "Packets sent again with a PSN already sent once.",
	"naks_sent":                  "NAKs of any kind the responder sent.",
	"icrc_errors":                "Received packets dropped for an ICRC that does not match.",
	"ack_held":                   "ACKs held back to leave with the QP's next request (-ack-hold).",
	"ack_hold_expired":           "Held ACKs that left alone: no request came in time, or the QP changed.",
	"naks_repeated":              "Sequence error NAKs sent again because their gap outlived a round trip (also in naks_sent).",
	"drop_malformed":             "Received packets dropped because their headers do not parse.",
	"drop_unknown_qp":            "Received packets dropped for a destination QPN no QP has.",
	"drop_bad_transport":         "Received packets dropped for an opcode of another service than their QP's.",
	"drop_bad_pkey":              "Received packets dropped for a P_Key that is not the port's.",
	"drop_bad_address":           "Received packets dropped for a source that is not their QP's peer.",
	"drop_qp_state":              "Received packets dropped because their QP's state does not take them.",
	"drop_bad_qkey":              "Received UD packets dropped for a Q_Key that is not their QP's.",
	"drop_bad_xrc_srq":           "XRC requests an XRC target QP dropped or NAKed: their XRCETH named no XRC SRQ, one of another XRC domain, or another SRQ in mid-message.",
	"drop_no_recv_wqe":           "UD or UC SENDs dropped for want of a posted receive WQE.",
	"drop_unexpected_response":   "ACKs and read responses dropped because they match no outstanding WQE.",
	"drop_uc_message":            "UC packets dropped because loss broke their message.",
	"drop_corrupted":             "Received packets the fault injector had marked corrupted, dropped.",
	"post_deferred":              "Posts left for the QP's next ACK or the application's next poll to send (post coalescing).",
	"np_ecn_marked_roce_packets": "DCQCN notification point: received packets marked CE (mlx5's np_ecn_marked_roce_packets).",
	"np_cnp_sent":                "DCQCN notification point: CNPs sent in answer to CE marks (mlx5's np_cnp_sent).",
	"rp_cnp_handled":             "DCQCN reaction point: CNPs received that cut a QP's rate (mlx5's rp_cnp_handled).",
	"rp_cnp_ignored":             "DCQCN reaction point: CNPs received and ignored, for a QP without congestion control (mlx5's rp_cnp_ignored).",
	"cm_tx_retries":              "CM messages the agent sent again after a timeout.",
	"cm_timeouts":                "CM messages whose retries ran out.",
	"cm_rx_duplicates":           "Duplicate REQs, REPs and DREQs received (the peer's retries), answered or dropped.",
	"cm_rx_dropped":              "CM MADs received and dropped: malformed, for no connection, or out of state.",
	"cm_tx_errors":               "CM MADs the agent failed to send.",
	"cm_rx_dropped_comm_id":      "CM MADs dropped because their communication IDs do not match the connection's.",
	"cm_rx_dropped_source":       "CM MADs dropped because they came from an address that is not the connection's peer.",
	"cm_rx_stale_conn":           "REQs from a connected peer naming its QP again (stale connection), answered with REJ and DREQ.",
	"cm_rx_dropped_stale":        "Stale-connection REQs dropped for coming from another address than the connection's peer.",
	"cm_rx_dropped_pending":      "REQs refused with REJ no resources: too many unanswered REQs or CM IDs.",
	"cm_req_timeouts":            "REQs freed because the listening application never answered them.",
	"cm_listen_drops":            "REQs the listening application refused (a full backlog), dropped without a REJ so that the peer retries.",
}

// cmMsgHelp is the HELP of cm_tx_msgs_X and cm_rx_msgs_X: Linux's per-port
// CM message counters, one per message type.
func cmMsgHelp(name string) (string, bool) {
	for _, d := range []struct{ prefix, verb string }{{"cm_tx_msgs_", "sent"}, {"cm_rx_msgs_", "received"}} {
		if msg, ok := strings.CutPrefix(name, d.prefix); ok && msg != "" {
			return "CM " + strings.ToUpper(msg) + " messages the agent " + d.verb + " (Linux's " + strings.TrimSuffix(d.prefix, "_") + "/" + msg + ").", true
		}
	}
	return "", false
}

// portHelp says what each counter of the port (ibudp.Stats) counts.
var portHelp = map[string]string{
	"sent_pkts":       "Packets the port handed the kernel and it took.",
	"sent_bytes":      "RoCE bytes (BTH to ICRC) of the packets the port sent.",
	"tx_batches":      "sendmmsg calls of the port that sent at least one packet.",
	"send_err":        "Packets the kernel refused to send.",
	"tx_invalid":      "Packet batches the port refused before the kernel (a peer of the wrong address family, say).",
	"rcvd_pkts":       "Packets the port received and passed to the device.",
	"rcvd_bytes":      "RoCE bytes (BTH to ICRC) of the packets the port received.",
	"rx_batches":      "recvmmsg calls of the port that returned at least one datagram.",
	"icrc_err":        "Datagrams the port dropped for an ICRC that does not match.",
	"rx_short":        "Datagrams the port dropped for being shorter than a BTH and an ICRC.",
	"rx_malformed":    "Datagrams the port dropped because their transport headers do not parse.",
	"rx_too_long":     "Datagrams the port dropped for being longer than the largest RoCE packet.",
	"rx_bad_header":   "Frames the port dropped for an unusable IP or UDP header (-mode packet).",
	"rx_outgoing":     "The port's own outgoing frames seen on receive and dropped (-mode packet).",
	"rx_udp_csum_err": "IPv6 datagrams the port dropped for a wrong UDP checksum (-mode packet).",
	"icrc_any_id":     "Packets whose ICRC matched only by the check for an unknown IPv4 ID.",
	"rx_kernel_drops": "Datagrams the kernel dropped for want of socket buffer (SO_RXQ_OVFL).",
}

// faultHelp says what each counter of the fault injector counts.
var faultHelp = map[string]string{
	"packets":      "Packets through the fault injector, impaired or not.",
	"matched":      "Packets the fault injector's QP filter matched (all of them without a filter).",
	"dropped":      "Packets the fault injector dropped (drop, dropnth).",
	"duplicated":   "Packets the fault injector sent twice (dup).",
	"corrupted":    "Packets the fault injector corrupted (corrupt).",
	"reordered":    "Packets the fault injector held back behind later ones (reorder).",
	"delayed":      "Packets the fault injector delayed (delay, jitter).",
	"overflow":     "Packets the fault injector dropped because its delay queue was full.",
	"link_queued":  "Packets that entered the injected bottleneck link's queue.",
	"link_dropped": "Packets the injected bottleneck link dropped at a full queue.",
	"link_marked":  "Packets the injected bottleneck link marked CE (RED on the queue's depth).",
}
