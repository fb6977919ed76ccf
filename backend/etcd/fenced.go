package etcd

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// FenceKey returns the etcd key of resource's fence record, which Fenced keeps: the highest
// fence accepted for resource, as 8 bytes, big-endian. It is under the Store's prefix, apart
// from every lock's records.
func (s *Store) FenceKey(resource string) string { return s.prefix + "%fence/" + escape(resource) }

// Fenced writes ops in one etcd transaction only if fence (a lease's Fence) is at least the
// highest fence accepted for resource before, and records fence as the highest in the same
// transaction: the check and the write commit together, so a holder whose lease was lost and
// given on (a higher fence accepted since) writes nothing. It returns the transaction's response
// (its Responses after the first are ops's). A lower fence returns an error wrapping
// core.ErrStaleFence and core.ErrLost, and none of ops is applied; equal fences pass. A fence of
// 0 or above 2^63 − 1 is core.ErrInvalid. It costs one round trip; the record stays (one small
// key per resource), as a fence record must, to refuse a late writer.
func (s *Store) Fenced(ctx context.Context, resource string, fence uint64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if fence == 0 || fence > math.MaxInt64 {
		return nil, fmt.Errorf("etcd: fenced write to %q: %w: fence %d: must be between 1 and 2^63 − 1", resource, core.ErrInvalid, fence)
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	key := s.FenceKey(resource)
	enc := func(f uint64) string { return string(binary.BigEndian.AppendUint64(nil, f)) }
	put := append([]clientv3.Op{clientv3.OpPut(key, enc(fence))}, ops...)
	// A missing record takes any fence; otherwise the record's value, compared as bytes, is the
	// highest fence so far, and must be below fence+1.
	resp, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(put...).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", enc(fence+1))}, put, []clientv3.Op{clientv3.OpGet(key)})).Commit()
	if err != nil {
		return nil, s.fail(ctx, fmt.Sprintf("fenced write to %q", resource), err)
	}
	if resp.Succeeded {
		return resp, nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return (*clientv3.TxnResponse)(inner), nil
	}
	highest := uint64(0)
	if kvs := inner.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && len(kvs[0].Value) == 8 {
		highest = binary.BigEndian.Uint64(kvs[0].Value)
	}
	return nil, fmt.Errorf("etcd: fenced write to %q: %w: %w: fence %d is below %d, accepted already", resource, core.ErrStaleFence, core.ErrLost, fence, highest)
}
