module github.com/leasehold/leasehold/bench/pglock

go 1.26.8

replace (
	github.com/leasehold/leasehold => ../..
	github.com/leasehold/leasehold/bench => ..
)

require (
	cirello.io/pglock v1.16.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/leasehold/leasehold/bench v0.0.0-00010101000000-000000000000
)

require (
	github.com/bsm/redislock v0.9.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redsync/redsync/v4 v4.18.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/leasehold/leasehold v0.0.0-00010101000000-000000000000 // indirect
	github.com/lib/pq v1.10.9 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
