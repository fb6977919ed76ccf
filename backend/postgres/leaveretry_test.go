package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestLeaveRefusedForNowIsSentAgain: a waiter gives up while another transaction holds its
// key's row, and the database refuses its leave for now (lock_timeout: lock_not_available,
// as it refuses a statement for a serialization failure or a deadlock); the leave is sent again
// within its budget, and once the row is free the place goes: it is not listed, and a Release
// serves no dead waiter.
func TestLeaveRefusedForNowIsSentAgain(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	var id [6]byte
	rand.Read(id[:])
	app := "leaveretry-" + hex.EncodeToString(id[:])
	s := storeOn(t, poolConfig(t, url, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["lock_timeout"] = "300ms"
		c.ConnConfig.RuntimeParams["application_name"] = app
	}))
	ctx := context.Background()
	key := uniqueKey(t)
	w := waiterBehindHolder(t, s, key)
	pool := newPool(t, url)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM leasehold_keys WHERE kh = sha256($1) FOR UPDATE", []byte(key)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// The leave waits for the row, and is refused after lock_timeout: its statement stops
	// waiting (or a later one waits) while the row is still held.
	var first string
	poll.Within(t, 5*time.Second, "the leave refused once", func() (string, bool) {
		var started string
		err := pool.QueryRow(ctx, "SELECT coalesce(max(query_start::text), '') FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&started)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = started
			return "not waiting yet", false
		}
		return started, started != first
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Waiters) != 0 {
		t.Fatalf("waiters %+v after the waiter left; want none", snap.Waiters)
	}
}
