package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// TestNewWithANilPoolNamesTheDriverAndTheArgument: a nil ctx or pool is core.ErrInvalid, worded as every
// driver words a nil argument to its constructor, and nothing is dialled.
func TestNewWithANilPoolNamesTheDriverAndTheArgument(t *testing.T) {
	t.Parallel()
	_, err := postgres.New(context.Background(), nil)
	if want := "postgres: new: invalid argument: pool: must not be nil"; !errors.Is(err, core.ErrInvalid) || err == nil || err.Error() != want {
		t.Errorf("New(ctx, nil) = %v, want ErrInvalid reading %q", err, want)
	}
	//lint:ignore SA1012 a nil ctx is the input under test
	_, err = postgres.New(nil, nil)
	if want := "postgres: new: invalid argument: ctx: must not be nil"; !errors.Is(err, core.ErrInvalid) || err == nil || err.Error() != want {
		t.Errorf("New(nil, nil) = %v, want ErrInvalid reading %q", err, want)
	}
}
