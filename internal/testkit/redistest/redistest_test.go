package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedServerAnswersWithNotifications(t *testing.T) {
	s := Shared(t)
	c := s.Client(t)
	ctx := context.Background()
	got, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Redis normalises KEA to "AKE".
	if v := got["notify-keyspace-events"]; len(v) < 3 {
		t.Fatalf("notify-keyspace-events = %q, want keyspace notifications on", v)
	}
	if Shared(t) != s {
		t.Fatal("Shared returned a second server")
	}
}

func TestRestartLosesDataAndComesBack(t *testing.T) {
	s := Start(t, Options{Notify: "none"})
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded with the server stopped")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("Exists(k) after restart = %d, %v; want 0, nil", n, err)
	}
}

func TestClusterSpreadsKeysOverThreeMasters(t *testing.T) {
	cl := StartCluster(t)
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	masters := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatalf("Set(%q) = %v", k, err)
		}
		n, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("keys landed on %d masters, want at least 2 of 3", len(masters))
	}
	var _ redis.UniversalClient = c
}
