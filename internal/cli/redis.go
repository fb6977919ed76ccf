package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/redlock"
)

func init() {
	// go-redis logs dial failures itself; the CLI reports each failure once, in one line.
	redis.SetLogger(quiet{})
}

// quiet is a go-redis logger that drops every line.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// The -driver values.
const (
	driverGoredis = "goredis"
	driverValkey  = "valkey"
)

// pingTimeout bounds the PING that checks each server before a command starts.
const pingTimeout = 3 * time.Second

// storeFlags are the flags of every subcommand that talks to a store: Redis (the servers, the
// client library and the key prefix), PostgreSQL (postgres.go) or a Backend's (backend.go).
// Register them with register, check them with check once the flags are parsed, then connect.
type storeFlags struct {
	urls     []string // -redis, as given
	driver   string
	prefix   string
	pg       pgFlags
	backends []*backendFlags // in the order given to Main
}

// register adds -redis, -driver and -prefix, the PostgreSQL flags, and each Backend's flags to
// fs.
func (r *storeFlags) register(fs *flag.FlagSet, backends []Backend) {
	fs.Func("redis", "Redis server: a `URL` (redis://[user:password@]host:port/db, rediss:// for TLS,\n"+
		"unix:///path) or host:port. Repeat it for Redlock over several servers: leasehold goes on\n"+
		"when enough of them answer for a quorum (a majority for -limit 1) and names the others on\n"+
		"stderr, one line each", func(s string) error {
		r.urls = append(r.urls, s)
		return nil
	})
	fs.StringVar(&r.driver, "driver", driverGoredis, "Redis client library: goredis (go-redis) or valkey (valkey-go)")
	fs.StringVar(&r.prefix, "prefix", "leasehold:", "prefix of every Redis key and channel Leasehold uses (the drivers' WithPrefix);\n"+
		"clients sharing a key must use the same prefix. Not empty, no '{' or '}'")
	r.pg.register(fs)
	for _, b := range backends {
		e := &backendFlags{b: b}
		e.register(fs)
		r.backends = append(r.backends, e)
	}
}

// given returns the store flags the command line gave, of -redis, -postgres and each Backend's,
// in that order.
func (r *storeFlags) given() []string {
	var flags []string
	if len(r.urls) > 0 {
		flags = append(flags, "-redis")
	}
	if r.pg.url != "" {
		flags = append(flags, "-postgres")
	}
	for _, e := range r.backends {
		if len(e.endpoints) > 0 {
			flags = append(flags, "-"+e.b.Name)
		}
	}
	return flags
}

// chosen returns the Backend the command line gave, or nil.
func (r *storeFlags) chosen() *backendFlags {
	for _, e := range r.backends {
		if len(e.endpoints) > 0 {
			return e
		}
	}
	return nil
}

// synopsis is the store flags as a command's usage line gives them: -redis URL|-postgres URL,
// and -Name URL for each Backend.
func (r *storeFlags) synopsis() string {
	s := "-redis URL|-postgres URL"
	for _, e := range r.backends {
		s += "|-" + e.b.Name + " URL"
	}
	return s
}

// help is a command's help text with the store flags of its usage line as synopsis gives them.
func (r *storeFlags) help(text string) string {
	return strings.ReplaceAll(text, "-redis URL|-postgres URL", r.synopsis())
}

// check returns an error naming the first bad flag: no store or two (of -redis, -postgres and
// each Backend's), an unknown -driver, an empty -prefix or one with a brace, a bad PostgreSQL flag, a -redis that
// is neither a URL nor host:port, the same server twice (which would count twice in a Redlock
// quorum), a Backend's Check error. Every flag given is checked, whichever store it is for.
func (r *storeFlags) check() error {
	given := r.given()
	switch {
	case len(given) > 1:
		return fmt.Errorf("%s and %s: give one store, not both", given[0], given[1])
	case len(given) == 0:
		stores := []string{"-redis", "-postgres"}
		for _, e := range r.backends {
			stores = append(stores, "-"+e.b.Name)
		}
		return fmt.Errorf("%s or %s is required", strings.Join(stores[:len(stores)-1], ", "), stores[len(stores)-1])
	case r.driver != driverGoredis && r.driver != driverValkey:
		return fmt.Errorf("-driver %q: must be %s or %s", r.driver, driverGoredis, driverValkey)
	case r.prefix == "":
		return errors.New(`-prefix "": must not be empty (the keys would lie at the database's root)`)
	case strings.ContainsAny(r.prefix, "{}"):
		return fmt.Errorf("-prefix %q: must not contain '{' or '}'", r.prefix)
	}
	if err := r.pg.checkNames(); err != nil {
		return err
	}
	if r.pg.url != "" {
		return r.pg.check()
	}
	if e := r.chosen(); e != nil {
		return e.check()
	}
	seen := make(map[string]string, len(r.urls))
	for _, u := range r.urls {
		nc, err := r.node(u)
		if err != nil {
			return err
		}
		if first, ok := seen[nc.addr]; ok {
			return fmt.Errorf("-redis %q and -redis %q: the same server twice", first, u)
		}
		seen[nc.addr] = u
	}
	return nil
}

