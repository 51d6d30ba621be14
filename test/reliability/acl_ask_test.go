package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestACLAsk: asking holders to release works with the "Asking holders to
// release" lines of docs/acl.md — an application's holds hear requests and
// leave their channels when they end; `lockscope release --ask` asks and
// records — and each permission of those lines is needed.
func TestACLAsk(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	admin := srv.Client(t)
	doc := readACLDoc(t)
	apps, ops := doc["app"], doc["lockscope-operator"]
	if len(apps) != 2 || len(ops) != 3 {
		t.Fatalf("%s has %d app and %d operator lines, want 2 and 3 (the last of each: asking holders to release)", aclDoc, len(apps), len(ops))
	}
	listeners := func(ctx context.Context, lease string) int64 {
		ch := event.RequestChannel(lease)
		return admin.PubSubNumSub(ctx, ch).Val()[ch]
	}
	// waitUntil polls cond until it holds or ctx ends.
	waitUntil := func(ctx context.Context, what string, cond func() bool) error {
		if !redistest.Poll(ctx, cond) {
			return errors.New(what)
		}
		return nil
	}

	t.Run("application", func(t *testing.T) {
		checkMinimal(t, srv, []aclLine{apps[0], apps[1]}, 1, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, budget time.Duration) error {
			bctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			c := lock.New(rdb, &lock.Options{Owner: user})
			a, err := c.Obtain(ctx, "app:ask:"+user+":a", 30*time.Second, nil)
			if err != nil {
				return err
			}
			defer a.Release(context.Background())
			b, err := c.Obtain(ctx, "app:ask:"+user+":b", 30*time.Second, nil)
			if err != nil {
				return err
			}
			defer b.Release(context.Background())
			asks := a.ReleaseRequested()
			b.ReleaseRequested()
			if err := waitUntil(bctx, "the holds' subscriptions", func() bool { return listeners(ctx, a.ID()) == 1 && listeners(ctx, b.ID()) == 1 }); err != nil {
				return err
			}
			op := lock.New(admin, nil)
			h, err := op.Inspect(ctx, a.Key())
			if err != nil {
				return err
			}
			if _, n, err := op.RequestRelease(ctx, a.Key(), h.Fingerprint, lock.ReleaseRequest{Operator: "op"}); err != nil || n != 1 {
				return fmt.Errorf("RequestRelease = %d, %v", n, err)
			}
			select {
			case <-asks:
			case <-bctx.Done():
				return errors.New("the hold heard no request")
			}
			a.Release(ctx)
			// The ended hold leaves its channel while the other listens on.
			return waitUntil(bctx, "the released hold to leave its channel", func() bool { return listeners(ctx, a.ID()) == 0 && listeners(ctx, b.ID()) == 1 })
		})
	})

	t.Run("operator", func(t *testing.T) {
		checkMinimal(t, srv, []aclLine{ops[0], ops[2]}, 1, false, func(ctx context.Context, t *testing.T, user string, _ *redis.Client, budget time.Duration) error {
			key := "app:ask-op:" + user
			l, err := lock.New(admin, &lock.Options{Owner: "app-1"}).Obtain(ctx, key, 30*time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			asks := l.ReleaseRequested()
			if !redistest.Poll(ctx, func() bool { return listeners(ctx, l.ID()) == 1 }) {
				t.Fatal("the holder never listened")
			}
			go func() {
				select {
				case <-asks:
					l.Release(context.Background())
				case <-ctx.Done():
				}
			}()
			u := (&url.URL{Scheme: "redis", User: url.UserPassword(user, ops[0].password()), Host: srv.Addr(), Path: "/0"}).String()
			var out, errOut bytes.Buffer
			cctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			err = runCLI(cctx, cliEnv{t: t, stdout: &out, stderr: &errOut}, []string{"release", key, "--ask", "--grace", budget.String(),
				"--reason", "acl ask", "--operator-user", "op", "--redis", u})
			if err != nil {
				return fmt.Errorf("lockscope release --ask: %v", err)
			}
			for _, e := range redistest.ReadStream(t, admin, event.DefaultStream).Events {
				if e.Type == event.Requested && e.Key == key && e.By == "op" && e.Count == 1 {
					return nil
				}
			}
			return errors.New("the request is not in the stream")
		})
	})
}
