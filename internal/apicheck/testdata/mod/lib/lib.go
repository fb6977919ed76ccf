package lib

import (
	"context"

	"github.com/leasehold/leasehold/internal/hidden"
)

// Limit is documented.
const Limit int = 3

const hidden = 1

// Default is a var.
var Default = Options{}

type Options struct {
	Name  string
	inner int
	Embedded
}

type Embedded struct{}

type Box[T any] struct{ V T }

func (b *Box[T]) Get(ctx context.Context) (value T, err error) { return b.V, nil }

type Getter interface {
	Get(ctx context.Context) (string, error)
	secret()
}

func Open(ctx context.Context, name, mode string, each func(key string) error) (*Options, error) {
	return nil, nil
}

func (o Options) unexported() {}

func helper() {}

type inner = hidden.Inner

type Wrapper struct{ *inner }
