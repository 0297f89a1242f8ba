// Package interop runs rnicd against real Linux Soft-RoCE: a qemu VM with
// Debian's kernel, rdma_rxe and rdma-core's perftest, ibverbs-utils and
// rdmacm-utils, and UCX's ucx_perftest (vm.sh), on a tap in a network
// namespace, rnicd on the bridge beside it. Each case runs a real tool in
// the VM against the same rnic tool on the host, or Debian's own through
// the C library, with rxe as client and as server; every
// packet rnicd sends is captured on the tap and its ICRC checked by this
// package's own code, and rnicd runs in packet mode, checking the ICRC of
// every packet rxe sends.
//
//	sudo RNICD_INTEROP=1 go test -v -timeout 30m ./tests/interop/
//
// It writes last-run.md, the table of the last run. RNICD_INTEROP_CASES,
// a regular expression on the case names, runs only the cases it matches;
// RNICD_INTEROP_REPEAT=N runs the loss phases N times in a row;
// RNICD_INTEROP_PCAP=DIR keeps a capture of the tap, both directions, in
// DIR. With either of the first two it leaves last-run.md alone.
//
// One concern a file: the namespace and the tap's impairments
// (netns_test.go), the cases and their phases (case_test.go), the VM and
// its log (vm_test.go), one link MTU's bench and the phases run on it
// (link_test.go), the verdicts and the table (verdict_test.go), what the
// rdma_cm tools print (rdmacm_test.go), what ucx_perftest prints
// (ucx_test.go), the ICRC checker (icrc_test.go).
package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The VM is 198.18.0.2 and 2001:db8:1::2 on tap0, rnicd 198.18.0.1 on
// the bridge, which also has 2001:db8:1::1; a second rnicd, in UDP mode
// (the default), 198.18.0.3, for the UDP-mode cases; a third, in packet mode, on 2001:db8:1::1 for the IPv6
// cases. rxe0's GID 1 is the IPv4 GID; its IPv6 GID comes after.
const (
	hostAddr  = "198.18.0.1"
	vmAddr    = "198.18.0.2"
	hostAddr6 = "2001:db8:1::1"
	vmAddr6   = "2001:db8:1::2"
	device    = "rnio0"
	udpAddr   = "198.18.0.3"
	udpDevice = "rnio1"
	device6   = "rnio6"
)

func TestRxeInterop(t *testing.T) {
	if os.Getenv("RNICD_INTEROP") != "1" {
		t.Skip("the rxe interop suite runs with RNICD_INTEROP=1 as root: sudo RNICD_INTEROP=1 go test -v -timeout 30m ./tests/interop/")
	}
	if os.Geteuid() != 0 {
		t.Fatal("RNICD_INTEROP=1 needs root (network namespaces, tap, qemu)")
	}
	ensurePackages(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../../cmd/rnicd", "../../cmd/rnic")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The C library, for the cases that run Debian's own tools on the host.
	if out, err := exec.Command("make", "-C", "../../clib", "B="+filepath.Join(bin, "clib")).CombinedOutput(); err != nil {
		t.Fatalf("make -C clib: %v\n%s", err, out)
	}
	cache := os.Getenv("RNICD_INTEROP_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "rnicd-interop")
	}
	img := filepath.Join(cache, "img")
	if out, err := exec.Command("./vm.sh", "image", img).CombinedOutput(); err != nil {
		t.Fatalf("VM image: %v\n%s", err, out)
	}
	var results []result
	expr, ran := os.Getenv("RNICD_INTEROP_CASES"), false
	if _, err := regexp.Compile(expr); err != nil {
		t.Fatalf("RNICD_INTEROP_CASES: %v", err)
	}
	for _, link := range []struct{ linkMTU, ibMTU int }{{1500, 1024}, {9000, 4096}} {
		// A selection of cases one MTU lacks (the UCX cases, run at
		// 1024 only) boots no VM at the other.
		if _, err := selectCases(matrix(link.ibMTU), expr); err != nil {
			continue
		}
		ran = true
		rs := runLink(t, bin, img, link.linkMTU, link.ibMTU)
		results = append(results, rs...)
	}
	if !ran {
		t.Fatalf("RNICD_INTEROP_CASES=%q matches no case at either MTU", expr)
	}
	// last-run.md is the whole suite's table: a run of some cases
	// (RNICD_INTEROP_CASES), or of the loss phases over and over
	// (RNICD_INTEROP_REPEAT), leaves it as it is.
	if os.Getenv("RNICD_INTEROP_CASES") == "" && os.Getenv("RNICD_INTEROP_REPEAT") == "" {
		writeTable(t, results)
	}
	// One line a failed case, last, so that the tail of a long log (CI
	// keeps its last 60 lines) names every failure; both sides' output
	// is in the case's own log line, written when it was judged.
	for _, r := range results {
		if !r.ok {
			first, _, _ := strings.Cut(r.detail, "\n")
			t.Errorf("%s, rxe %s, MTU %d, %q: %s", r.c.name(), r.rxeRole, r.mtu, r.impair, first)
		}
	}
}

// ensurePackages installs what the suite runs from Debian's packages.
func ensurePackages(t *testing.T) {
	need := map[string]string{"qemu-system-x86_64": "qemu-system-x86", "busybox": "busybox-static", "cpio": "cpio",
		"depmod": "kmod", "tcpdump": "tcpdump", "nft": "nftables", "ip": "iproute2", "rdma": "iproute2",
		"ib_write_bw": "perftest", "ibv_rc_pingpong": "ibverbs-utils", "make": "make", "gcc": "gcc",
		"rping": "rdmacm-utils", "rstream": "rdmacm-utils", "riostream": "rdmacm-utils", "mckey": "rdmacm-utils", "ucx_perftest": "ucx-utils"}
	var pkgs []string
	for cmd, pkg := range need {
		if _, err := exec.LookPath(cmd); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	// The C library builds against rdma-core's headers.
	for file, pkg := range map[string]string{"/usr/include/infiniband/verbs.h": "libibverbs-dev", "/usr/include/rdma/rdma_cma.h": "librdmacm-dev"} {
		if _, err := os.Stat(file); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) == 0 {
		return
	}
	sort.Strings(pkgs)
	cmd := exec.Command("sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends "+strings.Join(pkgs, " "))
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install %v: %v\n%s", pkgs, err, out)
	}
}
