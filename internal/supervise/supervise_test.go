//go:build unix

package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"go.uber.org/goleak"
)

// TestMain fails the tests if any goroutine outlives them. Started by Start, this test binary
// is also the supervisor (see init).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// farOff is a stop that does not come during a test.
func farOff() Stop {
	now := time.Now()
	return Stop{Term: now.Add(time.Hour), Kill: now.Add(time.Hour + time.Second), Deadline: now.Add(2 * time.Hour)}
}

// soon is a stop whose SIGTERM comes after term, SIGKILL grace later, and the deadline grace
// after that.
func soon(term, grace time.Duration) Stop {
	now := time.Now()
	return Stop{Term: now.Add(term), Kill: now.Add(term + grace), Deadline: now.Add(term + 2*grace)}
}

// start starts command, failing t if it cannot be.
func start(t *testing.T, stop Stop, command ...string) *Child {
	t.Helper()
	c, err := Start(command, os.Environ(), Stdio{Err: os.Stderr}, stop)
	if err != nil {
		t.Fatalf("Start(%q): %v", command, err)
	}
	return c
}

// sent returns the signals c reported sent on schedule by the time it ended.
func sent(c *Child) []syscall.Signal {
	var sigs []syscall.Signal
	for {
		select {
		case s := <-c.Stops():
			sigs = append(sigs, s)
		default:
			return sigs
		}
	}
}

func TestWaitReportsTheCommandsStatusAsAShellDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		c := start(t, farOff(), "sh", "-c", tc.script)
		if got := c.Wait(); got != tc.want {
			t.Errorf("sh -c %q: Wait() = %d, want %d", tc.script, got, tc.want)
		}
	}
}

func TestCommandGetsSIGTERMOnSchedule(t *testing.T) {
	t.Parallel()
	c := start(t, soon(300*time.Millisecond, 10*time.Second), "sleep", "30")
	if got, want := c.Wait(), 128+int(syscall.SIGTERM); got != want {
		t.Errorf("Wait() = %d, want %d: SIGTERM at the stop's Term", got, want)
	}
	if got := sent(c); len(got) != 1 || got[0] != syscall.SIGTERM {
		t.Errorf("Stops() reported %v, want [SIGTERM]", got)
	}
}

func TestCommandIgnoringSIGTERMGetsSIGKILLAfterGrace(t *testing.T) {
	t.Parallel()
	c, _ := startReady(t, "trap '' TERM; echo ready; sleep 30")
	c.Schedule(soon(100*time.Millisecond, 300*time.Millisecond))
	if got, want := c.Wait(), 128+int(syscall.SIGKILL); got != want {
		t.Errorf("Wait() = %d, want %d: SIGKILL at the stop's Kill", got, want)
	}
	if got := sent(c); len(got) != 2 || got[0] != syscall.SIGTERM || got[1] != syscall.SIGKILL {
		t.Errorf("Stops() reported %v, want [SIGTERM SIGKILL]", got)
	}
}

func TestScheduleMovesTheStopLater(t *testing.T) {
	t.Parallel()
	c := start(t, farOff(), "sleep", "2")
	// Unless the second Schedule moves it, the stop comes well before the command ends by itself.
	c.Schedule(soon(500*time.Millisecond, 500*time.Millisecond))
	c.Schedule(farOff())
	if got := c.Wait(); got != 0 {
		t.Errorf("Wait() = %d, want 0: the command ran to its end, its stop moved an hour on", got)
	}
	if got := sent(c); len(got) != 0 {
		t.Errorf("Stops() reported %v, want none", got)
	}
}

// startReady starts script under a supervisor with its stdout in a file, no stop in sight, and
// waits until the script has written "ready". It returns the child and the file's name.
func startReady(t *testing.T, script string) (*Child, string) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c, err := Start([]string{"sh", "-c", script}, os.Environ(), Stdio{Out: out, Err: os.Stderr}, farOff())
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the command is ready", func() bool {
		b, _ := os.ReadFile(out.Name())
		return strings.Contains(string(b), "ready")
	})
	return c, out.Name()
}

func TestSignalReachesTheCommand(t *testing.T) {
	t.Parallel()
	c, out := startReady(t, "trap 'echo got HUP; exit 3' HUP; echo ready; sleep 300 & wait")
	c.Signal(syscall.SIGHUP)
	got := c.Wait()
	b, _ := os.ReadFile(out)
	if got != 3 || !strings.Contains(string(b), "got HUP") {
		t.Errorf("Wait() = %d, output %q; want 3 and the trap's line", got, b)
	}
}
