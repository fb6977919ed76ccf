package valkey_test

import (
	"context"
	"errors"
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/redistest"
)

// TestFencedWriteThatFailsLeavesNoWatchOnItsConnection: a fenced write that fails after its
// WATCH (a record that is not a number; fn failing once its ctx has ended) gives its dedicated
// connection back with no WATCH armed: the next transaction on it (valkey-go hands back the
// connection given back last) is not aborted by a change to the record.
func TestFencedWriteThatFailsLeavesNoWatchOnItsConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	record := "leasehold:{r}:fence" // the record of resource "r", under the default prefix
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, fenced func(ctx context.Context, fn func(vk.Builder) (vk.Commands, error)) error, other vk.Client)
	}{
		{"a record that is not a number", func(t *testing.T, fenced func(context.Context, func(vk.Builder) (vk.Commands, error)) error, other vk.Client) {
			other.Do(context.Background(), other.B().Set().Key(record).Value("x").Build())
			if err := fenced(context.Background(), func(b vk.Builder) (vk.Commands, error) { return nil, nil }); err == nil {
				t.Fatal("a fenced write over a record that is not a number succeeded")
			}
		}},
		{"fn failing after the ctx ended", func(t *testing.T, fenced func(context.Context, func(vk.Builder) (vk.Commands, error)) error, _ vk.Client) {
			// fn ends ctx itself: a deadline could end it before the WATCH and GET that come
			// before fn, on a loaded machine, and fn would not run.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			boom := errors.New("boom")
			if err := fenced(ctx, func(vk.Builder) (vk.Commands, error) { cancel(); <-ctx.Done(); return nil, boom }); err != boom {
				t.Fatalf("Fenced: %v, want fn's error", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.Addr, vk.ClientOption{})
			other := newClient(t, srv.Addr, vk.ClientOption{})
			s := storeOver(t, c)
			bg := context.Background()
			other.Do(bg, other.B().Flushall().Build())
			tc.write(t, func(ctx context.Context, fn func(vk.Builder) (vk.Commands, error)) error {
				return s.Fenced(ctx, "r", 5, fn)
			}, other)
			if err := other.Do(bg, other.B().Set().Key(record).Value("9").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			err := c.Dedicated(func(d vk.DedicatedClient) error {
				resps := d.DoMulti(bg, d.B().Multi().Build(), d.B().Set().Key("y").Value("1").Build(), d.B().Exec().Build())
				_, err := resps[2].ToArray()
				return err
			})
			if vk.IsValkeyNil(err) {
				t.Errorf("a transaction after the failed fenced write was aborted: its WATCH outlived it on the pooled connection")
			} else if err != nil {
				t.Errorf("a transaction after the failed fenced write: %v", err)
			}
		})
	}
}
