// Command apicheck lists the exported API of the root module's packages, a line per name, and
// compares it with api/leasehold.txt: it exits 1, naming each line added or gone, when they
// differ, so that no change to what users call goes unnoticed. With -w it writes the file.
//
//	go run ./internal/apicheck        # check (go test ./internal/apicheck does the same)
//	go run ./internal/apicheck -w     # record the API as it now is
//
// A line is "pkg <import path>, <declaration>", as in Go's own api/ files: a func or method with
// its signature, a type with its kind, each exported field and interface method of a type, and
// each exported const and var. Internal packages, commands, tests and nested modules (otel,
// bench, backend/etcd) are not part of it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// File is the API file, relative to the module's root.
const File = "api/leasehold.txt"

func main() {
	write := flag.Bool("w", false, "write "+File+" instead of comparing with it")
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	lines, err := API(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	path := filepath.Join(root, File)
	if *write {
		if err := os.WriteFile(path, []byte(Join(lines)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "apicheck:", err)
			os.Exit(2)
		}
		return
	}
	recorded, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	if diff := Diff(Split(string(recorded)), lines); diff != "" {
		fmt.Fprintf(os.Stderr, "apicheck: the exported API differs from %s (run go run ./internal/apicheck -w and commit it with the change, and say so in CHANGELOG.md):\n%s", File, diff)
		os.Exit(1)
	}
}
