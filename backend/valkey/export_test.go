package valkey

import (
	"context"
	"time"
)

// SetCancelGrace sets cancelGrace to d and returns a func that restores it.
func SetCancelGrace(d time.Duration) (restore func()) {
	old := cancelGrace.Swap(int64(d))
	return func() { cancelGrace.Store(old) }
}

// NewGraceCtx returns the ctx Run sends a call under when ctx can be canceled but has no
// deadline (a graceCtx), and the end Run defers.
func NewGraceCtx(ctx context.Context) (call context.Context, end func()) {
	g := &graceCtx{Context: ctx}
	return g, g.end
}
