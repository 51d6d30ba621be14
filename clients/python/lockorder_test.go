package python

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// lockOrderBody is what the tests read of GET /api/v1/lockorder.
type lockOrderBody struct {
	Edges []struct {
		From, To string
		Count    int64
		Owners   []string
	}
	Inversions []struct {
		Classes []string
		Owners  []string
		Orders  []struct {
			From, To string
			Owners   []string
			Example  struct {
				FromKey string `json:"from_key"`
				ToKey   string `json:"to_key"`
			}
		}
	}
}

// TestLockOrderFromPython: the same as the Go services' test, with the
// Python package. py-a takes order:* then inventory:* in nested with
// blocks; later py-b takes inventory:* then order:* in asyncio (the inner
// lock in a task created while holding the outer); nobody ever waits. The
// real serve reports the inversion with both orders and their owners.
// invoice:* then ledger:*, taken by two Python services (one of each kind)
// in one order, is one edge and no inversion.
func TestLockOrderFromPython(t *testing.T) {
	checkPython(t)
	srv := redistest.Start(t, redistest.Options{})
	sv := startServe(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	take := func(owner, first, second string, async bool) {
		t.Helper()
		args := []string{"tests/drivers/ordered.py", "--redis", srv.URL(), "--owner", owner, "--first", first, "--second", second}
		if async {
			args = append(args, "--asyncio")
		}
		p := startPython(ctx, t, args...)
		p.expect(t, "done", 30*time.Second)
		p.wait(t, 30*time.Second)
	}
	take("billing-sync", "invoice:1", "ledger:1", false)
	take("billing-async", "invoice:2", "ledger:2", true)
	take("py-a", "order:1", "inventory:1", false)
	var lo lockOrderBody
	redistest.WaitFor(t, 10*time.Second, "the two orders in /api/v1/lockorder", func() bool {
		sv.Get("/api/v1/lockorder", &lo)
		return len(lo.Edges) == 2
	})
	if len(lo.Inversions) != 0 || sv.Metric("lockscope_lock_order_inversions", nil) != 0 {
		t.Errorf("inversions with every order taken one way = %+v, want none", lo.Inversions)
	}

	take("py-b", "inventory:2", "order:2", true)
	redistest.WaitFor(t, 10*time.Second, "the inversion in /api/v1/lockorder", func() bool {
		sv.Get("/api/v1/lockorder", &lo)
		return len(lo.Inversions) == 1
	})
	in := lo.Inversions[0]
	if !slices.Equal(in.Classes, []string{"inventory:*", "order:*"}) || !slices.Equal(in.Owners, []string{"py-b", "py-a"}) || len(in.Orders) != 2 {
		t.Fatalf("inversion = %+v, want inventory:* ⇄ order:* by py-b and py-a", in)
	}
	if o := in.Orders[0]; o.Example.FromKey != "inventory:2" || o.Example.ToKey != "order:2" {
		t.Errorf("py-b's order = %+v, want e.g. inventory:2 → order:2 (its asyncio task held the outer lock)", o)
	}
	if o := in.Orders[1]; o.Example.FromKey != "order:1" || o.Example.ToKey != "inventory:1" {
		t.Errorf("py-a's order = %+v, want e.g. order:1 → inventory:1", o)
	}
	redistest.WaitFor(t, 5*time.Second, "lockscope_lock_order_inversions 1", func() bool {
		return sv.Metric("lockscope_lock_order_inversions", nil) == 1
	})
	var ledger lockOrderBody
	sv.Get("/api/v1/lockorder?class="+url.QueryEscape("ledger:*"), &ledger)
	if len(ledger.Edges) != 1 || ledger.Edges[0].Count != 2 || !slices.Equal(ledger.Edges[0].Owners, []string{"billing-sync", "billing-async"}) || len(ledger.Inversions) != 0 {
		t.Errorf("/api/v1/lockorder?class=ledger:* = %+v, want one order, taken twice by both services, no inversion", ledger)
	}
}
