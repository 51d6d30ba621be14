package dashboard

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// nestedAt is an acquisition of key by owner under lease, holding held, at.
func nestedAt(key, owner, lease, held string, at time.Time) event.Event {
	return event.Event{Type: event.Acquired, Key: key, Owner: owner, Lease: lease, TS: at.UnixNano(), TTL: time.Minute, Attempts: 1, Reason: held}
}

// /blocking's "Lock order" section and GET /api/v1/lockorder: two services
// took order:* then inventory:* and inventory:* then order:*, never at the
// same time: one inversion with both orders, their owners and example
// keys. invoice:* then ledger:*, always in that order, is an order and no
// inversion; the API of its class says so.
func TestLockOrderSectionAndAPI(t *testing.T) {
	f := newFixture(t, nil)
	p := f.pfx
	now := time.Now()
	f.agg.Apply([]event.Event{
		nestedAt(p+"order:1", "checkout/pod-1", "a1", "", now.Add(-time.Hour)),
		nestedAt(p+"inventory:1", "checkout/pod-1", "a2", "a1", now.Add(-time.Hour)),
		nestedAt(p+"invoice:1", "billing", "i1", "", now.Add(-30*time.Minute)),
		nestedAt(p+"ledger:1", "billing", "i2", "i1", now.Add(-30*time.Minute)),
		nestedAt(p+"inventory:2", "restock/job", "b1", "", now.Add(-time.Minute)),
		nestedAt(p+"order:2", "restock/job", "b2", "b1", now.Add(-time.Minute)),
	})
	f.agg.Tick()

	doc := htmlDoc(t, f.do(t, req{target: "/blocking"}))
	sec := one(t, doc, "lock-order")
	invs := byTestID(sec, "lock-order-inversion")
	if len(invs) != 1 {
		t.Fatalf("inversions shown = %d, want 1:\n%s", len(invs), text(sec))
	}
	var classes []string
	for _, c := range byTestID(invs[0], "inversion-class") {
		classes = append(classes, text(c))
	}
	if want := []string{p + "inventory:*", p + "order:*"}; !slices.Equal(classes, want) {
		t.Errorf("inversion classes = %q, want %q", classes, want)
	}
	orders := byTestID(invs[0], "inversion-order")
	if len(orders) != 2 {
		t.Fatalf("orders of the inversion = %d, want 2", len(orders))
	}
	o0, o1 := strings.Join(strings.Fields(text(orders[0])), " "), strings.Join(strings.Fields(text(orders[1])), " ")
	if !strings.Contains(o0, p+"order:* taken while holding "+p+"inventory:*, once by restock/job") || !strings.Contains(o0, "last 1m00s ago") {
		t.Errorf("first order reads %q, want order:* taken while holding inventory:* by restock/job, a minute ago", o0)
	}
	if !strings.Contains(o1, p+"inventory:* taken while holding "+p+"order:*, once by checkout/pod-1") || !strings.Contains(o1, "last 1h00m ago") {
		t.Errorf("second order reads %q, want inventory:* taken while holding order:* by checkout/pod-1, an hour ago", o1)
	}
	if got := attr(one(t, orders[1], "inversion-from-key"), "title"); got != p+"order:1" {
		t.Errorf("example key of the second order = %q, want %q", got, p+"order:1")
	}
	edges := byTestID(sec, "lock-order-edge")
	inverted := 0
	for _, e := range edges {
		if hasAttr(e, "data-inverted") {
			inverted++
		}
	}
	if len(edges) != 3 || inverted != 2 {
		t.Errorf("order rows = %d (%d reversed too), want 3 (2)", len(edges), inverted)
	}

	type edge struct {
		From, To  string
		Count     int64
		Owners    []string
		FirstSeen time.Time `json:"first_seen"`
		LastSeen  time.Time `json:"last_seen"`
		Example   struct {
			FromKey string `json:"from_key"`
			ToKey   string `json:"to_key"`
		}
		MoreOwners bool `json:"more_owners"`
	}
	type body struct {
		WindowSeconds float64 `json:"window_seconds"`
		Edges         []edge
		Inversions    []struct {
			Classes   []string
			Owners    []string
			Orders    []edge
			FirstSeen time.Time `json:"first_seen"`
			LastSeen  time.Time `json:"last_seen"`
		}
	}
	b := decodeJSON[body](t, f.do(t, req{target: "/api/v1/lockorder"}))
	if len(b.Edges) != 3 || len(b.Inversions) != 1 || b.WindowSeconds != 86400 {
		t.Fatalf("API = %d edges, %d inversions, window %vs; want 3, 1, 86400", len(b.Edges), len(b.Inversions), b.WindowSeconds)
	}
	in := b.Inversions[0]
	if !slices.Equal(in.Classes, classes) || !slices.Equal(in.Owners, []string{"restock/job", "checkout/pod-1"}) || len(in.Orders) != 2 {
		t.Errorf("API inversion = %+v, want classes %q, owners restock/job and checkout/pod-1, two orders", in, classes)
	}
	if o := in.Orders[0]; o.From != p+"inventory:*" || o.To != p+"order:*" || o.Count != 1 || o.Example.FromKey != p+"inventory:2" || o.Example.ToKey != p+"order:2" ||
		!o.LastSeen.Equal(now.Add(-time.Minute).UTC()) {
		t.Errorf("API order = %+v, want inventory:* → order:* once, e.g. inventory:2 → order:2, a minute ago", o)
	}
	if !in.FirstSeen.Equal(now.Add(-time.Minute).UTC()) || !in.LastSeen.Equal(in.FirstSeen) {
		t.Errorf("API inversion first/last seen = %v, %v; want both when the second order closed it", in.FirstSeen, in.LastSeen)
	}

	c := decodeJSON[body](t, f.do(t, req{target: "/api/v1/lockorder?class=" + url.QueryEscape(p+"ledger:*")}))
	if len(c.Edges) != 1 || c.Edges[0].From != p+"invoice:*" || c.Edges[0].Count != 1 || len(c.Inversions) != 0 {
		t.Errorf("API of class ledger:* = %+v, want its one order and no inversion", c)
	}

	// Each class's page carries the same section for its class: the
	// inversion on order:*'s, none on ledger:*'s.
	for class, want := range map[string]int{p + "order:*": 1, p + "ledger:*": 0} {
		rec := f.do(t, req{target: classPath(class)})
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d", classPath(class), rec.Code)
		}
		sec := one(t, one(t, htmlDoc(t, rec), "class-sections"), "lock-order")
		if got := len(byTestID(sec, "lock-order-inversion")); got != want {
			t.Errorf("class page of %s: %d inversions in its lock-order section, want %d:\n%s", class, got, want, text(sec))
		}
	}
}

