package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/diagnose"
)

// A Backend is a store that run, inspect and elect can use besides the built-in ones (Redis,
// Valkey, Redlock and PostgreSQL): a driver from a module this one does not require, passed to
// Main by the main package of a leasehold built with it, as backend/etcd/cmd/leasehold does.
//
// A command line names it with -Name URL: one endpoint of the store, or several of one store (a
// cluster), the flag repeated or the URLs separated by commas. It is one store among the others: a
// command line gives one of -redis, -postgres and each Backend's -Name. Name and Open are
// required; Usage, Flags and Check may be left empty.
type Backend struct {
	// Name is the store's flag without its dash, and its name in messages ("etcd" for -etcd):
	// lower-case letters and digits, starting with a letter, and not a flag the commands have.
	Name string
	// Usage is the help of -Name in each command's --help, as flag.FlagSet.Var takes it (a word
	// in back quotes names the value). The help adds that several endpoints may be given.
	Usage string
	// Flags adds the store's own flags to fs, each named Name-something (-etcd-prefix). It is
	// called for the command line before it is parsed, and Check and Open then see what was set;
	// it is also called on sets that are never parsed (to list the flags in help), each time
	// setting its variables to their defaults again. A value wrong in itself should be refused by
	// the flag's Set (flag.FlagSet.Func), which makes it a usage error whichever store the
	// command line names.
	Flags func(fs *flag.FlagSet)
	// Check, when the command line gives -Name, returns an error naming the first bad endpoint or
	// flag, as "-etcd \"x\": not a URL". It connects to nothing. The command then exits 2, having
	// sent nothing anywhere.
	Check func(endpoints []string) error
	// Open connects to the store at endpoints (the -Name URLs in the order given, none empty, none
	// twice), checks that it answers, and returns it with a func that closes the store and
	// everything Open made. ctx bounds the opening: it has a deadline of a few seconds, and ends
	// sooner when no endpoint accepts a connection; the store must outlive it. On error, nothing is left open and nothing is returned but the error, which
	// need not name the store: the command prefixes "Name: ", and when the store did not answer it
	// probes the endpoints and says what is there instead (nothing: unreachable; a Redis or a
	// PostgreSQL server; a server that accepts connections and says nothing).
	Open func(ctx context.Context, endpoints []string) (store core.Store, close func() error, err error)
}

// backendName is what a Backend's Name may be.
var backendName = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// checkBackends returns an error saying what is wrong with the first bad Backend: a Name that is
// not a flag name, one the commands have already or one given twice, a missing Open, or a flag
// of its own not named Name-something or named as one the commands have.
func checkBackends(backends []Backend) error {
	builtin := flag.NewFlagSet("", flag.ContinueOnError)
	var r storeFlags
	r.register(builtin, nil)
	var c runConfig
	c.registerTiming(builtin)
	for _, name := range []string{"key", "limit", "permits", "value", "observe"} {
		builtin.Bool(name, false, "")
	}
	seen := map[string]bool{}
	for i, b := range backends {
		switch {
		case !backendName.MatchString(b.Name):
			return fmt.Errorf("backend %d: Name %q: not lower-case letters and digits starting with a letter", i, b.Name)
		case builtin.Lookup(b.Name) != nil || seen[b.Name]:
			return fmt.Errorf("backend %q: -%s is a flag already", b.Name, b.Name)
		case b.Open == nil:
			return fmt.Errorf("backend %q: no Open", b.Name)
		}
		seen[b.Name] = true
		if b.Flags == nil {
			continue
		}
		own := flag.NewFlagSet("", flag.ContinueOnError)
		b.Flags(own)
		var bad string
		own.VisitAll(func(f *flag.Flag) {
			if bad == "" && (!strings.HasPrefix(f.Name, b.Name+"-") || builtin.Lookup(f.Name) != nil) {
				bad = f.Name
			}
		})
		if bad != "" {
			return fmt.Errorf("backend %q: flag -%s: must be named -%s-something, and not as a flag the commands have", b.Name, bad, b.Name)
		}
	}
	return nil
}

// backendFlags is a Backend in a command line: its -Name URLs as given.
type backendFlags struct {
	b         Backend
	endpoints []string
}

