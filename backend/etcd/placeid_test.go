package etcd_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestRegisterDoesNotTakeAnotherKeysRefusal: keys and holders may hold any byte, so that
// ("k\x00a", "b") and ("k", "a\x00b") are two places, whose refusals Register keeps apart.
func TestRegisterDoesNotTakeAnotherKeysRefusal(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := t.Context()
	req := func(k, holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: k, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	for _, k := range []string{key, key + "\x00a"} {
		if res, err := st.Acquire(ctx, req(k, "owner")); err != nil || !res.Granted {
			t.Fatalf("Acquire(%q, owner) = %+v, %v", k, res, err)
		}
	}
	// A refusal on key "k" for holder "a\x00b": the key stays held, so its waiter has no cause to wake.
	if res, err := st.Acquire(ctx, req(key, "a\x00b")); err != nil || res.Granted {
		t.Fatalf("Acquire = %+v, %v; want refused", res, err)
	}
	// Register of holder "b" on key "k\x00a", which never asked there: it must start woken.
	w, err := st.Register(ctx, req(key+"\x00a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter registered without a refusal of its own did not start woken: it took another place's refusal")
	}
}
