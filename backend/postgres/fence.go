package postgres

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
)

// ErrStaleFence is core.ErrStaleFence: a fenced write was refused, a higher fence having been
// accepted for the resource before. errors.Is matches either name.
var ErrStaleFence = core.ErrStaleFence

// AcceptFence makes a write to resource inside the caller's transaction tx conditional on fence,
// the fencing token of the caller's lease (core.Lease.Fence): it refuses a fence lower than the
// highest accepted for resource before, with an error wrapping ErrStaleFence and core.ErrLost,
// and otherwise records fence as the highest. The record and the caller's writes commit or roll
// back together: a write under a lease that has been lost can never land after a newer holder's,
// however long its holder stalled. The check locks resource's row of the Store's fences table
// until tx ends, so the writers of one resource are serial; equal fences pass (one holder writing
// twice). It costs one round trip. tx must be a transaction on the Store's database.
//
// resource is any string (a table row's name, say) and need not be the lease's key: several
// leases' holders may guard one resource, and one lease several resources. A fence of zero, or
// above 2^63 − 1, is core.ErrInvalid. The record of a resource is a row of the fences table,
// kept until the caller deletes it (see the package doc), since without it a stale fence would
// pass.
func (s *Store) AcceptFence(ctx context.Context, tx pgx.Tx, resource string, fence uint64) error {
	switch {
	case tx == nil:
		return fmt.Errorf("%w: tx: must not be nil", core.ErrInvalid)
	case fence == 0 || fence > math.MaxInt64:
		return fmt.Errorf("%w: fence %d: must be between 1 and 2^63 − 1", core.ErrInvalid, fence)
	}
	var (
		accepted bool
		highest  int64
	)
	if err := tx.QueryRow(ctx, s.n.acceptFence, []byte(resource), int64(fence)).Scan(&accepted, &highest); err != nil {
		return s.fail(ctx, err)
	}
	if !accepted {
		return fmt.Errorf("%w: %w: fence %d for %q is below %d, accepted already", ErrStaleFence, core.ErrLost, fence, resource, highest)
	}
	return nil
}
