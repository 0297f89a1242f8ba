package ib_test

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
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
	g := graph{deps: map[string][]string{}, imports: map[string][]string{}, foreign: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		deps, imports, _ := strings.Cut(sc.Text(), " | ")
		f := strings.Fields(deps)
		pkg := strings.TrimPrefix(f[0], module)
		g.deps[pkg], g.imports[pkg], g.foreign[pkg] = ours(f[1:]), ours(strings.Fields(imports)), foreign(f[1:])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"ib", abiPkg, "verbs", "rdmacm", "rnic", "rnic/qpmgr", "rnic/trace", "wire/bth", "wire/ibudp", "wire/netif", "wire/steer", "wire/fault"} {
		if _, ok := g.deps[must]; !ok {
			t.Fatalf("go list did not list %s; the rules below would check nothing", must)
		}
	}
	for _, h := range hostSide {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(g.deps)), func(p string) bool { return under(p, h) }) {
			t.Fatalf("go list listed nothing under %s; the host-side rule would check nothing", h)
		}
	}
	if !slices.Contains(g.imports["rdmacm"], "verbs") || !slices.Contains(g.imports[abiPkg], "ib") ||
		!slices.Contains(g.imports["rnic/qpmgr"], abiPkg) || len(g.foreign["rnic"]) == 0 {
		t.Fatalf("rdmacm's imports %q, %s's %q, rnic/qpmgr's %q, rnic's foreign deps %q: not read; the rules below would check nothing",
			g.imports["rdmacm"], abiPkg, g.imports[abiPkg], g.imports["rnic/qpmgr"], g.foreign["rnic"])
	}
	for _, v := range importRules(g) {
		t.Error(v)
	}
}

// abiPkg is the ABI: the contract between the device and its clients
// (verbs in Go, clib's libibverbs and librdmacm in C, through
// clib/src/rnic.h, which its TestCHeaderABI holds equal), as rxe's uapi
// header rdma_user_rxe.h is between rxe's driver and its provider:
// request kinds and bodies, reply and CM event codes, the ring layout and
// the WQE and CQE slot codecs. It depends on nothing of the project but
// ib, whose WR, WC and SGE the slot codecs write, and on nothing outside
// the standard library, so a client links the contract without the
// device. The device imports it (rnic/qpmgr reads the WQE slots and
// writes the CQE slots itself, as a NIC reads and writes its queues by
// DMA), so it stands at the top of the tree: under hostif/ the tree
// would say that the NIC imports its host side.
const abiPkg = "abi"

// hostSide are the packages that serve the NIC's clients or are its
// clients, and stand above the device: the host interface, the monitor,
// the application's verbs and rdma_cm, the commands and the test
// fixture that builds whole devices. Nothing under rnic/ may depend on
// them: the NIC never calls up into what serves or uses it. The ABI
// (abiPkg) is not among them: both sides read it. TestImportGraph fails
// if go list lists nothing under one of them: one moved under rnic/ (or
// renamed) must come here too, in sight.
var hostSide = []string{"hostif", "monitor", "verbs", "rdmacm", "cmd", "internal/rnictest"}

// belowPort are the blocks the port (wire/ibudp) stands on: it imports
// them, never they it. The fault injector (wire/fault) wraps the port, so
// it imports the port and the port must not depend on it.
var belowPort = []string{"wire/netif", "wire/steer"}