// register adds -Name and the Backend's own flags to fs.
func (e *backendFlags) register(fs *flag.FlagSet) {
	usage := e.b.Usage
	if usage == "" {
		usage = "the " + e.b.Name + " store: an endpoint `URL`"
	}
	fs.Func(e.b.Name, usage+"\n(several endpoints of one store: repeat -"+e.b.Name+", or separate URLs with commas)", func(s string) error {
		for _, u := range strings.Split(s, ",") {
			switch u = strings.TrimSpace(u); {
			case u == "":
				return errors.New("an empty endpoint")
			case slices.Contains(e.endpoints, u):
				return fmt.Errorf("endpoint %q given twice", u)
			}
			e.endpoints = append(e.endpoints, u)
		}
		return nil
	})
	if e.b.Flags != nil {
		e.b.Flags(fs)
	}
}

// check returns Check's error, prefixed with the flag unless it names one already.
func (e *backendFlags) check() error {
	if e.b.Check == nil {
		return nil
	}
	err := e.b.Check(e.endpoints)
	if err != nil && !strings.HasPrefix(err.Error(), "-") {
		return fmt.Errorf("-%s: %v", e.b.Name, err)
	}
	return err
}

// connect opens the store with Open, which has pingTimeout to answer. If Open has not answered
// within dialCheckAfter, it dials every endpoint, and if none can be dialled it ends Open's wait at
// once: a client that waits for a server to come up (as etcd's does) would wait out pingTimeout
// for nothing. (A store that opens sooner is never dialled but by its driver: a connection closed
// at once is a line in some servers' logs.) When Open fails, the error says what failed: Open's
// words, or what the endpoints' probes found (backendFailure).
func (e *backendFlags) connect(ctx context.Context) (core.Store, func(), error) {
	octx, cancel := context.WithTimeout(ctx, pingTimeout)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(dialCheckAfter)
		defer t.Stop()
		select {
		case <-octx.Done():
		case <-t.C:
			if noneDialled(octx, e.endpoints) {
				cancel()
			}
		}
	})
	store, closeStore, err := e.b.Open(octx, slices.Clone(e.endpoints))
	cancel()
	wg.Wait()
	if err == nil && (store == nil || closeStore == nil) {
		if closeStore != nil {
			closeStore()
		}
		err = errors.New("the driver opened no store") // a Backend bug: Open returned nil and no error
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, backendFailure(ctx, e.b.Name, e.endpoints, err)
	}
	// The store is closed as the command exits; a failure to close changes nothing then.
	return store, func() { closeStore() }, nil
}

