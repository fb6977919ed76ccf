// Package primitives is Leasehold's portable layer: a Mutex and a weighted Semaphore over any
// core.Store. It checks every argument before the store sees it, owns waiting (by notification
// where the store offers it), keeps leases alive with a background refresh, and reports loss.
//
// A Mutex is a Semaphore of limit 1 on the same key model; a Semaphore's single- and
// multi-permit acquires share one key space. Mutex and Semaphore values are safe for concurrent
// use, and so are the leases they return.
//
// Costs, in store round trips: TryAcquire 1; Acquire 1 when the key has room, otherwise 1 per try
// (plus registering as a waiter once, free on the memory store); a refresh 1 per refresh interval;
// Release 1; Adopt 1. A held lease keeps one timer, which fires at its next refresh or its
// deadline; a refresh runs on the timer's goroutine, so a lease costs no goroutine between
// refreshes and none once it has ended.
package primitives
