module github.com/leasehold/leasehold/otel

go 1.26.0

toolchain go1.26.8

// The replace builds against the Leasehold beside it; it applies only here, not to users. No
// version of Leasehold is tagged yet: before tagging this module (otel/vX.Y.Z), require the tagged
// version of github.com/leasehold/leasehold below, or `go get` of this module cannot resolve it.
replace github.com/leasehold/leasehold => ../

require (
	github.com/leasehold/leasehold v0.0.0-00010101000000-000000000000
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
