package collector

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// lockOrderSelector returns the words of the lock-order graph's selector
// in docs/acl.md: "~lockscope:events:lockorder", "+evalsha", ...
func lockOrderSelector(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ACL SETUSER lockscope-collector (~lockscope:events:lockorder ") {
			continue
		}
		return strings.Fields(line[strings.Index(line, "(")+1 : strings.LastIndex(line, ")")])
	}
	t.Fatal("docs/acl.md has no selector line for the lock-order graph")
	return nil
}

// TestLockOrderStoreACL: the store writes (twice, so that records merge,
// and past its bound, so that it trims) and reads the graph with the
// selector docs/acl.md documents, and fails without any one of its
// permissions.
func TestLockOrderStoreACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	ctx := context.Background()
	words := lockOrderSelector(t)
	now := time.Now().Truncate(time.Millisecond)
	n := state.MaxOrderEdges + state.MaxOrderEdges/4 + 1
	run := func(user string, sel []string) error {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		admin.Del(ctx, LockOrderKey(event.DefaultStream))
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "resetkeys", "-@all", "("+strings.Join(sel, " ")+")").Err(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw", MaxRetries: -1})
		defer rdb.Close()
		s := NewLockOrderStore(rdb, event.DefaultStream, &LockOrderOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		for round := range 2 {
			es := make([]state.OrderEdge, 0, n)
			for i := range n {
				at := now.Add(-time.Duration(n-i) * time.Second)
				es = append(es, state.OrderEdge{From: fmt.Sprintf("c%d:*", i), To: "z:*", Count: int64(round + 1), FirstSeen: at, LastSeen: at})
			}
			s.LockOrderEdges(es)
			if err := s.Flush(ctx); err != nil {
				return err
			}
		}
		got, err := s.Load(ctx)
		if err != nil {
			return err
		}
		if len(got) != state.MaxOrderEdges || got[0].Count != 2 {
			return fmt.Errorf("graph = %d edges (count %d), want %d merged to count 2", len(got), got[0].Count, state.MaxOrderEdges)
		}
		if ttl := admin.PTTL(ctx, LockOrderKey(event.DefaultStream)).Val(); ttl <= 0 {
			return fmt.Errorf("PTTL = %v, want the graph to expire", ttl)
		}
		return nil
	}
	if err := run("documented", words); err != nil {
		t.Fatalf("with the documented selector %q: %v", words, err)
	}
	for i, w := range words {
		sel := append(append([]string(nil), words[:i]...), words[i+1:]...)
		if err := run(fmt.Sprint("without-", i), sel); err == nil {
			t.Errorf("still works without %q: the documented selector grants more than needed", w)
		}
	}
}
