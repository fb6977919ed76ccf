package valkey_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// failingClient answers every script call (FCALL, EVALSHA, EVAL) with err, sending nothing.
type failingClient struct {
	vk.Client
	err error
}

func (c failingClient) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	switch strings.ToUpper(cmd.Commands()[0]) {
	case "FCALL", "EVALSHA", "EVAL":
		return vk.NewErrorResult(c.err)
	}
	return c.Client.Do(ctx, cmd)
}

// TestDialCutByOwnDeadlineReportsTheDeadline: a call whose dial its own deadline cut off reports
// context.DeadlineExceeded (with the dial's words), even when net's dial returned its poller's
// "i/o timeout" before ctx's timer set Err: a caller that gave its Acquire a deadline is told
// that the deadline ended it, as with every other cut of its call. Before the fix the Acquire
// returned the bare dial error (TestBusyKeyHandoffsReview16i failed on it in CI, one run).
func TestDialCutByOwnDeadlineReportsTheDeadline(t *testing.T) {
	srv := redistest.StartServer(t)
	real := newClient(t, srv.Addr, vk.ClientOption{})
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if errors.Is(dialErr, context.DeadlineExceeded) {
		t.Fatal("the premise is gone: net's poller timeout now matches context.DeadlineExceeded")
	}
	s := storeOver(t, failingClient{Client: real, err: dialErr})
	ctx := lateCtx{Context: context.Background(), dl: time.Now().Add(-time.Millisecond)}
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: "dial-deadline", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose dial its own deadline cut = %v; want an error matching context.DeadlineExceeded", err)
	}
	if err == nil || !strings.Contains(err.Error(), "dial tcp") {
		t.Errorf("Acquire's error %v does not say the dial failed", err)
	}
}
