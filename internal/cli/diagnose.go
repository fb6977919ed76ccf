package cli

import (
	"context"
	"crypto/tls"

	"github.com/leasehold/leasehold/internal/diagnose"
)

// probeTimeout bounds each probe that redisFailure and postgresFailure send after a failed ping.
const probeTimeout = diagnose.ProbeTimeout

// endpoint is a server as dialled: network ("tcp" or "unix"), address, and its TLS
// configuration when the URL asks for TLS.
type endpoint struct {
	network, addr string
	tls           *tls.Config
}

// probed is what the probes found at an address.
type probed = diagnose.Probed

// What a server answers to a probe.
const (
	speaksRedis   = diagnose.SpeaksRedis
	speaksHTTP    = diagnose.SpeaksHTTP
	speaksSilence = diagnose.SpeaksSilence
)

// doctor says what failed in the words of the drivers' errors (package diagnose), with the
// CLI's URLs and flags as its advice.
var doctor = &diagnose.Doctor{Hints: diagnose.Hints{
	Password: "redis://[user]:password@host:port",
	Plain:    "use redis://, not rediss://",
	TLS:      "rediss://",
	Postgres: "use -postgres",
	Redis:    "use -redis",
}}

// of returns ep as package diagnose takes it.
func (ep endpoint) of() diagnose.Endpoint {
	return diagnose.Endpoint{Network: ep.network, Addr: ep.addr, TLS: ep.tls}
}

// redisFailure returns the one-line error for a -redis server whose PING failed with err, as a
// driver's error says it (diagnose.Doctor.Redis): unreachable, authentication, no such database,
// a TLS handshake, or not a Redis server. db is the database number the URL selects.
func redisFailure(ctx context.Context, ep endpoint, db int, err error) error {
	return doctor.Redis(ctx, ep.of(), db, err)
}

// postgresFailure is redisFailure for the -postgres database at ep, whose ping failed with err
// (diagnose.Doctor.Postgres); addr is the database's host:port, for the message.
func postgresFailure(ctx context.Context, addr string, ep endpoint, err error) error {
	return doctor.Postgres(ctx, addr, ep.of(), err)
}

// probe is diagnose.Probe at ep.
func probe(ctx context.Context, ep endpoint) probed { return diagnose.Probe(ctx, ep.of()) }

// unreachable is diagnose.Unreachable.
func unreachable(err error) bool { return diagnose.Unreachable(err) }

// oneLine is diagnose.OneLine.
func oneLine(err error) string { return diagnose.OneLine(err) }
