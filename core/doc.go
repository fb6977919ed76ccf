// Package core holds the contract between Leasehold's primitives and its storage drivers: the
// [Store] interface a driver implements, the [Lease] that primitives hand to callers, the [Clock]
// that decides time, the request and result types that cross between them, and the sentinel errors
// callers branch on with errors.Is.
//
// Package core does no I/O and imports nothing outside the standard library. Every type in it is
// safe for concurrent use unless its documentation says otherwise.
package core
