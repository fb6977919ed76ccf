package core

import "context"

// FenceRaiser is an optional Store capability for a store that serves as one node among several
// (package redlock requires it of every node, and discovers it by type assertion). It lets the
// caller put a floor under a grant's fence, so that the nodes of a quorum, whose counters are
// independent, agree on one fence that is above every fence any of them granted before. A Store
// that will not be a Redlock node need not implement it.
//
// Both methods are Acquire in every other respect: the same admission, the same line, the same
// idempotence, the same errors, one round trip. Raising a fence also raises the key's counter,
// so every later grant's fence is above it. Package conformance checks both methods of a Store
// that has them.
//
// A store refuses a floor it cannot honour exactly, or that would leave its counter no room to
// grow, with an error wrapping ErrInvalid, and changes nothing: the memory store takes floors up
// to 2^64 − 2^32 (fences after a higher one would wrap), the Redis stores, which count in Lua
// doubles, up to 2^53 − 2^32. Redlock passes only fences its nodes granted, far below that.
type FenceRaiser interface {
	// AcquireAbove is Acquire, except that a new grant's fence is at least floor:
	// max(floor, the fence Acquire would give). A lease the holder already holds is granted
	// again with its fence unchanged, as by Acquire. A grant the line makes to a request that
	// waits is made at least floor too.
	AcquireAbove(ctx context.Context, req AcquireRequest, floor uint64) (AcquireResult, error)

	// RaiseFence is Acquire, except that the lease granted, new or already held, has a fence of
	// at least fence: a held lease whose fence is lower is raised to fence.
	RaiseFence(ctx context.Context, req AcquireRequest, fence uint64) (AcquireResult, error)
}
