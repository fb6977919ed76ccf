package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// probeTimeout bounds each probe that redisFailure and postgresFailure send after a failed ping.
const probeTimeout = time.Second

// endpoint is a server as dialled: network ("tcp" or "unix"), address, and its TLS
// configuration when the URL asks for TLS.
type endpoint struct {
	network, addr string
	tls           *tls.Config
}

// redisFailure returns the one-line error for a -redis server whose PING failed with err:
// "redis ADDR unreachable: ..." when nothing answers at its address (refused, no route, no such
// host, a dial timeout), else "redis ADDR: WHAT: ..." where WHAT says what failed:
// authentication, no such database, a TLS handshake, or that the server is not a Redis server.
// For a failure the client's error does not explain (EOF, a reply it cannot parse, a
// timeout), it probes the address (probeTimeout, in parallel) to see what answers there.
// db is the database number the URL selects.
func redisFailure(ctx context.Context, ep endpoint, db int, err error) error {
	where := "redis " + ep.addr
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("%s: authentication failed: the server wants a password and none was given (redis://[user]:password@host:port): %s", where, msg)
	case strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "ERR AUTH") || strings.HasPrefix(msg, "ERR invalid password"):
		return fmt.Errorf("%s: authentication failed: %s", where, msg)
	case strings.Contains(msg, "DB index is out of range") || strings.Contains(msg, "invalid DB index"):
		return fmt.Errorf("%s: no such database /%d: %s", where, db, msg)
	case unreachable(err):
		return fmt.Errorf("%s unreachable: %v", where, err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p := probe(ctx, ep)
	switch {
	case p.dialErr != nil:
		return fmt.Errorf("%s unreachable: %v", where, p.dialErr)
	case ep.tls != nil && p.tlsErr != nil:
		return fmt.Errorf("%s: TLS handshake failed: %s", where, p.tlsFailure())
	case p.postgres, p.speaks == speaksHTTP, p.speaks == speaksOther:
		return fmt.Errorf("%s: not a Redis server: %s", where, p.describe())
	case ep.tls != nil, p.speaks == speaksRedis:
		return fmt.Errorf("%s: %v", where, err) // a Redis server, or a TLS one: the client's words
	case p.speaks == speaksSilence:
		return fmt.Errorf("%s: not a Redis server, or a stalled one: it accepts connections but does not answer PING within %v", where, probeTimeout)
	case p.speaks == speaksNothing:
		return fmt.Errorf("%s: not a Redis server, or one that wants TLS (rediss://): it closes the connection without a reply", where)
	}
	return fmt.Errorf("%s: %v", where, err)
}

// postgresFailure is redisFailure for the -postgres database at ep (plain: PostgreSQL starts
// TLS within its own protocol), whose ping failed with err:
// a server error says whether authentication failed (SQLSTATE 28P01, 28000) or the database
// does not exist (3D000); otherwise the probes say whether it is a PostgreSQL server at all.
// addr is the database's host:port, for the message.
func postgresFailure(ctx context.Context, addr string, ep endpoint, err error) error {
	where := "postgres " + addr
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("%s: authentication failed: %s (SQLSTATE %s)", where, pe.Message, pe.Code)
		case "3D000":
			return fmt.Errorf("%s: no such database: %s (SQLSTATE %s)", where, pe.Message, pe.Code)
		}
		return fmt.Errorf("%s: %s (SQLSTATE %s)", where, pe.Message, pe.Code)
	}
	if unreachable(err) {
		return fmt.Errorf("%s unreachable: %s", where, oneLine(err))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p := probe(ctx, ep)
	switch {
	case p.dialErr != nil:
		return fmt.Errorf("%s unreachable: %v", where, p.dialErr)
	case p.postgres:
		return fmt.Errorf("%s: %s", where, oneLine(err))
	case p.speaks == speaksRedis:
		return fmt.Errorf("%s: not a PostgreSQL server: it answers as a Redis server does (use -redis)", where)
	case p.speaks == speaksSilence:
		return fmt.Errorf("%s: not a PostgreSQL server, or a stalled one: it accepts connections but does not answer within %v", where, probeTimeout)
	case p.speaks == speaksNothing:
		return fmt.Errorf("%s: not a PostgreSQL server: it closes the connection without a reply", where)
	}
	return fmt.Errorf("%s: not a PostgreSQL server: %s", where, p.describe())
}

// unreachable reports whether err says that nothing could be reached at the address: the
// connection was refused, there was no route or no such host, or the dial timed out.
func unreachable(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ENOENT) ||
		(errors.As(err, &op) && op.Op == "dial")
}

// What a server answers to a probe's pingRequest.
const (
	speaksNothing = iota // it closed the connection without a byte
	speaksSilence        // it sent nothing within probeTimeout
	speaksRedis          // a RESP reply: +PONG, or an error such as -NOAUTH
	speaksHTTP           // an HTTP response, as to a bad request
	speaksOther          // anything else
)

