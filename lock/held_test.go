package lock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/lock"
)

func TestNewValueIsALockValue(t *testing.T) {
	since := time.UnixMilli(1_700_000_000_123)
	v, lease := lock.NewValue("billing/host/7", since)
	got, err := lock.ParseValue(v)
	if err != nil {
		t.Fatalf("ParseValue(%q) = %v", v, err)
	}
	if got.Lease != lease || len(lease) != 16 || len(got.Token) != 22 || !got.Since.Equal(since) || got.Owner != "billing/host/7" {
		t.Errorf("ParseValue(%q) = %+v, want lease %s, a 22-character token, since %v, the owner", v, got, lease, since)
	}
	if v2, lease2 := lock.NewValue("billing/host/7", since); v2 == v || lease2 == lease {
		t.Error("two values alike")
	}
	if h := lock.HolderName(v); h != "billing/host/7" {
		t.Errorf("HolderName(lockscope value) = %q", h)
	}
	if h := lock.HolderName("Zm9vYmFyYmF6cXV4MTIzNA=="); h != lock.ForeignOwner("Zm9vYmFyYmF6cXV4MTIzNA==") || !strings.HasPrefix(h, "redsync ") {
		t.Errorf("HolderName(redsync token) = %q", h)
	}
	if a, b := lock.NewLeaseID(), lock.NewLeaseID(); len(a) != 16 || a == b {
		t.Errorf("NewLeaseID() = %q, %q; want two different 16-digit ids", a, b)
	}
}

func TestHeldLeases(t *testing.T) {
	ctx := context.Background()
	if got := lock.HeldLeases(ctx); got != nil {
		t.Errorf("HeldLeases(empty) = %v", got)
	}
	a, b := true, true
	ctx = lock.WithHeld(ctx, "A", func() bool { return a })
	ctx = lock.WithHeld(ctx, "B", func() bool { return b })
	if d := cmp.Diff([]string{"B", "A"}, lock.HeldLeases(ctx)); d != "" {
		t.Errorf("HeldLeases, innermost first (-want +got):\n%s", d)
	}
	b = false
	if d := cmp.Diff([]string{"A"}, lock.HeldLeases(ctx)); d != "" {
		t.Errorf("HeldLeases after B's release (-want +got):\n%s", d)
	}
	for i := range 40 {
		ctx = lock.WithHeld(ctx, string(rune('a'+i)), func() bool { return true })
	}
	if n := len(lock.HeldLeases(ctx)); n != lock.MaxHeldLeases {
		t.Errorf("HeldLeases of 41 held = %d, want at most %d", n, lock.MaxHeldLeases)
	}
}
