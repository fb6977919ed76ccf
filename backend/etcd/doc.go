// Package etcd is a Leasehold store on etcd (v3.5 or later), through etcd's own Go client
// (go.etcd.io/etcd/client/v3): leases, the strict FIFO line of waiters, values, lock delays,
// Inspect with the line, waiters woken by etcd's watch (core.Notifier) and change announcements
// (core.Watcher), with the semantics of the other drivers, so it passes the same conformance
// suite and every primitive — Mutex, weighted Semaphore, RWMutex, Election, MultiLock — runs on
// it unchanged. It is a module of its own (github.com/leasehold/leasehold/backend/etcd), so
// that etcd's client, gRPC and protobuf enter only the builds of programs that use it.
//
//	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
//	…
//	store, err := etcd.New(client)
//	mu, err := primitives.NewMutex(store, "report:daily")
//
// # Records
//
// A key's state is a handful of etcd keys under prefix + the key + "/" ('%' and '/' in a key or
// holder are written %25 and %2F): a lease is a record l/<holder> on an etcd lease of its own; a
// lock delay is a record d/<holder> on a second etcd lease of TTL + delay, renewed with the first,
// so that it outlives an unreleased lease by the delay; a place in the line is a record
// w/<holder> on the Store's session lease (below). Each record holds the request's permits,
// limit, TTL, delay and value. Nothing else is kept: a key with no lease, delay or waiter has no
// etcd key at all.
//
// # Time
//
// Fences are the grant's revision times 256 plus its index among the grants of its transaction.
//
// Expiry is etcd's: a lease is held while its etcd lease lives, and etcd, not the caller, ends
// it. etcd counts lease TTLs in whole seconds, so a TTL is rounded up to the next second (and
// etcd raises one below its minimum, 1.5 election timeouts — 2 s with etcd's defaults — to that
// minimum), and etcd looks for expired leases twice a second. A lease therefore ends up to a
// second and a half after its TTL, never before it: the holder's own deadline, counted from its
// TTL, still comes first, so a holder stops before the store could grant its key to another.
// What a user sees is a dead holder's key freed later than its TTL (a 10 s TTL frees the key in
// 10 to 11.5 s), and a TTL shorter than a second kept for a second. Inspect's TTLs and delays
// are etcd's whole seconds turned into at most a second more than the truth, and never more
// than the TTL asked for. The lock delay likewise ends up to a second and a half late.
//
// When an etcd member that was leader restarts, or leadership moves, etcd gives every lease its
// full TTL again (unless the cluster runs with lease checkpointing): a dead holder's key stays
// closed up to one TTL longer, never shorter.
//
// # Operations
//
// Every decision is one etcd transaction. A transaction decided on the key's records as read
// at revision R holds only if no record of the key was written since (a compare of the mod
// revisions of the key's range); otherwise etcd returns the records as they are, and the Store
// decides again. A record deleted since R (a lease released or expired) is not caught, and need
// not be: it only makes the decision more cautious, and the waiters' watches see it. The
// operations of one Store on one key take turns, so they do not fail against each other.
//
//   - Acquire on a key with nothing on it: an etcd lease, and one transaction that writes the
//     lease if the key's range is still empty. The etcd lease is a spare of the Store's when it
//     has one of the same TTL — the lease of a grant it released, renewed with a keep-alive,
//     which is not a write through etcd's consensus, sent on the LeaseKeepAlive stream the Store
//     keeps for its renewals beside the transaction (one round trip; the grant counts only once
//     etcd says the spare lives its TTL again) — or a new one (two round trips). So an
//     uncontended pair is two consensus writes, the acquire's and the release's transactions, as
//     etcd's own Mutex's is. Close revokes the spares; one nobody takes ends at its TTL. The
//     etcd lease of a transaction whose outcome is unknown (its ctx ended, or its connection
//     broke, in flight) is never a spare: a drawn holder's (core.AcquireRequest.Unshared) is
//     revoked at once, taking along a grant its caller was told failed, or that lands after
//     its give-back; any other is left to its TTL, as is a drawn holder's that asked again
//     for a grant it held (which may be on that etcd lease now).
//   - Acquire on a key the Store's watch sees busy decides on the watch's copy of the records,
//     and asks for an etcd lease only to grant; a refusal with a Wait is one transaction that
//     writes its place; a decision to write nothing (a refusal without a wait) reads first. A
//     refusal also asks how long the leases in the way have left, for RetryAfter (at most 16, in
//     parallel, and not again while etcd's earlier answer lasts).
//   - Release with nobody waiting: one transaction. With a line, that transaction fails and
//     returns the key's records; a second one releases and grants every head that then fits
//     (up to 32), each with a fence of its own, on an etcd lease the release asks for (a spare,
//     renewed, or a new one).
//   - The woken waiter takes its grant with an etcd lease and one transaction.
//   - Extend with the same TTL (a refresh): a read and a renewal of the etcd leases (two round
//     trips, neither a consensus write); with another TTL, an etcd lease and one transaction
//     that moves the records onto it.
//   - Inspect: a read, and one question per lease for its time left, in parallel.
//
// docs/etcd.md has the measured counts, and the figures beside etcd's own concurrency package.
//
// # The line and the watch
//
// A refused request with a Wait writes its place, which lasts for its Wait; the places' create
// revisions are the line's order. While anyone waits no newcomer is granted; a release, and a
// waiter leaving, grant every head whose permits are free, in order, as leases marked untaken,
// on one etcd lease that nobody renews, of the TTL of the heads' sessions (the shortest of them).
// A grant is untaken until its waiter takes it onto etcd leases of its own TTL (its lock delay
// starts then); once no grant is on the grants' etcd lease, the taker keeps it as a spare if its
// own Store asked for it, and revokes it otherwise (its age is unknown there). A grant nobody
// takes ends by itself within its waiter's session TTL, whether the waiter died, gave up, or its
// leave could not get through (a Store busy on the key, etcd out of reach), and the line moves
// on.
//
// Each Store keeps one etcd watch per key it has waiters or watches on, starting from the
// revision its refused try read (so nothing between the refusal and Register is missed), and a
// copy of the key's records kept current by the watch's events. After each batch of events it
// wakes exactly the waiters the line would now serve, and the one whose grant the line made;
// that waiter takes its grant with one etcd lease and one transaction, without a read. When
// expiry, not a release, frees room, the head is woken and grants itself. Idle
// waiters send nothing: etcd pushes the events. A watch etcd cancels (its revision compacted,
// the member without a leader) is started again from a fresh read, and every waiter is woken
// to look again.
//
// A Store's places are on one etcd lease of its own, its session (WithSessionTTL, 10 s by
// default), renewed while the Store lives: a waiter whose process dies or stalls leaves every
// line when the session ends, and any grant the line made it ends within that TTL too. A
// waiter that gives up leaves its place (a read and a transaction, in the background, tried
// again while etcd cannot be reached, a waitline.LeaveBudget at a time, for up to two minutes,
// until the client's Close; Inspect through the same Store waits for it), and gives back a
// grant it has not taken; so does a request that failed with a Wait,
// which may have taken a place. The holder's next Acquire on the key through the same Store
// waits for that leave too (bounded by its ctx), so that under a holder id shared by its
// callers (WithHolder) a late leave takes neither the place that try keeps nor the grant the
// line makes it. Close revokes the session: every place of the Store goes at once.
//
// # Closing
//
// Close the Store before its client. Store.Close stops the Store's waiters and watches, revokes
// its session (its places in lines go at once) and its spare etcd leases, and waits for the
// leaves its waiters owe: for at most five seconds while etcd answers, and about a second when
// etcd answers none of it; what is left undone ends with the etcd leases' TTLs.
//
// Closing the client first ends the Store's background work at once: the leaves its waiters
// owe and its revocations are dropped, not tried again; every later operation returns an
// error wrapping core.ErrClosed, and the Store's Close returns at once, with an error saying that
// its session was not revoked. Its places in lines then hold up those lines until the session
// lease ends (WithSessionTTL, 10 s by default), and the etcd leases of the grants it was giving
// up end with their TTLs. After either Close, an operation in flight does not wait for a leave
// the Store can no longer send, and a Register in flight returns a waiter woken at once (its
// next try returns core.ErrClosed).
//
// # What etcd does not give
//
// The Store is not a core.FenceRaiser: a Redlock over etcd clusters would put a quorum over
// what is already one.
package etcd
