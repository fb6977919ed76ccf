// Package redistest starts throwaway redis-server processes for tests: a standalone server, or a
// Redis Cluster of several masters. Each listens on a free loopback port, keeps nothing on disk,
// and is stopped by pid when the test ends.
//
// It needs redis-server (and redis-cli for a cluster) on PATH. Without them the test is skipped
// with a message saying so, except under CI=true, where a missing server fails it.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binary returns the path of name on PATH, or skips (fails under CI=true) when it is missing.
func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("redistest: %s not found on PATH; install it (apt-get install -y redis-server) to run this test", name)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// freePort returns a loopback port that is free, with port+10000 (a cluster bus) free too.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			bus.Close()
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free port pair")
}

// Server is a running redis-server.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	args []string
}

// StartServer starts a standalone redis-server and returns it; it is stopped when t ends. Without
// redis-server on PATH the test is skipped, or fails under CI=true.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	binary(t, "redis-server")
	s, err := Launch(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a standalone redis-server on a free loopback port, keeping nothing on disk, with
// extra arguments, and waits until it answers PING. It is StartServer for programs: the caller
// stops the server with Close.
func Launch(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (apt-get install -y redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 { // a port found free may be taken before the server binds it
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args := append([]string{
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--logfile", "",
		}, extra...)
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, args: args}
		if last = s.run(bin); last == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, last
}

// run starts the server's process and waits until it answers PING.
func (s *Server) run(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	if err := waitReady(s.Addr, s.cmd.Process.Pid, 10*time.Second); err != nil {
		stop(s.cmd)
		return fmt.Errorf("redistest: redis-server on %s: %w", s.Addr, err)
	}
	return nil
}

// Restart kills the server (SIGKILL: it loses everything, having no persistence) and starts it
// again, empty, on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	stop(s.cmd)
	if err := s.run(binary(t, "redis-server")); err != nil {
		t.Fatal(err)
	}
}

// Close kills the server by pid (SIGKILL), waits for it to exit and removes its directory. It is
// safe to call more than once.
func (s *Server) Close() {
	stop(s.cmd)
	os.RemoveAll(s.dir)
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// waitReady waits until the server with process id pid answers on addr. It fails at once when
// another process answers there: the port, found free, was taken before this server could bind
// it (this server then exits), and a test would otherwise use someone else's server.
func waitReady(addr string, pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		info, err := Do(addr, "INFO", "server")
		if err == nil {
			if got := infoField(info, "process_id"); got == strconv.Itoa(pid) {
				return nil
			} else if got != "" {
				return fmt.Errorf("another redis-server (pid %s) answers there", got)
			}
			last = fmt.Errorf("INFO server without a process_id: %q", info)
		} else {
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", within, last)
}

// infoField returns the value of field in an INFO reply, or "" when it has none.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Do sends one command in RESP to addr and returns the first line of the reply (for simple
// status and integer replies), or the bulk string that follows for a bulk reply.
func Do(addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(line, "$") {
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line, nil
}

// StartCluster starts a Redis Cluster of masters (at least 3) with no replicas, waits until
// every node reports cluster_state:ok, and returns the nodes' addresses.
func StartCluster(t testing.TB, masters int) []string {
	t.Helper()
	cli := binary(t, "redis-cli")
	var addrs []string
	for range masters {
		s := StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		for {
			info, err := Do(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok after 30s: %q %v", a, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// clientCommands are the commands a Leasehold client sends per operation: scripts and functions
// (EVAL, EVALSHA, FCALL), their loading (SCRIPT, FUNCTION) and subscriptions. INFO commandstats
// also counts the commands that scripts run inside one call (GET, SET, HGETALL, …), which are not
// round trips, and each new pooled connection's handshake (HELLO, CLIENT) or a client's
// keep-alive PING, which are not per-operation costs; those are left out.
var clientCommands = []string{"cmdstat_eval", "cmdstat_fcall", "cmdstat_script", "cmdstat_function", "cmdstat_subscribe", "cmdstat_unsubscribe",
	"cmdstat_ssubscribe", "cmdstat_sunsubscribe"}

// ClientCommands returns how many commands clients have sent the server at addr, counted from
// INFO commandstats as above: take it before and after an operation to count its round trips.
func ClientCommands(t testing.TB, addr string) int {
	t.Helper()
	info, err := Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		known := false
		for _, p := range clientCommands {
			if strings.HasPrefix(line, p) {
				known = true
			}
		}
		if !known {
			continue
		}
		i := strings.Index(line, "calls=")
		j := strings.Index(line[i:], ",")
		c, _ := strconv.Atoi(line[i+6 : i+j])
		n += c
	}
	return n
}
