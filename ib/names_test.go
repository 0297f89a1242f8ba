package ib

import (
	"strings"
	"testing"
)

func TestStateString(t *testing.T) {
	want := []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
	for i, s := range []QPState{QPSReset, QPSInit, QPSRTR, QPSRTS, QPSSQD, QPSSQE, QPSErr} {
		if int(s) != i {
			t.Errorf("%v = %d, want %d (ibv_qp_state)", s, s, i)
		}
		if got := s.String(); got != want[i] {
			t.Errorf("State(%d).String() = %q, want %q", i, got, want[i])
		}
	}
	if got := QPState(7).String(); got != "State(7)" {
		t.Errorf("State(7).String() = %q", got)
	}
}

func TestTypeString(t *testing.T) {
	for _, c := range []struct {
		t    QPType
		v    uint8
		want string
	}{
		{QPTypeRC, 2, "RC"}, {QPTypeUC, 3, "UC"}, {QPTypeUD, 4, "UD"}, {QPType(8), 8, "Type(8)"},
	} {
		if uint8(c.t) != c.v || c.t.String() != c.want {
			t.Errorf("Type %d: %q, want %d %q", uint8(c.t), c.t.String(), c.v, c.want)
		}
	}
}

func TestAttrMaskString(t *testing.T) {
	for _, c := range []struct {
		m    AttrMask
		want string
	}{
		{0, "0"},
		{AttrState, "STATE"},
		{AttrState | AttrPathMTU, "STATE|PATH_MTU"},
		{AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags, "STATE|ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{1 << 21, "0x200000"},
		{AttrDestQPN | 1<<21 | 1<<31, "DEST_QPN|0x80200000"},
		{AttrState | AttrCurState | AttrEnSQDAsyncNotify | AttrAccessFlags | AttrPKeyIndex |
			AttrPort | AttrQKey | AttrAV | AttrPathMTU | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrRQPSN |
			AttrMaxQPRdAtomic | AttrAltPath | AttrMinRNRTimer | AttrSQPSN | AttrMaxDestRdAtomic |
			AttrPathMigState | AttrCap | AttrDestQPN | AttrRateLimit, "STATE|CUR_STATE|EN_SQD_ASYNC_NOTIFY|ACCESS_FLAGS|PKEY_INDEX|PORT|QKEY|AV|" +
			"PATH_MTU|TIMEOUT|RETRY_CNT|RNR_RETRY|RQ_PSN|MAX_QP_RD_ATOMIC|ALT_PATH|MIN_RNR_TIMER|" +
			"SQ_PSN|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE|CAP|DEST_QPN|RATE_LIMIT"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("AttrMask(%#x).String() = %q, want %q", uint32(c.m), got, c.want)
		}
	}
	// The values are libibverbs' IBV_QP_* bits.
	for _, c := range []struct {
		m    AttrMask
		name string
		bit  uint
	}{
		{AttrState, "STATE", 0}, {AttrCurState, "CUR_STATE", 1},
		{AttrEnSQDAsyncNotify, "EN_SQD_ASYNC_NOTIFY", 2}, {AttrAccessFlags, "ACCESS_FLAGS", 3},
		{AttrPKeyIndex, "PKEY_INDEX", 4}, {AttrPort, "PORT", 5}, {AttrQKey, "QKEY", 6},
		{AttrAV, "AV", 7}, {AttrPathMTU, "PATH_MTU", 8}, {AttrTimeout, "TIMEOUT", 9},
		{AttrRetryCnt, "RETRY_CNT", 10}, {AttrRNRRetry, "RNR_RETRY", 11}, {AttrRQPSN, "RQ_PSN", 12},
		{AttrMaxQPRdAtomic, "MAX_QP_RD_ATOMIC", 13}, {AttrAltPath, "ALT_PATH", 14},
		{AttrMinRNRTimer, "MIN_RNR_TIMER", 15}, {AttrSQPSN, "SQ_PSN", 16},
		{AttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC", 17}, {AttrPathMigState, "PATH_MIG_STATE", 18},
		{AttrCap, "CAP", 19}, {AttrDestQPN, "DEST_QPN", 20}, {AttrRateLimit, "RATE_LIMIT", 25},
	} {
		if c.m != 1<<c.bit || c.m.String() != c.name || strings.Contains(c.name, "|") {
			t.Errorf("%s: value %#x name %q, want bit %d", c.name, uint32(c.m), c.m.String(), c.bit)
		}
	}
}

func TestAccessString(t *testing.T) {
	for _, c := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{AccessLocalWrite, "LOCAL_WRITE"},
		{AccessLocalWrite | AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{AccessLocalWrite | AccessRemote, "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"},
		{AccessMWBind | AccessZeroBased | AccessOnDemand, "MW_BIND|ZERO_BASED|ON_DEMAND"},
		{AccessRemoteRead | 0x300, "REMOTE_READ|0x300"},
		{0x80, "0x80"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(c.a), got, c.want)
		}
	}
}

// TestWCOpcode checks the completion opcode of every WR opcode against
// libibverbs' ibv_wc_opcode: the variants complete as their plain operation.
func TestWCOpcode(t *testing.T) {
	for _, c := range []struct {
		wr WROpcode
		wc WCOpcode
	}{
		{WRRDMAWrite, WCRDMAWrite}, {WRRDMAWriteWithImm, WCRDMAWrite},
		{WRSend, WCSend}, {WRSendWithImm, WCSend}, {WRSendWithInv, WCSend},
		{WRRDMARead, WCRDMARead}, {WRAtomicCmpAndSwp, WCCompSwap}, {WRAtomicFetchAdd, WCFetchAdd},
		{WRBindMW, WCBindMW}, {WRLocalInv, WCLocalInv},
	} {
		if got := c.wr.WCOpcode(); got != c.wc {
			t.Errorf("%v completes as %v, want %v", c.wr, got, c.wc)
		}
		if !c.wr.Valid() {
			t.Errorf("%v is not Valid", c.wr)
		}
	}
	for _, op := range []WROpcode{10, 255} { // TSO, nothing
		if op.Valid() {
			t.Errorf("%v is Valid", op)
		}
	}
	if got := WCOpcode(128).String(); got != "RECV" {
		t.Errorf("WCOpcode(128) = %q, want RECV", got)
	}
}

// TestSupports checks which opcodes each service carries (IBTA 10.2.1).
func TestSupports(t *testing.T) {
	all := []WROpcode{WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRSendWithInv, WRLocalInv, WRBindMW, 10}
	want := map[QPType]string{
		QPTypeRC: "RDMA_WRITE RDMA_WRITE_WITH_IMM SEND SEND_WITH_IMM RDMA_READ ATOMIC_CMP_AND_SWP ATOMIC_FETCH_AND_ADD SEND_WITH_INV LOCAL_INV BIND_MW",
		QPTypeUC: "RDMA_WRITE RDMA_WRITE_WITH_IMM SEND SEND_WITH_IMM BIND_MW",
		QPTypeUD: "SEND SEND_WITH_IMM",
		// IBTA A14.2: an XRC initiator carries every RC operation; the
		// target has no send queue.
		QPTypeXRCSend: "RDMA_WRITE RDMA_WRITE_WITH_IMM SEND SEND_WITH_IMM RDMA_READ ATOMIC_CMP_AND_SWP ATOMIC_FETCH_AND_ADD SEND_WITH_INV",
		QPTypeXRCRecv: "",
		8:             "",
	}
	for typ, w := range want {
		var got []string
		for _, op := range all {
			if typ.Supports(op) {
				got = append(got, op.String())
			}
		}
		if g := strings.Join(got, " "); g != w {
			t.Errorf("%v supports %q, want %q", typ, g, w)
		}
	}
}
