package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives/httplimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustNew(t *testing.T, store core.Store, limit int, opts ...httplimit.Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(store, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
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
		{"limit 0", store, 0, nil, "limit"},
		{"negative wait", store, 1, []httplimit.Option{httplimit.WithWait(-time.Second)}, "wait"},
		{"short ttl", store, 1, []httplimit.Option{httplimit.WithTTL(time.Millisecond)}, "ttl"},
		{"nil key func", store, 1, []httplimit.Option{httplimit.WithKey(nil)}, "key func"},
		{"nil permits func", store, 1, []httplimit.Option{httplimit.WithPermits(nil)}, "permits func"},
		{"nil reject handler", store, 1, []httplimit.Option{httplimit.WithRejectHandler(nil)}, "reject handler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(tc.store, tc.limit, tc.opts...)
			if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

// gate is a handler that holds requests until released.
type gate struct {
	in      chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{in: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.in <- struct{}{}
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	io.WriteString(w, "done")
}

func TestFullKeyGets503WithRetryAfter(t *testing.T) {
	g := newGate()
	srv := httptest.NewServer(mustNew(t, memory.New(), 2)(g))
	defer srv.Close()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("held request: %d", resp.StatusCode)
			}
		})
	}
	<-g.in
	<-g.in
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(g.release)
	wg.Wait()
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the slots freed: %d, want 200", resp.StatusCode)
	}
}

func TestKeysAreSeparateAndWaitingWorks(t *testing.T) {
	g := newGate()
	mw := mustNew(t, memory.New(), 1, httplimit.WithKey(func(r *http.Request) string { return r.URL.Path }), httplimit.WithWait(5*time.Second))
	srv := httptest.NewServer(mw(g))
	defer srv.Close()
	codes := make(chan int, 3)
	get := func(path string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go get("/a")
	<-g.in
	go get("/b") // another key: not limited by /a
	<-g.in
	go get("/a") // waits for /a's slot
	time.Sleep(100 * time.Millisecond)
	close(g.release)
	for range 3 {
		if c := <-codes; c != 200 {
			t.Errorf("status %d, want 200", c)
		}
	}
}

func TestLostLeaseCancelsRequest(t *testing.T) {
	store := memory.New()
	cause := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap, _ := store.Inspect(r.Context(), "httplimit:default")
		store.Release(r.Context(), "httplimit:default", snap.Leases[0].Holder) // taken behind its back
		<-r.Context().Done()
		cause <- context.Cause(r.Context())
	})
	srv := httptest.NewServer(mustNew(t, store, 1, httplimit.WithTTL(300*time.Millisecond))(h))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := <-cause; !errors.Is(c, core.ErrLost) {
		t.Errorf("request context cause = %v, want ErrLost", c)
	}
}

func TestPanicReleasesSlot(t *testing.T) {
	store := memory.New()
	mw := mustNew(t, store, 1)
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if snap, _ := store.Inspect(context.Background(), "httplimit:default"); len(snap.Leases) != 0 {
		t.Errorf("a panicking request kept its slot: %+v", snap.Leases)
	}
}

func TestLimitHoldsAcrossServersSharingRedis(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	var running, peak atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		running.Add(-1)
	})
	var urls []string
	for range 2 {
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
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			resp, err := http.Get(urls[i%2])
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 503:
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	if peak.Load() > 3 || ok.Load() == 0 || busy.Load() == 0 {
		t.Errorf("peak %d handlers at once across both servers (limit 3), %d served, %d turned away; want ≤ 3 and some of each", peak.Load(), ok.Load(), busy.Load())
	}
}
