// Package diagnose says why a store's server could not be used, in one sentence that the drivers
// and the CLI share: "redis ADDR unreachable: ...", "redis ADDR: authentication failed: ...",
// "postgres ADDR: not a PostgreSQL server: it answers HTTP (...)". Where the client library's own
// error does not explain the failure (an EOF, a reply it cannot parse, a timeout), it probes the
// address, within ProbeTimeout, to see what answers there. Every error it returns wraps the
// client's error, so errors.Is and errors.As still find what the client returned.
package diagnose

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ProbeTimeout bounds each probe of an address (and the probes of one diagnosis, which run in
// parallel).
const ProbeTimeout = time.Second

// Endpoint is a server as dialled: network ("tcp" or "unix"), address, and its TLS configuration
// when the client makes a TLS handshake.
type Endpoint struct {
	Network, Addr string
	TLS           *tls.Config
	// Unprobed says the diagnosis reads the client's words and probes nothing: the client may
	// make a TLS handshake that TLS does not describe, or the server has answered it before (a
	// failure since is the network's or the server's, which a probe would only slow).
	Unprobed bool
}

// Hints are the advice a diagnosis adds, in parentheses, to the sentences that call for it: how
// the program that reports the error is told a password, plain text or TLS, or another store.
// The CLI names its URLs and flags; a driver names its client's options. An empty hint is left
// out with its parentheses.
type Hints struct {
	Password string // how a password is given: "redis://[user]:password@host:port"
	Plain    string // how plain text is chosen over TLS: "use redis://, not rediss://"
	TLS      string // how TLS is chosen: "rediss://"
	Postgres string // how a PostgreSQL server is used instead: "use -postgres"
	Redis    string // how a Redis server is used instead: "use -redis"
}

// in returns " (hint)", or "" for no hint.
func in(hint string) string {
	if hint == "" {
		return ""
	}
	return " (" + hint + ")"
}

// Doctor diagnoses failures with its Hints. It probes an address at most once at a time, on the
// goroutine of the call that needs it, and reuses what it found for ProbeTimeout, so many calls
// failing at once cost one probe. The zero value (no hints) is ready; a Doctor is safe for
// concurrent use.
type Doctor struct {
	Hints Hints

	mu    sync.Mutex
	found map[Endpoint]*visit
}

// visit is one probe of an address: done closes once it has ended, p and at set when it was
// complete.
type visit struct {
	done chan struct{}
	p    Probed
	at   time.Time
}

// probe returns what a probe of ep finds: the last one's findings when they are under
// ProbeTimeout old, else those of the probe under way or of a new one, bounded by ctx. ok is
// false when ctx ends first, or the probe this call waited for was cut off by its own caller's.
func (d *Doctor) probe(ctx context.Context, ep Endpoint) (p Probed, ok bool) {
	d.mu.Lock()
	if d.found == nil {
		d.found = make(map[Endpoint]*visit)
	}
	for e, v := range d.found { // forget what is stale, so the map stays small
		if !v.at.IsZero() && time.Since(v.at) > ProbeTimeout {
			delete(d.found, e)
		}
	}
	if v := d.found[ep]; v != nil {
		d.mu.Unlock()
		select {
		case <-v.done:
			return v.p, !v.at.IsZero()
		case <-ctx.Done():
			return Probed{}, false
		}
	}
	v := &visit{done: make(chan struct{})}
	d.found[ep] = v
	d.mu.Unlock()
	p = Probe(ctx, ep)
	d.mu.Lock()
	if ended(ctx) {
		delete(d.found, ep) // cut off: what it found may be the caller's deadline
	} else {
		v.p, v.at = p, time.Now()
	}
	d.mu.Unlock()
	close(v.done)
	return p, !v.at.IsZero()
}

// ended reports whether ctx has ended or its deadline has passed.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// Redis returns the one-line error for a Redis server at ep whose call failed with err:
// "redis ADDR unreachable: ..." when nothing answers at its address (refused, no route, no such
// host, a dial timeout), else "redis ADDR: WHAT: ..." where WHAT says what failed:
// authentication, no such database, a TLS handshake, or that the server is not a Redis server.
// For a failure the client's error does not explain (EOF, a reply it cannot parse, a timeout), it
// probes the address (ProbeTimeout, bounded by ctx; when ctx ends first, it returns err as it
// is). db is the database number the client selects, or negative when unknown. The error wraps
// err, whose words it leaves out where the probe says more.
func (d *Doctor) Redis(ctx context.Context, ep Endpoint, db int, err error) error {
	where := "redis " + ep.Addr
	msg := err.Error()
	h := d.Hints
	switch {
	case authWanted(msg):
		return fmt.Errorf("%s: authentication failed: the server wants a password and none was given%s: %w", where, in(h.Password), err)
	case strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "ERR AUTH") || strings.HasPrefix(msg, "ERR invalid password"):
		return fmt.Errorf("%s: authentication failed: %w", where, err)
	case strings.Contains(msg, "DB index is out of range") || strings.Contains(msg, "invalid DB index"):
		if db < 0 {
			return fmt.Errorf("%s: no such database: %w", where, err)
		}
		return fmt.Errorf("%s: no such database /%d: %w", where, db, err)
	case Unreachable(err):
		return fmt.Errorf("%s unreachable: %w", where, err)
	case strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "LOADING") || strings.HasPrefix(msg, "READONLY") ||
		strings.HasPrefix(msg, "MASTERDOWN") || strings.HasPrefix(msg, "BUSY") || strings.HasPrefix(msg, "OOM"):
		return fmt.Errorf("%s: %w", where, err) // a Redis server's own words
	}
	if ep.Unprobed {
		return fmt.Errorf("%s: %w", where, err)
	}
	if ended(ctx) {
		return err
	}
	p, ok := d.probe(ctx, ep)
	switch {
	case !ok:
		return err
	case p.DialErr != nil:
		return fmt.Errorf("%s unreachable: %v%w", where, p.DialErr, silent{err})
	case ep.TLS != nil && p.TLSErr != nil:
		return fmt.Errorf("%s: TLS handshake failed: %s%w", where, p.tlsFailure(h), silent{err})
	case p.Postgres, p.Speaks == SpeaksHTTP, p.Speaks == SpeaksOther:
		return fmt.Errorf("%s: not a Redis server: %s%w", where, p.Describe(h), silent{err})
	case ep.TLS != nil, p.Speaks == SpeaksRedis:
		return fmt.Errorf("%s: %w", where, err) // a Redis server, or a TLS one: the client's words
	case p.Speaks == SpeaksSilence:
		return fmt.Errorf("%s: not a Redis server, or a stalled one: it accepts connections but does not answer PING within %v%w", where, ProbeTimeout, silent{err})
	}
	return fmt.Errorf("%s: not a Redis server, or one that wants TLS%s: it closes the connection without a reply%w", where, in(h.TLS), silent{err})
}

