package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
)

// TestFencedWriteCanceledMidwayLeavesNoWatchOnItsConnection: a fenced write whose ctx ends
// between its WATCH and its EXEC returns the connection to the pool with no WATCH armed: a later
// transaction on that connection (a pool of one) is not aborted by a change to the record.
func TestFencedWriteCanceledMidwayLeavesNoWatchOnItsConnection(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, timeouts := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, ContextTimeoutEnabled: timeouts})
		s, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		other := redis.NewClient(&redis.Options{Addr: srv.Addr})
		// Its ctx ends after the WATCH and the GET, before the EXEC is sent.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = s.Fenced(ctx, "r", 5, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, "x", "1", 0)
			<-ctx.Done()
			return nil
		})
		cancel()
		t.Logf("ContextTimeoutEnabled %v: the canceled write: %v", timeouts, err)
		bg := context.Background()
		// Change the record the write watched, from another client, then run a transaction
		// on the pool's one connection.
		if err := other.Set(bg, "leasehold:"+s.FenceTag("r")+":fence", "9", 0).Err(); err != nil { // the record, under the default prefix
			t.Fatal(err)
		}
		_, err = c.TxPipelined(bg, func(pipe redis.Pipeliner) error {
			pipe.Set(bg, "y", "1", 0)
			return nil
		})
		if errors.Is(err, redis.TxFailedErr) {
			t.Errorf("ContextTimeoutEnabled %v: a transaction after the canceled fenced write was aborted: the WATCH outlived it on the pooled connection", timeouts)
		} else if err != nil {
			t.Errorf("ContextTimeoutEnabled %v: a transaction after the canceled fenced write: %v", timeouts, err)
		}
		s.Close()
		c.Close()
		other.FlushAll(bg)
		other.Close()
	}
}

// TestFencedWriteOverABadRecordLeavesNoWatchOnItsConnection: a fenced write that fails after its
// WATCH, reading a record that is not a number, returns the connection (a pool of one) with no
// WATCH armed.
func TestFencedWriteOverABadRecordLeavesNoWatchOnItsConnection(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer other.Close()
	ctx := context.Background()
	record := "leasehold:" + s.FenceTag("r") + ":fence" // under the default prefix
	other.Set(ctx, record, "x", 0)
	if err := s.Fenced(ctx, "r", 5, func(redis.Pipeliner) error { return nil }); err == nil {
		t.Fatal("a fenced write over a record that is not a number succeeded")
	}
	other.Set(ctx, record, "9", 0)
	if _, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "y", "1", 0)
		return nil
	}); err != nil {
		t.Errorf("a transaction after the failed fenced write: %v, want it to run (no WATCH left on the connection)", err)
	}
}
