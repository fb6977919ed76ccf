package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is a core.Store on etcd. It is safe for concurrent use. Create it with New; Close it
// when done (the client stays the caller's).
//
// Its state is kept by concern, each part with a lock of its own that no other lock is taken
// under: the session lease (session.go), the key watches (watch.go), the refusals kept for
// Register and the ends of their Waits (refusal.go, waitend.go), the leaves owed (leave.go), the
// per-key turns (keylock.go), the spare etcd leases (spare.go), the keys whose releases met a line (grantlease.go), what etcd said of leases
// (leaselife.go) and the background work (background.go). Each part that can be added to after
// Close has a closed mark of its own, set by Close under its lock.
type Store struct {
	c          *clientv3.Client
	prefix     string
	sessionTTL time.Duration

	mu     sync.Mutex
	closed bool

	sess      session
	watches   watchSet
	refusals  refusals
	waitEnds  waitEnds
	leaves    *waitline.Leaves
	locks     keyLocks
	lifeCache lifeCache
	spares    sparePool
	lines     lineHints
	renewals  renewer
	bg        background

	loops sync.WaitGroup     // the session's renewal and the key watches
	stop  context.CancelFunc // ends the background work
	ctx   context.Context
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
// it, and a grant the line made it that it does not take ends within it too, even while the
// Store lives. The Store renews it while it lives,
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
	s := &Store{c: client, prefix: DefaultPrefix, sessionTTL: 10 * time.Second}
	for _, o := range opts {
		o(s)
	}
	if s.sessionTTL < time.Second {
		return nil, fmt.Errorf("%w: etcd.WithSessionTTL(%v): must be at least 1s", core.ErrInvalid, s.sessionTTL)
	}
	// The client's Close ends the background work too: nothing it tries could reach etcd.
	s.ctx, s.stop = context.WithCancel(client.Ctx())
	s.leaves = waitline.NewLeaves(s.ctx)
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
	s.mu.Unlock()
	s.waitEnds.close()
	s.renewals.close()
	for _, kw := range s.watches.close() {
		kw.shut()
	}
	sess := s.sess.close()
	spares := s.spares.close()
	defer func() { s.stop(); s.leaves.Close(s.ctx); <-s.bg.idle(); s.loops.Wait() }()
	if s.c.Ctx().Err() != nil {
		if sess != 0 {
			return fmt.Errorf("etcd: revoke the session lease: the client was closed first (the Store's places in lines end with the session lease's TTL, %v)", s.sessionTTL)
		}
		return nil
	}
	return s.closeLeases(sess, spares)
}

// closeLeases revokes the session lease sess and the spares, and waits for the background work
// owed, within closeWait, or closeUnanswered while etcd answers none of it. It returns the
// session's revoke's error.
func (s *Store) closeLeases(sess clientv3.LeaseID, spares []clientv3.LeaseID) error {
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
	for _, id := range spares {
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
	owed := s.bg.owed() || s.leaves.Pending()
	left := make(chan struct{})
	go func() { s.leaves.Close(ctx); close(left) }() // ends with ctx at the latest
	select {
	case <-s.bg.idle():
	case <-ctx.Done():
	}
	<-left
	if owed && ctx.Err() == nil {
		answered.Store(true) // the work owed was done: etcd answers (no work owed says nothing)
	}
	s.stop() // no background work starts after this: background.start checks s.ctx under its lock
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
