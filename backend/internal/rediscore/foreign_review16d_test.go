package rediscore_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestForeignCounterValuesAreReported: someone else's hash at the lease key whose entries are
// named like the key's counters but hold what no script writes (not a whole number of ours:
// nan, inf, negative, fractional, past 2^53) is reported as foreign and left as it was. Read
// as numbers they would make a fence of NaN, granted as -2^63 and written into their hash.
func TestForeignCounterValuesAreReported(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			for _, v := range []string{"nan", "inf", "-inf", "-1", "1.5", "1e300", "9007199254740993"} {
				for _, counter := range []string{"fence", "seq", "keep"} {
					key := "theirs-" + counter + "-" + v
					lease := rediscore.Keys(key)[0]
					if err := c.HSet(ctx, lease, counter, v).Err(); err != nil {
						t.Fatal(err)
					}
					_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
					if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), lease) {
						t.Errorf("Acquire over their hash {%s: %s}: %v; want a wrong-type error naming %s", counter, v, err, lease)
					}
					if m, err := c.HGetAll(ctx, lease).Result(); err != nil || !reflect.DeepEqual(m, map[string]string{counter: v}) {
						t.Errorf("their hash {%s: %s} became %q (%v)", counter, v, m, err)
					}
				}
			}
		})
	}
}
