// Package wqe is the NIC's WQE process engine, the requester: it fetches
// send WQEs, segments their messages by path MTU into FIRST, MIDDLE, LAST
// and ONLY packets, assigns PSNs, sets AckReq as rxe does, keeps at most
// 128 PSNs unacknowledged (fewer after a loss: flowctl.Window) and at
// most max_rd_atomic READs and atomics outstanding, and goes back to the
// oldest unacknowledged PSN when the completer asks for a retry
// (go-back-N). It owns nothing but the cursor of each WQE; the QP
// manager holds the state, the DMA engine the memory.
package wqe