// authWanted reports whether a Redis error says that the connection must authenticate first:
// NOAUTH, or the protocol error Redis answers to a long command from a connection that has not
// (a script call or a FUNCTION LOAD, before it reads the command's name).
func authWanted(msg string) bool {
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "ERR Protocol error: unauthenticated")
}

// Postgres is Redis for a PostgreSQL database at ep (plain: PostgreSQL starts TLS within its own
// protocol) whose call failed with err: a server error says whether authentication failed
// (SQLSTATE 28P01, 28000) or the database does not exist (3D000); otherwise the probes say
// whether it is a PostgreSQL server at all. addr is the database's host:port, for the message.
// The error wraps err.
func (d *Doctor) Postgres(ctx context.Context, addr string, ep Endpoint, err error) error {
	where := "postgres " + addr
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("%s: authentication failed: %s (SQLSTATE %s)%w", where, pe.Message, pe.Code, silent{err})
		case "3D000":
			return fmt.Errorf("%s: no such database: %s (SQLSTATE %s)%w", where, pe.Message, pe.Code, silent{err})
		}
		return fmt.Errorf("%s: %s (SQLSTATE %s)%w", where, pe.Message, pe.Code, silent{err})
	}
	if Unreachable(err) {
		return fmt.Errorf("%s unreachable: %s%w", where, OneLine(err), silent{err})
	}
	if ended(ctx) {
		return err
	}
	p, ok := d.probe(ctx, ep)
	switch {
	case !ok:
		return err
	case p.Postgres && p.DialErr == nil:
		return fmt.Errorf("%s: %s%w", where, OneLine(err), silent{err})
	}
	return fmt.Errorf("%s%w", d.NotPostgres(addr, p), silent{err})
}

// NotPostgres says what probe p found at the address of a PostgreSQL database (addr, its
// host:port, for the message) when that is not a PostgreSQL server that answers: "postgres ADDR
// unreachable: ..." or "postgres ADDR: not a PostgreSQL server: ...". It returns "" when p
// found a PostgreSQL server.
func (d *Doctor) NotPostgres(addr string, p Probed) string {
	where := "postgres " + addr
	switch {
	case p.DialErr != nil:
		return fmt.Sprintf("%s unreachable: %v", where, p.DialErr)
	case p.Postgres:
		return ""
	case p.Speaks == SpeaksRedis:
		return fmt.Sprintf("%s: not a PostgreSQL server: it answers as a Redis server does%s", where, in(d.Hints.Redis))
	case p.Speaks == SpeaksSilence:
		return fmt.Sprintf("%s: not a PostgreSQL server, or a stalled one: it accepts connections but does not answer within %v", where, ProbeTimeout)
	case p.Speaks == SpeaksNothing:
		return fmt.Sprintf("%s: not a PostgreSQL server: it closes the connection without a reply", where)
	}
	return fmt.Sprintf("%s: not a PostgreSQL server: %s", where, p.Describe(d.Hints))
}

// silent wraps an error that a message has said in its own words: it adds nothing to the text.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// OneLine returns err's message on one line: pgx puts each address it tried on a line of its own,
// often the same line twice (with TLS and without).
func OneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// Unreachable reports whether err says that nothing could be reached at the address: the
// connection was refused, there was no route or no such host, or the dial timed out.
func Unreachable(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ENOENT) ||
		(errors.As(err, &op) && op.Op == "dial")
}

