package core_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestEveryExportedNameIsDocumented: core is the contract a driver author reads with go doc, so
// every exported type, function, method, constant and variable has a doc comment that go doc
// shows (a blank line between a comment and its declaration detaches it, silently).
func TestEveryExportedNameIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/leasehold/leasehold/core")
	if err != nil {
		t.Fatal(err)
	}
	check := func(kind, name, text string) {
		if ast.IsExported(name) && strings.TrimSpace(text) == "" {
			t.Errorf("%s %s has no doc comment in go doc", kind, name)
		}
	}
	for _, v := range append(p.Consts, p.Vars...) {
		check("value", strings.Join(v.Names, ", "), v.Doc)
	}
	for _, f := range p.Funcs {
		check("func", f.Name, f.Doc)
	}
	for _, ty := range p.Types {
		check("type", ty.Name, ty.Doc)
		for _, f := range ty.Funcs {
			check("func", f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			check("method", ty.Name+"."+m.Name, m.Doc)
		}
	}
}
