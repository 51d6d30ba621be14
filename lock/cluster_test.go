package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/eventrec"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestCluster runs the lock on a real 3-master cluster (started once: it
// takes seconds).
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t).Client(t)
	ctx := context.Background()
	rec := &eventrec.Recorder{}
	c := New(cl, &Options{Owner: "clustered", Recorder: rec})

	t.Run("FenceKey in the key's slot", func(t *testing.T) {
		keys := []string{
			"invoice:17", "{user1}:cart", "job:{42}:run", "a}b", "x{}y", "{}", "}{", "a{b", "{", "}", "",
			"{a}{b}", "a{b}c}d", "a{}{b}", "<script>{x}</script>", "new\nline}", "\xff\xfe}",
		}
		for _, k := range keys {
			fk := FenceKey(k)
			want, err := cl.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			got, err := cl.ClusterKeySlot(ctx, fk).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("slot of FenceKey(%q) = %q: %d, want %d (slot of the key)", k, fk, got, want)
			}
			if int64(Slot(k)) != want {
				t.Errorf("Slot(%q) = %d, want %d", k, Slot(k), want)
			}
		}
		seen := map[string]string{}
		for _, k := range append(keys, "{invoice:17}", "t:{x}", "s:{x}") {
			if prev, dup := seen[FenceKey(k)]; dup {
				t.Errorf("FenceKey(%q) = FenceKey(%q) = %q", k, prev, FenceKey(k))
			}
			seen[FenceKey(k)] = k
		}
	})

	t.Run("obtain refresh release fence across slots", func(t *testing.T) {
		// Keys chosen to land on all three masters, with and without braces.
		keys := []string{"order:1", "order:2", "order:3", "{tenant7}:job", "odd}key", "x{}y", "a{b"}
		nodes := map[string]bool{}
		for _, k := range keys {
			n, err := cl.MasterForKey(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			nodes[n.Options().Addr] = true
		}
		if len(nodes) < 3 {
			t.Fatalf("keys cover %d masters, want 3", len(nodes))
		}
		for _, k := range keys {
			l, err := c.Obtain(ctx, k, time.Second, &ObtainOptions{Fencing: true})
			if err != nil {
				t.Fatalf("Obtain(%q) = %v", k, err)
			}
			if l.Fence() <= 0 {
				t.Errorf("Obtain(%q) fence = %d, want > 0", k, l.Fence())
			}
			if _, h, err := c.Try(ctx, k, time.Second, nil); !errors.Is(err, ErrNotObtained) || h.Lease != l.ID() {
				t.Errorf("Try(%q) on held = %v, %+v, want ErrNotObtained naming lease %s", k, err, h, l.ID())
			}
			if err := l.Refresh(ctx, time.Minute); err != nil {
				t.Errorf("Refresh(%q) = %v", k, err)
			}
			if d, err := l.TTL(ctx); err != nil || d < 59*time.Second {
				t.Errorf("TTL(%q) after Refresh = %v, %v, want ~1m", k, d, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release(%q) = %v", k, err)
			}
			l2, err := c.Obtain(ctx, k, time.Second, &ObtainOptions{Fencing: true})
			if err != nil {
				t.Fatalf("second Obtain(%q) = %v", k, err)
			}
			if l2.Fence() <= l.Fence() {
				t.Errorf("second fence of %q = %d, want > %d", k, l2.Fence(), l.Fence())
			}
			h, err := c.Inspect(ctx, k)
			if err != nil || h.Lease != l2.ID() || h.Fence != l2.Fence() {
				t.Errorf("Inspect(%q) = %+v, %v, want lease %s fence %d", k, h, err, l2.ID(), l2.Fence())
			}
			if _, err := c.ForceRelease(ctx, k, h.Fingerprint, "op", "test"); err != nil {
				t.Errorf("ForceRelease(%q) = %v", k, err)
			}
		}
	})

	t.Run("concurrent callers share pipelines across nodes", func(t *testing.T) {
		done := make(chan error, 30)
		for i := range 30 {
			go func() {
				key := "c:" + string(rune('a'+i))
				for range 10 {
					l, err := c.Obtain(ctx, key, time.Second, nil)
					if err != nil {
						done <- err
						return
					}
					if err := l.Release(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
		for range 30 {
			if err := <-done; err != nil {
				t.Errorf("cycle on the cluster: %v", err)
			}
		}
	})
}
