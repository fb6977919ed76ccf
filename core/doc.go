// Package core holds the contract between Leasehold's primitives and its storage drivers: the
// [Store] interface a driver implements, the [Lease] that primitives hand to callers, the [Clock]
// that decides time, the request and result types that cross between them, and the sentinel errors
// callers branch on with errors.Is.
//
// A driver implements [Store], and [Notifier] (with its [Waiter]) so that waiters are woken by
// releases instead of polling. [Watcher] (with its [Watch]) is optional: it lets an
// election's observers hear of a change instead of polling. [FenceRaiser] is optional: only a
// store that is to be a Redlock node needs it. The portable layer (package primitives) checks every argument before it calls a
// driver, so a driver may assume the valid input each request type documents; package
// conformance defines a correct driver by test, with one conformance.Run call.
//
// Package core does no I/O and imports nothing outside the standard library. Every type in it is
// safe for concurrent use unless its documentation says otherwise.
package core
