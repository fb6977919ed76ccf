package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// modulePath is the root module's import path.
const modulePath = "github.com/leasehold/leasehold"

// moduleRoot returns the directory of the root module, found from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module " + modulePath + " in the working directory or above it")
		}
		dir = parent
	}
}

// API returns the sorted lines of the exported API of the packages of the module rooted at root:
// every directory below it with Go files, except internal ones, testdata, hidden ones and
// nested modules; commands (package main) are skipped.
func API(root string) ([]string, error) {
	var lines []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root {
			if name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module has an API of its own
			}
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		pkg := modulePath
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		got, err := Package(path, pkg)
		lines = append(lines, got...)
		return err
	})
	slices.Sort(lines)
	return slices.Compact(lines), err
}

// Package returns the API lines of the package in dir, imported as importPath; none for a
// command or a directory without Go files. Files of every build constraint count.
func Package(dir, importPath string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var lines []string
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			return nil, nil
		}
		w := writer{fset: fset, prefix: "pkg " + importPath + ", "}
		for _, decl := range f.Decls {
			w.decl(decl)
		}
		lines = append(lines, w.lines...)
		files = append(files, f)
	}
	more, err := promoted(files, dir, importPath)
	return append(lines, more...), err
}

// promoted returns the lines of the methods that the exported struct types of files get from a
// field embedding a type of another package of the module, directly or through an unexported
// alias of it, as if they were declared on the struct: that package may be internal, and its
// methods are then seen only through the struct. A method of a pointer receiver is listed on
// the struct's pointer.
func promoted(files []*ast.File, dir, importPath string) ([]string, error) {
	type ref struct {
		typ     ast.Expr
		imports map[string]string // of the file that names typ
		outer   string            // the struct that embeds it
	}
	aliases := map[string]ref{}
	var embeds []ref
	for _, f := range files {
		imports := map[string]string{}
		for _, spec := range f.Imports {
			path := strings.Trim(spec.Path.Value, `"`)
			name := path[strings.LastIndex(path, "/")+1:]
			if spec.Name != nil {
				name = spec.Name.Name
			}
			imports[name] = path
		}
		ast.Inspect(f, func(n ast.Node) bool {
			s, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if s.Assign.IsValid() {
				aliases[s.Name.Name] = ref{typ: s.Type, imports: imports}
			}
			if st, ok := s.Type.(*ast.StructType); ok && s.Name.IsExported() {
				for _, fld := range st.Fields.List {
					if len(fld.Names) == 0 {
						embeds = append(embeds, ref{typ: fld.Type, imports: imports, outer: s.Name.Name})
					}
				}
			}
			return false
		})
	}
	root := dir
	for range strings.Count(strings.TrimPrefix(importPath, modulePath), "/") {
		root = filepath.Dir(root)
	}
	var lines []string
	for _, e := range embeds {
		if star, ok := e.typ.(*ast.StarExpr); ok {
			e.typ = star.X
		}
		if id, ok := e.typ.(*ast.Ident); ok {
			e.typ, e.imports = aliases[id.Name].typ, aliases[id.Name].imports
		}
		sel, ok := e.typ.(*ast.SelectorExpr)
		if !ok {
			continue
		}
		pkg, _ := sel.X.(*ast.Ident)
		path, ok := e.imports[pkg.String()]
		if !ok || !strings.HasPrefix(path, modulePath+"/") {
			continue
		}
		methods, err := methodsOf(filepath.Join(root, strings.TrimPrefix(path, modulePath+"/")), sel.Sel.Name)
		if err != nil {
			return nil, err
		}
		for _, m := range methods {
			lines = append(lines, "pkg "+importPath+", method ("+strings.Replace(m, "T", e.outer, 1))
		}
	}
	return lines, nil
}

// methodsOf returns the exported methods of type name in the package in dir, each as
// "T) Name(sig)" or "*T) Name(sig)" by its receiver.
func methodsOf(dir, name string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		w := writer{fset: fset}
		for _, decl := range f.Decls {
			d, ok := decl.(*ast.FuncDecl)
			if !ok || d.Recv == nil || !d.Name.IsExported() {
				continue
			}
			recv, star := d.Recv.List[0].Type, ""
			if s, ok := recv.(*ast.StarExpr); ok {
				recv, star = s.X, "*"
			}
			if id, ok := recv.(*ast.Ident); ok && id.Name == name {
				out = append(out, star+"T) "+d.Name.Name+w.signature(d.Type))
			}
		}
	}
	return out, nil
}

