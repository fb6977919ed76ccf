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

func TestKeyLengthIsBounded(t *testing.T) {
	store := memory.New()
	newMutex := func(key string) error { _, err := primitives.NewMutex(store, key); return err }
	newRW := func(key string) error { _, err := primitives.NewRWMutex(store, key); return err }
	for _, tc := range []struct {
		name   string
		make   func(string) error
		length int
		want   string // "" for no error
	}{
		{"mutex at MaxKeyLen", newMutex, core.MaxKeyLen, ""},
		{"mutex past MaxKeyLen", newMutex, core.MaxKeyLen + 1, "key of 1025 bytes: must be at most 1024 (core.MaxKeyLen)"},
		{"mutex of a megabyte", newMutex, 1 << 20, "key of 1048576 bytes: must be at most 1024 (core.MaxKeyLen)"},
		// The RWMutex's writers announce themselves under its key and a 7-byte suffix.
		{"rwmutex at its bound", newRW, core.MaxKeyLen - 7, ""},
		{"rwmutex past its bound", newRW, core.MaxKeyLen - 6, "key of 1018 bytes: must be at most 1017 (core.MaxKeyLen less the 7 bytes of a suffix it needs)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.make(strings.Repeat("k", tc.length))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("key of %d bytes: %v, want it accepted", tc.length, err)
				}
				return
			}
			if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("key of %d bytes: %v, want ErrInvalid saying %q", tc.length, err, tc.want)
			}
			if len(err.Error()) > 300 {
				t.Errorf("error of %d bytes for a key of %d: %.200s…; want the key quoted in at most ~100 bytes", len(err.Error()), tc.length, err)
			}
		})
	}
}

func TestErrorsQuoteTheStartOfALongKey(t *testing.T) {
	key := strings.Repeat("é", 200) // 400 bytes, two to a rune: the cut must not split one
	_, err := primitives.NewSemaphore(memory.New(), key, 0)
	if err == nil {
		t.Fatal("NewSemaphore with limit 0: nil error")
	}
	want := `leasehold: new semaphore "` + strings.Repeat("é", 50) + `"… (400 bytes): invalid argument: limit 0: must be >= 1`
	if err.Error() != want {
		t.Errorf("error:\n %s\nwant\n %s", err, want)
	}
}

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
