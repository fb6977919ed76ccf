package primitives_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"testing"

	"github.com/leasehold/leasehold/core"
)

// TestInspectAliasesDocumentTheirFields: go doc of an alias shows no fields, so the doc of each
// alias Inspect's report is made of lists every field of the core type, one line each, so that a
// user reads them where the name is.
func TestInspectAliasesDocumentTheirFields(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE && len(g.Specs) == 1 {
			docs[g.Specs[0].(*ast.TypeSpec).Name.Name] = g.Doc.Text()
		}
	}
	for name, typ := range map[string]reflect.Type{
		"LeaseInfo":  reflect.TypeFor[core.LeaseInfo](),
		"WaiterInfo": reflect.TypeFor[core.WaiterInfo](),
		"DelayInfo":  reflect.TypeFor[core.DelayInfo](),
	} {
		doc, ok := docs[name]
		if !ok {
			t.Errorf("names.go declares no %s", name)
			continue
		}
		for i := range typ.NumField() {
			fld := typ.Field(i)
			line := `(?m)^\t` + fld.Name + ` +` + regexp.QuoteMeta(fld.Type.String()) + ` +// \S`
			if !regexp.MustCompile(line).MatchString(doc) {
				t.Errorf("the doc of %s lists no field %s %s with what it means", name, fld.Name, fld.Type)
			}
		}
	}
}
