// Package bench measures Leasehold beside the Go lock libraries it means to replace — redsync,
// bsm/redislock and valkey-go's valkeylock — on local redis-servers, in one run. It is a module
// of its own, so the peers never enter Leasehold's go.sum.
//
// Command peerbench starts its own servers, runs every library through the same scenarios and
// prints one markdown table with ratios to the best peer:
//
//	cd bench && go run ./cmd/peerbench
//
// The hot paths of Leasehold's own packages have go test benchmarks beside their code:
//
//	go test -run '^$' -bench . -benchmem ./primitives/ ./backend/memory/ ./backend/internal/rediscore/
package bench
