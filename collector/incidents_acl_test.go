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

// incidentsSelector returns the words of the incident history's selector in
// docs/acl.md: "~lockscope:events:incidents", "+evalsha", ...
func incidentsSelector(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ACL SETUSER lockscope-collector (~lockscope:events:incidents ") {
			continue
		}
		sel := line[strings.Index(line, "(")+1 : strings.LastIndex(line, ")")]
		return strings.Fields(sel)
	}
	t.Fatal("docs/acl.md has no selector line for the incident history")
	return nil
}

// TestIncidentStoreACL: the store writes (past its bound, so that it trims)
// and lists the history with the selector docs/acl.md documents, and fails
// without any one of its permissions. (test/reliability checks the
// selector as a whole beside the collector's other lines.)
func TestIncidentStoreACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	ctx := context.Background()
	words := incidentsSelector(t)
	run := func(user string, sel []string) error {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "resetkeys", "-@all", "("+strings.Join(sel, " ")+")").Err(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw", MaxRetries: -1})
		defer rdb.Close()
		s := NewIncidentStore(rdb, event.DefaultStream, &IncidentOptions{Max: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		start := time.Now().Truncate(time.Millisecond)
		for i := range 3 {
			s.Incident(state.Incident{ID: fmt.Sprintf("stuck:%s:%d", user, i), Kind: state.IncidentStuck, Keys: []string{"k"},
				Start: start.Add(time.Duration(i) * time.Second), Count: 1})
		}
		if err := s.Flush(ctx); err != nil {
			return err
		}
		got, err := s.List(ctx, 0)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0].ID != fmt.Sprintf("stuck:%s:2", user) {
			return fmt.Errorf("history = %+v, want the newest of three (bound 1)", got)
		}
		if ttl := admin.PTTL(ctx, IncidentsKey(event.DefaultStream)).Val(); ttl <= 0 {
			return fmt.Errorf("PTTL = %v, want the history to expire", ttl)
		}
		return nil
	}
	if err := run("documented", words); err != nil {
		t.Fatalf("with the documented selector %q: %v", words, err)
	}
	for i, w := range words {
		sel := append(append([]string(nil), words[:i]...), words[i+1:]...)
		admin.Del(ctx, IncidentsKey(event.DefaultStream))
		if err := run(fmt.Sprint("without-", i), sel); err == nil {
			t.Errorf("still works without %q: the documented selector grants more than needed", w)
		}
	}
}
