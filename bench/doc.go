// Package bench measures Leasehold beside the Go lock libraries it means to replace — redsync,
// bsm/redislock and valkey-go's valkeylock — on local redis-servers, in one run. It is a module
// of its own, so the peers never enter Leasehold's go.sum.
//
//	cd bench && go test -run '^$' -bench . -benchtime 2s
//
// Command peerbench runs every library through the same scenarios and prints one markdown table:
//
//	cd bench && go run ./cmd/peerbench
package bench
