package rediscore

import (
	"context"
	"errors"
	"testing"
)

// unreachable is a FunctionClient one of whose nodes cannot be reached: every load fails with a
// network error, and scripts run by EVALSHA.
type unreachable struct{ loads, evals, fcalls int }

func (u *unreachable) FCall(context.Context, Script, Call) (any, error) {
	u.fcalls++
	return nil, errors.New("ERR Function not found")
}
func (u *unreachable) LoadLibrary(context.Context) []error {
	u.loads++
	return []error{nil, errors.New("dial tcp: i/o timeout")}
}
func (u *unreachable) Eval(context.Context, Script, Call) (any, error) {
	u.evals++
	return int64(1), nil
}
func (u *unreachable) Reply(err error) (string, bool) {
	if err != nil && err.Error() == "ERR Function not found" {
		return err.Error(), true
	}
	return "", false
}

// TestUnreachableNodeIsNotLoadedOnEveryCall: a load that cannot reach every node is tried again
// only after loadRetry; meanwhile the calls run by EVALSHA, none waiting for the node.
func TestUnreachableNodeIsNotLoadedOnEveryCall(t *testing.T) {
	var f Functions
	u := &unreachable{}
	for range 20 {
		if _, err := f.Run(context.Background(), u, acquireScript, Call{}); err != nil {
			t.Fatal(err)
		}
	}
	if u.loads != 1 || u.evals != 20 || u.fcalls != 0 {
		t.Fatalf("20 calls with a node unreachable: %d loads, %d EVALSHAs, %d FCALLs; want 1, 20, 0", u.loads, u.evals, u.fcalls)
	}
	f.retryAt.Store(0) // loadRetry has passed
	f.Run(context.Background(), u, acquireScript, Call{})
	if u.loads != 2 {
		t.Fatalf("after loadRetry: %d loads, want 2", u.loads)
	}
}
