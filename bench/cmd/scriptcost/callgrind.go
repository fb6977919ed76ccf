package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// zero resets the counts of the callgrind run of process pid.
func zero(ctx context.Context, pid int) error {
	if out, err := exec.CommandContext(ctx, "callgrind_control", "-z", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -z %d: %v: %s", pid, err, out)
	}
	return nil
}

// dump has the callgrind run of process pid write its counts since the last zero to a new file
// in dir, waits for that file, and returns the instructions it counts.
func dump(ctx context.Context, pid int, dir string) (int64, error) {
	before, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, f := range before {
		seen[f] = true
	}
	if out, err := exec.CommandContext(ctx, "callgrind_control", "-d", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control -d %d: %v: %s", pid, err, out)
	}
	var total int64
	err = waitFor(ctx, 30*time.Second, "callgrind writes its dump to "+dir, func() (bool, error) {
		after, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			return false, err
		}
		for _, f := range after {
			if seen[f] {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return false, err
			}
			if n, err := totalInstructions(string(data)); err == nil {
				total = n
				return true, nil
			}
		}
		return false, nil // not there yet, or not written to the end yet
	})
	return total, err
}

// totalInstructions reads the instructions (Ir) a callgrind dump counts, from its totals: line
// or its summary: line, whichever comes first. Ir must be the first event of the events: line,
// as it is by default.
func totalInstructions(dump string) (int64, error) {
	for _, line := range strings.Split(dump, "\n") {
		if events, ok := strings.CutPrefix(line, "events:"); ok {
			if f := strings.Fields(events); len(f) == 0 || f[0] != "Ir" {
				return 0, fmt.Errorf("callgrind dump: first event is not Ir: %q", line)
			}
			continue
		}
		rest, ok := strings.CutPrefix(line, "totals:")
		if !ok {
			rest, ok = strings.CutPrefix(line, "summary:")
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("callgrind dump: no count in %q", line)
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, errors.New("callgrind dump: no totals: or summary: line")
}
