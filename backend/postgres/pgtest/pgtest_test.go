//go:build unix

package pgtest_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestServerKeepsCommittedDataAcrossKill(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts a server")
	t.Parallel() // a server of its own
	s := pgtest.StartServer(t)
	ctx := context.Background()
	pool := s.Pool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Kill(t)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the postmaster %d is alive after Kill: %v", pid, err)
	}
	s.Restart(t)
	var v int
	if err := s.Pool(t).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after the restart: %d, %v; want the committed 42", v, err)
	}
}

func TestServerPauses(t *testing.T) {
	testenv.SkipShort(t, "pauses a server")
	t.Parallel() // a server of its own
	s := pgtest.StartServer(t)
	pool := s.Pool(t)
	ctx := context.Background()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := pool.Exec(short, "SELECT 1"); err == nil {
		t.Error("a paused server answered")
	}
	s.Resume()
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the resumed server: %v", err)
	}
}

func TestCloseStopsAndRemoves(t *testing.T) {
	t.Parallel() // a server of its own
	s, err := pgtest.Launch()
	if err != nil {
		if os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Close()
	s.Close()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the postmaster %d is alive after Close: %v", pid, err)
	}
}
