package waitline

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func refusedReq() core.AcquireRequest {
	return core.AcquireRequest{Key: "k", Holder: "h", Permits: 2, Limit: 3, TTL: time.Minute, Wait: time.Minute,
		Value: "v", LockDelay: time.Second, Unshared: true}
}

// waiting returns a Place refused at floor 10 on refusedReq, sent at t0, since granted fence 11.
func waiting() Place {
	var p Place
	p.Refused(10, Sent{At: t0, Req: refusedReq()})
	p.Granted(11)
	return p
}

// TestTakeOnlyForTheRefusedRequest: a grant is taken without a round trip only by the request
// that was refused; one that differs in any field the lease was made on is not, and the grant
// stays to be taken by a round trip. Wait may differ: it is the time left.
func TestTakeOnlyForTheRefusedRequest(t *testing.T) {
	differ := map[string]func(*core.AcquireRequest){
		"key":       func(r *core.AcquireRequest) { r.Key = "other" },
		"holder":    func(r *core.AcquireRequest) { r.Holder = "other" },
		"permits":   func(r *core.AcquireRequest) { r.Permits = 1 },
		"limit":     func(r *core.AcquireRequest) { r.Limit = 4 },
		"ttl":       func(r *core.AcquireRequest) { r.TTL = 2 * time.Minute },
		"value":     func(r *core.AcquireRequest) { r.Value = "w" },
		"lockdelay": func(r *core.AcquireRequest) { r.LockDelay = 0 },
		"shared":    func(r *core.AcquireRequest) { r.Unshared = false },
	}
	for name, change := range differ {
		p := waiting()
		req := refusedReq()
		change(&req)
		if f, _, ok := p.Take(req, t0.Add(time.Second)); ok {
			t.Errorf("%s differs: taken (fence %d); want no take", name, f)
		}
		if p.Grant != 11 || !p.Owes() {
			t.Errorf("%s differs: place %+v after the refused take; want the grant kept, owed", name, p)
		}
	}
	p := waiting()
	req := refusedReq()
	req.Wait = time.Second
	fence, left, ok := p.Take(req, t0.Add(time.Second))
	if !ok || fence != 11 || left != 59*time.Second {
		t.Fatalf("the refused request = %d, %v, %v; want fence 11 with 59s left", fence, left, ok)
	}
	if p.Owes() || p.Queued || p.Grant != 0 || p.Floor != 11 {
		t.Fatalf("after the take %+v; want nothing owed, floor 11", p)
	}
	if _, _, ok := p.Take(req, t0.Add(time.Second)); ok {
		t.Fatal("taken twice")
	}
}

// TestTakeOnlyWithinHalfTheTTL: a wait of TTL/MaxTakeAge or more, or a clock that went back,
// takes nothing; the zero Sent (a try that raised fences) takes nothing.
func TestTakeOnlyWithinHalfTheTTL(t *testing.T) {
	for _, at := range []time.Time{t0.Add(30 * time.Second), t0.Add(time.Hour), t0.Add(-time.Second)} {
		p := waiting()
		if _, _, ok := p.Take(refusedReq(), at); ok {
			t.Errorf("taken at %v after the try", at.Sub(t0))
		}
	}
	p := waiting()
	if _, _, ok := p.Take(refusedReq(), t0.Add(30*time.Second-time.Nanosecond)); !ok {
		t.Error("not taken just under TTL/2")
	}
	var q Place
	q.Refused(10, Sent{})
	q.Granted(11)
	if _, _, ok := q.Take(refusedReq(), t0); ok {
		t.Error("taken with no sent try")
	}
}

// TestPlaceKeepsOnlyFreshGrants: grants at or below the floor are stale and wake nobody; a
// refusal drops a grant at or below its floor; a try's grant takes the place and grants up to
// its fence; a release leaves nothing to take.
func TestPlaceKeepsOnlyFreshGrants(t *testing.T) {
	var p Place
	p.Refused(10, Sent{At: t0, Req: refusedReq()})
	if p.Granted(10) || p.Granted(9) || p.Grant != 0 {
		t.Fatalf("stale grants kept: %+v", p)
	}
	if !p.Granted(12) || p.Granted(12) || p.Grant != 12 {
		t.Fatalf("grant 12, then again: %+v; want news once", p)
	}
	if p.Granted(11); p.Grant != 12 {
		t.Fatalf("grant 11 after 12: %+v; want 12 kept", p)
	}
	p.Refused(12, Sent{At: t0, Req: refusedReq()})
	if p.Grant != 0 || !p.Queued || !p.Owes() {
		t.Fatalf("after a refusal at 12: %+v; want queued, grant dropped", p)
	}
	p.Granted(14)
	p.Found(13)
	if p.Queued || p.Floor != 13 || p.Grant != 14 || !p.Owes() {
		t.Fatalf("found 13 with 14 heard of: %+v; want 14 kept, owed", p)
	}
	p.Found(14)
	if p.Grant != 0 || p.Owes() {
		t.Fatalf("found 14: %+v; want nothing owed", p)
	}
	p.Granted(20)
	p.Released()
	if p.Grant != 0 || p.Granted(1<<62) || p.Owes() {
		t.Fatalf("released: %+v; want no grant until the next refusal", p)
	}
}

// TestTriesCountsByHolder: a try in flight is counted until it ends, by id.
func TestTriesCountsByHolder(t *testing.T) {
	var tr Tries
	if tr.Any() || tr.Busy("a") {
		t.Fatal("zero Tries not empty")
	}
	tr.Begin("a")
	tr.Begin("a")
	tr.End("a")
	if !tr.Busy("a") || tr.Busy("b") || !tr.Any() {
		t.Fatal("a's second try not counted")
	}
	tr.End("a")
	if tr.Busy("a") || tr.Any() {
		t.Fatal("a counted after its tries ended")
	}
}
