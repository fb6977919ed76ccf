package httpfence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/primitives/httpfence"
)

// ledger is a handler that appends each request's body to the resource's log, with the fence the
// middleware accepted.
type ledger struct {
	mu  sync.Mutex
	log []string
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fence, ok := httpfence.FromContext(r.Context())
	if !ok {
		http.Error(w, "no fence in the context", http.StatusInternalServerError)
		return
	}
	l.mu.Lock()
	l.log = append(l.log, string(body)+"@"+strconv.FormatUint(fence, 10))
	l.mu.Unlock()
}

func serve(t *testing.T, h http.Handler, fence string, body string) int {
	t.Helper()
	r := httptest.NewRequest("POST", "/account-7", strings.NewReader(body))
	if fence != "" {
		r.Header.Set(httpfence.Header, fence)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestMiddlewareRefusesAStaleFence: the current fence is served, an older one gets 409 and never
// reaches the handler, the same fence is served again, and a missing or malformed fence gets 400.
func TestMiddlewareRefusesAStaleFence(t *testing.T) {
	store := memory.New()
	fenced, err := httpfence.Middleware(store.Fenced, func(r *http.Request) string { return r.URL.Path })
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	h := fenced(&l)
	for _, step := range []struct {
		fence, body string
		want        int
	}{
		{"5", "a", http.StatusOK}, {"3", "b", http.StatusConflict}, {"5", "c", http.StatusOK},
		{"9", "d", http.StatusOK}, {"8", "e", http.StatusConflict},
		{"", "f", http.StatusBadRequest}, {"0", "g", http.StatusBadRequest}, {"x9", "h", http.StatusBadRequest},
		{"-1", "i", http.StatusBadRequest}, {"18446744073709551616", "j", http.StatusBadRequest},
	} {
		if got := serve(t, h, step.fence, step.body); got != step.want {
			t.Errorf("fence %q: status %d, want %d", step.fence, got, step.want)
		}
	}
	if got := strings.Join(l.log, " "); got != "a@5 c@5 d@9" {
		t.Errorf("the handler saw %q, want a@5 c@5 d@9", got)
	}
}

// TestMiddlewareFailsClosedWhenTheGuardFails: a Guard that cannot check gets 503, and the handler
// does not run.
func TestMiddlewareFailsClosedWhenTheGuardFails(t *testing.T) {
	down := errors.New("store down")
	fenced, err := httpfence.Middleware(httpfence.CheckFirst(func(context.Context, string, uint64) error { return down }),
		func(*http.Request) string { return "r" })
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	if got := serve(t, fenced(&l), "4", "a"); got != http.StatusServiceUnavailable || len(l.log) != 0 {
		t.Errorf("status %d, handler saw %v; want 503 and nothing served", got, l.log)
	}
}

func TestMiddlewareRefusesNilArguments(t *testing.T) {
	store := memory.New()
	if _, err := httpfence.Middleware(nil, func(*http.Request) string { return "" }); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "guard") {
		t.Errorf("nil guard: %v, want ErrInvalid naming guard", err)
	}
	if _, err := httpfence.Middleware(store.Fenced, nil); !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "resource") {
		t.Errorf("nil resource func: %v, want ErrInvalid naming it", err)
	}
}

// TestTransportSendsTheLeasesFence: a client holding a lease writes with its fence; after a newer
// holder wrote, a request with the older fence is refused by the server; a request under a
// released lease is not sent at all.
func TestTransportSendsTheLeasesFence(t *testing.T) {
	store := memory.New()
	fenced, err := httpfence.Middleware(store.Fenced, func(r *http.Request) string { return r.URL.Path })
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	srv := httptest.NewServer(fenced(&l))
	defer srv.Close()
	m, err := primitives.NewMutex(store, "account-7")
	if err != nil {
		t.Fatal(err)
	}
	post := func(lease core.Lease, body string) (int, error) {
		c := &http.Client{Transport: httpfence.Transport(nil, lease)}
		resp, err := c.Post(srv.URL+"/account-7", "text/plain", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	old, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if code, err := post(old, "a"); err != nil || code != http.StatusOK {
		t.Fatalf("a write under the lease: %d, %v; want 200", code, err)
	}
	if err := old.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := post(old, "late"); !errors.Is(err, core.ErrNotHeld) {
		t.Errorf("a request under a released lease: %v, want it not sent, wrapping ErrNotHeld", err)
	}
	newer, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Release(context.Background())
	if code, err := post(newer, "b"); err != nil || code != http.StatusOK {
		t.Fatalf("a write under the newer lease: %d, %v; want 200", code, err)
	}
	// The old holder, stalled and not knowing it lost the key, sends its fence by hand.
	req, _ := http.NewRequest("POST", srv.URL+"/account-7", strings.NewReader("stale"))
	req.Header.Set(httpfence.Header, strconv.FormatUint(old.Fence(), 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("a write with the older fence: %d, want 409", resp.StatusCode)
	}
	want := "a@" + strconv.FormatUint(old.Fence(), 10) + " b@" + strconv.FormatUint(newer.Fence(), 10)
	if got := strings.Join(l.log, " "); got != want {
		t.Errorf("the handler saw %q, want %q", got, want)
	}
}
