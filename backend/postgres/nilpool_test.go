package postgres_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// TestNewWithANilPoolNamesTheDriverAndTheArgument: a nil pool is core.ErrInvalid, worded as every
// driver words a nil argument to its constructor, and nothing is dialled.
func TestNewWithANilPoolNamesTheDriverAndTheArgument(t *testing.T) {
	_, err := postgres.New(nil)
	if want := "postgres: new: invalid argument: pool: must not be nil"; !errors.Is(err, core.ErrInvalid) || err == nil || err.Error() != want {
		t.Errorf("New(nil) = %v, want ErrInvalid reading %q", err, want)
	}
}
