package httplimit_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/primitives/httplimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const defaultKey = httplimit.DefaultPrefix + httplimit.DefaultKey

func mustNew(t *testing.T, store core.Store, limit int, opts ...httplimit.Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(store, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// serve starts an httptest.Server, closed when the test ends. Closing drops client connections
// first, so that a test that fails while a gate holds a request does not hang in Close.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// response is what a client got.
type response struct {
	code       int
	retryAfter string
	body       string
}

// get sends a GET and returns the response; a transport error fails the test.
func get(t *testing.T, url string) response {
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return response{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
}

// goGet sends a GET on its own goroutine and delivers the response on the returned channel.
func goGet(t *testing.T, url string) <-chan response {
	c := make(chan response, 1)
	go func() { c <- get(t, url) }()
	return c
}

// recv returns the next value from c, failing the test after 10s.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		panic("unreachable")
	}
}

// gate is a handler that holds each request until the test closes the channel the request
// announced itself with on in.
type gate struct{ in chan chan struct{} }

func newGate() *gate { return &gate{in: make(chan chan struct{}, 16)} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	release := make(chan struct{})
	g.in <- release
	select {
	case <-release:
	case <-r.Context().Done():
	}
	io.WriteString(w, "done")
}

// held waits for the next request to enter the handler and returns its release.
func (g *gate) held(t *testing.T) chan struct{} {
	t.Helper()
	return recv(t, g.in, "request inside the handler")
}

func TestNewRefusesBadInput(t *testing.T) {
	store := memory.New()
	tests := []struct {
		name  string
		store core.Store
		limit int
		opts  []httplimit.Option
		want  string
	}{
		{"nil store", nil, 1, nil, "store"},
		{"limit 0", store, 0, nil, "limit 0"},
		{"negative limit", store, -3, nil, "limit -3"},
		{"negative wait", store, 1, []httplimit.Option{httplimit.WithWait(-time.Second)}, "wait"},
		{"short ttl", store, 1, []httplimit.Option{httplimit.WithTTL(time.Millisecond)}, "ttl"},
		{"ttl above MaxDuration", store, 1, []httplimit.Option{httplimit.WithTTL(math.MaxInt64)}, "ttl"},
		{"limit above MaxLimit", store, core.MaxLimit + 1, nil, "limit"},
		{"nil key func", store, 1, []httplimit.Option{httplimit.WithKey(nil)}, "key func"},
		{"nil permits func", store, 1, []httplimit.Option{httplimit.WithPermits(nil)}, "permits func"},
		{"nil reject handler", store, 1, []httplimit.Option{httplimit.WithRejectHandler(nil)}, "reject handler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := httplimit.New(tc.store, tc.limit, tc.opts...)
			if mw != nil || !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrInvalid naming %q and no middleware", err, tc.want)
			}
		})
	}
	if _, err := httplimit.New(store, 1, nil, httplimit.WithTTL(primitives.MinTTL), httplimit.WithWait(0)); err != nil {
		t.Errorf("a nil option, the minimum TTL and no wait: %v, want them accepted", err)
	}
	if _, err := httplimit.New(store, core.MaxLimit, httplimit.WithTTL(core.MaxDuration), httplimit.WithWait(math.MaxInt64)); err != nil {
		t.Errorf("the largest limit and TTL and an unbounded wait: %v, want them accepted", err)
	}
}

