package etcdtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// startTimeout bounds how long a server may take to say it is ready, and then to answer: about
// a second on an idle machine, but a loaded one running two race-instrumented suites stalls.
const startTimeout = 30 * time.Second

// process is a running server process.
type process struct {
	cmd   *exec.Cmd
	stdin *os.File      // the write end of the server's standard input: it exits at end of file
	done  chan struct{} // closed when cmd has exited
}

// kill kills the process by pid (SIGKILL, which a stopped process obeys too) and waits for it
// to exit. It reports whether the process had exited by itself before.
func (p *process) kill() (exited bool) {
	select {
	case <-p.done:
		exited = true
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.stdin.Close()
	return exited
}

// launch starts a new server with its files in dir, on free loopback ports. A port found free
// may be taken before the server binds it (it then exits): it tries again on other ports.
func launch(dir string) (*Server, error) {
	var last error
	for range 3 {
		client, peer, err := freePorts()
		if err != nil {
			return nil, err
		}
		s := &Server{dir: dir, client: client, peer: peer}
		if s.proc, last = s.run(); last == nil {
			return s, nil
		}
		// A member bootstrapped on the ports of a failed try would restart on them.
		if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
			return nil, err
		}
	}
	return nil, last
}

// freePorts returns two distinct loopback ports that were free a moment ago.
func freePorts() (client, peer int, err error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, fmt.Errorf("etcdtest: no free loopback port: %w", err)
		}
		defer l.Close() // held until both are chosen, so they differ
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

// run starts the server's process on s's directory and ports, and returns it once it answers.
func (s *Server) run() (*process, error) {
	exe, args, err := serverCommand()
	if err != nil {
		return nil, fmt.Errorf("etcdtest: the test binary: %w", err)
	}
	sp, err := json.Marshal(spec{Dir: s.dir, Client: s.client, Peer: s.peer})
	if err != nil {
		return nil, err
	}
	outPath := filepath.Join(s.dir, "server.out")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	defer out.Close() // the child has its own
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	defer readyR.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, fmt.Errorf("etcdtest: %w", err)
	}

	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), serveEnv+"="+string(sp))
	cmd.Stdin = stdinR
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.ExtraFiles = []*os.File{readyW} // fd 3
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	readyW.Close()
	stdinR.Close()
	if err != nil {
		stdinW.Close()
		return nil, fmt.Errorf("etcdtest: start the server process: %w", err)
	}
	p := &process{cmd: cmd, stdin: stdinW, done: make(chan struct{})}
	go func() { // ends when the process exits, at the latest when kill kills it
		cmd.Wait()
		close(p.done)
	}()

	// The server writes a line to fd 3 once it is ready: it has bound both ports, so no one
	// else answers on them. End of file means it exited first.
	readyR.SetReadDeadline(time.Now().Add(startTimeout))
	line := make([]byte, len(readyLine))
	if _, err := io.ReadFull(readyR, line); err != nil || string(line) != readyLine {
		p.kill()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("it exited first")
		}
		return nil, fmt.Errorf("etcdtest: server on ports %d, %d not ready: %v (is etcdtest.Main called from TestMain?); its output: %s",
			s.client, s.peer, err, tail(outPath))
	}
	if err := s.answer(startTimeout); err != nil {
		p.kill()
		return nil, fmt.Errorf("%w; its output: %s", err, tail(outPath))
	}
	return p, nil
}

// tail returns the end of the file at path, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	if len(b) == 0 {
		return "(none)"
	}
	return string(b)
}
