module github.com/leasehold/leasehold/bench/pglock

go 1.26.8

replace (
	github.com/leasehold/leasehold => ../..
	github.com/leasehold/leasehold/bench => ..
)

require (
	cirello.io/pglock v1.16.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/leasehold/leasehold v0.0.0-00010101000000-000000000000
	github.com/leasehold/leasehold/bench v0.0.0-00010101000000-000000000000
)