func TestFullKeyGets503WithRetryAfter(t *testing.T) {
	g := newGate()
	srv := serve(t, mustNew(t, memory.New(), 2)(g))
	first := goGet(t, srv.URL)
	r1 := g.held(t)
	second := goGet(t, srv.URL)
	r2 := g.held(t)

	got := get(t, srv.URL)
	if s, err := strconv.Atoi(got.retryAfter); got.code != http.StatusServiceUnavailable || err != nil || s < 1 || got.body == "" {
		t.Errorf("third request: %+v; want 503 with Retry-After >= 1 and a body", got)
	}

	close(r1)
	if got := recv(t, first, "first response"); got.code != http.StatusOK {
		t.Errorf("first request: %+v, want 200", got)
	}
	next := goGet(t, srv.URL) // the first's slot is free: served while the second still holds its own
	close(g.held(t))
	if got := recv(t, next, "response after a slot freed"); got.code != http.StatusOK {
		t.Errorf("request after a slot freed: %+v, want 200", got)
	}
	close(r2)
	recv(t, second, "second response")
}

func TestKeysAreLimitedSeparately(t *testing.T) {
	g := newGate()
	mw := mustNew(t, memory.New(), 1, httplimit.WithKey(func(r *http.Request) string { return r.URL.Path }))
	srv := serve(t, mw(g))
	a := goGet(t, srv.URL+"/a")
	ra := g.held(t)
	b := goGet(t, srv.URL+"/b") // another key: not limited by /a
	rb := g.held(t)
	if got := get(t, srv.URL+"/a"); got.code != http.StatusServiceUnavailable {
		t.Errorf("second /a while /a is held: %+v, want 503", got)
	}
	close(ra)
	close(rb)
	for _, c := range []<-chan response{a, b} {
		if got := recv(t, c, "response"); got.code != http.StatusOK {
			t.Errorf("held request: %+v, want 200", got)
		}
	}
}

func TestEmptyKeyCountsAgainstDefault(t *testing.T) {
	store := memory.New()
	var seen string
	mw := mustNew(t, store, 1, httplimit.WithKey(func(*http.Request) string { return "" }))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap, _ := store.Inspect(r.Context(), defaultKey)
		seen = strconv.Itoa(snap.InUse())
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if seen != "1" {
		t.Errorf("permits in use on %q while the handler ran: %s, want 1", defaultKey, seen)
	}
}

func TestWaitQueuesForASlot(t *testing.T) {
	g := newGate()
	srv := serve(t, mustNew(t, memory.New(), 1, httplimit.WithWait(10*time.Second))(g))
	first := goGet(t, srv.URL)
	r1 := g.held(t)
	second := goGet(t, srv.URL)
	select {
	case got := <-second:
		t.Fatalf("second request answered while the slot was held, under WithWait(10s): %+v", got)
	case <-time.After(100 * time.Millisecond): // waiting, as it should
	}
	close(r1)
	close(g.held(t)) // the second request got the slot
	for _, c := range []<-chan response{first, second} {
		if got := recv(t, c, "response"); got.code != http.StatusOK {
			t.Errorf("status %+v, want 200", got)
		}
	}
}

func TestWaitEndsWith503(t *testing.T) {
	g := newGate()
	srv := serve(t, mustNew(t, memory.New(), 1, httplimit.WithWait(50*time.Millisecond))(g))
	first := goGet(t, srv.URL)
	r1 := g.held(t)
	start := time.Now()
	got := get(t, srv.URL)
	if waited := time.Since(start); got.code != http.StatusServiceUnavailable || got.retryAfter == "" || waited < 50*time.Millisecond {
		t.Errorf("request refused after %v: %+v; want 503 with Retry-After after waiting 50ms", waited, got)
	}
	close(r1)
	recv(t, first, "first response")
}

func TestRejectHandlerAnswersFullKey(t *testing.T) {
	g := newGate()
	reject := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	srv := serve(t, mustNew(t, memory.New(), 1, httplimit.WithRejectHandler(reject))(g))
	first := goGet(t, srv.URL)
	r1 := g.held(t)
	if got := get(t, srv.URL); got.code != http.StatusTooManyRequests || got.retryAfter != "" {
		t.Errorf("full key with a reject handler: %+v, want its 429 and no Retry-After of ours", got)
	}
	close(r1)
	recv(t, first, "first response")
}