// writer collects the API lines of one file.
type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

// expr prints n as gofmt would, on one line, without the parameter names of the func types in
// it (the file's syntax tree is changed to drop them).
func (w *writer) expr(n ast.Node) string {
	ast.Inspect(n, func(x ast.Node) bool {
		if ft, ok := x.(*ast.FuncType); ok {
			ft.Params, ft.Results = unnamed(ft.Params), unnamed(ft.Results)
		}
		return true
	})
	var b bytes.Buffer
	if err := printer.Fprint(&b, w.fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func (w *writer) decl(decl ast.Decl) {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		w.fn(d)
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				w.typ(s)
			case *ast.ValueSpec:
				w.value(d.Tok, s)
			}
		}
	}
}

func (w *writer) fn(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	sig := w.signature(d.Type)
	if d.Recv == nil {
		w.add("func %s%s", d.Name.Name, sig)
		return
	}
	recv := d.Recv.List[0].Type
	base := recv
	if star, ok := base.(*ast.StarExpr); ok {
		base = star.X
	}
	for {
		switch b := base.(type) {
		case *ast.IndexExpr:
			base = b.X
			continue
		case *ast.IndexListExpr:
			base = b.X
			continue
		}
		break
	}
	if id, ok := base.(*ast.Ident); ok && id.IsExported() {
		w.add("method (%s) %s%s", w.expr(recv), d.Name.Name, sig)
	}
}

// signature prints a func type without "func" and without the names of its parameters and
// results, which are not part of what a caller sees.
func (w *writer) signature(ft *ast.FuncType) string {
	return strings.TrimPrefix(w.expr(ft), "func")
}

// unnamed returns fields with one unnamed field per name.
func unnamed(fields *ast.FieldList) *ast.FieldList {
	if fields == nil {
		return nil
	}
	out := &ast.FieldList{}
	for _, f := range fields.List {
		for range max(1, len(f.Names)) {
			out.List = append(out.List, &ast.Field{Type: f.Type})
		}
	}
	return out
}

func (w *writer) typ(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.TypeParams != nil {
		var params []string
		for _, f := range s.TypeParams.List {
			var names []string
			for _, n := range f.Names {
				names = append(names, n.Name)
			}
			params = append(params, strings.Join(names, ", ")+" "+w.expr(f.Type))
		}
		name += "[" + strings.Join(params, ", ") + "]"
	}
	if s.Assign.IsValid() {
		w.add("type %s = %s", name, w.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		w.members(name+" struct", t.Fields, func(n *ast.Ident, f *ast.Field) string {
			return n.Name + " " + w.expr(f.Type)
		})
	case *ast.InterfaceType:
		w.members(name+" interface", t.Methods, func(n *ast.Ident, f *ast.Field) string {
			return n.Name + w.signature(f.Type.(*ast.FuncType))
		})
	default:
		w.add("type %s %s", name, w.expr(s.Type))
	}
}

func (w *writer) value(tok token.Token, s *ast.ValueSpec) {
	for i, n := range s.Names {
		if !n.IsExported() {
			continue
		}
		line := tok.String() + " " + n.Name
		if s.Type != nil {
			line += " " + w.expr(s.Type)
		}
		if tok == token.CONST && i < len(s.Values) {
			if lit, ok := s.Values[i].(*ast.BasicLit); ok {
				line += " = " + lit.Value
			}
		}
		w.add("%s", line)
	}
}

// members adds the line of a struct or interface type, then one per embedded type and per
// exported member (as member prints it), and one for unexported interface methods.
func (w *writer) members(typ string, fields *ast.FieldList, member func(*ast.Ident, *ast.Field) string) {
	w.add("type %s", typ)
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			w.add("type %s, embedded %s", typ, w.expr(f.Type))
		}
		for _, n := range f.Names {
			switch {
			case n.IsExported():
				w.add("type %s, %s", typ, member(n, f))
			case strings.HasSuffix(typ, " interface"):
				w.add("type %s, unexported methods", typ)
			}
		}
	}
}

// Join returns lines as a file's text.
func Join(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// Split returns the lines of a file's text, without empty ones.
func Split(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// Diff returns the lines of want missing from got ("-") and those of got missing from want
// ("+"), one per line, or "" when the two hold the same lines.
func Diff(want, got []string) string {
	var b strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}
