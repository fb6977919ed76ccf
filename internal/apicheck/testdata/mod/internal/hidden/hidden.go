package hidden

import "context"

func Hidden() {}

type Inner struct{}

func (*Inner) Do(ctx context.Context) error { return nil }

func (Inner) Name() string { return "" }

func (*Inner) private() {}
