// Package rx is the NIC's RX packet handler. It classifies every inbound
// packet (parse, QP lookup, P_Key, transport, QP state, source address)
// and hands requests to the responder and ACKs and responses to the
// completer:
//
//   - the responder (responder.go; rxe_resp.c, IBTA 9.7.5) checks the
//     expected PSN, NAKs a gap once, re-ACKs duplicates, serves duplicate
//     READs again and answers duplicate atomics from its replay ring,
//     consumes receive WQEs, writes SENDs and WRITEs through the DMA
//     engine, sends READ responses and atomic ACKs, RNR NAKs when no
//     receive WQE is posted and NAKs bad requests;
//   - the Acker (ack.go) owns the responder's ACKs and NAKs: it coalesces
//     ACKs per receive batch, holds a ping-pong QP's ACK for its next
//     request, repeats a gap's NAK, and every way one leaves is one of its
//     methods (Flush, Release, Expire, SendHeld, and the responder's);
//   - the completer (completer.go; rxe_comp.c, IBTA 9.7.5.1) matches ACKs,
//     NAKs and responses to send WQEs, writes READ responses and atomic
//     results into local memory, posts CQEs, and starts retries (NAK
//     sequence error, implied NAK, timeout, RNR) within retry_cnt and
//     rnr_retry.
package rx
