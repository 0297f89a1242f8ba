package ib_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rnicd/rnicd/"

// TestImportGraph holds the project's dependency rule (cmd -> verbs ->
// rnic -> wire, with ib the leaf everyone shares) so that it cannot regress
// unnoticed. It reads the graph the go command computes, test files
// excluded (the end-to-end suites under tests/ are applications and may
// use verbs); importRules says the rules, TestImportRulesFail shows each
// can fail.
func TestImportGraph(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gocmd, "list", "-f", `{{.ImportPath}} {{join .Deps " "}} | {{join .Imports " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	g := graph{deps: map[string][]string{}, imports: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		deps, imports, _ := strings.Cut(sc.Text(), " | ")
		f := strings.Fields(deps)
		pkg := strings.TrimPrefix(f[0], module)
		g.deps[pkg], g.imports[pkg] = ours(f[1:]), ours(strings.Fields(imports))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, must := range append([]string{"ib", abiPkg, "verbs", "rdmacm", "rnic", "rnic/qpmgr", "rnic/trace", "wire/bth", "wire/ibudp", "wire/netif", "wire/steer", "wire/fault"}, hostSide...) {
		if _, ok := g.deps[must]; !ok {
			t.Fatalf("go list did not list %s; the rules below would check nothing", must)
		}
	}
	if !slices.Contains(g.imports["rdmacm"], "verbs") || !slices.Contains(g.imports[abiPkg], "ib") {
		t.Fatalf("rdmacm's imports %q, %s's %q: not read; the rules below would check nothing",
			g.imports["rdmacm"], abiPkg, g.imports[abiPkg])
	}
	for _, v := range importRules(g) {
		t.Error(v)
	}
}

// abiPkg holds the host interface's ABI (request kinds and bodies, reply
// and CM event codes, ring layout and slot codecs): the contract between
// the daemon and its clients, which clib/src/rnic.h repeats for C (its
// TestCHeaderABI holds the two equal). It is a leaf: it imports nothing
// of the project but ib, whose WR, WC and SGE its slot codecs write, so
// a client links the contract without the device (hostif, the daemon's
// side, imports rnic). It is no part of the host side: the device reads
// the WQE slots and writes the CQE slots in it itself, as a NIC reads
// and writes its queues by DMA in the format the provider shares (rxe's
// driver includes rdma_user_rxe.h as its provider does), so a wr_id
// reaches the device and comes back without the device calling up.
const abiPkg = "hostif/abi"

// hostSide are the packages that serve the NIC's clients and stand above
// the device (they import rnic): the host interface, the monitor, the test
// fixture. They live outside rnic/, so that the folder tree shows the NIC
// apart from its host side, and the device's blocks must not reach up into
// them. TestImportGraph fails if one is missing from go list's answer: one
// moved back under rnic/ (or renamed) must come here too, in sight.
var hostSide = []string{"hostif", "monitor", "internal/rnictest"}

// belowPort are the blocks the port (wire/ibudp) stands on: it imports
// them, never they it. The fault injector (wire/fault) wraps the port, so
// it imports the port and the port must not depend on it.
var belowPort = []string{"wire/netif", "wire/steer"}

// graph is the project's import graph, packages by path below the module.
type graph struct {
	deps    map[string][]string // every package of the project a package depends on, directly or not
	imports map[string][]string // the ones it imports itself
}

// ours is the paths of the project among ps, module prefix cut.
func ours(ps []string) []string {
	var out []string
	for _, p := range ps {
		if strings.HasPrefix(p, module) {
			out = append(out, strings.TrimPrefix(p, module))
		}
	}
	return out
}

// importRules returns every break of the rules in g:
//   - ib imports nothing of the project;
//   - nothing below cmd imports verbs (but rdmacm, the connection
//     manager's API, which stands on verbs as librdmacm stands on
//     libibverbs), and nothing below cmd imports rdmacm;
//   - nothing under wire imports anything above it;
//   - the port's blocks (belowPort) do not import the port, and the port
//     does not depend on the fault injector that wraps it;
//   - rnic/trace imports nothing above wire: every block of the NIC emits
//     into it, so one it imported could not (an import cycle);
//   - nothing under rnic/ depends on the host side (hostSide), test files
//     aside: the NIC never calls up into what serves its clients (the
//     ABI, abiPkg, is the contract both sides read, not the host side);
//   - rdmacm imports nothing under rnic/: it speaks to the daemon in the
//     host interface's ABI, the protocol its requests travel in
//     (verbs.CMCall takes its kinds and bodies), so not through the
//     daemon's CM agent (rnic/cm);
//   - the ABI package (abiPkg) depends on nothing of the project but ib.
func importRules(g graph) []string {
	var bad []string
	// low: the packages at wire's level or below it: wire itself, ib, and
	// helpers under internal/ that depend on nothing above wire (kwait, say;
	// not rnictest, which builds a whole NIC).
	low := func(p string) bool {
		if under(p, "wire") || p == "ib" {
			return true
		}
		if !under(p, "internal") {
			return false
		}
		for _, d := range g.deps[p] {
			if !under(d, "wire") && d != "ib" && !under(d, "internal") {
				return false
			}
		}
		return true
	}
	host := func(p string) bool {
		if p == abiPkg {
			return false
		}
		for _, h := range hostSide {
			if under(p, h) {
				return true
			}
		}
		return false
	}
	for pkg, ds := range g.deps {
		for _, d := range ds {
			switch {
			case pkg == "ib":
				bad = append(bad, fmt.Sprintf("ib imports %s: the vocabulary must import nothing of the project", d))
			case pkg == abiPkg && d != "ib":
				bad = append(bad, fmt.Sprintf("%s depends on %s: the ABI imports nothing of the project but ib", pkg, d))
			case d == "verbs" && !under(pkg, "cmd") && pkg != "rdmacm":
				bad = append(bad, fmt.Sprintf("%s imports verbs: only applications (cmd/...) and rdmacm may", pkg))
			case d == "rdmacm" && !under(pkg, "cmd"):
				bad = append(bad, fmt.Sprintf("%s imports rdmacm: only applications (cmd/...) may", pkg))
			case under(pkg, "wire") && !low(d):
				bad = append(bad, fmt.Sprintf("%s imports %s, which is above wire", pkg, d))
			case slices.Contains(belowPort, pkg) && under(d, "wire/ibudp"):
				bad = append(bad, fmt.Sprintf("%s imports %s: the port stands on it, not it on the port", pkg, d))
			case under(pkg, "wire/ibudp") && under(d, "wire/fault"):
				bad = append(bad, fmt.Sprintf("%s depends on %s: the fault injector wraps the port, not the reverse", pkg, d))
			case pkg == "rnic/trace" && !low(d):
				bad = append(bad, fmt.Sprintf("rnic/trace imports %s: the trace is the ground floor every block emits into", d))
			case under(pkg, "rnic") && host(d):
				bad = append(bad, fmt.Sprintf("%s depends on %s: the NIC must not reach up into the host side", pkg, d))
			}
		}
	}
	for _, d := range g.imports["rdmacm"] {
		if under(d, "rnic") {
			bad = append(bad, fmt.Sprintf("rdmacm imports %s: it speaks to the daemon through the host interface only", d))
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportRulesFail shows every rule of importRules fails when broken:
// a graph that breaks each once (the host-side rule once for each package
// of the host side) gets one complaint each, and the same graph without
// the breaks none.
func TestImportRulesFail(t *testing.T) {
	ok := graph{
		deps: map[string][]string{
			"ib": nil, "wire/bth": {"ib"}, "rnic": {"ib", "wire/bth"}, "rnic/cm": {"rnic", "ib"},
			"wire/netif": nil, "wire/steer": nil, "wire/ibudp": {"wire/bth", "wire/netif", "wire/steer"},
			"wire/fault": {"wire/ibudp", "wire/bth", "wire/netif", "wire/steer"},
			"rnic/trace": {"ib", "wire/bth"}, "rnic/qpmgr": {"hostif/abi", "ib"},
			"hostif/abi": {"ib"}, "hostif": {"hostif/abi", "rnic", "rnic/cm", "ib"}, "monitor": {"rnic"},
			"verbs":  {"hostif", "hostif/abi", "rnic", "ib"},
			"rdmacm": {"verbs", "hostif", "hostif/abi", "rnic/cm", "rnic", "ib"}, "cmd/rnicd": {"verbs", "hostif", "monitor"},
		},
		imports: map[string][]string{"rdmacm": {"verbs", "hostif/abi", "ib"}, "hostif/abi": {"ib"}},
	}
	if got := importRules(ok); len(got) != 0 {
		t.Fatalf("a graph that keeps the rules: %q", got)
	}
	broken := graph{deps: map[string][]string{}, imports: map[string][]string{}}
	for k, v := range ok.deps {
		broken.deps[k] = v
	}
	broken.deps["ib"] = []string{"wire/bth"}
	broken.deps["rnic/qpmgr"] = []string{"verbs"}
	broken.deps["rnic/wqe"] = []string{"rdmacm"}
	broken.deps["wire/ibudp"] = []string{"rnic", "wire/fault"}
	broken.deps["wire/steer"] = []string{"wire/ibudp"}
	broken.deps["rnic/rx"] = []string{"monitor"}
	broken.deps["rnic/cm"] = []string{"rnic", "ib", "hostif"}
	broken.deps["rnic/dma"] = []string{"ib", "internal/rnictest"}
	broken.deps["rnic/trace"] = []string{"ib", "rnic/qpmgr"}
	broken.imports["rdmacm"] = []string{"verbs", "hostif", "rnic/cm"}
	broken.deps["hostif/abi"] = []string{"ib", "rnic", "wire/bth"}
	want := []string{
		"hostif/abi depends on rnic: the ABI imports nothing of the project but ib",
		"hostif/abi depends on wire/bth: the ABI imports nothing of the project but ib",
		"ib imports wire/bth: the vocabulary must import nothing of the project",
		"rdmacm imports rnic/cm: it speaks to the daemon through the host interface only",
		"rnic/cm depends on hostif: the NIC must not reach up into the host side",
		"rnic/dma depends on internal/rnictest: the NIC must not reach up into the host side",
		"rnic/qpmgr imports verbs: only applications (cmd/...) and rdmacm may",
		"rnic/rx depends on monitor: the NIC must not reach up into the host side",
		"rnic/trace imports rnic/qpmgr: the trace is the ground floor every block emits into",
		"rnic/wqe imports rdmacm: only applications (cmd/...) may",
		"wire/ibudp depends on wire/fault: the fault injector wraps the port, not the reverse",
		"wire/ibudp imports rnic, which is above wire",
		"wire/steer imports wire/ibudp: the port stands on it, not it on the port",
	}
	if got := importRules(broken); !slices.Equal(got, want) {
		t.Errorf("a graph that breaks each rule once:\n got %q\nwant %q", got, want)
	}
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// TestFixturesAreTestPackages holds the fixtures' rule: a test fixture
// (code that imports package testing) lives in a _test.go file or in a
// package whose name ends in "test", as httptest beside net/http, so that
// no fixture can end up in a binary and the graph above stays honest.
func TestFixturesAreTestPackages(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gocmd, "list", "-f", `{{.ImportPath}} {{.Name}} {{join .Imports " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		checked++
		for _, imp := range f[2:] {
			if imp == "testing" && !strings.HasSuffix(f[1], "test") {
				t.Errorf("%s (package %s) imports testing outside a _test.go file: move it to a *test package", strings.TrimPrefix(f[0], module), f[1])
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list listed %d packages; the rule would check nothing", checked)
	}
}
