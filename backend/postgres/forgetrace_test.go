package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestKeyRowDeletedUnderWaitingOperationsIsMadeAgain: a release or a sweep that deletes a key's
// row while other operations wait for its lock leaves them a key to use: an acquire waiting
// then is granted on a row made again, at a fence above the forgotten one, and every other
// operation finds what it should — at each isolation level a pool may default to.
func TestKeyRowDeletedUnderWaitingOperationsIsMadeAgain(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := ownSchema(t) // it sweeps
	pool := newPool(t, url)
	ctx := context.Background()
	var id [6]byte
	rand.Read(id[:])
	app := "forgetrace-" + hex.EncodeToString(id[:]) // its operations' sessions, whose lock waits it counts
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		s := storeOn(t, poolConfig(t, url, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			c.ConnConfig.RuntimeParams["application_name"] = app
		}))
		for _, by := range []string{"release", "sweep"} {
			// Another Store's sweep may take the row first: then try again on a new key.
			var (
				key string
				res core.AcquireResult
				tx  pgx.Tx
			)
			for attempt := 0; tx == nil; attempt++ {
				key, res, tx = deleteUncommitted(t, s, pool, by)
				if tx == nil && attempt == 3 {
					t.Fatalf("%s: no sweep of this test's deleted its key", iso)
				}
			}
			type acquired struct {
				res core.AcquireResult
				err error
			}
			got := make(chan acquired, 1)
			extended := make(chan error, 1)
			released := make(chan error, 1)
			go func() {
				res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
				got <- acquired{res, err}
			}()
			go func() {
				_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute})
				extended <- err
			}()
			go func() {
				ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"})
				if err == nil && ok {
					err = errString("released a's lease twice")
				}
				released <- err
			}()
			poll.Until(t, "the operations to wait for the row's lock", func() bool {
				var n int
				err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%leasehold_%'", app).Scan(&n)
				return err == nil && n >= 3
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			g := <-got
			if g.err != nil || !g.res.Granted || g.res.Fence <= res.Fence {
				t.Errorf("%s, %s: Acquire(b) after the row was deleted: %+v, %v; want granted above fence %d", iso, by, g.res, g.err, res.Fence)
			}
			if err := <-extended; err == nil {
				t.Errorf("%s, %s: a's lease was extended after it ended", iso, by)
			}
			if err := <-released; err != nil {
				t.Errorf("%s, %s: Release(a) again: %v", iso, by, err)
			}
			snap, err := s.Inspect(ctx, key)
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" {
				t.Errorf("%s, %s: Inspect: %+v, %v; want b's lease alone", iso, by, snap, err)
			}
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b"}); err != nil || !ok {
				t.Errorf("%s, %s: Release(b): %v, %v", iso, by, ok, err)
			}
			if rows := keyRows(t, pool, key); rows != noRows {
				t.Errorf("%s, %s: rows left:\n%s", iso, by, rows)
			}
		}
	}
}

// deleteUncommitted acquires a new key, then has a transaction delete its row (by release, or
// by sweep once the lease expired) and returns it uncommitted; nil when the sweep found nothing
// to delete.
func deleteUncommitted(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, by string) (string, core.AcquireResult, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	key := uniqueKey(t) + "-" + by
	ttl := time.Minute
	if by == "sweep" {
		ttl = time.Millisecond // left to expire, for the sweep
	}
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: ttl})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	if by == "sweep" {
		poll.Until(t, "a's lease to expire", func() bool {
			snap, err := s.Inspect(ctx, key)
			return err == nil && len(snap.Leases) == 0
		})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if by == "release" {
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT leasehold_release($1, $2, 0)", []byte(key), []byte("a")).Scan(&ok); err != nil || !ok {
			t.Fatalf("release: %v, %v", ok, err)
		}
		return key, res, tx
	}
	rows := func() int {
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM leasehold_keys WHERE kh = sha256($1)", []byte(key)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := rows()
	if _, err := tx.Exec(ctx, "SELECT leasehold_sweep(0, 1000)"); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if before != 1 || rows() != 0 {
		tx.Rollback(ctx)
		return "", res, nil
	}
	return key, res, tx
}

type errString string

func (e errString) Error() string { return string(e) }
