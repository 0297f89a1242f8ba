package verbs_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rnicd/rnicd/internal/looptest"
	"github.com/rnicd/rnicd/verbs"
)

// The errors of verbs are its own: a post in the wrong state is
// ErrQPState, a refused WR a *WRError naming it, a refused request a
// *RequestError carrying libibverbs' errno.
func TestErrors(t *testing.T) {
	c := openLocal(t, looptest.Get(t))
	qp, s := rcQP(t, c)

	err := qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend}})
	if !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("send in RESET: %v, want ErrQPState", err)
	}

	// RESET -> RTS skips INIT and RTR: the NIC refuses it with EINVAL.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
	var re *verbs.RequestError
	if !errors.As(err, &re) || re.Verb != "modify_qp" || !errors.Is(err, syscall.EINVAL) || re.Msg == "" {
		t.Fatalf("RESET->RTS: %v, want a *RequestError of modify_qp with EINVAL", err)
	}

	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	// A receive WR with more SGEs than the QP allows (MaxRecvSGE 1) is
	// refused, and the WR before it is posted.
	two := []verbs.SGE{s.mr.SGE(0, 8), s.mr.SGE(8, 8)}
	err = qp.PostRecv([]verbs.RecvWR{{WRID: 10, SGL: two[:1]}, {WRID: 11, SGL: two}})
	var we *verbs.WRError
	if !errors.As(err, &we) || we.Index != 1 || we.WRID != 11 {
		t.Fatalf("recv with 2 SGEs: %v, want *WRError for index 1, wr_id 11", err)
	}

	// Receive WRs posted one by one, with nothing arriving, fill the
	// queue: the first that does not fit is refused with ErrQueueFull.
	for i := range 3 * qp.Cap.MaxRecvWR {
		err = qp.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i)}})
		if err != nil {
			break
		}
	}
	if !errors.As(err, &we) || we.Index != 0 || !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("filling the receive queue: %v, want a *WRError wrapping ErrQueueFull", err)
	}
}

// Open with no daemon says how to start one, as the tools do, and keeps
// the dial error for errors.Is.
func TestOpenWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RNICD_DIR", dir)
	_, err := verbs.Open("rnic9")
	want := "no rnicd serves rnic9: start one with `rnicd -d rnic9` (no live control socket " + dir + "/rnic9.sock)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open: %v, want %q wrapping ErrNotExist", err, want)
	}
}

// The values are libibverbs' own (verbs.h), so that they mean the same on
// the control socket, in the C library and in a capture.
func TestLibibverbsValues(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"IBV_WC_SUCCESS", uint64(verbs.WCSuccess), 0},
		{"IBV_WC_LOC_LEN_ERR", uint64(verbs.WCLocLenErr), 1},
		{"IBV_WC_LOC_QP_OP_ERR", uint64(verbs.WCLocQPOpErr), 2},
		{"IBV_WC_LOC_PROT_ERR", uint64(verbs.WCLocProtErr), 4},
		{"IBV_WC_WR_FLUSH_ERR", uint64(verbs.WCWRFlushErr), 5},
		{"IBV_WC_REM_ACCESS_ERR", uint64(verbs.WCRemAccessErr), 10},
		{"IBV_WC_RETRY_EXC_ERR", uint64(verbs.WCRetryExcErr), 12},
		{"IBV_WC_RNR_RETRY_EXC_ERR", uint64(verbs.WCRNRRetryExcErr), 13},
		{"IBV_WC_RDMA_WRITE", uint64(verbs.WCRDMAWrite), 1},
		{"IBV_WC_RECV", uint64(verbs.WCRecv), 128},
		{"IBV_WC_RECV_RDMA_WITH_IMM", uint64(verbs.WCRecvRDMAWithImm), 129},
		{"IBV_WR_SEND_WITH_INV", uint64(verbs.WRSendWithInv), 9},
		{"IBV_WR_LOCAL_INV", uint64(verbs.WRLocalInv), 7},
		{"IBV_WR_BIND_MW", uint64(verbs.WRBindMW), 8},
		{"IBV_WC_BIND_MW", uint64(verbs.WCBindMW), 5},
		{"IBV_WC_LOCAL_INV", uint64(verbs.WCLocalInv), 6},
		{"IBV_WC_MW_BIND_ERR", uint64(verbs.WCMWBindErr), 6},
		{"IBV_MW_TYPE_2", uint64(verbs.MWType2), 2},
		{"IBV_QPT_UD", uint64(verbs.QPTypeUD), 4},
		{"IBV_QPS_ERR", uint64(verbs.QPSErr), 6},
		{"IBV_MTU_1024", uint64(verbs.MTU1024), 3},
		{"IBV_ACCESS_REMOTE_ATOMIC", uint64(verbs.AccessRemoteAtomic), 8},
		{"IBV_QP_DEST_QPN", uint64(verbs.AttrDestQPN), 1 << 20},
		{"IBV_SEND_INLINE", uint64(verbs.SendInline), 8},
		{"IBV_WC_WITH_IMM", uint64(verbs.WCFlagWithImm), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if s := verbs.WCRemAccessErr.String() + " " + verbs.WCRecv.String() + " " + verbs.QPSRTS.String(); s != "REM_ACCESS_ERR RECV RTS" {
		t.Errorf("names %q", s)
	}
}
