package etcd_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
)

// TestNewWithANilClientNamesTheDriverAndTheArgument: a nil client is core.ErrInvalid, worded as
// every driver words a nil argument to its constructor.
func TestNewWithANilClientNamesTheDriverAndTheArgument(t *testing.T) {
	_, err := etcd.New(nil)
	if want := "etcd: new: invalid argument: client: must not be nil"; !errors.Is(err, core.ErrInvalid) || err == nil || err.Error() != want {
		t.Errorf("New(nil) = %v, want ErrInvalid reading %q", err, want)
	}
}