// Healthy: every pair taken in one order shows its orders and says there
// is no inversion; the section, a component of its own, says so too with
// nothing seen at all.
func TestLockOrderSectionHealthy(t *testing.T) {
	f := newFixture(t, nil)
	p := f.pfx
	now := time.Now()
	var evs []event.Event
	for _, owner := range []string{"billing/1", "billing/2", "billing/3"} {
		evs = append(evs, nestedAt(p+"invoice:1", owner, owner+"o", "", now), nestedAt(p+"ledger:1", owner, owner+"i", owner+"o", now),
			event.Event{Type: event.Released, Key: p + "ledger:1", Owner: owner, Lease: owner + "i", TS: now.UnixNano()},
			event.Event{Type: event.Released, Key: p + "invoice:1", Owner: owner, Lease: owner + "o", TS: now.UnixNano()})
	}
	f.agg.Apply(evs)
	f.agg.Tick()
	doc := htmlDoc(t, f.do(t, req{target: "/blocking"}))
	if got := text(one(t, doc, "lock-order-no-inversion")); !strings.Contains(got, "No inversion") {
		t.Errorf("section says %q, want no inversion", got)
	}
	if n := len(byTestID(doc, "lock-order-inversion")); n != 0 {
		t.Errorf("inversions shown = %d, want 0", n)
	}
	edges := byTestID(doc, "lock-order-edge")
	if len(edges) != 1 || hasAttr(edges[0], "data-inverted") || !strings.Contains(text(edges[0]), "billing/3") {
		t.Errorf("order rows = %d, want one, not reversed, naming its three owners", len(edges))
	}

	empty := renderHTML(t, lockOrderSection(newLockOrderView(state.LockOrder{Window: time.Hour}, "", now)))
	if got := text(one(t, empty, "lock-order-no-inversion")); !strings.Contains(got, "No lock was taken while holding another") {
		t.Errorf("empty section says %q", got)
	}
}
