// Package rediscore is the Redis Store, whatever client it uses: the Lua scripts (one copy,
// embedded), the key layout, the choice of the commands that run them (FCALL of a library loaded
// once per server, or EVALSHA and EVAL; see functions), the decoding of script replies into core
// results, the Store operations, and the subscription bookkeeping that turns wake messages into
// wake-ups: the subscriber (the Store's one subscription connection, its Listener) routes what
// it hears to the waiters in the keys' lines (waiters) or to the key watches (watches). The
// adapters backend/goredis and backend/valkey only move bytes: each implements Adapter (send a
// command once, load the library on every node, read an error reply, tell a command that never
// left the client, keep a subscription connection) and embeds the Store made by New over it; a
// call goes down once, Store → Adapter.Do → the client, and nothing of the adapter calls back
// into the Store but what its subscription connection hears (Listener). It is internal: its
// names are the adapters'.
//
// # Key layout
//
// A resource key K under prefix P is stored in four Redis keys (their records are the table in
// Record format). P{K'}:lease holds all an operation needs when nobody waits. In the commonest
// state, a lone lease (one holder of a Mutex's permit, limit 1, no lock delay, nobody in line or
// watching), it is a string that holds the fence, the holder and the value, and expires with the
// lease (PSETEX); released before the clock passed its fence (a Redlock node's, a second ahead),
// it holds the fence alone until the clock does. Otherwise it is a hash of the leases, each inline with its value, and the key's
// counters; a call reads it whole with one HGETALL and writes back what it changed with one HSET
// (and one HDEL). A call that needs more than a lone lease holds turns the string into the hash
// first. P{K'}:queue, P{K'}:waiting (the line) and P{K'}:left (tries given up before their reply
// came, and leaves overtaken by a later try of their holder, for a minute) are read only while the
// lease hash says they live. So an uncontended Mutex's acquire is TIME, GET and PSETEX inside its
// script, its extend TIME, GET, PTTL and PEXPIRE, and its release TIME, GET and DEL (a Redlock
// node's, whose fence is above the clock, PSETEX of the fence alone after the DEL); a semaphore's acquire is TIME,
// HGETALL and HSET (and a PEXPIRE on a new key), a release TIME, HGETALL and HDEL, and an extend
// TIME, HGETALL and HSET (and, about once per TTL, the hash's keep and a PEXPIRE). Each operation
// has up to three tiers: a lone tier on the string (acquire_lone, extend_lone, release_lone), a
// fast path that takes the common states of the hash (a free key, a lease beside live leases, no
// live line or watch) straight from the HGETALL's reply, before anything else is set up, and the
// general path, which decodes the state (each tier says when it applies; common.lua holds what
// they share). K' is K with '%', '{' and '}'
// percent-encoded. K' is the hash tag, so the four keys (and the key's channels) land in one
// Redis Cluster slot and one script can touch them all; the encoding keeps any user key in one
// slot and distinct from every other. No call sends the channels: the scripts name them after
// the lease hash's name, and a waiting try's Store after its try id.
//
// # Nothing left behind
//
// A key nobody holds, waits for or watches leaves no Redis key: a lone lease's string expires
// with it or is deleted by its release, and the call that leaves a hash so (the last release, a
// leave, an expired lease's deletion) deletes it, with the HDEL of every entry (so that only our
// entries go). The one
// exception is a lease hash whose fence is at or above the server clock in µs (a Redlock node
// raises fences to the quorum's): it expires just after the clock passes that fence. Deleting
// the counters is safe for fences because a new grant's fence is max(last + 1, server µs,
// floors): with the hash gone last is 0, and the clock is above every fence granted before as
// long as the last one was below the clock when the hash went (and the server's clock does not
// step back past it). So 10 000 per-entity keys each used once leave no Redis key, where each
// left its lease hash for a week before (see TestPerEntityKeysFootprint).
//
// Keys still in use are bounded too. The lease hash outlives every lease, place, left try and
// watch it records by as long again as the longest of them needed when it last set its keep (a
// second at least): a holder that died leaves its hash for at most its TTL and lock delay (or a
// second) past the end of the delay (a lease that expired unreleased keeps its entry, and its
// permits closed, until then), and a lease kept alive by refreshes sets a new keep (one more
// HSET field and a PEXPIRE) about once per TTL, one refresh in four at the default interval
// (TTL/3). The line's keys live a minute past the expiry (and lock delay) of the last lease in
// the way of the latest try (or twice that), never past twice the longest wait: a live waiter
// tries again when those leases expire (and their delays end), or at its retry interval, and
// each try renews them; so the places of waiters that
// died, behind a holder that died, go a few minutes on, not at the end of their Wait (which may
// be a century). A waiter that stalls for more than that minute loses its place, and takes the
// last one when it tries again. A left try id lives tryHold (a minute). A hash left with no
// lease and no place, kept for a watch or a left try alone, is kept as long again as they need,
// not as long as its leases and places had it kept.
//
// # Record format (layout version 2)
//
// Numbers are whole decimals below 2^53 with no leading zero, as strconv and the scripts' int()
// write them; times are the server's clock (TIME) in ms; a fence is at least the server's clock
// in µs when granted. P{K'} is the key's tag. "acquire", "extend", … name the scripts (the
// operation's fast path and general path alike, unless it says "general"); settle is every
// writing call's end (line.lua). Every script reads the whole lease key (one GET or HGETALL).
//
//	Redis key      type  entry / member   encoding                                   written by              read by
//	P{K'}:lease    string                 "L@2 <fence> <holder length> <holder>"     acquire (lone: a free   every script; a call
//	                                      then the value: a lone lease, which        key, one permit of a    that needs the hash
//	                                      expires with the lease (PSETEX, PEXPIRE);  limit of 1, no lock     turns it into one
//	                                      the clock passes the fence 2 ms before     delay, a fence the      (unlone)
//	                                      the lease ends at least                    clock passes in time),
//	                                                                                 extend (PEXPIRE);
//	                                                                                 deleted by release
//	                                      "L@2 <fence>": the fence alone, left by    release, settle (a key  acquire (the next
//	                                      a release before the clock passed it,      left idle, the fence    fence is above it)
//	                                      until it does                              at or above the clock:
//	                                                                                 a Redlock node's)
//	P{K'}:lease    hash  ':' + holder     "<permits> <fence> <expiry ms>", then      acquire (a grant, and   every script; inspect
//	                                      " q" for a grant from the line not taken   the line's grants in    reports it
//	                                      yet, "+<lock delay ms>" when it has one,   release and leave),
//	                                      then "\n<value>" when it has one           extend (expiry; q gone);
//	                                                                                 deleted by release,
//	                                                                                 leave (an untaken
//	                                                                                 grant) and any general
//	                                                                                 call (expired, delay
//	                                                                                 ended)
//	                     fence            the last fence granted                     every grant             acquire (next fence),
//	                                                                                                         settle, release
//	                                                                                                         (above the clock?)
//	                     limit            the limit of the latest grant (the key's,  every grant             acquire (limit check),
//	                                      while leases live)                                                 extend (reply), inspect
//	                     seq              the line's place counter                   acquire (general: a     acquire (general)
//	                                                                                 new place)
//	                     watch            until when some Store watches the key      watch                   every writing call
//	                                                                                                         (publish or not)
//	                     line             until when queue and waiting may hold      acquire (general: a     every call (read the
//	                                      places ('0': empty)                        place), serve           line or not)
//	                     left             until when left may hold ids               acquire (general:       acquire, leave, settle,
//	                                                                                 overtakes), leave       release (keep the hash)
//	                     keep@2           when the hash expires (its PEXPIRE); its   any call whose records  every script (does the
//	                                      name carries the layout version            outlive it (keep,       hash last? which
//	                                                                                 hset_kept), settle      layout?)
//	P{K'}:queue    zset  holder           place (from seq): the line in arrival      acquire (general),      acquire, release, leave
//	                                      order                                      serve, leave            (serve), inspect
//	P{K'}:waiting  hash  holder           "<permits> <deadline ms> <limit> <ttl ms>  acquire (general)       serve, held_limit,
//	                                      <min fence> <flags> [<delay ms> ][<value                           inspect
//	                                      length> <value>]<channel>": flags is
//	                                      listens (0/1: a PUBLISH on the channel
//	                                      counts its Store), +2 when a value
//	                                      follows, +4 when a lock delay does
//	P{K'}:left     zset  try or leave id  until when that try takes no place, or     leave (a try), acquire  acquire (general), leave
//	                                      that leave does nothing                    (general: overtakes)
//
// Every key written gets an expiry or is deleted: the lease hash by keep/hset_kept (PEXPIRE to
// keep@2) or settle's HDEL of every entry, the lone lease's string by its PSETEX, PEXPIRE or DEL; queue and waiting by the PEXPIRE of the place that
// extends line (and Redis deletes them when they empty); left by the PEXPIRE of each hold.
//
// Channels (named by the scripts from the lease key, never sent): P{K'}:granted:<store id>
// carries grants from the line to that Store's waiters, each "<holder length>:<holder><fence> ";
// P{K'}:changed carries an empty message on each change of a watched key.
//
// The scripts' arguments are named in one list, args.go's (acquireParams, …): the Go side fills
// ARGV by those indices and the Lua takes them as parameters of those names.
//
// # Layout version
//
// The layout above, and the scripts' arguments and replies, are LayoutVersion 2. Every lease
// hash has its keep entry, whose name carries the version (keep@2), and every lone lease its tag
// (L@2), and every call reads the whole lease key, so a script knows the version of what it reads
// at no cost: a hash whose keep entry names another version (keep@1), a lone lease of another
// tag, or a hash of ours whose keep entry has none (keep: a layout from before versions), is
// refused: the call writes nothing, and its error reply is returned as a
// *LayoutError naming both versions (errors.Is ErrLayoutVersion). The Functions library is named
// LibraryName ("leasehold") whatever its version, and its functions carry the version in their
// names (leasehold_v2_acquire, …), so a Store never runs another version's code; the one function
// every version has, LayoutFunction (leasehold_layout), returns the loaded library's version,
// which a Store asks once, when its FUNCTION LOAD finds a library loaded: another version's is
// refused the same way (see Functions). A change to the layout, or to what the scripts take or
// answer, that a Store of this version would misread takes the next version. Stores of two
// versions do not share a server.
//
// A lease's value (at most 1 KiB, any bytes) is stored inline, in the lease's entry: granting,
// renewing, extending or inspecting a lease reads and writes no other key and runs no other
// command for it. A waiter's value is kept with its request in the waiting hash, length-prefixed
// because the channel after it holds the user key, and goes with the grant the line makes it.
//
// # One limit per key
//
// A key's limit is that of its unexpired leases (the counter limit, the latest grant's, which
// they all share), or, with none, that of the first waiter in its line whose wait has not ended
// (the waiting hash keeps each waiter's). An acquire of another limit (AcquireAbove and
// RaiseFence too; the holder itself asking again, too) is refused at once with a
// *core.LimitMismatchError naming both: it takes no place, writes nothing, publishes nothing,
// and is followed by no leave. A key held by nobody and waited for by nobody takes any limit:
// the uncontended path, which only runs on a hash with no lease, needs no check and no command
// for it. Inspect reports the key's limit so defined.
//
// # Scripts
//
// Each Store operation is one script call. Where the server has Redis Functions (Redis 7.0 and
// later, Valkey) and lets the client load them, the scripts are one library, LibraryName,
// loaded once per server (FUNCTION LOAD; on a Cluster, on every primary) and called by FCALL:
// the prelude's helpers are made once, when the library loads, not on every call, which saves the
// server a few µs per call. A server that lost the library (restarted without persistence,
// FUNCTION FLUSH, a new Cluster node) is given it again by the first call that finds it
// missing. Where the server refuses the library (an older server, an ACL without FUNCTION LOAD
// or FCALL, a proxy that does not pass them), the Store uses EVALSHA, falling back to EVAL once
// per server, for the rest of its life. Both ways run the same Lua, so clients of either kind
// share keys. A server holds one library (see Layout version). The scripts take
// the time from the server (TIME) and delete expired leases when they write. Someone else's data
// under the prefix is reported (an error naming the key and its type) and left untouched: each
// key's first command is one that Redis refuses on a wrong type before it changes anything, and
// only then is the key's type looked up, to name it. User values travel only as KEYS and ARGV.
//
// # Handing over to waiters
//
// A refused Acquire that will wait (AcquireRequest.Wait > 0) takes a place in the key's line,
// with its request and the channel of its Store. The line is strictly FIFO: free permits go to
// its head first, which waits until its permits are free, and no newcomer passes it. A release
// grants the permits it frees to the head of the line in the same script, and publishes each
// grant on the channel of the waiter's Store alone; the releasing Store wakes its own waiters
// from the reply without waiting for the message. Only the waiters granted wake, and no other
// Store hears of it; idle waiters send nothing. A woken waiter's next Acquire takes the grant:
// without a command, from what its Store heard, when its holder id is its own
// (AcquireRequest.Unshared) and it waited less than half its TTL since its refused try (the grant was made after that try was sent, on its TTL, so the lease lasts at
// least the TTL from then: AcquireResult.TTL says what is left of that); otherwise with one call
// that renews it for its full TTL. A grant taken without the call stays marked untaken on the
// server until the lease's first Extend or Release, which nothing but its own Store's leave
// reads, and that Store sends no leave for it, however late the line's message about it comes
// (it records the take until the lease's Release or TTL). A grant published to nobody (the
// waiter's process died and its connection closed) is undone, and that Store's places dropped,
// in the same script, once the place was checked (its Store's subscription confirmed before the try; never on a Cluster,
// where PUBLISH counts one node's subscribers). A waiter that gives up leaves the line (one more
// script call, in the background; a closing Store sends those its waiters owe before Close
// returns), passing a grant it has not taken to the next in line; so does a try that failed or
// was canceled in flight, which the leave also keeps out of the line should it arrive later. A
// leave whose sends went unanswered may itself arrive late, after its holder's next try (a shared
// holder id tries again): that try names it, and the server keeps it from doing anything for a
// minute but keep its own given-up try out, so it takes neither the try's place nor a grant the
// line made it; the try names the given-up try too, which is kept out should the leave never
// arrive. A
// Store gives back a grant for a caller that gave up before enrolling, a second after it, and
// stays subscribed to the key until it has.
//
// # Watching a key
//
// A Watch (core.Watcher) hears of every new lease, release and grant given back on its key,
// whichever Store or driver made it: the scripts that make such a change PUBLISH (an empty
// message) on the key's changed channel, P{K'}:changed, to which the watching Store subscribes on
// its one subscription connection, beside its waiters' channels; on a Cluster, plain pub/sub
// reaches every node, so both Cluster modes hear it. They publish only while someone watches:
// Watch sets the lease hash's watch counter to a deadline in server time 30 s ahead (and keeps
// the hash at least that long), the Store renews it every 10 s while it has watches on the key,
// and a script publishes only when that deadline has not passed.
//
// Why there, and not always publishing, nor a key of watchers: a key nobody watches costs its
// scripts no PUBLISH, no extra key and no extra command, since every call reads the whole lease
// hash anyway (one HGETALL), so the check rides on a read already made; the uncontended acquire
// and release take their fast paths only while the deadline has passed, and extend, which tells
// no watcher, takes its own whatever the deadline. A deadline, not a flag or a count, needs no
// cleanup: a Store that dies stops renewing it, and the key stops publishing within 30 s.
//
// A watch is Reliable while its subscription is confirmed and the latest renewal succeeded;
// every change of that sends a value on C, and a new Watch starts with one, since a change
// before its subscription is confirmed cannot be heard.
package rediscore
