package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/primitives"
)

// A mutex on PostgreSQL: the Store creates its tables on first use and keeps one listening
// connection for its waiters; the pool stays the caller's.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// New fails within its ctx when the database cannot be reached (or is not PostgreSQL).
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	store, err := postgres.New(nctx, pool)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	m, err := primitives.NewMutex(store, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding with fence", lease.Fence())
}

// A write guarded by the lease's fence in the same transaction: if the lease was lost and a newer
// holder has written since, the transaction rolls back, update and all.
func ExampleStore_AcceptFence() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://app@db.internal/app")
	store, _ := postgres.New(ctx, pool)
	m, _ := primitives.NewMutex(store, "invoice-42")
	lease, err := m.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.AcceptFence(ctx, tx, "invoice-42", lease.Fence()); err != nil {
			return err // postgres.ErrStaleFence: a newer holder wrote; nothing is written
		}
		_, err := tx.Exec(ctx, "UPDATE invoices SET state = 'sent' WHERE id = 42")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
