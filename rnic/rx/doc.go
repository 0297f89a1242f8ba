// Package rx is the NIC's RX packet handler: rxe's receive side, one type
// for each of its three files, each with its own share of the QP, and the
// responder's ACK in a fourth:
//
//   - Handler (handler.go; rxe_recv.c) checks every inbound packet
//     (parse, QP lookup, P_Key, transport, QP state, source address)
//     and hands it by opcode to the responder (a request) or the
//     completer (an ACK, a NAK or a response), as rxe_rcv queues a
//     packet to a QP's responder or completer task. It keeps no QP state
//     of its own; the notification and reaction points of DCQCN
//     (congestion.go) are its;
//   - Responder (responder.go; rxe_resp.c, IBTA 9.7.5) owns qp.Resp: it
//     checks the expected PSN, NAKs a gap once, re-ACKs duplicates,
//     serves duplicate READs again and answers duplicate atomics from
//     its replay ring, consumes receive WQEs, writes SENDs and WRITEs
//     through the DMA engine, sends READ responses and atomic ACKs, RNR
//     NAKs when no receive WQE is posted and NAKs bad requests;
//   - the responder's Acker (ack.go) owns its ACKs and NAKs: it
//     coalesces ACKs per receive batch, holds a ping-pong QP's ACK for
//     its next request, repeats a gap's NAK, and every way one leaves is
//     one of its methods (Flush, Release, Expire, SendHeld, and the
//     responder's);
//   - Completer (completer.go; rxe_comp.c, IBTA 9.7.5.1) owns qp.Comp: it
//     matches ACKs, NAKs and responses to send WQEs, writes READ
//     responses and atomic results into local memory, posts CQEs, and
//     starts retries (NAK sequence error, implied NAK, timeout, RNR)
//     within retry_cnt and rnr_retry; the retransmission timer's expiries
//     come to it (Timeout).
//
// Neither role touches the other's state: roles_test.go fails if the
// responder's code names qp.Comp, qp.Req or qp.SQ, or the completer's
// qp.Resp.
package rx
