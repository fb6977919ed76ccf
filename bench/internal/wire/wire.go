// Package wire counts the commands Redis clients send, by name, by reading the RESP they write
// to their connections.
//
// It counts what crosses the network: one per top-level command, whatever a script then runs
// inside the server. INFO commandstats cannot tell those apart (a GET inside EVALSHA is counted
// as a GET), and Redis 7.0 keeps no per-client command count, so the counting is done here, on
// the client side of each connection, at the cost of a scan of the bytes written.
package wire

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
)

// Handshake lists the commands that set a connection up or keep it alive rather than do work:
// HELLO, CLIENT (SETINFO, SETNAME, TRACKING), PING, INFO, AUTH, SELECT, CLUSTER (valkey-go's
// topology probe), READONLY, COMMAND and QUIT. Counts.Since leaves them out.
var Handshake = []string{"HELLO", "CLIENT", "PING", "INFO", "AUTH", "SELECT", "CLUSTER", "READONLY", "COMMAND", "QUIT"}

// Counter counts, by upper-case name, the commands written to every connection it wraps. A nil
// Counter counts nothing and wraps nothing. It is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts Counts
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: Counts{}} }

// Counts are numbers of commands by upper-case name.
type Counts map[string]int64

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Counts {
	if c == nil {
		return Counts{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := make(Counts, len(c.counts))
	for k, v := range c.counts {
		s[k] = v
	}
	return s
}

// Since returns, by name, the commands counted after before and up to s, leaving out Handshake.
func (s Counts) Since(before Counts) Counts {
	d := Counts{}
	for k, v := range s {
		if n := v - before[k]; n != 0 && !isHandshake(k) {
			d[k] = n
		}
	}
	return d
}

// Total returns the sum of the counts.
func (s Counts) Total() int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

func isHandshake(name string) bool {
	for _, h := range Handshake {
		if name == h {
			return true
		}
	}
	return false
}

func (c *Counter) add(name string) {
	c.mu.Lock()
	c.counts[name]++
	c.mu.Unlock()
}

// Wrap returns conn with its writes counted.
func (c *Counter) Wrap(conn net.Conn) net.Conn {
	if c == nil {
		return conn
	}
	return &countingConn{Conn: conn, p: parser{count: c.add}}
}

// Dial dials addr and wraps the connection; it has the type of go-redis's Options.Dialer.
func (c *Counter) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return c.Wrap(conn), nil
}

// DialValkey dials addr with d and wraps the connection; it has the type of valkey-go's
// ClientOption.DialCtxFn. TLS is not supported.
func (c *Counter) DialValkey(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.Wrap(conn), nil
}

type countingConn struct {
	net.Conn
	mu sync.Mutex
	p  parser
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.p.feed(b[:n])
	c.mu.Unlock()
	return n, err
}

// parser follows a stream of client-to-server RESP — arrays of bulk strings, or inline
// commands — across arbitrary write boundaries, and reports each command's name.
type parser struct {
	count func(name string)
	state int
	num   int64 // the number being read, or the bytes left of a bulk string and its CRLF
	args  int64 // bulk strings left in the current command
	first bool  // the bulk string being read is the command name
	name  []byte
}

const (
	stStart  = iota // before a command
	stCount         // in "*<n>\r\n"
	stHeader        // before "$"
	stLen           // in "$<n>\r\n"
	stBody          // in a bulk string and its CRLF
	stInline        // in an inline command's name
	stLine          // in the rest of an inline command
)

const maxName = 32

func (p *parser) feed(b []byte) {
	for len(b) > 0 {
		switch p.state {
		case stStart:
			if b[0] == '*' {
				p.state, p.num = stCount, 0
			} else if b[0] != '\r' && b[0] != '\n' {
				p.state, p.name = stInline, append(p.name[:0], b[0])
			}
			b = b[1:]
		case stCount, stLen:
			c := b[0]
			b = b[1:]
			switch {
			case c >= '0' && c <= '9':
				p.num = p.num*10 + int64(c-'0')
			case c == '\n' && p.state == stCount:
				p.args, p.first = p.num, true
				p.state = stHeader
				if p.args <= 0 {
					p.state = stStart
				}
			case c == '\n':
				p.num += 2
				p.state = stBody
			}
		case stHeader:
			if b[0] == '$' {
				p.state, p.num = stLen, 0
			}
			b = b[1:]
		case stBody:
			n := min(int64(len(b)), p.num)
			if p.first {
				data := b[:max(0, min(n, p.num-2))]
				p.name = append(p.name, data[:min(len(data), max(0, maxName-len(p.name)))]...)
			}
			b, p.num = b[n:], p.num-n
			if p.num > 0 {
				continue
			}
			if p.first {
				p.emit()
				p.first = false
			}
			if p.args--; p.args > 0 {
				p.state = stHeader
			} else {
				p.state = stStart
			}
		case stInline:
			c := b[0]
			b = b[1:]
			switch {
			case c == '\n':
				p.emit()
				p.state = stStart
			case c == ' ' || c == '\r':
				p.emit()
				p.state = stLine
			case len(p.name) < maxName:
				p.name = append(p.name, c)
			}
		case stLine:
			if b[0] == '\n' {
				p.state = stStart
			}
			b = b[1:]
		}
	}
}

func (p *parser) emit() {
	p.count(strings.ToUpper(string(p.name)))
	p.name = p.name[:0]
}
