package postgres

import (
	"context"
	"math/rand/v2"
	"time"
)

// The sweep's period and size. Every Store tries every sweepTry (with jitter); the one that
// finds no sweep in the last sweepPeriod runs it, so the database sees about one a minute
// however many Stores there are, as long as one runs.
const (
	sweepPeriod = time.Minute
	sweepTry    = 30 * time.Second
	sweepBatch  = 1000 // rows of each kind per statement
	sweepRounds = 100  // statements per sweep at most, each after a full batch
)

// sweepEvery runs the sweep about every sweepTry until ctx ends.
func (s *Store) sweepEvery(ctx context.Context) {
	t := time.NewTimer(rand.N(sweepTry))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sweep(ctx, sweepPeriod) //nolint:errcheck // the next sweep tries again
		t.Reset(sweepTry/2 + rand.N(sweepTry))
	}
}

// swept is what one sweep removed.
type swept struct {
	Keys, Places, Tries int
}

// sweep removes the rows that operations left behind on keys nobody uses any more (see the
// sweep function in sql/sweep.sql), unless a Store swept in the last period: it runs statements of
// at most sweepBatch rows of each kind until one removes less than a full batch. Each statement
// locks only the keys it removes rows of, skipping those an operation holds.
func (s *Store) sweep(ctx context.Context, period time.Duration) (swept, error) {
	var total swept
	for round := 0; round < sweepRounds; round++ {
		var (
			ran                 bool
			keys, places, tries int32
		)
		if err := s.queryRow(ctx, s.n.sweep, []any{us(period), sweepBatch}, &ran, &keys, &places, &tries); err != nil {
			return total, err
		}
		total.Keys += int(keys)
		total.Places += int(places)
		total.Tries += int(tries)
		if !ran || max(keys, places, tries) < sweepBatch {
			return total, nil
		}
		period = 0 // this Store's sweep goes on
	}
	return total, nil
}