// backendFailure is redisFailure for a Backend's store called name, which Open failed to open with
// err: it probes every endpoint in parallel (probeTimeout) and says, in this order of precedence,
// that one is another store's server (Redis, PostgreSQL), that one accepts connections but sends
// nothing, that the TLS handshake with an https:// one failed (and why: a plain server, a
// certificate this machine does not trust), or that none could be dialled (unreachable); else it
// gives err, naming the endpoints that could not be dialled. An endpoint whose address it cannot tell (endpointOf) is not probed.
func backendFailure(ctx context.Context, name string, endpoints []string, err error) error {
	eps := make([]endpoint, 0, len(endpoints))
	for _, u := range endpoints {
		if ep, ok := endpointOf(u); ok {
			eps = append(eps, ep)
		}
	}
	found := make([]probed, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { found[i] = probe(ctx, ep) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var down []string
	for i, p := range found {
		where := name + " " + eps[i].addr
		switch {
		case p.DialErr != nil:
			down = append(down, fmt.Sprintf("%s (%v)", eps[i].addr, p.DialErr))
		case p.Postgres:
			return fmt.Errorf("%s: not %s server: it is a PostgreSQL server (use -postgres)", where, aServer(name))
		case p.Speaks == speaksRedis:
			return fmt.Errorf("%s: not %s server: it answers as a Redis server does (use -redis)", where, aServer(name))
		case p.Speaks == speaksSilence:
			return fmt.Errorf("%s: not %s server, or a stalled one: it accepts connections but does not answer within %v: %v", where, aServer(name), probeTimeout, err)
		case eps[i].tls != nil && p.TLSErr != nil && p.Speaks == speaksHTTP:
			return fmt.Errorf("%s: TLS handshake failed: the server speaks plain HTTP, not TLS (use http://, not https://)", where)
		case eps[i].tls != nil && p.TLSErr != nil:
			return fmt.Errorf("%s: TLS handshake failed: %v", where, p.TLSErr)
		}
	}
	switch {
	case len(eps) == 1 && len(down) == 1:
		return fmt.Errorf("%s %s unreachable: %v", name, eps[0].addr, found[0].DialErr)
	case len(eps) == len(endpoints) && len(down) == len(eps):
		return fmt.Errorf("%s unreachable: none of its %d endpoints answers: %s", name, len(eps), strings.Join(down, ", "))
	case len(down) > 0:
		return fmt.Errorf("%s: %v; unreachable: %s", name, err, strings.Join(down, ", "))
	}
	return fmt.Errorf("%s: %v", name, err)
}

// dialCheckAfter is how long connect lets Open wait before it checks whether any endpoint can be
// dialled at all.
const dialCheckAfter = 200 * time.Millisecond

// noneDialled reports whether no endpoint could be dialled within probeTimeout: each one refused,
// or had no route, no such host or socket (unreachable). An endpoint whose address endpointOf
// cannot tell might be dialled: then false.
func noneDialled(ctx context.Context, endpoints []string) bool {
	eps := make([]endpoint, len(endpoints))
	for i, u := range endpoints {
		ep, ok := endpointOf(u)
		if !ok {
			return false
		}
		eps[i] = ep
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var down atomic.Int32
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Go(func() {
			c, err := diagnose.Dial(ctx, ep.of())
			if err == nil {
				c.Close()
			} else if ctx.Err() == nil && unreachable(err) {
				down.Add(1)
			}
		})
	}
	wg.Wait()
	return int(down.Load()) == len(eps)
}

// aServer is "a name" or "an name", as name is said: "an etcd".
func aServer(name string) string {
	if strings.ContainsRune("aeio", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

// endpointOf returns the address a store's endpoint URL names, to probe: a unix socket for
// unix://path or unix:path (unixs too), host:port for scheme://[user@]host:port/... or plain
// host:port, with TLS for https://. ok is false for a URL without a port, whose default only
// its driver knows.
func endpointOf(u string) (ep endpoint, ok bool) {
	for _, scheme := range []string{"unix://", "unixs://", "unix:", "unixs:"} {
		if path, found := strings.CutPrefix(u, scheme); found {
			return endpoint{network: "unix", addr: path}, path != ""
		}
	}
	var conf *tls.Config
	if scheme, rest, found := strings.Cut(u, "://"); found {
		u, _, _ = strings.Cut(rest, "/")
		if i := strings.LastIndex(u, "@"); i >= 0 {
			u = u[i+1:]
		}
		if scheme == "https" {
			conf = &tls.Config{}
		}
	}
	host, port, err := net.SplitHostPort(u)
	if err != nil || host == "" || port == "" {
		return endpoint{}, false
	}
	return endpoint{network: "tcp", addr: u, tls: conf}, true
}

// etcdInstall installs the leasehold built with the etcd driver (backend/etcd/cmd/leasehold): the
// same command, with -etcd.
const etcdInstall = "go install github.com/leasehold/leasehold/backend/etcd/cmd/leasehold@latest"

// noEtcdUsage is the paragraph of the tool's help that says where the etcd build is, in a build
// without Backends.
const noEtcdUsage = `
etcd (-etcd) needs the leasehold built with its driver, the same command:
  ` + etcdInstall + `
`

// missingDriver returns the one-line error for err, fs's parse error, when the flag it did not
// know is -etcd or -etcd-something on a command that takes a store: this leasehold has no etcd
// driver, and how to install the one that has. For any other error, "".
func missingDriver(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok || fs.Lookup("redis") == nil || (name != "etcd" && !strings.HasPrefix(name, "etcd-")) {
		return ""
	}
	return fmt.Sprintf("-%s: this leasehold has no etcd driver (it keeps etcd's client out of its module); the one that has is the same command, installed with: %s",
		name, etcdInstall)
}
