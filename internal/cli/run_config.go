package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/supervise"
	"github.com/leasehold/leasehold/primitives"
)

// runConfig is what `leasehold run` and `leasehold elect` are told.
type runConfig struct {
	name    string // the subcommand, for messages: run or elect
	elect   bool   // campaign on the key (elect) instead of taking permits (run)
	store   storeFlags
	key     string   // the key; with several (run -key A -key B), the first
	keys    []string // run's keys, in the order given, when there are several: a MultiLock on them
	limit   int
	permits int
	ttl     time.Duration
	wait    waitFlag
	nowait  bool
	grace   waitFlag // the command's time between SIGTERM and SIGKILL: see stopAt
	value   string   // kept with the lease: -value, elect's VALUE, or defaultValue
	command []string // what to run, after "--"

	lockDelay time.Duration // -lock-delay: primitives.WithLockDelay
	refreshed chan struct{} // told, without blocking, when a refresh has moved the deadline
	// abandoned receives, without blocking, the release of a grant the store may have made for
	// an acquire that failed (its reply lost as a signal ended the wait, or the connection broke).
	abandoned chan core.ReleaseRequest
	// refused holds, when not nil, the key of the last refused or failed acquire: the busy one
	// of several keys.
	refused *atomic.Pointer[string]
}

// multi reports whether the command runs holding several keys.
func (c *runConfig) multi() bool { return len(c.keys) > 1 }

// keysShown is how many of several keys a message names; the rest are counted.
const keysShown = 6

// keysText names the key, or every key (`"a", "b" and "c"`), in messages: with more than
// keysShown, the first of them and how many more (`"a", "b", … and 994 more`).
func (c *runConfig) keysText() string {
	if !c.multi() {
		return strconv.Quote(c.key)
	}
	shown := c.keys
	if len(shown) > keysShown {
		shown = shown[:keysShown-1]
	}
	q := make([]string, len(shown))
	for i, k := range shown {
		q[i] = strconv.Quote(k)
	}
	if len(shown) < len(c.keys) {
		return strings.Join(q, ", ") + fmt.Sprintf(", … and %d more", len(c.keys)-len(shown))
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// refusedKey is the key an acquire of several was refused on, or the first key if unknown.
func (c *runConfig) refusedKey() string {
	if c.multi() && c.refused != nil {
		if k := c.refused.Load(); k != nil {
			return *k
		}
	}
	return c.key
}

// oneTry reports whether the lease is to be tried once, not waited for.
func (c *runConfig) oneTry() bool { return c.nowait || (c.wait.set && c.wait.d == 0) }

// registerTiming adds the flags run and elect share besides the Redis ones: -ttl, -wait, -n,
// -nowait, -grace and -lock-delay.
func (c *runConfig) registerTiming(fs *flag.FlagSet) {
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "lease TTL; the lease is refreshed every TTL/3 while the command runs")
	fs.Var(&c.wait, "wait", "wait at most this `duration` for the lease (default: until it is free; 0 is -n)")
	fs.BoolVar(&c.nowait, "n", false, "try once: exit at once if the key is busy")
	fs.BoolVar(&c.nowait, "nowait", false, "the same as -n")
	fs.Var(&c.grace, "grace", "the `duration` the command has between SIGTERM and SIGKILL when the lease is not renewed in time:\n"+
		"SIGKILL comes at the lease's stop margin (TTL/10) before its deadline, SIGTERM -grace before that;\n"+
		"at most 2/5 of -ttl (default: TTL/5, 2s at the default -ttl)")
	fs.DurationVar(&c.lockDelay, "lock-delay", 0, "if the lease expires unreleased (leasehold stalled or died), the store keeps KEY closed this much longer\n"+
		"(Consul's lock-delay): time for a stalled machine to stop the command before the next holder starts")
}

// stopMargin is how long before its deadline a lease that was not renewed is reported lost, and
// the command gets SIGKILL: primitives' default, a tenth of the TTL, given explicitly.
func (c *runConfig) stopMargin() time.Duration { return c.ttl / 10 }

// maxGrace is the longest -grace the TTL allows: SIGTERM then comes at most TTL/2 before the
// lease's deadline, so a refresh sent on time (every TTL/3) has TTL/6 to be answered, or retried,
// before the command is told to stop.
func (c *runConfig) maxGrace() time.Duration { return c.ttl/2 - c.stopMargin() }

// graceOrDefault is -grace, or a fifth of the TTL if it was not given.
func (c *runConfig) graceOrDefault() time.Duration {
	if c.grace.set {
		return c.grace.d
	}
	return c.ttl / 5
}

// stopAt returns when the command is stopped if the lease is not renewed past deadline (its
// Deadline): SIGKILL at Kill, the stop margin before the deadline, when the lease is reported
// lost, so that the command's group is dead before the store can grant the key to anyone else;
// SIGTERM at Term, -grace before that.
func (c *runConfig) stopAt(deadline time.Time) supervise.Stop {
	kill := deadline.Add(-c.stopMargin())
	return supervise.Stop{Term: kill.Add(-c.graceOrDefault()), Kill: kill, Deadline: deadline}
}

// checkTiming returns an error naming the first bad flag of those registerTiming adds (both,
// when -wait and -grace are both negative), with its bound.
func (c *runConfig) checkTiming() error {
	switch {
	case c.ttl < primitives.MinTTL:
		return fmt.Errorf("-ttl %v: must be at least %v", c.ttl, primitives.MinTTL)
	case c.wait.d < 0 && c.grace.d < 0:
		return fmt.Errorf("-wait %v and -grace %v: must not be negative", c.wait.d, c.grace.d)
	case c.wait.d < 0:
		return fmt.Errorf("-wait %v: must not be negative", c.wait.d)
	case c.grace.d < 0:
		return fmt.Errorf("-grace %v: must not be negative", c.grace.d)
	case c.nowait && c.wait.set:
		return errors.New("-n and -wait: give one")
	case c.grace.d > c.maxGrace():
		fix := "lower -grace (no -ttl allows it)" // 5/2 of it is beyond the longest TTL, and may overflow
		if c.grace.d <= primitives.MaxDuration/5*2 {
			fix = fmt.Sprintf("lower -grace, or raise -ttl to at least %v", c.grace.d*5/2)
		}
		return fmt.Errorf("-grace %v: at most %v (2/5 of -ttl %v): the command gets SIGTERM -grace before the lease's stop margin (TTL/10), "+
			"which must leave a refresh time to be retried; %s", c.grace.d, c.maxGrace(), c.ttl, fix)
	case c.lockDelay < 0 || c.lockDelay > primitives.MaxDuration:
		return fmt.Errorf("-lock-delay %v: must be in [0, %v]", c.lockDelay, primitives.MaxDuration)
	}
	return nil
}
