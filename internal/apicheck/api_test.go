package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExportedAPIMatchesTheAPIFile fails when the root module's exported API changes without
// the matching lines in api/leasehold.txt.
func TestExportedAPIMatchesTheAPIFile(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	got, err := API(root)
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		t.Fatal(err)
	}
	if diff := Diff(Split(string(recorded)), got); diff != "" {
		t.Errorf("the exported API differs from %s; if the change is meant, run `go run ./internal/apicheck -w`, commit the file and say so in CHANGELOG.md:\n%s", File, diff)
	}
}

// TestAPIListsWhatACallerSeesAndNothingElse: exported funcs, methods (generic receivers too),
// types with their exported fields and interface methods, consts and vars; without parameter
// names, unexported names, tests, commands, internal packages or nested modules; the methods a
// struct gets by embedding a type of an internal package are listed as its own.
func TestAPIListsWhatACallerSeesAndNothingElse(t *testing.T) {
	got, err := API(filepath.Join("testdata", "mod"))
	if err != nil {
		t.Fatal(err)
	}
	p := "pkg " + modulePath + "/lib, "
	want := []string{
		p + "const Limit int = 3",
		p + "func Open(context.Context, string, string, func(string) error) (*Options, error)",
		p + "method (*Box[T]) Get(context.Context) (T, error)",
		p + "type Box[T any] struct",
		p + "type Box[T any] struct, V T",
		p + "type Embedded struct",
		p + "type Getter interface",
		p + "type Getter interface, Get(context.Context) (string, error)",
		p + "type Getter interface, unexported methods",
		p + "type Options struct",
		p + "type Options struct, Name string",
		p + "type Options struct, embedded Embedded",
		p + "type Wrapper struct",
		p + "type Wrapper struct, embedded *inner",
		p + "method (*Wrapper) Do(context.Context) error",
		p + "method (Wrapper) Name() string",
		p + "var Default",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("API lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDiffNamesLinesAddedAndGone: a changed signature shows as the old line gone and the new
// one added; the same lines in another order are no change.
func TestDiffNamesLinesAddedAndGone(t *testing.T) {
	if d := Diff([]string{"a", "b"}, []string{"b", "a"}); d != "" {
		t.Errorf("Diff of the same lines = %q, want none", d)
	}
	if d := Diff([]string{"f(int)", "g"}, []string{"g", "f(int, string)"}); d != "-f(int)\n+f(int, string)\n" {
		t.Errorf("Diff = %q", d)
	}
}
