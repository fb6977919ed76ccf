package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// A run that loses its lease says so on the stderr its command writes to as well, and the two
// take turns: run in this process with a plain buffer as stderr, the race detector checks that
// run's line and the command's output, which os/exec copies on a goroutine, are not written at
// once.
func TestRunSaysTheLossOnTheStderrItsCommandWritesTo(t *testing.T) {
	store := useMemoryStore(t)
	const key = "shared-stderr"
	var errOut bytes.Buffer
	code := make(chan int, 1)
	writing := filepath.Join(t.TempDir(), "writing")
	go func() {
		code <- run(t.Context(), []string{"run", "-redis", memoryRedis, "-key", key, "-ttl", "1s", "--",
			"sh", "-c", `echo working >&2; touch "$1"; while :; do echo working >&2; sleep 0.01; done`, "sh", writing}, io.Discard, &errOut)
	}()
	poll.Until(t, "the command writes to stderr", func() bool {
		_, err := os.Stat(writing)
		return err == nil
	})
	snap, err := store.Inspect(t.Context(), key)
	if err != nil || len(snap.Leases) != 1 {
		t.Fatalf("inspect the run's key: %+v, %v; want one holder", snap, err)
	}
	if ok, err := store.Release(t.Context(), core.ReleaseRequest{Key: key, Holder: snap.Leases[0].Holder}); !ok || err != nil {
		t.Fatalf("release the run's lease from under it: %v, %v", ok, err)
	}
	select {
	case got := <-code:
		out := errOut.String()
		if got != exitLost || !strings.Contains(out, "stopping the command") || !strings.Contains(out, "working") {
			t.Errorf("exit %d, stderr %q; want %d, the loss said and the command's output", got, out, exitLost)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run still runs 20s after its lease was released from under it")
	}
}
