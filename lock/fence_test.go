package lock

import (
	"context"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestFencesIncreaseAcrossExpiry(t *testing.T) {
	c, rdb, _, p := newClient(t, "f")
	key := p + "k"
	ctx := context.Background()
	fenced := &ObtainOptions{Fencing: true}
	var last int64
	for i := range 3 {
		l := mustObtain(t, c, key, 50*time.Millisecond, fenced)
		if l.Fence() <= last {
			t.Fatalf("obtain %d: fence %d, want > previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		redistest.WaitFor(t, 15*time.Second, "lock expired", func() bool { return rdb.Exists(ctx, key).Val() == 0 })
	}
	// Released locks too, in quick succession.
	for i := range 5 {
		l := mustObtain(t, c, key, time.Second, fenced)
		if l.Fence() <= last {
			t.Fatalf("quick obtain %d: fence %d, want > previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ttl := rdb.TTL(ctx, FenceKey(key)).Val(); ttl != -1 {
		t.Errorf("TTL of the fence counter = %v, want -1 (never expires)", ttl)
	}
	if h := mustObtain(t, c, key, time.Second, nil); h.Fence() != 0 {
		t.Errorf("unfenced obtain Fence() = %d, want 0", h.Fence())
	}
}

// TestFencesIncreaseAcrossRestart restarts a Redis that persists nothing:
// the counter is gone, and the next fence must still be larger.
func TestFencesIncreaseAcrossRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	rdb := srv.Client(t)
	c := New(rdb, nil)
	ctx := context.Background()
	key := "job:restart"
	fenced := &ObtainOptions{Fencing: true}
	var last int64
	for range 50 { // push the counter as far ahead of the clock as we can
		l := mustObtain(t, c, key, time.Second, fenced)
		last = l.Fence()
		l.Release(ctx)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, FenceKey(key)).Val(); n != 0 {
		t.Fatalf("fence counter survived the restart (%d), the test proves nothing", n)
	}
	var l *Lease
	redistest.WaitFor(t, 15*time.Second, "obtain after restart", func() bool {
		var err error
		l, err = c.Obtain(ctx, key, time.Second, fenced)
		return err == nil
	})
	if l.Fence() <= last {
		t.Errorf("fence after restart = %d, want > %d (before restart)", l.Fence(), last)
	}
}

func TestSlotTagsCoverEverySlot(t *testing.T) {
	for s := range 16384 {
		tag := slotTag(s)
		if tag == "" || Slot(tag) != s {
			t.Fatalf("slotTag(%d) = %q with slot %d", s, tag, Slot(tag))
		}
	}
}
