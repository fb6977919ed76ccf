// Package core is the driver contract of Leasehold: the [Store] interface a storage driver
// implements, its optional capabilities, the request and result types that cross between the
// primitives and a driver, the [Lease] the primitives hand to callers, the [Clock] that decides a
// store's time, and the sentinel errors.
//
// Programs do not need to import it: package primitives re-exports the names a caller uses
// (primitives.Lease, primitives.Store, primitives.ErrLost, primitives.ErrNotAcquired and the
// other errors, the bounds) as aliases, so errors.Is and type assertions work with either name.
// A program imports primitives and one backend.
//
// A driver implements [Store], and [Notifier] so that waiters are woken by releases instead of
// polling. [Watcher] is optional: it lets an election's observers hear of a change instead of
// polling. Both hand out a [Wake]. [AcquireWatcher] serves a store without a line (Redlock);
// [FenceRaiser] is optional: only a store that is to be a Redlock node needs it. The portable layer (package primitives) checks
// every argument before it calls a driver, so a driver may assume the valid input each request
// type documents; package conformance defines a correct driver by test, with one
// conformance.Run call. docs/writing-a-driver.md walks through one.
//
// Package core does no I/O and imports nothing outside the standard library. Every type in it is
// safe for concurrent use unless its documentation says otherwise.
package core
