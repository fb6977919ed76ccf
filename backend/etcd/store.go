package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is a core.Store on etcd. It is safe for concurrent use. Create it with New; Close it
// when done (the client stays the caller's).
type Store struct {
	c          *clientv3.Client
	prefix     string
	sessionTTL time.Duration

	mu        sync.Mutex
	closed    bool
	sess      clientv3.LeaseID // the session lease the Store's places are on; 0 until needed
	sessDone  chan struct{}    // closed when the session lease is lost
	watches   map[string]*keyWatch
	refused   map[placeID]refusal     // the state a refused try with Wait saw, for its Register
	seedBytes int                     // the estimated size of the records refused keeps
	waitEnds  map[placeID]*time.Timer // the end of a place's Wait
	leaving   map[string]*pending     // by key
	leavingBy map[placeID]*pending    // by key and holder
	locks     map[string]*keyLock
	lifeCache map[clientv3.LeaseID]life // what etcd said of leases, for RetryAfter
	pool      map[int64][]pooled        // spare etcd leases, by their whole seconds
	inPool    map[clientv3.LeaseID]bool
	doomed    map[clientv3.LeaseID]bool // leases being revoked (discard): never spares
	pooledN   int

	// The work the Store owes (leaving lines, revoking leases), counted under mu rather than in
	// a WaitGroup: operations in flight at Close may still add to it while Close waits.
	bgN    int
	bgIdle chan struct{}      // closed when bgN drops to 0, while Close waits for that
	loops  sync.WaitGroup     // the session's renewal and the key watches
	stop   context.CancelFunc // ends the background work
	ctx    context.Context
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Notifier = (*Store)(nil)
	_ core.Watcher  = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts every record of the Store under prefix (default "leasehold/"). Stores that
// share keys must share the prefix.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// WithSessionTTL sets the TTL of the etcd lease the Store's places in lines are on (default 10s,
// at least the 1s etcd allows): a waiter whose process dies or stalls leaves every line within
// it, and an untaken grant the line made it is passed on. The Store renews it while it lives,
// every third of it.
func WithSessionTTL(d time.Duration) Option {
	return func(s *Store) { s.sessionTTL = d }
}

// DefaultPrefix is the key prefix of a Store made without WithPrefix.
const DefaultPrefix = "leasehold/"

// New returns a Store on the etcd cluster client reaches. It sends nothing until used. It
// returns an error wrapping core.ErrInvalid for a nil client or a session TTL below 1s.
func New(client *clientv3.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("etcd: new: %w: client: must not be nil", core.ErrInvalid)
	}
	s := &Store{c: client, prefix: DefaultPrefix, sessionTTL: 10 * time.Second,
		watches: map[string]*keyWatch{}, refused: map[placeID]refusal{}, waitEnds: map[placeID]*time.Timer{}, leaving: map[string]*pending{},
		leavingBy: map[placeID]*pending{},
		locks:     map[string]*keyLock{}, lifeCache: map[clientv3.LeaseID]life{},
		pool: map[int64][]pooled{}, inPool: map[clientv3.LeaseID]bool{}, doomed: map[clientv3.LeaseID]bool{}}
	for _, o := range opts {
		o(s)
	}
	if s.sessionTTL < time.Second {
		return nil, fmt.Errorf("%w: etcd.WithSessionTTL(%v): must be at least 1s", core.ErrInvalid, s.sessionTTL)
	}
	// The client's Close ends the background work too: nothing it tries could reach etcd.
	s.ctx, s.stop = context.WithCancel(client.Ctx())
	return s, nil
}

func (s *Store) keys(key string) keys { return keys{base: s.prefix + escape(key) + "/"} }

