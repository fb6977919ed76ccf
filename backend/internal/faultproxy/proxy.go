// Package faultproxy is a TCP proxy on loopback for the fault tests of every backend: latency,
// connections cut, traffic held back (a partition), replies lost (delivered late or never, the
// requests having gone through), and healing.
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback between clients and a server, for injecting network faults:
// latency, connections cut, traffic held back (a partition), replies lost, and healing. Clients dial Addr. A
// Proxy is safe for concurrent use; it is closed, with every connection, when the test ends.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond // signalled when held changes
	latency time.Duration
	held    bool
	drop    int // how many more reads from the server to drop (DropReplies)
	dropped int // reads from the server dropped so far
	hold    *heldRequest
	stop    chan struct{} // closed by Close
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup

	lose     int           // LoseReplies: every lose-th read of a server's bytes is lost (0: none)
	loseHold time.Duration // for this long
	cut      bool          // and then dropped with its connection, instead of delivered
	replies  int           // the reads of servers' bytes counted since LoseReplies
}

// Start starts a proxy to target; it is closed when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays everything sent either way by d from now on (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Hold stops (true) or resumes (false) forwarding, as a partition would: connections stay
// open, and what is sent meanwhile waits, to arrive when forwarding resumes unless the
// connection is cut first.
func (p *Proxy) Hold(held bool) {
	p.mu.Lock()
	p.held = held
	p.cond.Broadcast()
	p.mu.Unlock()
}

// DropReplies drops the next n reads of what the server sends, on whichever connections they come:
// the request each answers has reached the server, and the client waits for a reply that never
// comes (until its own timeout), as when a reply is lost on the way. A read is one request's reply
// when the client waits for each reply before it sends the next request.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	p.drop = n
	p.mu.Unlock()
}

// heldRequest is a request HoldRequest waits for, and holds back.
type heldRequest struct {
	match             []byte
	arrived, delivery chan struct{}
	deliver           sync.Once
}

// HoldRequest holds back the next read of what a client sends that contains match, on its own
// connection (which sends nothing more meanwhile; the others go on), until deliver is called:
// then it reaches the server, late, as a request stuck on the way would. arrived is closed once
// the proxy holds it.
func (p *Proxy) HoldRequest(match string) (arrived <-chan struct{}, deliver func()) {
	h := &heldRequest{match: []byte(match), arrived: make(chan struct{}), delivery: make(chan struct{})}
	p.mu.Lock()
	p.hold = h
	p.mu.Unlock()
	return h.arrived, func() { h.deliver.Do(func() { close(h.delivery) }) }
}

// Dropped returns how many reads of what the server sends were dropped (see DropReplies).
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// LoseReplies loses replies from now on: every nth read of a server's bytes (a reply, several
// pipelined, or part of one), counted across the proxy's connections from this call on, is held
// back for hold — and so is what follows it on that connection — then delivered (cut false) or
// dropped with its connection, which is cut (cut true). Requests are forwarded as they come, so
// the server has run a call whose reply its caller, with a ctx shorter than hold, never sees:
// the caller's give-back, and a client library's retry of the call, reach the server after it.
// n 0 ends it (a reply held back then is still delivered or dropped at its time).
func (p *Proxy) LoseReplies(n int, hold time.Duration, cut bool) {
	p.mu.Lock()
	p.lose, p.loseHold, p.cut, p.replies = max(n, 0), hold, cut, 0
	p.mu.Unlock()
}

// Cut closes every open connection, as a network reset would; new ones are accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(s, c, false) })
		p.wg.Go(func() { p.pump(c, s, true) })
	}
}

// pump copies from src to dst, waiting while held, delaying by the latency, and dropping or losing
// replies as DropReplies and LoseReplies say when src is the server (fromServer); when either side
// ends it closes both.
func (p *Proxy) pump(dst, src net.Conn, fromServer bool) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held && !p.closed {
				p.cond.Wait()
			}
			d := p.latency
			drop := fromServer && p.drop > 0
			if drop {
				p.drop--
				p.dropped++
			}
			var hold time.Duration
			cut := false
			if fromServer && !drop && p.lose > 0 {
				if p.replies++; p.replies%p.lose == 0 {
					hold, cut = p.loseHold, p.cut
				}
			}
			var h *heldRequest
			if !fromServer && p.hold != nil && bytes.Contains(buf[:n], p.hold.match) {
				h, p.hold = p.hold, nil
			}
			p.mu.Unlock()
			if h != nil {
				close(h.arrived)
				select {
				case <-h.delivery:
				case <-p.stop:
					return
				}
			}
			if d > 0 {
				time.Sleep(d)
			}
			if drop {
				continue
			}
			if hold > 0 || cut {
				t := time.NewTimer(hold)
				select {
				case <-t.C:
				case <-p.stop:
					t.Stop()
					return
				}
				if cut {
					return // the deferred closes drop the reply with its connection
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a cut: the deferred closes end the other direction too
		}
	}
}

// HangUp returns the address of a loopback listener that closes every connection it accepts at
// once, without a byte: a server that is there but answers nothing. It is closed when t ends.
func HangUp(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return l.Addr().String()
}
