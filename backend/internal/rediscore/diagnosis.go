package rediscore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/diagnose"
)

// Diagnosis is what a driver can tell of its client's connections, so that the Store's errors say
// why a call failed in the sentence the CLI prints for the same failure (package diagnose):
// "goredis: redis 127.0.0.1:5432: not a Redis server: it is a PostgreSQL server (...)". Either
// field may be nil.
type Diagnosis struct {
	// Endpoint returns the one server the client sends to and the database it selects (negative
	// when unknown); ok is false when the client sends to several servers or the driver cannot
	// tell its address.
	Endpoint func() (ep diagnose.Endpoint, db int, ok bool)
	// DialFailure returns the error of the client's latest dial when it failed at or after since
	// and no dial has succeeded after it, else nil: what kept a call cut off by its ctx from
	// reaching the server.
	DialFailure func(since time.Time) error
}

// WithDiagnosis gives the Store its driver's Diagnosis. Without it, the Store's errors carry the
// client's words alone.
func WithDiagnosis(d Diagnosis) Option {
	return func(o *options) { o.diagnosis = d }
}

// doctor diagnoses the Stores' failures, with the advice a library user can follow.
var doctor = &diagnose.Doctor{Hints: diagnose.Hints{
	Password: "the client's Password option, or redis://[user]:password@host:port",
	Plain:    "use a client without TLSConfig, or redis:// rather than rediss://",
	TLS:      "the client's TLSConfig, or rediss://",
	Postgres: "use package postgres",
}}

// clientError is err, from the client on a call sent at since, as the Store reports it, after the
// driver's name: in the words of package diagnose when the driver has a Diagnosis (which probes
// the server, within ctx and diagnose.ProbeTimeout, when the client's words do not say what failed).
// When ctx has ended it is ctx's error (CtxErr), followed by what failed when the client's error
// or its failed dials since say more. It wraps ctx's error, and the client's.
func (s *Store) clientError(ctx context.Context, since time.Time, err error) error {
	cerr := CtxErr(ctx)
	if cerr == nil {
		return fmt.Errorf("%s: %w", s.name, s.diagnosed(ctx, err))
	}
	cause := err
	if errors.Is(err, cerr) {
		cause = nil
		if f := s.diagnosis.DialFailure; f != nil && !since.IsZero() {
			cause = f(since)
		}
		if cause == nil {
			return cerr
		}
	}
	cause = s.diagnosed(ctx, cause)
	if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		// Another ctx's error inside the client's: said, not wrapped, lest errors.Is find it.
		return fmt.Errorf("%w: %s: %v", cerr, s.name, cause)
	}
	return fmt.Errorf("%w: %s: %w", cerr, s.name, cause)
}

// diagnosed is err in the words of diagnose.Doctor.Redis when the driver can tell the server's
// address, else err. Until a call of the Store has had a reply, a failure the client's words do
// not explain probes the address; after, the server is known to be Redis, and nothing is probed.
func (s *Store) diagnosed(ctx context.Context, err error) error {
	if s.diagnosis.Endpoint == nil {
		return err
	}
	ep, db, ok := s.diagnosis.Endpoint()
	if !ok {
		return err
	}
	ep.Unprobed = ep.Unprobed || s.answered.Load()
	return doctor.Redis(ctx, ep, db, err)
}