// What a server answers to a probe's pingRequest.
const (
	SpeaksNothing = iota // it closed the connection without a byte
	SpeaksSilence        // it sent nothing within ProbeTimeout
	SpeaksRedis          // a RESP reply: +PONG, or an error such as -NOAUTH
	SpeaksHTTP           // an HTTP response, as to a bad request
	SpeaksOther          // anything else
)

// Probed is what the probes found at an address.
type Probed struct {
	DialErr  error  // the address could not be dialled
	TLSErr   error  // the TLS handshake failed (only when the endpoint asks for TLS)
	Speaks   int    // what a plain connection answers to pingRequest (SpeaksNothing, ...)
	Reply    []byte // its first bytes
	Postgres bool   // a plain connection answers PostgreSQL's SSLRequest
}

// Probe dials ep up to three times in parallel, each within ProbeTimeout and ctx: a plain
// connection that sends pingRequest, one that sends PostgreSQL's SSLRequest, and, when ep asks
// for TLS, one that makes the TLS handshake. It closes every connection before it returns.
func Probe(ctx context.Context, ep Endpoint) Probed {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	var p Probed
	var wg sync.WaitGroup
	wg.Go(func() { p.Speaks, p.Reply, p.DialErr = ping(ctx, ep) })
	wg.Go(func() { p.Postgres = answersSSLRequest(ctx, ep) })
	if ep.TLS != nil {
		wg.Go(func() { p.TLSErr = handshake(ctx, ep) })
	}
	wg.Wait()
	return p
}

// Dial connects to ep, plain, with ctx's deadline on every read and write.
func Dial(ctx context.Context, ep Endpoint) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, ep.Network, ep.Addr)
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
func ping(ctx context.Context, ep Endpoint) (speaks int, reply []byte, err error) {
	c, err := Dial(ctx, ep)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(pingRequest)); err != nil {
		return SpeaksNothing, nil, nil
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(c, buf, 1)
	reply = buf[:n]
	var ne net.Error
	switch {
	case n == 0 && errors.As(err, &ne) && ne.Timeout():
		return SpeaksSilence, nil, nil
	case n == 0:
		return SpeaksNothing, nil, nil
	case bytes.HasPrefix(reply, []byte("HTTP/")), bytes.HasPrefix(bytes.ToLower(reply), []byte("<!doctype html")), bytes.HasPrefix(bytes.ToLower(reply), []byte("<html")):
		return SpeaksHTTP, reply, nil
	case strings.IndexByte("+-:$*%_,#(!=|~>", reply[0]) >= 0:
		return SpeaksRedis, reply, nil
	}
	return SpeaksOther, reply, nil
}

// answersSSLRequest reports whether a plain connection to ep answers PostgreSQL's SSLRequest
// with 'S' or 'N', as every PostgreSQL server does.
func answersSSLRequest(ctx context.Context, ep Endpoint) bool {
	c, err := Dial(ctx, ep)
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
func handshake(ctx context.Context, ep Endpoint) error {
	c, err := Dial(ctx, ep)
	if err != nil {
		return err
	}
	defer c.Close()
	conf := ep.TLS.Clone()
	if conf.ServerName == "" && !conf.InsecureSkipVerify {
		host, _, _ := net.SplitHostPort(ep.Addr)
		conf.ServerName = host
	}
	err = tls.Client(c, conf).HandshakeContext(ctx)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer to the handshake within %v", ProbeTimeout)
	}
	return err
}

// tlsFailure says why the TLS handshake failed, and what speaks plain text there.
func (p Probed) tlsFailure(h Hints) string {
	switch {
	case p.Speaks == SpeaksRedis:
		return "the server speaks plain Redis, not TLS" + in(h.Plain)
	case p.Postgres:
		return "not a Redis server: it is a PostgreSQL server" + in(h.Postgres)
	case p.Speaks == SpeaksHTTP || p.Speaks == SpeaksOther:
		return fmt.Sprintf("%v; %s", p.TLSErr, p.Describe(h))
	}
	return p.TLSErr.Error()
}

// Describe says what answered pingRequest, for a server that is not what was expected, with h's
// advice.
func (p Probed) Describe(h Hints) string {
	switch {
	case p.Postgres:
		return "it is a PostgreSQL server" + in(h.Postgres)
	case p.Speaks == SpeaksHTTP && bytes.HasPrefix(p.Reply, []byte("HTTP/")):
		status, _, _ := bytes.Cut(p.Reply, []byte("\r\n"))
		return fmt.Sprintf("it answers HTTP (%q)", status)
	case p.Speaks == SpeaksHTTP:
		return "it answers HTTP (an HTML page)"
	case p.Speaks == SpeaksRedis:
		return "it answers as a Redis server does" + in(h.Redis)
	case p.Speaks == SpeaksOther:
		return fmt.Sprintf("it answers %q", p.Reply)
	case p.Speaks == SpeaksSilence:
		return fmt.Sprintf("it does not answer within %v", ProbeTimeout)
	}
	return "it closes the connection without a reply"
}
