package peerbench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
)

func TestBoundedGivesUp(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	_, err := bounded(context.Background(), 20*time.Millisecond, func(context.Context) (result, error) {
		<-block
		return result{}, nil
	})
	if !errors.Is(err, errTimeout) {
		t.Fatalf("got %v, want errTimeout", err)
	}
	_, err = bounded(context.Background(), time.Second, func(context.Context) (result, error) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("got %v, want the panic as an error", err)
	}
}

func TestTableRatiosAgainstBestPeer(t *testing.T) {
	ours := newRow(lockers.Lib{Label: "ours"})
	fast := newRow(lockers.Lib{Label: "fast", Peer: true})
	slow := newRow(lockers.Lib{Label: "slow", Peer: true})
	stuck := newRow(lockers.Lib{Label: "stuck", Peer: true})
	ours.cells[colUncontended] = cell{v: 12400, ok: true}
	fast.cells[colUncontended] = cell{v: 10000, ok: true}
	slow.cells[colUncontended] = cell{v: 5000, ok: true}
	stuck.cells[colUncontended] = cell{v: 20000, ok: true, stranded: true}
	ours.cells[colP50] = cell{v: 50, ok: true}
	fast.cells[colP50] = cell{v: 200, ok: true}
	slow.cells[colP50] = cell{v: 100, ok: true}
	stuck.cells[colP50] = cell{text: "timeout"}
	got := table([]*row{ours, fast, slow, stuck}, 16, []column{colUncontended, colP50})
	for _, want := range []string{
		"| ours | 12 400 (1.24×) | 50.0 (0.50×) |",
		"| fast | 10 000 (1.00×) | 200 (2.00×) |",
		"| slow | 5 000 (0.50×) | 100 (1.00×) |",
		"| stuck | 20 000 (2.00×) † | timeout |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
