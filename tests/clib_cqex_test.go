package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLibCQEx runs clib/test/cqex: an extended CQ (ibv_create_cq_ex)
// read through ibv_start_poll/ibv_next_poll/ibv_end_poll and every
// ibv_wc_read_* function gives, for SEND, SEND_WITH_IMM,
// RDMA_WRITE_WITH_IMM, RDMA_READ, a UD datagram, REM_ACCESS_ERR and a
// flushed receive between two rnicd, field by field what ibv_poll_cq
// gives for the same sequence on the same kind of CQ; ibv_start_poll on
// an empty CQ is ENOENT and leaves the CQ to ibv_poll_cq; ibv_end_poll
// consumes the completion the poll stands on and ibv_next_poll the ones
// it moves over; events, ibv_poll_cq and ibv_destroy_cq take
// ibv_cq_ex_to_cq; what rxe refuses (timestamps and the other fields a
// CQE of neither carries, IGNORE_OVERRUN) is EOPNOTSUPP.
func TestCLibCQEx(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "cqex"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := strings.Join([]string{
		"both runs: 7 completions on A's CQ, 4 on B's: ok",
		"A 0x106 flushed receive: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x201 SEND: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x202 SEND_WITH_IMM: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x203 RDMA_WRITE_WITH_IMM: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x204 RDMA_READ: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x205 UD SEND: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"A 0x206 WRITE, bad rkey: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"B 0x101 receive: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"B 0x102 receive with immediate: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"B 0x103 RDMA WRITE immediate: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"B 0x105 UD receive: every ibv_wc_read_* field as ibv_poll_cq reports it: ok",
		"SEND: SUCCESS, opcode SEND, qp_num: ok",
		"receive: opcode RECV, byte_len 100, no immediate, qp_num: ok",
		"receive with immediate: byte_len 200, IBV_WC_WITH_IMM, imm_data in network order: ok",
		"RDMA WRITE with immediate: opcode RECV_RDMA_WITH_IMM, byte_len 300, imm_data: ok",
		"RDMA_WRITE_WITH_IMM: opcode RDMA_WRITE: ok",
		"RDMA_READ: opcode RDMA_READ, byte_len 400, the bytes written and read: ok",
		"UD receive: byte_len 104, IBV_WC_GRH, sl 2 (IPv4), src_qp, qp_num, slid 0, dlid_path_bits 0: ok",
		"bad rkey: REM_ACCESS_ERR: ok",
		"the receive after the error: WR_FLUSH_ERR: ok",
		"empty CQ: ibv_start_poll fails with ENOENT: ok",
		"empty CQ: ibv_poll_cq after the ENOENT returns 0 (lock released): ok",
		"ibv_req_notify_cq on ibv_cq_ex_to_cq: ok",
		"ibv_get_cq_event returns ibv_cq_ex_to_cq and the cq_context: ok",
		"ibv_start_poll stands on the completion: wr_id, status, opcode, byte_len: ok",
		"ibv_end_poll consumed it: ibv_poll_cq finds nothing: ok",
		"ibv_next_poll: the next completion each time, then ENOENT standing on the last: ok",
		"ibv_end_poll after ibv_next_poll's ENOENT consumed the last: ok",
		"ibv_end_poll consumes one: the next ibv_start_poll stands on the next: ok",
		"ibv_poll_cq takes a completion of the extended CQ: ok",
		"then ibv_start_poll finds it empty: ok",
		"ibv_destroy_cq of ibv_cq_ex_to_cq: ok",
		"the channel destroyed after its extended CQ: ok",
		"wc_flags with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: EOPNOTSUPP: ok",
		"wc_flags with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: EOPNOTSUPP: ok",
		"wc_flags with IBV_WC_EX_WITH_CVLAN: EOPNOTSUPP: ok",
		"wc_flags with IBV_WC_EX_WITH_FLOW_TAG: EOPNOTSUPP: ok",
		"wc_flags with IBV_WC_EX_WITH_TM_INFO: EOPNOTSUPP: ok",
		"IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: EOPNOTSUPP (as rxe): ok",
		"an unknown comp_mask bit: EOPNOTSUPP: ok",
		"cqe 0: EINVAL: ok",
		"SINGLE_THREADED, wc_flags 0: made, with the opcode, vendor_err and wc_flags readers only: ok",
		"ibv_query_device_ex: no completion timestamp (mask 0), as rxe: ok",
		"PASS", "",
	}, "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("cqex printed\n%s\nwant\n%s", out, want)
	}
}

// TestCLibRCPingpongTimestamp runs Debian's ibv_rc_pingpong -t (completion
// timestamps through an extended CQ): as on rxe, whose devices report no
// timestamp mask, it stops before connecting with its own message.
func TestCLibRCPingpongTimestamp(t *testing.T) {
	newToolBench(t)
	pingpong := debianTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := pingpong(ctx, "", "-d", "rnicA", "-g", "1", "-t", "-p", "1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("ibv_rc_pingpong -t: %v, want exit status 1\n%s", err, out)
	}
	if want := "The device isn't completion timestamp capable\n"; !strings.Contains(string(out), want) {
		t.Errorf("ibv_rc_pingpong -t printed\n%s\nwant it to say %q", out, want)
	}
}
