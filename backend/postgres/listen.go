package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/core"
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
	pending  map[string]time.Time // notices that found no waiter yet
	refusals map[string]uint64    // notice → the generation its refused try was sent in
	owed     map[string]try       // notice → a refused try that waits, until its Register
	watches  map[string]*keyWatch // hex MD5 of the key → its watches
}

func newListener(s *Store, cfg *pgx.ConnConfig, channel string) *listener {
	return &listener{s: s, cfg: cfg, channel: channel, tried: make(chan struct{}),
		waiters: make(map[string][]*waiter), pending: make(map[string]time.Time),
		refusals: make(map[string]uint64), owed: make(map[string]try), watches: make(map[string]*keyWatch)}
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

// deliver hands a notification to the waiters or watches it is for.
func (l *listener) deliver(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch channel {
	case l.channel:
		ws := l.waiters[payload]
		if len(ws) == 0 {
			// The waiter's Register has not come yet (the try's reply and the wake crossed).
			if len(l.pending) >= maxPending {
				now := time.Now()
				maps.DeleteFunc(l.pending, func(_ string, at time.Time) bool { return now.Sub(at) > pendingFor })
				if len(l.pending) >= maxPending {
					clear(l.pending) // such waiters' Registers start woken: see afterTry
					clear(l.refusals)
				}
			}
			l.pending[payload] = time.Now()
		}
		for _, w := range ws {
			w.wake()
		}
	case l.s.n.changed:
		if kw := l.watches[payload]; kw != nil {
			kw.wakeAll()
		}
	}
}

// try is a try that will wait, from beforeTry to afterTry: whether its place in the line names
// the listening connection, which generation of it, and the notice a grant to it will send.
type try struct {
	key     string
	holder  string
	id      int64
	up      bool
	gen     uint64
	pid     int32
	started time.Time
	notice  string
}

func (l *listener) beforeTry(key, holder string) try {
	l.mu.Lock()
	defer l.mu.Unlock()
	return try{key: key, holder: holder, up: l.up, gen: l.gen, pid: l.pid, started: l.started, notice: noticeOf(key, holder)}
}

// afterTry records a try's outcome: a refusal whose place names this listener, unchanged since,
// lets Register trust that no grant to it went unheard. A refusal is owed a leave until its
// Register, so that Close can send it; afterTry reports a refusal that came after Close, whose
// caller cannot Register and must leave its place itself.
func (l *listener) afterTry(t try, granted bool) (closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.waiters[t.notice] {
		w.queued = !granted // a grant took the holder out of the line; a refusal that waits keeps its place
	}
	if granted {
		delete(l.owed, t.notice)
	} else {
		if l.s.closed.Load() {
			return true // Close, which holds l.mu when it collects the leaves owed, came before
		}
		if len(l.waiters[t.notice]) == 0 { // else its Waiter owes the leave
			if len(l.owed) >= maxPending {
				clear(l.owed) // callers that never registered; a place left then ends with its wait
			}
			l.owed[t.notice] = t
		}
	}
	switch {
	case granted:
		delete(l.refusals, t.notice)
		delete(l.pending, t.notice) // the wake of the grant it just took, if any
	case t.up:
		if len(l.refusals) >= maxPending {
			clear(l.refusals) // callers that never registered; the rest start woken
		}
		l.refusals[t.notice] = t.gen
	default:
		delete(l.refusals, t.notice)
	}
	return false
}

// Register implements core.Notifier. The waiter is woken when the line grants req.Holder a
// lease on req.Key, announced on the Store's listening connection; it starts woken unless its
// refused try named that connection, which has stayed up since and brought no grant for it
// before Register. It does no I/O and ignores ctx: a caller whose ctx ended still gets the
// Waiter whose Close takes its place out of the line.
func (s *Store) Register(_ context.Context, req core.AcquireRequest) (core.Waiter, error) {
	if s.closed.Load() {
		return nil, core.ErrClosed
	}
	l := s.l
	w := &waiter{l: l, key: req.Key, holder: req.Holder, notice: noticeOf(req.Key, req.Holder), c: make(chan struct{}, 1), queued: true}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiters[w.notice] = append(l.waiters[w.notice], w)
	gen, refused := l.refusals[w.notice]
	_, missed := l.pending[w.notice]
	delete(l.refusals, w.notice)
	delete(l.pending, w.notice)
	delete(l.owed, w.notice) // the Waiter owes the leave now
	if !l.up || !refused || gen != l.gen || missed {
		w.wake()
	}
	return w, nil
}

// waiter is one enrollment of a caller waiting in a key's line.
type waiter struct {
	l                   *listener
	key, holder, notice string
	c                   chan struct{}
	closed              bool // guarded by l.mu
	// queued says the holder may have a place in the line, or a grant from it not taken: its
	// latest try was refused and waits. A try that was granted took both, so Close sends no
	// leave. Guarded by l.mu.
	queued bool
}

func (w *waiter) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// C implements core.Waiter.
func (w *waiter) C() <-chan struct{} { return w.c }

// Reliable implements core.Waiter: true while the listening connection is up.
func (w *waiter) Reliable() bool { return w.l.isUp() }

// Close implements core.Waiter: the holder's place leaves the line, and a grant the line made it
// that it has not taken goes to the next waiters, in one call sent in the background — unless
// the holder's latest try was granted, which left it neither.
func (w *waiter) Close() {
	l := w.l
	// s.lmu first, as Store.Close takes it: a Close of the Store either finds this waiter
	// enrolled, and leaves its place, or comes after its leave has started.
	l.s.lmu.Lock()
	defer l.s.lmu.Unlock()
	l.mu.Lock()
	if w.closed {
		l.mu.Unlock()
		return
	}
	w.closed = true
	ws := slices.DeleteFunc(l.waiters[w.notice], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(l.waiters, w.notice)
	} else {
		l.waiters[w.notice] = ws
	}
	queued := w.queued
	l.mu.Unlock()
	if len(ws) == 0 && queued && !l.s.closed.Load() {
		l.s.leaveLocked(w.key, w.holder, nil)
	}
}

// queued returns, one per holder and key, the holders that may have a place in the line or a
// grant from it not taken: those of open Waiters, and of refused tries not yet registered.
func (l *listener) queued() []try {
	l.mu.Lock()
	defer l.mu.Unlock()
	owed := slices.Collect(maps.Values(l.owed))
	for notice, ws := range l.waiters {
		if _, ok := l.owed[notice]; ok {
			continue
		}
		if i := slices.IndexFunc(ws, func(w *waiter) bool { return w.queued }); i >= 0 {
			owed = append(owed, try{key: ws[i].key, holder: ws[i].holder})
		}
	}
	return owed
}

// keyWatch is the watches of one key.
type keyWatch struct {
	key     string
	list    []*watch
	renewed bool // the latest marking of the key as watched succeeded
}

func (kw *keyWatch) wakeAll() {
	for _, w := range kw.list {
		w.wake()
	}
}

// watch is one caller's core.Watch.
type watch struct {
	l  *listener
	h  string
	kw *keyWatch
	c  chan struct{}
}

func (w *watch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Watch implements core.Watcher. The key's changes are announced (NOTIFY) on one channel shared
// by every Store with this prefix, and only while the key is marked watched: Watch marks it for
// 30 s (one round trip, when the Store does not watch the key already) and the Store renews the
// mark every 10 s while it has watches on the key, so a key nobody watches costs its operations
// nothing. The Watch starts with a value in C.
func (s *Store) Watch(ctx context.Context, key string) (core.Watch, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	l := s.l
	h := md5hex([]byte(key))
	l.mu.Lock()
	kw := l.watches[h]
	if kw == nil {
		kw = &keyWatch{key: key}
		l.watches[h] = kw
	}
	w := &watch{l: l, h: h, kw: kw, c: make(chan struct{}, 1)}
	kw.list = append(kw.list, w)
	renewed := kw.renewed
	l.mu.Unlock()
	if !renewed {
		if err := s.markWatched(ctx, key); err != nil {
			w.Close()
			return nil, s.fail(ctx, err)
		}
		l.mu.Lock()
		if !kw.renewed {
			kw.renewed = true
			kw.wakeAll()
		}
		l.mu.Unlock()
	}
	w.wake()
	return w, nil
}

func (s *Store) markWatched(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, s.n.watch, []byte(key), us(watchFor))
	return err
}

// renew renews the watched mark of every key the Store watches, every watchRenewal, until ctx
// ends. A key whose renewal fails, or succeeds again, has its watches woken (their reliability
// changed).
func (l *listener) renew(ctx context.Context) {
	t := time.NewTicker(watchRenewal)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		keys := make([]*keyWatch, 0, len(l.watches))
		for _, kw := range l.watches {
			keys = append(keys, kw)
		}
		l.mu.Unlock()
		for _, kw := range keys {
			rctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := l.s.markWatched(rctx, kw.key)
			cancel()
			l.mu.Lock()
			if ok := err == nil; ok != kw.renewed {
				kw.renewed = ok
				kw.wakeAll()
			}
			l.mu.Unlock()
		}
	}
}

// C implements core.Watch.
func (w *watch) C() <-chan struct{} { return w.c }

// Reliable implements core.Watch: true while the listening connection is up and the key's
// latest watched mark was made.
func (w *watch) Reliable() bool {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.up && w.kw.renewed && !w.l.s.closed.Load()
}

// Close implements core.Watch. The key's mark lapses within 30 s once no Store renews it.
func (w *watch) Close() {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	w.kw.list = slices.DeleteFunc(w.kw.list, func(x *watch) bool { return x == w })
	if len(w.kw.list) == 0 && l.watches[w.h] == w.kw {
		delete(l.watches, w.h)
	}
}