// normalURL returns s as a URL: s itself when it has a scheme, redis://s when it is host:port
// or a host name alone. A redis:// or rediss:// URL whose host is not a host[:port] (an IPv6
// address outside brackets, as in redis://:::, or a ':' with no port) is an error: the client
// libraries would read a host into it.
func normalURL(s string) (string, error) {
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		if scheme != "redis" && scheme != "rediss" {
			return s, nil // the client library says what it takes
		}
		host, _, _ := strings.Cut(rest, "/")
		if i := strings.LastIndex(host, "@"); i >= 0 {
			host = host[i+1:]
		}
		switch {
		case strings.Count(host, ":") > 1 && !strings.HasPrefix(host, "["):
			return "", fmt.Errorf("-redis %q: not a host:port (an IPv6 address goes in brackets, as in %s://[::1]:6379)", s, scheme)
		case strings.HasSuffix(host, ":"):
			return "", fmt.Errorf("-redis %q: no port after ':'", s)
		}
		return s, nil
	}
	host := s
	if strings.Contains(s, ":") {
		h, port, err := net.SplitHostPort(s)
		if err != nil || port == "" {
			return "", fmt.Errorf("-redis %q: neither a URL (redis://host:port) nor host:port", s)
		}
		host = h
	}
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", fmt.Errorf("-redis %q: neither a URL (redis://host:port) nor host:port", s)
	}
	return "redis://" + s, nil
}

// server is one -redis server, its client made but not yet connected.
type server struct {
	addr  string // for messages: host:port, or a socket's path
	ep    endpoint
	db    int
	store core.Store
	ping  func(context.Context) error
	close func()
}

// check PINGs the server within pingTimeout and returns nil, or an error saying what failed
// (redisFailure).
func (s *server) check(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := s.ping(pctx)
	cancel()
	if err == nil {
		return nil
	}
	return redisFailure(ctx, s.ep, s.db, err)
}

// nodeConfig is a -redis server's client configuration for the chosen driver.
type nodeConfig struct {
	addr    string
	ep      endpoint
	db      int
	goredis *redis.Options
	valkey  vk.ClientOption
}

// node parses URL u for the chosen driver.
func (r *storeFlags) node(u string) (nodeConfig, error) {
	full, err := normalURL(u)
	if err != nil {
		return nodeConfig{}, err
	}
	if r.driver == driverValkey {
		opt, err := vk.ParseURL(full)
		if err != nil {
			return nodeConfig{}, fmt.Errorf("-redis %q: %v", u, err)
		}
		if len(opt.InitAddress) != 1 {
			return nodeConfig{}, fmt.Errorf("-redis %q: one server per -redis", u)
		}
		// One standalone server per -redis, even when it cannot be reached now: Redlock keeps
		// the node and the client dials it again on each call.
		opt.ForceSingleClient = true
		opt.DisableCache = true
		addr := opt.InitAddress[0]
		return nodeConfig{addr: addr, ep: endpoint{network(full), addr, opt.TLSConfig}, db: opt.SelectDB, valkey: opt}, nil
	}
	opt, err := redis.ParseURL(full)
	if err != nil {
		return nodeConfig{}, fmt.Errorf("-redis %q: %v", u, err)
	}
	return nodeConfig{addr: opt.Addr, ep: endpoint{network(full), opt.Addr, opt.TLSConfig}, db: opt.DB, goredis: opt}, nil
}

// network is the network a -redis URL is dialled on: unix for unix://, else tcp.
func network(url string) string {
	if strings.HasPrefix(url, "unix://") {
		return "unix"
	}
	return "tcp"
}

// open makes the client and the store of a checked -redis server. It sends nothing, except
// valkey-go, which dials at once: a failed dial is left for the ping to report.
func (r *storeFlags) open(u string) (*server, error) {
	nc, err := r.node(u)
	if err != nil {
		return nil, err
	}
	if nc.goredis != nil {
		client := redis.NewClient(nc.goredis)
		s, err := goredis.New(client, goredis.WithPrefix(r.prefix))
		if err != nil {
			client.Close()
			return nil, err
		}
		return &server{addr: nc.addr, ep: nc.ep, db: nc.db, store: s,
			ping:  func(ctx context.Context) error { return client.Ping(ctx).Err() },
			close: func() { s.Close(); client.Close() }}, nil
	}
	client, err := vk.NewClient(nc.valkey)
	if client == nil {
		return nil, fmt.Errorf("redis %s: %v", nc.addr, err)
	}
	s, err := valkey.New(client, valkey.WithPrefix(r.prefix))
	if err != nil {
		client.Close()
		return nil, err
	}
	return &server{addr: nc.addr, ep: nc.ep, db: nc.db, store: s,
		ping:  func(ctx context.Context) error { return client.Do(ctx, client.B().Ping().Build()).Error() },
		close: func() { s.Close(); client.Close() }}, nil
}