// Close ends the Store: its waiters and watches stop, its places in lines go (its session lease
// is revoked), and later operations return an error wrapping core.ErrClosed. It waits for the
// background work its waiters owe (leaving lines, revoking leases) and revokes its session and
// spare etcd leases meanwhile, for at most five seconds while etcd answers, and about a second
// when etcd answers none of it (unreachable): what is not done by then ends with the etcd
// leases' TTLs (the places with the session's, WithSessionTTL). After the client's Close it
// sends nothing and returns at once. It does not close the client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for id, t := range s.waitEnds {
		t.Stop()
		delete(s.waitEnds, id)
	}
	ws := s.watches
	s.watches = map[string]*keyWatch{}
	sess := s.sess
	s.mu.Unlock()
	for _, kw := range ws {
		kw.shut()
	}
	defer func() { s.stop(); <-s.idle(); s.loops.Wait() }()
	if s.c.Ctx().Err() != nil {
		if sess != 0 {
			return fmt.Errorf("etcd: revoke the session lease: the client was closed first (the Store's places in lines end with the session lease's TTL, %v)", s.sessionTTL)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	var answered atomic.Bool
	unanswered := time.AfterFunc(closeUnanswered, func() {
		if !answered.Load() {
			cancel()
		}
	})
	defer unanswered.Stop()
	revoke := func(id clientv3.LeaseID) error {
		_, err := s.c.Revoke(ctx, id)
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			answered.Store(true)
			return nil
		}
		return err
	}
	var wg sync.WaitGroup
	for _, id := range s.dropSpares() {
		wg.Go(func() { revoke(id) }) // one not revoked ends at its TTL, with no record on it
	}
	var err error
	if sess != 0 {
		wg.Go(func() {
			if e := revoke(sess); e != nil {
				err = fmt.Errorf("etcd: revoke the session lease: %w", e)
			}
		})
	}
	s.mu.Lock()
	owed := s.bgN > 0
	s.mu.Unlock()
	select {
	case <-s.idle():
		if owed {
			answered.Store(true) // the work owed was done: etcd answers (no work owed says nothing)
		}
	case <-ctx.Done():
	}
	s.stop() // no background work starts after this: goBackground checks s.ctx under mu
	wg.Wait()
	return err
}

// closeWait bounds Close's wait for etcd; closeUnanswered, when etcd has answered none of it.
const (
	closeWait       = 5 * time.Second
	closeUnanswered = time.Second
)

// begin checks that the Store is open and ctx is live.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return core.ErrClosed
	}
	if s.c.Ctx().Err() != nil {
		return errClientClosed
	}
	return nil
}

// errClientClosed is the error of an operation after the client's Close: nothing can be sent.
var errClientClosed = fmt.Errorf("%w: etcd: the Store's client was closed", core.ErrClosed)

// fail returns err from an operation: core.ErrClosed after Close, ctx's error when ctx ended
// (etcd's client reports a canceled call as a gRPC status, which errors.Is does not match), and
// otherwise err with what etcd call failed.
func (s *Store) fail(ctx context.Context, what string, err error) error {
	if errors.Is(err, core.ErrClosed) || errors.Is(err, core.ErrInvalid) || errors.Is(err, core.ErrLimitMismatch) || errors.Is(err, core.ErrLost) {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("%w (etcd %s: %v)", core.ErrClosed, what, err)
	}
	if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
		return fmt.Errorf("etcd %s: %w (%v)", what, ce, err)
	}
	return fmt.Errorf("etcd %s: %w", what, err)
}

// go runs fn in the background, tracked so that Close waits for it.
func (s *Store) goBackground(fn func(ctx context.Context)) { s.goBackgroundFor(10*time.Second, fn) }

// goBackgroundFor runs fn in the background, as goBackground, with budget d.
func (s *Store) goBackgroundFor(d time.Duration, fn func(ctx context.Context)) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.bgN++
	s.mu.Unlock()
	go func() {
		defer s.doneBackground()
		ctx, cancel := context.WithTimeout(s.ctx, d)
		defer cancel()
		fn(ctx)
	}()
}

func (s *Store) doneBackground() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bgN--; s.bgN == 0 && s.bgIdle != nil {
		close(s.bgIdle)
		s.bgIdle = nil
	}
}

// idle returns a channel closed once no background work runs.
func (s *Store) idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bgN == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if s.bgIdle == nil {
		s.bgIdle = make(chan struct{})
	}
	return s.bgIdle
}

