package dashboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestKeyPageHeadroom: the holder card shows the last and the least
// headroom of the hold's renewals, marked when the least was under a
// quarter of the TTL; the API carries both in seconds.
func TestKeyPageHeadroom(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()

	// A real lease renewed twice: the figures are the lease's own.
	key := f.pfx + "report:1"
	l := f.obtain(t, key, "reporter/host/1", 10*time.Second, false)
	if err := l.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	h1 := l.Headroom()
	// The second renewal later than the first: 20 ms of its TTL gone.
	redistest.WaitFor(t, 10*time.Second, "20ms of the refreshed TTL gone", func() bool {
		return f.rdb.PTTL(ctx, key).Val() < 10*time.Second-20*time.Millisecond
	})
	if err := l.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	h2 := l.Headroom()
	doc := htmlDoc(t, f.do(t, req{target: keyPath(key)}))
	want := "last " + headroomDuration(h2) + " · least " + headroomDuration(min(h1, h2)) + " of 10s"
	hd := one(t, doc, "holder-headroom")
	if got := text(hd); got != want {
		t.Errorf("holder headroom = %q, want %q", got, want)
	}
	if strings.Contains(attr(hd, "class"), "bad") {
		t.Errorf("headroom of a lease renewed early marked at risk (class %q)", attr(hd, "class"))
	}

	// A scripted hold whose renewal came with 5 s of a 30 s TTL left.
	risky := f.pfx + "job:2"
	now := time.Now()
	f.agg.Apply([]event.Event{
		{Type: event.Acquired, Key: risky, Owner: "worker-2", Lease: "L2", TS: now.Add(-40 * time.Second).UnixNano(), TTL: 30 * time.Second, Attempts: 1},
		{Type: event.Renewed, Key: risky, Owner: "worker-2", Lease: "L2", TS: now.Add(-15 * time.Second).UnixNano(), TTL: 30 * time.Second, Headroom: 5 * time.Second},
		{Type: event.Renewed, Key: risky, Owner: "worker-2", Lease: "L2", TS: now.Add(-5 * time.Second).UnixNano(), TTL: 30 * time.Second, Headroom: 20 * time.Second},
	})
	doc = htmlDoc(t, f.do(t, req{target: keyPath(risky)}))
	hd = one(t, doc, "holder-headroom")
	if got := text(hd); got != "last 20s · least 5s of 30s" {
		t.Errorf("holder headroom = %q, want %q", got, "last 20s · least 5s of 30s")
	}
	if !strings.Contains(attr(hd, "class"), "bad") {
		t.Errorf("headroom under a quarter of the TTL not marked (class %q)", attr(hd, "class"))
	}
	var found bool
	for _, row := range byTestID(doc, "event-row") {
		if strings.Contains(text(row), "headroom 5s") {
			found = true
		}
	}
	if !found {
		t.Error("no recent event row says \"headroom 5s\"")
	}
	api := decodeJSON[apiLockDetail](t, f.do(t, req{target: apiLockPath(risky)}))
	if api.LastHeadroom == nil || api.MinHeadroom == nil || *api.LastHeadroom != 20 || *api.MinHeadroom != 5 {
		t.Errorf("API headroom last, min = %v, %v, want 20, 5", api.LastHeadroom, api.MinHeadroom)
	}
	if len(api.Recent) == 0 || api.Recent[0].Headroom != 20 {
		t.Errorf("API newest event headroom = %+v, want 20", api.Recent)
	}
}
