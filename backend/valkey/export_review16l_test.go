package valkey

import "context"

// NewGraceCtx returns the ctx Run sends a call under when ctx can be canceled but has no
// deadline (a graceCtx), and the end Run defers.
func NewGraceCtx(ctx context.Context) (call context.Context, end func()) {
	g := &graceCtx{Context: ctx}
	return g, g.end
}
