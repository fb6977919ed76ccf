// Package waitline is the client side of a store's FIFO line, written once for every driver that
// keeps one (Redis, PostgreSQL, etcd): what a Store knows of its holders' places, the take of a
// grant heard of in a notification, the tries in flight, and the leaves sent in the background.
//
// # Taking a grant from a notification
//
// A Place is one Store's record of a holder's standing in a key's line: the key's last fence at
// its latest refusal (Floor; a grant at or below it is stale), the fence of a grant the line made
// it since and it has not taken (Grant), whether it may hold a place (Queued), and the refused try
// as it was sent (Sent). A driver updates it from each try's outcome (Refused, Found), from each
// grant it hears of (Granted) and from a release (Released), all under its own lock.
//
// Place.Take hands the holder the grant without a round trip, only when all of these hold: the
// holder id is the caller's alone (AcquireRequest.Unshared: another caller's leave of a shared id
// may have passed the grant on); the request asked now is the refused one (Same: Key, Holder,
// Permits, Limit, TTL, Value, LockDelay and Unshared), so that the lease the line made is the one
// the caller asks for; and the wait since the refused try was sent is under TTL/MaxTakeAge, so
// that the lease, made on that request after it was sent, has at least half its TTL left, which
// the take reports. The driver adds its own conditions (one waiter of the holder, no try of it in
// flight, the Store open). A driver whose take is itself a checked write (etcd) compares with
// Same and needs no more.
//
// # Tries in flight
//
// Tries counts a Store's tries in flight by holder: a grant is neither taken from a notification
// nor given back to the line while a try of its holder is on its way, for that try may be the one
// to find it.
//
// # Leaving in the background
//
// A waiter that gives up, and a try that failed in flight, leave the line: one call, sent in the
// background by Leaves. The budget is one for every driver: a leave is sent again while it fails
// (10 ms apart, doubling to a second) until it is answered or LeaveBudget has passed since it
// started (a send that hangs uses it up; a leave that waits its turn on the key behind the Store's
// other calls sets its own, Leave.Budget); a place it could not take out then lapses with its wait,
// and a grant with its lease's TTL, as they would have had the process died (etcd, whose places
// live on the Store's session until it ends, starts such a leave again). A send that the server
// refused with an error it would give again is answered: the driver reports it as done; one
// refused for now (a server busy, failing over, a deadlock) is not.
//
// What waits for leaves is one rule too: a holder's next Acquire and Release on a key wait for the
// leaves of that holder on that key (AwaitHolder), so that a late leave never takes the place or
// grant a newer call was given; Inspect waits for every leave of the key (AwaitKey), so that a
// waiter closed before it is not listed; and a Store's Close waits for every leave started before
// it, until Close's ctx ends (drivers give it CloseWait), and then cuts them off. Each wait also
// ends with its caller's ctx.
package waitline
