package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/poll"
)

// useMemoryStore makes the commands run in this process use a fresh memory store instead of
// their -redis servers (which must still be valid) until the test ends, and returns it. Tests
// that call it must not be parallel.
func useMemoryStore(t *testing.T) *memory.Store {
	t.Helper()
	s := memory.New()
	inProcessStore = s
	t.Cleanup(func() { inProcessStore = nil })
	return s
}

// memoryRedis is the -redis of commands on the memory store: valid, never dialled.
const memoryRedis = "127.0.0.1:1"

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// started is a command line running in this process.
type started struct {
	out, err syncBuffer
	code     chan int // receives the exit status
	cancel   context.CancelFunc
}

// start runs the command line args in this process. The end of the test cancels its context,
// as an interrupt would; a command it started runs on until it exits (a gate's command, when
// the gate opens as the test ends), and TestMain's leak check waits for it.
func start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{code: make(chan int, 1), cancel: cancel}
	go func() { s.code <- run(ctx, args, &s.out, &s.err) }()
	t.Cleanup(cancel)
	return s
}

// exit waits up to 20s for the command to exit and returns its status.
func (s *started) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.code:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("still running after 20s; stdout %q, stderr %q", s.out.String(), s.err.String())
		return 0
	}
}

// gate returns a command that runs until open is called, and open.
func gate(t *testing.T) (command []string, open func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "open")
	open = sync.OnceFunc(func() {
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(open)
	return []string{"sh", "-c", `until [ -e "$1" ]; do sleep 0.01; done`, "sh", file}, open
}

// inspectUntil polls inspect of key in this process until its output contains every one of
// want, and returns that output.
func inspectUntil(t *testing.T, key string, want ...string) string {
	t.Helper()
	return poll.For(t, fmt.Sprintf("inspect %s showing %q", key, want), func() (string, bool) {
		code, out, errOut := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, key)
		if code != exitOK {
			t.Fatalf("inspect %s: exit %d, stderr %q", key, code, errOut)
		}
		return out, containsAll(out, want)
	})
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
