package held

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/lock"
)

func TestNewValueIsALockValue(t *testing.T) {
	since := time.UnixMilli(1_700_000_000_123)
	v, lease := NewValue("billing/host/7", since)
	got, err := lock.ParseValue(v)
	if err != nil {
		t.Fatalf("ParseValue(%q) = %v", v, err)
	}
	if got.Lease != lease || len(lease) != 16 || len(got.Token) != 22 || !got.Since.Equal(since) || got.Owner != "billing/host/7" {
		t.Errorf("ParseValue(%q) = %+v, want lease %s, a 22-character token, since %v, the owner", v, got, lease, since)
	}
	if v2, lease2 := NewValue("billing/host/7", since); v2 == v || lease2 == lease {
		t.Error("two values alike")
	}
	if h := Holder(v); h != "billing/host/7" {
		t.Errorf("Holder(lockscope value) = %q", h)
	}
	if h := Holder("Zm9vYmFyYmF6cXV4MTIzNA=="); h != lock.ForeignOwner("Zm9vYmFyYmF6cXV4MTIzNA==") || !strings.HasPrefix(h, "redsync ") {
		t.Errorf("Holder(redsync token) = %q", h)
	}
}

func TestLeases(t *testing.T) {
	ctx := context.Background()
	if got := Leases(ctx); got != nil {
		t.Errorf("Leases(empty) = %v", got)
	}
	a, b := true, true
	ctx = With(ctx, "A", func() bool { return a })
	ctx = With(ctx, "B", func() bool { return b })
	if d := cmp.Diff([]string{"B", "A"}, Leases(ctx)); d != "" {
		t.Errorf("Leases, innermost first (-want +got):\n%s", d)
	}
	b = false
	if d := cmp.Diff([]string{"A"}, Leases(ctx)); d != "" {
		t.Errorf("Leases after B's release (-want +got):\n%s", d)
	}
	for i := range 40 {
		ctx = With(ctx, string(rune('a'+i)), func() bool { return true })
	}
	if n := len(Leases(ctx)); n != Max {
		t.Errorf("Leases of 41 held = %d, want at most %d", n, Max)
	}
}

// TestLockStaysFreeOfAdapters: the lock package must not pull redsync or
// redislock in (they live in extra/ so that lock/ stays light).
func TestLockStaysFreeOfAdapters(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/lockscope/lockscope/lock").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "redsync") || strings.Contains(dep, "redislock") || strings.Contains(dep, "/extra/") {
			t.Errorf("lock depends on %s", dep)
		}
	}
	if !strings.Contains(string(out), "github.com/redis/go-redis/v9") {
		t.Errorf("go list -deps lock lists no go-redis: the check looks at the wrong thing:\n%s", out)
	}
}
