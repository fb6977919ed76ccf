package postgres

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend/internal/waitline"
)

// Timings of the listening connection and of watches.
const (
	quietCheck   = 15 * time.Second // a listening connection quiet this long is pinged
	pingTimeout  = 5 * time.Second
	watchFor     = 30 * time.Second // how long a watch has changes announced without renewal
	watchRenewal = 10 * time.Second
	pendingFor   = time.Minute // how long a wake that found no waiter is kept for its Register
	// selfCheckTimeout bounds the wait for a listener's own notification (milliseconds when
	// all is well).
	selfCheckTimeout = 3 * time.Second
	maxPending       = 4096
)

// listener is a Store's one listening connection and what hears from it: the waiters it wakes
// when the line grants their holders, and the watches it wakes when a watched key changes.
type listener struct {
	s       *Store
	cfg     *pgx.ConnConfig
	channel string // the Store's own channel: grants to its waiters

	mu       sync.Mutex
	up       bool // LISTEN is in force on a live connection
	gen      uint64
	pid      int32 // the listening backend, while up
	started  time.Time
	tried    chan struct{}        // closed when the first connection has been tried, up or not
	waiters  map[string][]*waiter // notice → enrolled waiters
	pending  map[string]heard     // notices that found no waiter yet
	refusals map[string]refusal   // notice → its refused try
	owed     map[string]try       // notice → a refused try that waits, until its Register
	inflight waitline.Tries       // by notice
	watches  map[string]*keyWatch // hex MD5 of the key → its watches
}

func newListener(s *Store, cfg *pgx.ConnConfig, channel string) *listener {
	return &listener{s: s, cfg: cfg, channel: channel, tried: make(chan struct{}),
		waiters: make(map[string][]*waiter), pending: make(map[string]heard),
		refusals: make(map[string]refusal), owed: make(map[string]try), watches: make(map[string]*keyWatch)}
}

// awaitUp waits until the listener's first connection has been tried (it is up, or failed), ctx
// ends or five seconds pass.
func (l *listener) awaitUp(ctx context.Context) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-l.tried:
	case <-ctx.Done():
	case <-t.C:
	}
}

// run keeps a listening connection open until ctx ends, reconnecting with a backoff of 50ms
// doubling to 2s.
func (l *listener) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		began := time.Now()
		l.session(ctx)
		l.setDown()
		l.markTried()
		if time.Since(began) > time.Minute {
			backoff = 50 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// session opens a connection, listens on the Store's channel and the change channel, and
// delivers what arrives until the connection fails or ctx ends. A connection quiet for
// quietCheck is pinged, so that a dead one is found.
func (l *listener) session(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.cfg)
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	var (
		pid     int32
		started time.Time
	)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()+"; LISTEN "+pgx.Identifier{l.s.n.changed}.Sanitize())
	if err == nil {
		err = conn.QueryRow(cctx, "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&pid, &started)
	}
	if err == nil {
		sctx, scancel := context.WithTimeout(cctx, selfCheckTimeout)
		err = l.selfCheck(sctx, conn)
		scancel()
	}
	cancel()
	if err != nil {
		return err
	}
	l.setUp(pid, started)
	for {
		wctx, cancel := context.WithTimeout(ctx, quietCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.deliver(n.Channel, n.Payload)
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) || conn.IsClosed():
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

// selfCheck sends a notification on the Store's channel through the pool and waits for it on
// conn. It fails when the pool and the listening connection do not reach the same database —
// WithListenDSN naming another server, or LISTEN through a transaction pooler, which keeps
// no session to deliver to — so that waiters poll instead of waiting for wakes that cannot come.
func (l *listener) selfCheck(ctx context.Context, conn *pgx.Conn) error {
	if _, err := l.s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", l.channel, selfCheckPayload); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("the listening connection did not hear the pool's notification (do the pool and WithListenDSN reach one database, without a transaction pooler in between?): %w", err)
		}
		if n.Channel == l.channel && n.Payload == selfCheckPayload {
			return nil
		}
		l.deliver(n.Channel, n.Payload)
	}
}

// selfCheckPayload is the payload of a listener's self-check: never a notice (32 hex digits).
const selfCheckPayload = "self-check"

func (l *listener) setUp(pid int32, started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up, l.pid, l.started = true, pid, started
	l.gen++
	l.wakeAllLocked()
	l.markTriedLocked()
}

func (l *listener) markTried() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markTriedLocked()
}

func (l *listener) markTriedLocked() {
	select {
	case <-l.tried:
	default:
		close(l.tried)
	}
}

func (l *listener) setDown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up {
		l.up = false
		l.wakeAllLocked()
	}
}

func (l *listener) isUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up && !l.s.closed.Load()
}

// wakeAll wakes every waiter and watch, so that each looks again (its reliability changed, or
// the Store closed).
func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeAllLocked()
}

func (l *listener) wakeAllLocked() {
	for _, ws := range l.waiters {
		for _, w := range ws {
			w.wake()
		}
	}
	for _, kw := range l.watches {
		kw.wakeAll()
	}
}

// heard is a grant's notice that found no waiter yet: when, and the grant's fence.
type heard struct {
	at    time.Time
	fence uint64
}

// deliver hands a notification to the waiters or watches it is for. A grant's notice is the
// notice of its holder and key (see noticeOf), a space and the grant's fence; another payload on
// the Store's channel is not a grant, and is dropped.
func (l *listener) deliver(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch channel {
	case l.channel:
		notice, f, _ := strings.Cut(payload, " ")
		fence, err := strconv.ParseUint(f, 10, 64)
		if err != nil || fence == 0 {
			return
		}
		ws := l.waiters[notice]
		if len(ws) == 0 {
			// The waiter's Register has not come yet (the try's reply and the wake crossed).
			if len(l.pending) >= maxPending {
				now := time.Now()
				maps.DeleteFunc(l.pending, func(_ string, h heard) bool { return now.Sub(h.at) > pendingFor })
				if len(l.pending) >= maxPending {
					clear(l.pending) // such waiters' Registers start woken: see afterTry
					clear(l.refusals)
				}
			}
			l.pending[notice] = heard{at: time.Now(), fence: max(fence, l.pending[notice].fence)}
		}
		for _, w := range ws {
			w.granted(fence)
		}
	case l.s.n.changed:
		if kw := l.watches[payload]; kw != nil {
			kw.wakeAll()
		}
	}
}
