package primitives_test

import (
	"errors"
	"strings"
	"testing"

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

func TestOperationErrorsQuoteAtMostTheStartOfTheKey(t *testing.T) {
	key := strings.Repeat("k", core.MaxKeyLen)
	sem, err := primitives.NewSemaphore(memory.New(), key, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(t.Context(), 3)
	want := `leasehold: acquire "` + strings.Repeat("k", 100) + `"… (1024 bytes): invalid argument: permits 3: must be in [1, 2]`
	if err == nil || err.Error() != want {
		t.Errorf("TryAcquire(3) on a key of 1024 bytes: %v, want %s", err, want)
	}
}