// probed is what the probes found at an address.
type probed struct {
	dialErr  error  // the address could not be dialled
	tlsErr   error  // the TLS handshake failed (only when the endpoint asks for TLS)
	speaks   int    // what a plain connection answers to pingRequest
	reply    []byte // its first bytes
	postgres bool   // a plain connection answers PostgreSQL's SSLRequest
}

// probe dials ep up to three times in parallel, each within probeTimeout: a plain connection
// that sends pingRequest, one that sends PostgreSQL's SSLRequest, and, when ep asks for TLS,
// one that makes the TLS handshake.
func probe(ctx context.Context, ep endpoint) probed {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var p probed
	var wg sync.WaitGroup
	wg.Go(func() { p.speaks, p.reply, p.dialErr = ping(ctx, ep) })
	wg.Go(func() { p.postgres = answersSSLRequest(ctx, ep) })
	if ep.tls != nil {
		wg.Go(func() { p.tlsErr = handshake(ctx, ep) })
	}
	wg.Wait()
	return p
}

// dial connects to ep, plain, with ctx's deadline (probe's) on every read and write.
func dial(ctx context.Context, ep endpoint) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, ep.network, ep.addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	return c, nil
}

// pingRequest is both an inline Redis command (PING with two arguments: a Redis server answers
// an error) and an HTTP/1.0 request (an HTTP server answers with its status line).
const pingRequest = "PING / HTTP/1.0\r\n\r\n"

// ping sends pingRequest on a plain connection and reads what comes back.
func ping(ctx context.Context, ep endpoint) (speaks int, reply []byte, err error) {
	c, err := dial(ctx, ep)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(pingRequest)); err != nil {
		return speaksNothing, nil, nil
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(c, buf, 1)
	reply = buf[:n]
	var ne net.Error
	switch {
	case n == 0 && errors.As(err, &ne) && ne.Timeout():
		return speaksSilence, nil, nil
	case n == 0:
		return speaksNothing, nil, nil
	case bytes.HasPrefix(reply, []byte("HTTP/")), bytes.HasPrefix(bytes.ToLower(reply), []byte("<!doctype html")), bytes.HasPrefix(bytes.ToLower(reply), []byte("<html")):
		return speaksHTTP, reply, nil
	case strings.IndexByte("+-:$*%_,#(!=|~>", reply[0]) >= 0:
		return speaksRedis, reply, nil
	}
	return speaksOther, reply, nil
}

// answersSSLRequest reports whether a plain connection to ep answers PostgreSQL's SSLRequest
// with 'S' or 'N', as every PostgreSQL server does.
func answersSSLRequest(ctx context.Context, ep endpoint) bool {
	c, err := dial(ctx, ep)
	if err != nil {
		return false
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		return false
	}
	b := make([]byte, 2)
	n, _ := c.Read(b)
	return n == 1 && (b[0] == 'S' || b[0] == 'N')
}

// handshake makes a TLS handshake with ep and returns its error.
func handshake(ctx context.Context, ep endpoint) error {
	c, err := dial(ctx, ep)
	if err != nil {
		return err
	}
	defer c.Close()
	conf := ep.tls.Clone()
	if conf.ServerName == "" && !conf.InsecureSkipVerify {
		host, _, _ := net.SplitHostPort(ep.addr)
		conf.ServerName = host
	}
	err = tls.Client(c, conf).HandshakeContext(ctx)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer to the handshake within %v", probeTimeout)
	}
	return err
}

// tlsFailure says why the TLS handshake failed, and what speaks plain text there.
func (p probed) tlsFailure() string {
	switch {
	case p.speaks == speaksRedis:
		return "the server speaks plain Redis, not TLS (use redis://, not rediss://)"
	case p.postgres:
		return "not a Redis server: it is a PostgreSQL server (use -postgres)"
	case p.speaks == speaksHTTP || p.speaks == speaksOther:
		return fmt.Sprintf("%v; %s", p.tlsErr, p.describe())
	}
	return p.tlsErr.Error()
}

// describe says what answered pingRequest, for a server that is not what was expected.
func (p probed) describe() string {
	switch {
	case p.postgres:
		return "it is a PostgreSQL server (use -postgres)"
	case p.speaks == speaksHTTP && bytes.HasPrefix(p.reply, []byte("HTTP/")):
		status, _, _ := bytes.Cut(p.reply, []byte("\r\n"))
		return fmt.Sprintf("it answers HTTP (%q)", status)
	case p.speaks == speaksHTTP:
		return "it answers HTTP (an HTML page)"
	case p.speaks == speaksRedis:
		return "it answers as a Redis server does"
	case p.speaks == speaksOther:
		return fmt.Sprintf("it answers %q", p.reply)
	case p.speaks == speaksSilence:
		return fmt.Sprintf("it does not answer within %v", probeTimeout)
	}
	return "it closes the connection without a reply"
}
