package rediscore

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestStaleGrantDoesNotWake: a grant made before a holder's latest refusal (its fence not above
// the key's last fence then) does not wake the holder's waiter; a fresh one does.
func TestStaleGrantDoesNotWake(t *testing.T) {
	l, _ := newLayout(defaultPrefix)
	subs := newSubscriptions(l, "store", nopPubSub{})
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	ch := subs.channel("k")
	subs.afterTry(ctx, try{}, tryOutcome{key: "k", holder: "h", waits: true, fence: 100})
	w, err := subs.register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	drain := func() bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	drain() // it starts woken: the subscription was not confirmed before the try
	subs.granted(ch, []grant{{holder: "h", fence: 100}}, fromReply)
	if drain() {
		t.Fatal("a grant whose fence is not above the last fence at the refusal woke the waiter")
	}
	subs.granted(ch, []grant{{holder: "other", fence: 150}}, fromReply)
	if drain() {
		t.Fatal("a grant to another holder woke the waiter")
	}
	subs.granted(ch, []grant{{holder: "h", fence: 151}}, fromReply)
	if !drain() {
		t.Fatal("a fresh grant did not wake the waiter")
	}
}

type nopPubSub struct{}

func (nopPubSub) Subscribe(context.Context, string) error   { return nil }
func (nopPubSub) Unsubscribe(context.Context, string) error { return nil }
