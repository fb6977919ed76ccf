package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// newSemaphoreError returns the error of NewSemaphore(key, limit 0): it quotes the key.
func newSemaphoreError(t *testing.T, key string) string {
	t.Helper()
	_, err := primitives.NewSemaphore(memory.New(), key, 0)
	if err == nil {
		t.Fatal("NewSemaphore with limit 0: nil error")
	}
	return err.Error()
}

func TestErrorsQuoteKeysOfAtMostAHundredBytesWhole(t *testing.T) {
	for _, n := range []int{1, 99, 100} {
		key := strings.Repeat("k", n)
		want := `leasehold: new semaphore "` + key + `": invalid argument: limit 0: must be >= 1`
		if got := newSemaphoreError(t, key); got != want {
			t.Errorf("key of %d bytes:\n %s\nwant\n %s", n, got, want)
		}
	}
}

func TestErrorsCutAKeyOfAHundredAndOneBytes(t *testing.T) {
	key := strings.Repeat("k", 101)
	want := `leasehold: new semaphore "` + key[:100] + `"… (101 bytes): invalid argument: limit 0: must be >= 1`
	if got := newSemaphoreError(t, key); got != want {
		t.Errorf("error:\n %s\nwant\n %s", got, want)
	}
}

func TestErrorsQuoteTheStartOfAKeyOfInvalidUTF8(t *testing.T) {
	// No byte of it starts a rune: the cut must still keep about a hundred of them.
	key := strings.Repeat("\x80", 200)
	got := newSemaphoreError(t, key)
	if want := `"` + strings.Repeat(`\x80`, 97); !strings.Contains(got, want) {
		t.Errorf("error:\n %s\nwant it to quote the key's first bytes, %s…", got, want)
	}
}

func TestAcquireErrorsQuoteAtMostTheStartOfALongKey(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	key := strings.Repeat("k", core.MaxKeyLen)
	two, err := primitives.NewSemaphore(store, key, 2, primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := two.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	mu, err := primitives.NewMutex(store, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mu.TryAcquire(ctx)
	want := `leasehold: acquire "` + key[:100] + `"… (1024 bytes): limit mismatch: the key is held under limit 2, this request has 1`
	if !errors.Is(err, core.ErrLimitMismatch) || err.Error() != want {
		t.Errorf("TryAcquire of a mutex on a semaphore's key of 1024 bytes: %v\nwant %s", err, want)
	}
}
