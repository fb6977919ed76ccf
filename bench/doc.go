// Package bench measures Leasehold beside the Go lock libraries it means to replace — redsync,
// bsm/redislock and valkey-go's valkeylock — on local redis-servers, in one run. It is a module
// of its own, so the peers never enter Leasehold's go.sum.
//
// Command peerbench starts its own servers, runs every library through the same scenarios and
// prints one markdown table with ratios to the best peer:
//
//	cd bench && go run ./cmd/peerbench
//
// Its floor scenario sets Leasehold's uncontended lock/unlock pair beside the least a lock can
// cost — a bare SET NX PX with a compare-and-delete script, and a minimal fenced lease with
// server time in one Redis function — and beside bsm/redislock and redsync, all in one process
// on one shared client per library, with the client's and the server's CPU per pair, as medians
// of interleaved rounds:
//
//	cd bench && go run ./cmd/peerbench -scenarios floor -duration 3s -rounds 3
//
// Command scriptcost counts the instructions the server executes per Leasehold Store operation
// (pair, Redlock node pair, Mutex, acquire, release, extend, refused try, granting release), with
// a redis-server of its own under valgrind's callgrind; the header names the commit, so that two
// commits can be compared:
//
//	cd bench && go run ./cmd/scriptcost [-n 500] [-drv goredis|valkey] [-only pair,mutex]
//
// The hot paths of Leasehold's own packages have go test benchmarks beside their code:
//
//	go test -run '^$' -bench . -benchmem ./primitives/ ./backend/memory/ ./backend/internal/rediscore/
package bench
