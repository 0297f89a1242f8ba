package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLibCQResize runs clib/test/cqresize: ibv_resize_cq of a CQ with
// ten completions waiting (nine WRITEs and one REM_ACCESS_ERR between
// two rnicd) refuses 9 and 5 entries with EINVAL, as rxe, and grows and
// shrinks it (10, 300, 6, 1) keeping every completion, in order, field
// by field, with cqe the new size; an arm made before a resize raises
// its event through the new ring; then one thread polls a CQ while
// another posts 3000 WRITEs and resizes it every 7 (8 to 4096 entries),
// and every completion arrives once, in order.
func TestCLibCQResize(t *testing.T) {
	newToolBench(t)
	lib := clibDir(t)
	cmd := exec.Command(filepath.Join(lib, "cqresize"), "rnicA", "rnicB")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	want := strings.Join([]string{
		"ibv_req_notify_cq, solicited only: ok",
		"the failed WRITE's event: ten completions wait: ok",
		"resize to 9 with 10 waiting: EINVAL, cqe still 16: ok",
		"resize to 10: cqe 10: ok",
		"the first 4 completions after the shrink: wr_id, status, opcode, byte_len, qp_num: ok",
		"grow to 300 with 6 waiting: cqe 300: ok",
		"resize to 5 with 6 waiting: EINVAL: ok",
		"shrink to 6: cqe 6: ok",
		"the other 6, the last REM_ACCESS_ERR, in order: ok",
		"then the CQ is empty: ok",
		"resize to 0: EINVAL: ok",
		"resize past the device's max_cqe: EINVAL: ok",
		"ibv_req_notify_cq, then resize to 1: ok",
		"resize to 1: cqe 1: ok",
		"the flushed WR's event, through the new ring: ok",
		"its completion: WR_FLUSH_ERR: ok",
		"3000 WRITEs polled by one thread while another resized: each once, in order: ok",
		"every resize of the race went through: ok",
		"nothing after the 3000: ok",
		"the resized CQ destroyed: ok",
		"the CQ with a channel destroyed: ok",
		"its channel destroyed: ok",
		"PASS", "",
	}, "\n")
	if out := runOut(t, cmd); out != want {
		t.Errorf("cqresize printed\n%s\nwant\n%s", out, want)
	}
}