// revoke ends etcd leases that no record is on any more, in the background.
func (s *Store) revoke(ids ...clientv3.LeaseID) {
	var live []clientv3.LeaseID
	for _, id := range ids {
		if id != 0 && id != s.currentSession() {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return
	}
	s.goBackground(func(ctx context.Context) {
		for _, id := range live {
			s.c.Revoke(ctx, id) // a lease already gone is what we want; other errors leave it to its TTL
		}
	})
}

// forgetSession makes the next place go on a new session lease when id, the current one, was
// found ended before its renewal noticed (its renewal's end still wakes the waiters).
func (s *Store) forgetSession(id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == id {
		s.sess = 0
	}
}

func (s *Store) currentSession() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// session returns the Store's session lease, granting it (and starting its renewal) on first use
// and after a loss.
func (s *Store) session(ctx context.Context) (clientv3.LeaseID, error) {
	s.mu.Lock()
	if s.sess != 0 {
		id := s.sess
		s.mu.Unlock()
		return id, nil
	}
	s.mu.Unlock()
	g, err := s.c.Grant(ctx, seconds(s.sessionTTL))
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	if s.closed || s.sess != 0 {
		id, closed := s.sess, s.closed
		s.mu.Unlock()
		s.revoke(g.ID)
		if closed {
			return 0, core.ErrClosed
		}
		return id, nil
	}
	ch, err := s.c.KeepAlive(s.ctx, g.ID)
	if err != nil {
		s.mu.Unlock()
		s.revoke(g.ID)
		return 0, err
	}
	s.sess = g.ID
	done := make(chan struct{})
	s.sessDone = done
	s.loops.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.loops.Done()
		for range ch {
		}
		// The lease expired (the process stalled, or etcd was out of reach for its TTL) or the
		// Store closed: its places are gone, so every waiter is woken to ask again.
		s.mu.Lock()
		if s.sess == g.ID {
			s.sess = 0
		}
		ws := make([]*keyWatch, 0, len(s.watches))
		for _, kw := range s.watches {
			ws = append(ws, kw)
		}
		s.mu.Unlock()
		close(done)
		for _, kw := range ws {
			kw.wakeAll()
		}
	}()
	return g.ID, nil
}

// seconds is d in whole seconds, rounded up, at least 1: an etcd lease's TTL.
func seconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// keyLock lets one of the Store's operations at a time decide and write on a key: the others
// would only fail their transactions against its writes and try again, each a round trip, so
// that many callers of one Store on one key would take turns by failing.
type keyLock struct {
	ch   chan struct{}
	refs int
}

// lockKey takes the Store's lock of key, waiting at most until ctx ends, and returns its unlock.
func (s *Store) lockKey(ctx context.Context, key string) (func(), error) {
	s.mu.Lock()
	l := s.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		s.locks[key] = l
	}
	l.refs++
	s.mu.Unlock()
	unref := func() {
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, key)
		}
		s.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; unref() }, nil
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
}

// seen returns a copy of the key's records as the Store's watch on key last saw them, or nil
// when the Store has no watch on key, or its watch saw nothing there.
func (s *Store) seen(key string) *state {
	s.mu.Lock()
	kw := s.watches[key]
	s.mu.Unlock()
	if kw == nil {
		return nil
	}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if _, busy := kw.st.limit(); !busy || !kw.reliable {
		return nil
	}
	return kw.st.clone()
}

// seenGrant is a grant of the line that the Store's watch on its key saw, not yet taken.
type seenGrant struct {
	permits, limit    int
	create            int64
	fence             int64
	lease, delayLease clientv3.LeaseID
}

// untaken returns the grant of the line to holder on key that the Store's watch saw, if it saw
// one.
func (s *Store) untaken(key, holder string) (seenGrant, bool) {
	s.mu.Lock()
	kw := s.watches[key]
	s.mu.Unlock()
	if kw == nil {
		return seenGrant{}, false
	}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	e, ok := kw.st.leases[holder]
	if !ok || !e.untaken {
		return seenGrant{}, false
	}
	g := seenGrant{permits: e.permits, limit: e.limit, create: e.create, fence: e.leaseFence(), lease: e.lease}
	if d, ok := kw.st.delays[holder]; ok {
		g.delayLease = d.lease
	}
	return g, true
}
