package goredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

// fencedTries bounds how often Fenced checks the record again after another writer changed it
// between its read and its EXEC.
const fencedTries = 16

// Fenced runs the commands fn queues in one MULTI/EXEC, only if fence (a lease's Fence) is at
// least the highest fence accepted for resource before, and records fence as the highest in the
// same transaction: a write under a lease that was lost can never land after a newer holder's,
// however long its holder stalled. A lower fence returns an error wrapping core.ErrStaleFence and
// core.ErrLost, and none of fn's commands run; equal fences pass (one holder writing twice). An
// error fn returns is returned as it is, and nothing is sent. The commands fn queued all run at
// EXEC, as in any transaction: one that fails there fails alone, and Fenced returns the first
// such error.
//
// The record is a key under the Store's prefix, "<prefix>{R}:fence", kept until the caller
// deletes it (without it a stale fence would pass). It costs a WATCH, a GET and the transaction:
// three round trips, and again when another writer of resource changed the record meanwhile. On
// a Cluster every key fn writes must be in the record's slot: put FenceTag(resource) in their
// names. resource is any string, and need not be the lease's key. A fence of 0 or above 2^63 − 1,
// or a nil fn, is core.ErrInvalid, and nothing is sent.
//
// Fenced runs on the client's connection as go-redis runs any transaction: a reply that does not
// come is waited for up to the client's ReadTimeout, not until ctx ends, unless the client was
// made with ContextTimeoutEnabled. A late EXEC is still checked, so a stale one changes nothing;
// to stop a holder's write at its lease's end, give the client ContextTimeoutEnabled and the
// write a ctx from LeaseContext.
func (s *Store) Fenced(ctx context.Context, resource string, fence uint64, fn func(pipe redis.Pipeliner) error) error {
	switch {
	case fn == nil:
		return fmt.Errorf("goredis: fenced write to %q: %w: fn: must not be nil", resource, core.ErrInvalid)
	case fence == 0 || fence > 1<<63-1:
		return fmt.Errorf("goredis: fenced write to %q: %w: fence %d: must be between 1 and 2^63 − 1", resource, core.ErrInvalid, fence)
	}
	key, _ := rediscore.FenceRecord(s.store, resource)
	for range fencedTries {
		var fnErr error
		err := s.a.c.Watch(ctx, func(tx *redis.Tx) error {
			highest, err := tx.Get(ctx, key).Uint64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if fence < highest {
				return fmt.Errorf("goredis: fenced write to %q: %w: %w: fence %d is below %d, accepted already",
					resource, core.ErrStaleFence, core.ErrLost, fence, highest)
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				if fence > highest {
					pipe.Set(ctx, key, fence, 0)
				}
				fnErr = fn(pipe)
				return fnErr
			})
			return err
		}, key)
		switch {
		case fnErr != nil:
			return fnErr
		case errors.Is(err, redis.TxFailedErr):
			continue // another writer changed the record: read it again
		case err == nil, errors.Is(err, core.ErrStaleFence):
			return err
		default:
			return fmt.Errorf("goredis: fenced write to %q: %w", resource, err)
		}
	}
	return fmt.Errorf("goredis: fenced write to %q: the record changed under each of %d tries", resource, fencedTries)
}

// FenceTag returns the hash tag of resource's fence record, "{R}": on a Cluster, a key written
// by Fenced must contain it, so that it is in the record's slot.
func (s *Store) FenceTag(resource string) string {
	_, tag := rediscore.FenceRecord(s.store, resource)
	return tag
}
