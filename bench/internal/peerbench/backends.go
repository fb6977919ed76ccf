package peerbench

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

// Redis is the Redis backend: a standalone redis-server, three more for Redlock, and the Redis
// libraries.
func Redis() Backend {
	return Backend{
		Name: "redis-server",
		Launch: func() (string, string, func(), error) {
			srv, err := redistest.Launch()
			if err != nil {
				return "", "", nil, err
			}
			v, err := redisVersion(srv.Addr)
			if err != nil {
				srv.Close()
				return "", "", nil, err
			}
			return srv.Addr, v, srv.Close, nil
		},
		LaunchRedlock: func() (string, func(), error) {
			srv, err := redistest.Launch()
			if err != nil {
				return "", nil, err
			}
			return srv.Addr, srv.Close, nil
		},
		Libs: lockers.All(),
		Counting: "Commands are counted on the client side of every connection as the RESP each client writes — " +
			"one per top-level command, however many commands a script runs inside the server — leaving out " +
			"connection setup (" + strings.Join(wire.Handshake, ", ") + ").",
		Deps:    []string{"github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/valkey-io/valkey-go"},
		Command: "cd bench && go run ./cmd/peerbench",
		Stats:   redisStats,
		Floor:   lockers.FloorLibs(),
	}
}

// serverStats are a server's counters at one moment.
type serverStats struct {
	cpu         time.Duration // the server process's CPU, user and system, since it started
	scriptCalls int64         // calls of scripts and functions (EVAL, EVALSHA, FCALL and their _RO forms)
	scriptUsec  int64         // the time the server spent in them, in µs
	calls       wire.Counts   // calls by upper-case command name (a subcommand's under its command's), scripts' inner commands included
}

// redisStats reads INFO cpu and INFO commandstats of the server at addr.
func redisStats(addr string) (serverStats, error) {
	info, err := redistest.Do(addr, "INFO", "everything")
	if err != nil {
		return serverStats{}, err
	}
	return parseInfo(info), nil
}

// parseInfo reads the counters of serverStats from the text of INFO.
func parseInfo(info string) serverStats {
	st := serverStats{calls: wire.Counts{}}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			st.cpu += seconds(v)
		} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			st.cpu += seconds(v)
		}
		name, rest, ok := strings.Cut(line, ":")
		if cmd, isCmd := strings.CutPrefix(name, "cmdstat_"); ok && isCmd {
			cmd, _, _ = strings.Cut(cmd, "|")
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			st.calls[strings.ToUpper(cmd)] += n
		}
		if !ok || !scriptStat[name] {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.scriptCalls += n
			case "usec":
				st.scriptUsec += n
			}
		}
	}
	return st
}

// scriptStat names the commandstats lines of scripts and functions.
var scriptStat = map[string]bool{"cmdstat_eval": true, "cmdstat_evalsha": true, "cmdstat_eval_ro": true,
	"cmdstat_evalsha_ro": true, "cmdstat_fcall": true, "cmdstat_fcall_ro": true}

// seconds parses INFO's seconds ("1.234567") into a duration.
func seconds(v string) time.Duration {
	f, _ := strconv.ParseFloat(v, 64)
	return time.Duration(f * float64(time.Second))
}

// Postgres is the PostgreSQL backend: a throwaway server of backend/postgres/pgtest, Leasehold's
// driver and the floor of a plain advisory lock, and extra libraries (bench/pglock adds its own).
func Postgres(extra ...lockers.Lib) Backend {
	return Backend{
		Name: "PostgreSQL",
		Launch: func() (string, string, func(), error) {
			srv, err := pgtest.Launch()
			if err != nil {
				return "", "", nil, err
			}
			v, err := lockers.PostgresVersion(srv.URL)
			if err != nil {
				srv.Close()
				return "", "", nil, err
			}
			return srv.URL, v, srv.Close, nil
		},
		Libs: append(lockers.Postgres(), extra...),
		Counting: "Commands are the statements each client sends (a pgx tracer on every connection: one per " +
			"round trip once a statement is prepared, BEGIN and COMMIT included), named by their first word or " +
			"the function they call; connection setup and LISTEN are left out.",
		Deps:    []string{"github.com/jackc/pgx/v5", "cirello.io/pglock"},
		Command: "cd bench && go run ./cmd/peerbench -backend postgres",
	}
}

// redisVersion returns the redis_version of the server at addr.
func redisVersion(addr string) (string, error) {
	info, err := redistest.Do(addr, "INFO", "server")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("no redis_version in INFO server")
}