// graph is the project's import graph, packages by path below the module.
type graph struct {
	deps    map[string][]string // every package of the project a package depends on, directly or not
	imports map[string][]string // the ones it imports itself
	foreign map[string][]string // every package it depends on outside the project and the standard library
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

// importRules returns every break of the rules in g, each rule checked
// on its own (a dependency that breaks two is reported twice):
//   - ib imports nothing of the project;
//   - the ABI package (abiPkg) depends on nothing of the project but ib,
//     and on nothing outside the standard library;
//   - nothing below cmd imports verbs (but rdmacm, the connection
//     manager's API, which stands on verbs as librdmacm stands on
//     libibverbs), and nothing below cmd imports rdmacm;
//   - nothing under wire imports anything above it;
//   - the port's blocks (belowPort) do not import the port, and the port
//     does not depend on the fault injector that wraps it;
//   - rnic/trace imports nothing above wire: every block of the NIC emits
//     into it, so one it imported could not (an import cycle);
//   - nothing under rnic/ depends on the host side (hostSide), test files
//     aside: the NIC never calls up into what serves or uses it; it may
//     import the ABI (abiPkg), the contract both sides read;
//   - rdmacm imports nothing under rnic/: it speaks to the daemon in the
//     ABI, the protocol its requests travel in (verbs.CMCall takes its
//     kinds and bodies), so not through the daemon's CM agent (rnic/cm).
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
		return slices.ContainsFunc(hostSide, func(h string) bool { return under(p, h) })
	}
	for pkg, ds := range g.deps {
		for _, d := range ds {
			if pkg == "ib" {
				bad = append(bad, fmt.Sprintf("ib imports %s: the vocabulary must import nothing of the project", d))
			}
			if pkg == abiPkg && d != "ib" {
				bad = append(bad, fmt.Sprintf("%s depends on %s: the ABI imports nothing of the project but ib", pkg, d))
			}
			if d == "verbs" && !under(pkg, "cmd") && pkg != "rdmacm" {
				bad = append(bad, fmt.Sprintf("%s imports verbs: only applications (cmd/...) and rdmacm may", pkg))
			}
			if d == "rdmacm" && !under(pkg, "cmd") {
				bad = append(bad, fmt.Sprintf("%s imports rdmacm: only applications (cmd/...) may", pkg))
			}
			if under(pkg, "wire") && !low(d) {
				bad = append(bad, fmt.Sprintf("%s imports %s, which is above wire", pkg, d))
			}
			if slices.Contains(belowPort, pkg) && under(d, "wire/ibudp") {
				bad = append(bad, fmt.Sprintf("%s imports %s: the port stands on it, not it on the port", pkg, d))
			}
			if under(pkg, "wire/ibudp") && under(d, "wire/fault") {
				bad = append(bad, fmt.Sprintf("%s depends on %s: the fault injector wraps the port, not the reverse", pkg, d))
			}
			if pkg == "rnic/trace" && !low(d) {
				bad = append(bad, fmt.Sprintf("rnic/trace imports %s: the trace is the ground floor every block emits into", d))
			}
			if under(pkg, "rnic") && host(d) {
				bad = append(bad, fmt.Sprintf("%s depends on %s: the NIC must not reach up into the host side", pkg, d))
			}
		}
	}
	for _, d := range g.foreign[abiPkg] {
		bad = append(bad, fmt.Sprintf("%s depends on %s: the ABI depends on nothing outside the standard library", abiPkg, d))
	}
	for _, d := range g.imports["rdmacm"] {
		if under(d, "rnic") {
			bad = append(bad, fmt.Sprintf("rdmacm imports %s: it speaks to the daemon through the ABI only", d))
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportRulesFail shows every rule of importRules fails when broken:
// a graph that breaks each once (the host-side rule once for each package
// of the host side, the ABI's for a package of the project and one from
// outside) gets the complaints it should, and the same graph without the
// breaks none.
func TestImportRulesFail(t *testing.T) {
	ok := graph{
		deps: map[string][]string{
			"ib": nil, "abi": {"ib"}, "wire/bth": {"ib"}, "rnic": {"abi", "ib", "wire/bth"}, "rnic/cm": {"rnic", "ib"},
			"wire/netif": nil, "wire/steer": nil, "wire/ibudp": {"wire/bth", "wire/netif", "wire/steer"},
			"wire/fault": {"wire/ibudp", "wire/bth", "wire/netif", "wire/steer"},
			"rnic/trace": {"ib", "wire/bth"}, "rnic/qpmgr": {"abi", "ib"},
			"hostif": {"abi", "rnic", "rnic/cm", "ib"}, "monitor": {"rnic"}, "internal/rnictest": {"rnic", "wire/fault"},
			"verbs":  {"hostif", "abi", "rnic", "ib"},
			"rdmacm": {"verbs", "hostif", "abi", "rnic/cm", "rnic", "ib"}, "cmd/rnicd": {"verbs", "hostif", "monitor"},
		},
		imports: map[string][]string{"rdmacm": {"verbs", "abi", "ib"}, "abi": {"ib"}, "rnic/qpmgr": {"abi", "ib"}},
		foreign: map[string][]string{"rnic": {"golang.org/x/sys/unix"}, "hostif": {"golang.org/x/sys/unix"}},
	}
	if got := importRules(ok); len(got) != 0 {
		t.Fatalf("a graph that keeps the rules: %q", got)
	}
	broken := graph{deps: map[string][]string{}, imports: map[string][]string{}, foreign: map[string][]string{}}
	for k, v := range ok.deps {
		broken.deps[k] = v
	}
	broken.deps["ib"] = []string{"wire/bth"}
	broken.deps["abi"] = []string{"ib", "rnic", "hostif"}
	broken.foreign["abi"] = []string{"golang.org/x/sys/unix"}
	broken.deps["rnic/qpmgr"] = []string{"abi", "verbs"}
	broken.deps["rnic/wqe"] = []string{"rdmacm"}
	broken.deps["wire/ibudp"] = []string{"rnic", "wire/fault"}
	broken.deps["wire/steer"] = []string{"wire/ibudp"}
	broken.deps["rnic/rx"] = []string{"monitor"}
	broken.deps["rnic/cm"] = []string{"rnic", "ib", "hostif"}
	broken.deps["rnic/dma"] = []string{"ib", "internal/rnictest"}
	broken.deps["rnic/flowctl"] = []string{"cmd/rnic"}
	broken.deps["rnic/trace"] = []string{"ib", "rnic/qpmgr"}
	broken.imports["rdmacm"] = []string{"verbs", "abi", "rnic/cm"}
	want := []string{
		"abi depends on golang.org/x/sys/unix: the ABI depends on nothing outside the standard library",
		"abi depends on hostif: the ABI imports nothing of the project but ib",
		"abi depends on rnic: the ABI imports nothing of the project but ib",
		"ib imports wire/bth: the vocabulary must import nothing of the project",
		"rdmacm imports rnic/cm: it speaks to the daemon through the ABI only",
		"rnic/cm depends on hostif: the NIC must not reach up into the host side",
		"rnic/dma depends on internal/rnictest: the NIC must not reach up into the host side",
		"rnic/flowctl depends on cmd/rnic: the NIC must not reach up into the host side",
		"rnic/qpmgr depends on verbs: the NIC must not reach up into the host side",
		"rnic/qpmgr imports verbs: only applications (cmd/...) and rdmacm may",
		"rnic/rx depends on monitor: the NIC must not reach up into the host side",
		"rnic/trace imports rnic/qpmgr: the trace is the ground floor every block emits into",
		"rnic/wqe depends on rdmacm: the NIC must not reach up into the host side",
		"rnic/wqe imports rdmacm: only applications (cmd/...) may",
		"wire/ibudp depends on wire/fault: the fault injector wraps the port, not the reverse",
		"wire/ibudp imports rnic, which is above wire",
		"wire/steer imports wire/ibudp: the port stands on it, not it on the port",
	}
	if got := importRules(broken); !slices.Equal(got, want) {
		t.Errorf("a graph that breaks each rule once:\n got %q\nwant %q", got, want)
	}
}

// foreign is the paths among ps that are neither the project's nor the
// standard library's (whose first element has no dot, as the go command
// tells them apart).
func foreign(ps []string) []string {
	var out []string
	for _, p := range ps {
		first, _, _ := strings.Cut(p, "/")
		if !strings.HasPrefix(p, module) && strings.Contains(first, ".") {
			out = append(out, p)
		}
	}
	return out
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