func TestPermitsWeighRequests(t *testing.T) {
	g := newGate()
	mw := mustNew(t, memory.New(), 3, httplimit.WithPermits(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		return n
	}))
	srv := serve(t, mw(g))
	heavy := goGet(t, srv.URL+"?n=2")
	rh := g.held(t)
	if got := get(t, srv.URL+"?n=2"); got.code != http.StatusServiceUnavailable {
		t.Errorf("2 permits with 2 of 3 held: %+v, want 503", got)
	}
	light := goGet(t, srv.URL+"?n=1")
	close(g.held(t))
	for _, n := range []string{"0", "4"} {
		if got := get(t, srv.URL+"?n="+n); got.code != http.StatusBadRequest {
			t.Errorf("%s permits of 3: %+v, want 400", n, got)
		}
	}
	close(rh)
	for _, c := range []<-chan response{heavy, light} {
		if got := recv(t, c, "response"); got.code != http.StatusOK {
			t.Errorf("status %+v, want 200", got)
		}
	}
}

func TestStoreFailureFailsClosed(t *testing.T) {
	store := memory.New()
	store.Close() // every operation now fails with ErrClosed
	called := false
	h := mustNew(t, store, 1)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if called || rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "unavailable") {
		t.Errorf("store down: handler called %v, %d %q; want 503 saying the limiter is unavailable", called, rec.Code, rec.Body.String())
	}
}

// TestLostLeaseCancelsRequest runs in a bubble: fake time, so that a loaded machine's stall
// cannot end the 60 ms lease before the handler has seen it.
func TestLostLeaseCancelsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		cause := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			snap, err := store.Inspect(r.Context(), defaultKey)
			if err != nil || len(snap.Leases) != 1 {
				t.Errorf("Inspect %q inside the handler: %+v, %v; want one lease", defaultKey, snap, err)
				cause <- nil
				return
			}
			store.Release(r.Context(), core.ReleaseRequest{Key: defaultKey, Holder: snap.Leases[0].Holder}) // taken behind its back
			select {
			case <-r.Context().Done():
				cause <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				cause <- errors.New("request context still live 10s after its lease was removed (TTL 60ms)")
			}
		})
		mw := mustNew(t, store, 1, httplimit.WithTTL(60*time.Millisecond)) // refreshed every 20ms
		mw(h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		if c := recv(t, cause, "cause"); !errors.Is(c, core.ErrLost) {
			t.Errorf("request context cause = %v, want one wrapping ErrLost", c)
		}
	})
}

func TestPanicReleasesSlot(t *testing.T) {
	store := memory.New()
	h := mustNew(t, store, 1)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the handler's panic to go on", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if snap, err := store.Inspect(context.Background(), defaultKey); err != nil || len(snap.Leases) != 0 {
		t.Errorf("a panicking request kept its slot: %+v, %v", snap.Leases, err)
	}
}

func TestLimitHoldsAcrossServersSharingRedis(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	running := conformance.NewOccupancy(3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer running.Enter(1)()
		time.Sleep(50 * time.Millisecond)
	})
	var urls []string
	for range 2 { // two "processes": each its own client, Store and server
		c := redis.NewClient(&redis.Options{Addr: addr})
		s, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mustNew(t, s, 3)(h))
		t.Cleanup(func() { srv.Close(); s.Close(); c.Close() })
		urls = append(urls, srv.URL)
	}
	var ok, busy atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			<-start
			switch got := get(t, urls[i%2]); got.code {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusServiceUnavailable:
				busy.Add(1)
			default:
				t.Errorf("response %+v, want 200 or 503", got)
			}
		})
	}
	close(start)
	wg.Wait()
	if running.Peak() > 3 || ok.Load() == 0 || busy.Load() == 0 {
		t.Errorf("peak %d handlers at once across both servers (limit 3), %d served, %d turned away; want ≤ 3 and some of each", running.Peak(), ok.Load(), busy.Load())
	}
}
