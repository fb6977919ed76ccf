package valkey

import (
	"context"
	"errors"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

// fencedTries bounds how often Fenced checks the record again after another writer changed it
// between its read and its EXEC.
const fencedTries = 16

// Fenced sends the commands fn builds in one MULTI/EXEC, only if fence (a lease's Fence) is at
// least the highest fence accepted for resource before, and records fence as the highest in the
// same transaction: a write under a lease that was lost can never land after a newer holder's,
// however long its holder stalled. A lower fence returns an error wrapping core.ErrStaleFence and
// core.ErrLost, and none of fn's commands run; equal fences pass (one holder writing twice). An
// error fn returns is returned as it is, and nothing is sent. fn's commands all run at EXEC, as
// in any transaction: one that fails there fails alone, and Fenced returns the first such error.
//
// It is goredis.Store.Fenced in valkey-go's shape (fn builds the commands with the builder it is
// given), on the same record, so writers of both drivers fence each other: "<prefix>{R}:fence",
// kept until the caller deletes it. It costs a WATCH, a GET and the transaction on a dedicated
// connection: three round trips, and again when another writer of resource changed the record
// meanwhile. On a Cluster every key fn writes must be in the record's slot: put FenceTag(resource)
// in their names. A fence of 0 or above 2^63 − 1, or a nil fn, is core.ErrInvalid, and nothing is
// sent.
func (s *Store) Fenced(ctx context.Context, resource string, fence uint64, fn func(b vk.Builder) (vk.Commands, error)) error {
	switch {
	case fn == nil:
		return fmt.Errorf("valkey: fenced write to %q: %w: fn: must not be nil", resource, core.ErrInvalid)
	case fence == 0 || fence > 1<<63-1:
		return fmt.Errorf("valkey: fenced write to %q: %w: fence %d: must be between 1 and 2^63 − 1", resource, core.ErrInvalid, fence)
	}
	key, _ := rediscore.FenceRecord(s.store, resource)
	var fnErr error
	err := s.c.Dedicated(func(c vk.DedicatedClient) error {
		// A WATCH left armed would stay on the connection, given back to valkey-go's pool, and
		// abort the next transaction sent on it: every return between the WATCH and the EXEC
		// (which ends it) sends UNWATCH, even once ctx has ended.
		armed := false
		defer func() {
			if armed {
				c.Do(context.WithoutCancel(ctx), c.B().Unwatch().Build())
			}
		}()
		for range fencedTries {
			armed = true
			if err := c.Do(ctx, c.B().Watch().Key(key).Build()).Error(); err != nil {
				return err
			}
			highest, err := c.Do(ctx, c.B().Get().Key(key).Build()).AsUint64()
			if err != nil && !vk.IsValkeyNil(err) {
				return err
			}
			if fence < highest {
				return fmt.Errorf("valkey: fenced write to %q: %w: %w: fence %d is below %d, accepted already",
					resource, core.ErrStaleFence, core.ErrLost, fence, highest)
			}
			cmds, err := fn(c.B())
			if err != nil {
				fnErr = err
				return err
			}
			tx := make(vk.Commands, 0, len(cmds)+3)
			tx = append(tx, c.B().Multi().Build())
			if fence > highest {
				tx = append(tx, c.B().Set().Key(key).Value(fmt.Sprint(fence)).Build())
			}
			tx = append(tx, cmds...)
			tx = append(tx, c.B().Exec().Build())
			resps := c.DoMulti(ctx, tx...)
			armed = false // EXEC ended the WATCH, or the connection broke
			for _, r := range resps[:len(resps)-1] {
				if err := r.Error(); err != nil {
					return err // refused before EXEC (a wrong command, say): EXEC discards them all
				}
			}
			results, err := resps[len(resps)-1].ToArray()
			if vk.IsValkeyNil(err) {
				continue // another writer changed the record: read it again
			}
			if err != nil {
				return err
			}
			for _, r := range results {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("the record changed under each of %d tries", fencedTries)
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err == nil, errors.Is(err, core.ErrStaleFence):
		return err
	default:
		return fmt.Errorf("valkey: fenced write to %q: %w", resource, err)
	}
}

// FenceTag returns the hash tag of resource's fence record, "{R}": on a Cluster, a key written
// by Fenced must contain it, so that it is in the record's slot.
func (s *Store) FenceTag(resource string) string {
	_, tag := rediscore.FenceRecord(s.store, resource)
	return tag
}
