package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rnicd/rnicd/internal/debtest"
)

// TestCLibOpenMPI runs an MPI program (clib/test/mpipingpong.c, built
// with Debian's Open MPI 4.1 mpicc) as two ranks on two rnicd, started by
// Debian's mpirun with pml ucx and only clib on LD_LIBRARY_PATH: each
// rank sees one rnicd (the daemons' sockets are in two directories) and
// UCX is told its device and transports as the README says
// (UCX_NET_DEVICES, UCX_TLS=rc_verbs,ud_verbs,self: UCX's default
// selection adds shared-memory transports whose MAP_SHARED memory clib
// cannot register). 100 round trips of 64 KiB, every byte checked on both
// ranks, and an allreduce; both rnicd's counters show the data went
// through them.
func TestCLibOpenMPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("UCX lists a device only with its /dev/infiniband node, which rnicd makes as root (CAP_MKNOD)")
	}
	lib := clibDir(t)
	mpirun := debianTool(t, "mpirun", "openmpi-bin")
	mpicc := debtest.Ensure(t, "mpicc", "libopenmpi-dev")
	debianTool(t, "ucx_info", "ucx-utils") // pml ucx's libraries
	prog := filepath.Join(t.TempDir(), "mpipingpong")
	if out, err := exec.Command(mpicc, "-O2", "-o", prog, "../clib/test/mpipingpong.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}

	name := fmt.Sprintf("mp%06x", time.Now().UnixNano()&0xffffff)
	nameA, nameB := name+"a", name+"b"
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := startDaemon(dirA, nameA, ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	b, err := startDaemon(dirB, nameB, ownAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	t.Setenv("RNICD_DIR", dirA)
	ca := open(t, nameA)
	t.Setenv("RNICD_DIR", dirB)
	cb := open(t, nameB)
	beforeA, beforeB := must[map[string]uint64](t)(ca.Counters()), must[map[string]uint64](t)(cb.Counters())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rank := func(dir, dev string) []string {
		return []string{"-np", "1", "-x", "RNICD_DIR=" + dir, "-x", "UCX_NET_DEVICES=" + dev + ":1", prog}
	}
	args := append([]string{
		"--allow-run-as-root", "--oversubscribe",
		// pml ucx, and nothing else that opens the devices: the
		// openib BTL and the ofi MTL and UCX's one-sided component.
		"--mca", "pml", "ucx", "--mca", "btl", "self,tcp", "--mca", "mtl", "^ofi", "--mca", "osc", "^ucx",
		"-x", "LD_LIBRARY_PATH=" + lib, "-x", "UCX_TLS=rc_verbs,ud_verbs,self",
	}, rank(dirA, nameA)...)
	args = append(append(args, ":"), rank(dirB, nameB)...)
	cmd := mpirun(ctx, "", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for r := 0; r < 2; r++ {
		want := fmt.Sprintf("rank %d: 100 round trips of 65536 bytes, 0 bad bytes; allreduce 3 30 200 -1\n", r)
		if !strings.Contains(string(out), want) {
			t.Errorf("mpirun printed no %q:\n%s", want, out)
		}
	}
	// 200 messages of 64 KiB went each way between the two rnicd: at
	// least 16 packets each (RoCE's largest MTU) reached each daemon.
	afterA, afterB := must[map[string]uint64](t)(ca.Counters()), must[map[string]uint64](t)(cb.Counters())
	for _, d := range []struct {
		who           string
		before, after map[string]uint64
	}{{"rank 0's", beforeA, afterA}, {"rank 1's", beforeB, afterB}} {
		for _, k := range []string{"sent_pkts", "rcvd_pkts"} {
			got := d.after[k] - d.before[k]
			if got < 100*16 {
				t.Errorf("the %s rnicd counts %s %d, want at least %d", d.who, k, got, 100*16)
			}
			t.Logf("the %s rnicd: %s %d", d.who, k, got)
		}
	}
	t.Logf("mpirun --mca pml ucx:\n%s", out)
}
