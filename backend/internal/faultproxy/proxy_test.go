package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// echoServer answers each line it is sent with the same line, and keeps the lines it got.
type echoServer struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []string
	wg   sync.WaitGroup
	conn []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conn = append(s.conn, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.mu.Lock()
					s.got = append(s.got, line)
					s.mu.Unlock()
					c.Write([]byte(line))
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conn {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// call sends line and returns the reply, how long it took, and the error of a reply that did
// not come within wait.
func call(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte(line)); err != nil {
		return "", 0, err
	}
	c.SetReadDeadline(start.Add(wait))
	reply, err := r.ReadString('\n')
	return reply, time.Since(start), err
}

// TestLostReplyArrivesLateAfterItsRequestWentThrough: with LoseReplies(2, hold, false) every
// second reply comes hold late, the request having reached the server at once.
func TestLostReplyArrivesLateAfterItsRequestWentThrough(t *testing.T) {
	srv := startEcho(t)
	p := Start(t, srv.ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	const hold = 200 * time.Millisecond
	p.LoseReplies(2, hold, false)
	for i, line := range []string{"a\n", "b\n", "c\n"} {
		reply, took, err := call(c, r, line, 5*time.Second)
		if err != nil || reply != line {
			t.Fatalf("call %d: %q, %v; want %q", i, reply, err, line)
		}
		if late := i == 1; late != (took >= hold) {
			t.Errorf("call %d took %v (hold %v): want it held back %v", i, took, hold, late)
		}
	}
}

// TestLostReplyIsDroppedWithItsConnectionAfterItsRequestWentThrough: with LoseReplies(1, hold,
// true) the caller sees no reply, then its connection cut, while the server ran the request.
func TestLostReplyIsDroppedWithItsConnectionAfterItsRequestWentThrough(t *testing.T) {
	srv := startEcho(t)
	p := Start(t, srv.ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	p.LoseReplies(1, 50*time.Millisecond, true)
	reply, _, err := call(c, r, "a\n", 5*time.Second)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("a lost reply: %q, %v; want the connection closed without it (EOF)", reply, err)
	}
	if got := srv.lines(); !slices.Equal(got, []string{"a\n"}) {
		t.Errorf("the server got %q, want the request", got)
	}
	p.LoseReplies(0, 0, false)
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if reply, _, err := call(c2, bufio.NewReader(c2), "b\n", 5*time.Second); err != nil || reply != "b\n" {
		t.Errorf("after LoseReplies(0): %q, %v; want the reply", reply, err)
	}
}
