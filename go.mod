module github.com/leasehold/leasehold

go 1.26.8

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.24.0
	pgregory.net/rapid v1.3.0
)
