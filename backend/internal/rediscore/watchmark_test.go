package rediscore

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestStaleWatchScriptMarksNothing: a watch refresh sent before the connection went down (it
// may have reached a server that has since restarted empty) does not make the watch Reliable
// when its success comes back after the Down; only a watch script sent after it can.
func TestStaleWatchScriptMarksNothing(t *testing.T) {
	l, _ := newLayout(defaultPrefix)
	subs := newSubscriptions(l, "store", nopPubSub{})
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	subs.mark = func(string) error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release // the stale script: sent before the Down, answered after it
			return nil
		}
		return errors.New("server still down") // the scripts the Down starts
	}
	w, err := subs.watch("k")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Close()
		subs.close()
	}()
	subs.Confirmed(l.changed("k"))
	done := make(chan struct{})
	go func() { subs.refreshWatch(w.k); close(done) }()
	<-entered
	subs.Down()
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Down did not start a watch script")
		}
	}
	subs.Confirmed(l.changed("k")) // the subscription is back before the stale answer
	close(release)
	<-done
	if w.Reliable() {
		t.Fatal("a watch script answered after the Down made the watch Reliable: the server may have lost the watch entry")
	}
}