// inProcessStore, when not nil, is the store every command connects to instead of its -redis
// servers, which are still checked but not dialled. Only tests set it (to a memory store, whose
// values and line the commands then show), before they run a command in this process.
var inProcessStore core.Store

// connect returns the -postgres Store (see pgFlags.connect), a Backend's (backendFlags.connect),
// or a Store over the -redis
// servers, Redlock over them when there are several, and a func that closes everything. It
// first checks every server in parallel (server.check: a PING within 3s, and when it fails, up
// to 1s more to find out why). One server must answer. Of several, those that do not are
// reported on warn, one line each starting with "leasehold cmd: " and saying what failed, and
// kept in the Redlock, which uses them again if they come back; it goes on when enough answer
// to grant a key of limit permits (Quorum(limit): a majority for a mutex, more for a
// semaphore), and is an error otherwise. When a semaphore's quorum is every server, it says so on
// warn, one line. On error nothing is left open.
func (r *storeFlags) connect(ctx context.Context, cmd string, warn io.Writer, limit int) (core.Store, func(), error) {
	if inProcessStore != nil {
		return inProcessStore, func() {}, nil
	}
	if r.pg.url != "" {
		return r.pg.connect(ctx)
	}
	if e := r.chosen(); e != nil {
		return e.connect(ctx)
	}
	servers, errs, err := r.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() { closeServers(servers) }
	if len(servers) == 1 {
		if errs[0] != nil {
			closeAll()
			return nil, nil, errs[0]
		}
		return servers[0].store, closeAll, nil
	}
	rl, err := redlockOver(servers, errs, cmd, warn, limit)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return rl, closeAll, nil
}

// dial opens a server for each -redis URL and checks them all in parallel (server.check). It
// returns the servers and each one's check, or an error, with nothing left open: a URL that
// cannot be opened, or ctx's.
func (r *storeFlags) dial(ctx context.Context) ([]*server, []error, error) {
	servers := make([]*server, 0, len(r.urls))
	for _, u := range r.urls {
		s, err := r.open(u)
		if err != nil {
			closeServers(servers)
			return nil, nil, err
		}
		servers = append(servers, s)
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.check(ctx) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		closeServers(servers)
		return nil, nil, err
	}
	return servers, errs, nil
}

// closeServers closes each of servers.
func closeServers(servers []*server) {
	for _, s := range servers {
		s.close()
	}
}

// redlockOver returns Redlock over servers, whose checks failed where errs says, if enough
// answer to grant a key of limit permits; each that does not is reported on warn as connect
// says. It leaves the servers open either way.
func redlockOver(servers []*server, errs []error, cmd string, warn io.Writer, limit int) (*redlock.Store, error) {
	stores := make([]core.Store, len(servers))
	for i, s := range servers {
		stores[i] = s.store
	}
	rl, err := redlock.New(stores)
	if err != nil {
		return nil, err
	}
	up, need := 0, rl.Quorum(limit)
	for _, err := range errs {
		if err == nil {
			up++
		}
	}
	if limit > 1 && need == len(servers) {
		// The user chose N for a semaphore: say that no server may be lost, and what would do.
		fmt.Fprintf(warn, "leasehold %s: -limit %d over %d Redis servers: Redlock needs all %d to answer (a semaphore of limit L over N servers needs ⌊N·L/(L+1)⌋+1), so one server down stops it; to survive a server's loss, a semaphore needs L+2 servers: %d for -limit %d (5 servers for -limit 2 or 3)\n",
			cmd, limit, len(servers), need, limit+2, limit)
	}
	then := fmt.Sprintf("going on without it: %d of %d answer, Redlock needs %d", up, len(servers), need)
	if up < need {
		then = "too few answer"
	}
	for _, err := range errs {
		if err != nil {
			fmt.Fprintf(warn, "leasehold %s: %v; %s\n", cmd, err, then)
		}
	}
	if up < need {
		what := fmt.Sprintf("%d (a majority)", need)
		if limit > 1 {
			what = fmt.Sprintf("%d for -limit %d", need, limit)
		}
		return nil, fmt.Errorf("only %d of %d Redis servers answer; Redlock needs %s", up, len(servers), what)
	}
	return rl, nil
}
