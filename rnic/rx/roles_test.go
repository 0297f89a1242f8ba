package rx

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// roleOf says whose code fn is: its receiver's type for a method of one
// of the two roles, else the file it is in (the free functions of
// responder.go and ack.go serve only the responder, those of
// completer.go only the completer); "" for the Handler's own.
func roleOf(file string, fn *ast.FuncDecl) string {
	if fn.Recv != nil && len(fn.Recv.List) == 1 {
		t := fn.Recv.List[0].Type
		if s, ok := t.(*ast.StarExpr); ok {
			t = s.X
		}
		if id, ok := t.(*ast.Ident); ok {
			switch id.Name {
			case "Responder", "Acker":
				return "responder"
			case "Completer":
				return "completer"
			}
			return ""
		}
	}
	switch file {
	case "responder.go", "ack.go":
		return "responder"
	case "completer.go":
		return "completer"
	}
	return ""
}

// forbidden names the qpmgr.QP fields each role must leave alone: the
// responder (rxe_resp.c) keeps to qp.Resp, the completer (rxe_comp.c) to
// qp.Comp and the requester state it sends back (qp.Req.NeedRetry), as
// rxe's two tasks each keep to their part of the QP.
var forbidden = map[string][]string{
	"responder": {"Comp", "Req", "SQ"},
	"completer": {"Resp"},
}

// roleViolations lists, for the package's Go files in dir (tests aside),
// each selection of a field its role must not touch, as
// "file:line: role func .Field". It goes by field name, not type: no
// other type in reach has fields so named.
func roleViolations(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var bad []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			role := roleOf(filepath.Base(path), fn)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				for _, name := range forbidden[role] {
					if sel.Sel.Name == name {
						pos := fset.Position(sel.Sel.Pos())
						bad = append(bad, fmt.Sprintf("%s:%d: %s %s .%s", filepath.Base(pos.Filename), pos.Line, role, fn.Name.Name, name))
					}
				}
				return true
			})
		}
	}
	sort.Strings(bad)
	return bad
}

// TestRolesKeepToTheirState holds the responder and the completer to
// their own sub-state of the QP.
func TestRolesKeepToTheirState(t *testing.T) {
	for _, v := range roleViolations(t, ".") {
		t.Errorf("%s: not its role's state", v)
	}
}

// TestRolesCheckFails shows the check above catching a responder that
// reads the completer's PSN, a free function of completer.go that
// writes the responder's, and a Completer method elsewhere that does.
func TestRolesCheckFails(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"responder.go": "package rx\nfunc (r *Responder) f(qp *qpmgr.QP) { _ = qp.Comp.PSN }\n",
		"completer.go": "package rx\nfunc g(qp *qpmgr.QP) { qp.Resp.EPSN = 0 }\n",
		"handler.go":   "package rx\nfunc (c *Completer) h(qp *qpmgr.QP) { _ = qp.Resp }\nfunc (h *Handler) ok(qp *qpmgr.QP) { _ = h.Resp }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(roleViolations(t, dir), "; ")
	want := "completer.go:2: completer g .Resp; handler.go:2: completer h .Resp; responder.go:2: responder f .Comp"
	if got != want {
		t.Fatalf("violations:\n got %s\nwant %s", got, want)
	}
}
