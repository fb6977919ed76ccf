package httpfence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/primitives/httpfence"
)

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (b *closeRecorder) Close() error { b.closed = true; return nil }

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportSendsNothingUnderALostLease: once the lease is lost (not renewed by its
// deadline), a request is not sent: the error wraps core.ErrLost, not ErrNotHeld, and the
// request's body is closed, as a RoundTripper must close it even on an error.
func TestTransportSendsNothingUnderALostLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := primitives.NewMutex(memory.New(), "job", primitives.WithTTL(time.Second), primitives.WithoutRefresh())
		if err != nil {
			t.Fatal(err)
		}
		lease, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sent := false
		tr := httpfence.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
			sent = true
			return nil, errors.New("sent")
		}), lease)
		<-lease.Done()
		body := &closeRecorder{Reader: strings.NewReader("late")}
		r, _ := http.NewRequest("POST", "http://resource.invalid/x", body)
		_, err = tr.RoundTrip(r)
		if !errors.Is(err, core.ErrLost) || errors.Is(err, core.ErrNotHeld) {
			t.Errorf("a request under a lost lease: %v, want it wrapping ErrLost (not ErrNotHeld)", err)
		}
		if sent || !body.closed {
			t.Errorf("a request under a lost lease: sent %v, body closed %v; want not sent, and closed", sent, body.closed)
		}
	})
}
