package primitives_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/primitives/httplimit"
)

// TestConstructorsWordANilStoreAlike: every constructor that takes a store refuses a nil one
// with core.ErrInvalid, worded as the drivers word a nil argument to theirs: what was being made,
// then "invalid argument: store: must not be nil".
func TestConstructorsWordANilStoreAlike(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"NewMutex", func() error { _, err := primitives.NewMutex(nil, "k"); return err },
			`leasehold: new mutex "k": invalid argument: store: must not be nil`},
		{"NewSemaphore", func() error { _, err := primitives.NewSemaphore(nil, "k", 2); return err },
			`leasehold: new semaphore "k": invalid argument: store: must not be nil`},
		{"NewRWMutex", func() error { _, err := primitives.NewRWMutex(nil, "k"); return err },
			`leasehold: new rwmutex "k": invalid argument: store: must not be nil`},
		{"NewElection", func() error { _, err := primitives.NewElection(nil, "k"); return err },
			`leasehold: new election "k": invalid argument: store: must not be nil`},
		{"NewMultiLock", func() error { _, err := primitives.NewMultiLock(nil, []string{"a", "b"}); return err },
			`leasehold: new multilock ["a" "b"]: invalid argument: store: must not be nil`},
		{"httplimit.New", func() error { _, err := httplimit.New(nil, 1); return err },
			`leasehold: new httplimit: invalid argument: store: must not be nil`},
	} {
		if err := tc.err(); !errors.Is(err, core.ErrInvalid) || err.Error() != tc.want {
			t.Errorf("%s(nil store) = %v, want ErrInvalid reading %q", tc.name, err, tc.want)
		}
	}
}
