package rediscore

import (
	"context"
	"errors"
	"testing"
)

// unreachable is an Adapter one of whose nodes cannot be reached: every load fails with a
// network error, and scripts run by EVALSHA.
type unreachable struct{ loads, evals, fcalls int }

func (u *unreachable) do(_ context.Context, c Call) (any, error) {
	if c.Args[0] == "fcall" {
		u.fcalls++
		return nil, errors.New("ERR Function not found")
	}
	u.evals++
	return int64(1), nil
}
func (u *unreachable) LoadLibrary(context.Context, string) []error {
	u.loads++
	return []error{nil, errors.New("dial tcp: i/o timeout")}
}
func (u *unreachable) ErrorReply(err error) (string, bool) {
	if err != nil && err.Error() == "ERR Function not found" {
		return err.Error(), true
	}
	return "", false
}

// TestUnreachableNodeIsNotLoadedOnEveryCall: a load that cannot reach every node is tried again
// only after loadRetry; meanwhile the calls run by EVALSHA, none waiting for the node.
func TestUnreachableNodeIsNotLoadedOnEveryCall(t *testing.T) {
	var f functions
	u := &unreachable{}
	for range 20 {
		if _, err := f.run(context.Background(), u, acquireScript, Call{Args: make([]any, Head)}); err != nil {
			t.Fatal(err)
		}
	}
	if u.loads != 1 || u.evals != 20 || u.fcalls != 0 {
		t.Fatalf("20 calls with a node unreachable: %d loads, %d EVALSHAs, %d FCALLs; want 1, 20, 0", u.loads, u.evals, u.fcalls)
	}
	f.retryAt.Store(0) // loadRetry has passed
	f.run(context.Background(), u, acquireScript, Call{Args: make([]any, Head)})
	if u.loads != 2 {
		t.Fatalf("after loadRetry: %d loads, want 2", u.loads)
	}
}
