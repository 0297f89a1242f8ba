package ib_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/rnicd/rnicd/"

// TestImportGraph holds the project's dependency rule (cmd -> verbs ->
// rnic -> wire, with ib the leaf everyone shares) so that it cannot regress
// unnoticed: ib imports nothing of the project, nothing below cmd imports
// verbs (but rdmacm, the connection manager's API, which stands on verbs as
// librdmacm stands on libibverbs), nothing below cmd imports rdmacm, and
// nothing under wire imports anything above it. It reads the
// graph the go command computes, test files excluded (the end-to-end suites
// under tests/ are applications and may use verbs).
func TestImportGraph(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gocmd, "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	deps := map[string][]string{} // package -> the project's packages it depends on, module prefix cut
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		deps[pkg] = nil
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				deps[pkg] = append(deps[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"ib", "verbs", "rdmacm", "rnic", "rnic/qpmgr", "wire/bth", "wire/ibudp"} {
		if _, ok := deps[must]; !ok {
			t.Fatalf("go list did not list %s; the rules below would check nothing", must)
		}
	}
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
		for _, d := range deps[p] {
			if !under(d, "wire") && d != "ib" && !under(d, "internal") {
				return false
			}
		}
		return true
	}
	for pkg, ds := range deps {
		for _, d := range ds {
			switch {
			case pkg == "ib":
				t.Errorf("ib imports %s: the vocabulary must import nothing of the project", d)
			case d == "verbs" && !under(pkg, "cmd") && pkg != "rdmacm":
				t.Errorf("%s imports verbs: only applications (cmd/...) and rdmacm may", pkg)
			case d == "rdmacm" && !under(pkg, "cmd"):
				t.Errorf("%s imports rdmacm: only applications (cmd/...) may", pkg)
			case under(pkg, "wire") && !low(d):
				t.Errorf("%s imports %s, which is above wire", pkg, d)
			}
		}
	}
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// TestFixturesAreTestPackages holds issue 18's last rule: a test fixture
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
