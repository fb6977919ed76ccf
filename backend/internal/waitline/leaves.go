package waitline

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The budget of a leave sent in the background, and how long a Store's Close waits for them.
const (
	// LeaveBudget bounds a leave, its sends and the waits between them: the holder's next try
	// and Release on the key wait for it, so it ends within a client's usual read timeout; a
	// place it could not take out lapses with its wait, and an untaken grant with its TTL, as
	// when its process dies.
	LeaveBudget = 2 * time.Second
	// CloseWait is how long a driver's Close waits for the leaves it owes before cutting them
	// off (its ctx for Leaves.Close): as long as a leave started at Close may take.
	CloseWait = LeaveBudget
)

// Leave is one leave of a holder's place in a key's line.
type Leave struct {
	Key, Holder string
	// Send sends the leave once, within ctx, and returns nil once it is done: the server ran
	// it, or refused it with an error it would give again. An error means it may not have
	// arrived, or was refused for now: it is sent again.
	Send func(ctx context.Context) error
	// After, if set, runs once the leave has ended, sent or given up.
	After func()
	// Budget, if set, replaces LeaveBudget for this leave: for a store whose leave may wait its
	// turn on the key behind the Store's other calls (etcd), which a cut-off leave loses.
	Budget time.Duration
}

// Leaves are the leaves a Store sends in the background, counted by key and by key and holder
// for the calls that wait for them. Make them with NewLeaves; safe for concurrent use.
type Leaves struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	n      atomic.Int32 // leaves running, for the hot path

	mu       sync.Mutex
	closed   bool
	byKey    map[string]*count
	byPlace  map[place]*count
	awaiting map[place]int // calls in AwaitHolder, by place
}

type place struct{ key, holder string }

// count is the leaves of one key, or of one place, running: done is closed when the last ends.
// Once a call waits for it, it is sealed: a leave started later is counted in a new count, so
// that the wait is not held by the leaves that keep starting after it.
type count struct {
	n      int
	sealed bool
	done   chan struct{}
}

// NewLeaves returns the Leaves of a Store whose background work ends with parent: no leave
// starts after it ends, and those running are cut off.
func NewLeaves(parent context.Context) *Leaves {
	ctx, cancel := context.WithCancel(parent)
	return &Leaves{ctx: ctx, cancel: cancel, byKey: map[string]*count{}, byPlace: map[place]*count{}, awaiting: map[place]int{}}
}

// Start sends l on a goroutine of its own within the budget (see the package doc), and reports
// whether it did: not once Close has begun or the parent context has ended. It is counted before
// Start returns, so that a wait that follows waits for it; it does not block.
func (ls *Leaves) Start(l Leave) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed || ls.ctx.Err() != nil {
		return false
	}
	id := place{l.Key, l.Holder}
	byKey, byPlace := ls.byKey[l.Key].add(), ls.byPlace[id].add()
	ls.byKey[l.Key], ls.byPlace[id] = byKey, byPlace
	ls.n.Add(1)
	ls.wg.Go(func() {
		ls.send(l)
		if l.After != nil {
			l.After()
		}
		ls.mu.Lock()
		if byKey.end() && ls.byKey[l.Key] == byKey {
			delete(ls.byKey, l.Key)
		}
		if byPlace.end() && ls.byPlace[id] == byPlace {
			delete(ls.byPlace, id)
		}
		ls.n.Add(-1)
		ls.mu.Unlock()
	})
	return true
}

// send sends l until it is done or its budget ends.
func (ls *Leaves) send(l Leave) {
	ctx, cancel := context.WithTimeout(ls.ctx, cmp.Or(l.Budget, LeaveBudget))
	defer cancel()
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if l.Send(ctx) == nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (c *count) add() *count {
	if c == nil || c.sealed {
		c = &count{done: make(chan struct{})}
	}
	c.n++
	return c
}

// end counts one leave of c ended, and reports whether it was the last.
func (c *count) end() bool {
	if c.n--; c.n > 0 {
		return false
	}
	close(c.done)
	return true
}

// AwaitHolder returns when no leave of holder on key started before it is running, or with
// ctx's error.
func (ls *Leaves) AwaitHolder(ctx context.Context, key, holder string) error {
	if ls.n.Load() == 0 {
		return nil
	}
	id := place{key, holder}
	ls.mu.Lock()
	c := ls.byPlace[id]
	if c == nil {
		ls.mu.Unlock()
		return nil
	}
	ls.awaiting[id]++
	defer func() {
		ls.mu.Lock()
		if ls.awaiting[id]--; ls.awaiting[id] == 0 {
			delete(ls.awaiting, id)
		}
		ls.mu.Unlock()
	}()
	return ls.await(ctx, c)
}

// AwaitKey returns when no leave on key started before it is running, or with ctx's error.
func (ls *Leaves) AwaitKey(ctx context.Context, key string) error {
	if ls.n.Load() == 0 {
		return nil
	}
	ls.mu.Lock()
	return ls.await(ctx, ls.byKey[key])
}

// await waits for c (nil: nothing), ls.mu held at the call and let go.
func (ls *Leaves) await(ctx context.Context, c *count) error {
	if c == nil {
		ls.mu.Unlock()
		return nil
	}
	c.sealed = true
	ls.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Awaiting returns how many calls wait in AwaitHolder for the leaves of holder on key.
func (ls *Leaves) Awaiting(key, holder string) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.awaiting[place{key, holder}]
}

// Close stops taking leaves, waits for those started until ctx ends, then cuts off those still
// running and returns once they have ended. Later calls return at once.
func (ls *Leaves) Close(ctx context.Context) {
	ls.mu.Lock()
	ls.closed = true // every wg.Go came before: Start checks closed under mu
	ls.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ls.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	ls.cancel()
	<-done
}

// Pending reports whether any leave is running.
func (ls *Leaves) Pending() bool { return ls.n.Load() > 0 }
