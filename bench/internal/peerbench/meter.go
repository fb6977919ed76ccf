package peerbench

import (
	"os"
	"runtime/pprof"
	"time"

	"github.com/leasehold/leasehold/bench/internal/wire"
)

// meter reads, at the start and the end of a measured window, this process's CPU and the CPU of
// the servers at addrs; the first error is kept.
type meter struct {
	addrs   []string
	stats   func(addr string) (serverStats, error)
	client0 time.Duration
	server0 time.Duration
	client  time.Duration // this process's CPU over the window
	server  time.Duration // the servers' CPU over the window, summed
	calls0  []wire.Counts
	calls   wire.Counts // the servers' commands over the window, summed
	profile string      // when not "", the file the window's CPU profile goes to
	pprofTo *os.File
	// The machine's CPU, every process's, over the window, and the window's wall time; ok
	// false where /proc/stat cannot be read.
	machine0, machine time.Duration
	machineOK         bool
	t0                time.Time
	wall              time.Duration
	err               error
}

func (m *meter) start() {
	if m == nil {
		return
	}
	m.t0 = time.Now()
	m.machine0, m.machineOK = machineCPU()
	// The servers first: the round trips to read them are then outside this process's window.
	m.server0, m.calls0 = m.servers()
	if m.profile != "" {
		f, err := os.Create(m.profile)
		m.fail(err)
		if err == nil {
			if err := pprof.StartCPUProfile(f); err != nil {
				m.fail(err)
				f.Close()
			} else {
				m.pprofTo = f
			}
		}
	}
	m.client0 = m.process()
}

func (m *meter) stop() {
	if m == nil {
		return
	}
	m.client = m.process() - m.client0
	if m.pprofTo != nil {
		pprof.StopCPUProfile()
		m.fail(m.pprofTo.Close())
	}
	server, calls := m.servers()
	m.server = server - m.server0
	m.calls = wire.Counts{}
	for i, c := range calls {
		if i < len(m.calls0) {
			for k, v := range c.Since(m.calls0[i]) {
				m.calls[k] += v
			}
		}
	}
	machine, ok := machineCPU()
	m.machine, m.machineOK = machine-m.machine0, m.machineOK && ok
	m.wall = time.Since(m.t0)
}

// others returns the cores the machine's other processes used on average over the window (its
// CPU less this process's and the servers'), or -1 where it cannot tell.
func (m *meter) others() float64 {
	if !m.machineOK || m.wall <= 0 {
		return -1
	}
	return max(0, (m.machine-m.client-m.server).Seconds()/m.wall.Seconds())
}

func (m *meter) process() time.Duration {
	cpu, err := processCPU()
	m.fail(err)
	return cpu
}

// servers returns the servers' CPU, summed, and each one's command calls.
func (m *meter) servers() (time.Duration, []wire.Counts) {
	var sum time.Duration
	var calls []wire.Counts
	for _, a := range m.addrs {
		st, err := m.stats(a)
		m.fail(err)
		sum += st.cpu
		calls = append(calls, st.calls)
	}
	return sum, calls
}

func (m *meter) fail(err error) {
	if err != nil && m.err == nil {
		m.err = err
	}
}
