package collector

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// repoRoot is the module's root, for the tools and clients the tests run.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Each library's holders are named for it: 60 locks taken with each of
// redislock, redsync (the Go libraries), redis-py (Debian's python3-redis)
// and node-redlock (redlock 4, pinned in tools/foreign), under patterns
// that take nothing but known libraries' tokens for locks: redis-py's
// under '*' (its uuid1 says which library wrote it), the others' random
// tokens under a pattern that names their keys.
// Every one of the 240 is seen held and named by its library (an older rule
// named 2 % of redislock's tokens "foreign"), and the Python client names
// each holder as Go does.
func TestWatchNamesHoldersByLibrary(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	agg, _ := testAgg(t, state.Config{})
	c := startFollower(t, rdb, agg, &Options{Stream: "lockscope:events", Replica: "names", Watch: []string{"rl:*", "rs:*", "nr:*", "*"}})
	waitSynced(t, c, 1)

	const n = 60
	for i := range n {
		if _, err := redislock.New(rdb).Obtain(ctx, "rl:"+strconv.Itoa(i), time.Minute, nil); err != nil {
			t.Fatalf("redislock Obtain: %v", err)
		}
		m := redsync.New(goredis.NewPool(rdb)).NewMutex("rs:"+strconv.Itoa(i), redsync.WithExpiry(time.Minute), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			t.Fatalf("redsync Lock: %v", err)
		}
	}
	root := repoRoot(t)
	py := exec.CommandContext(ctx, "/usr/bin/python3", "-c", fmt.Sprintf(`
import redis
r = redis.Redis(port=%d)
for i in range(%d):
    assert r.lock("py:%%d" %% i, timeout=60).acquire(blocking=False)
`, srv.Port(), n))
	if out, err := py.CombinedOutput(); err != nil {
		t.Fatalf("redis-py (Debian's python3-redis, scripts/deps.sh): %v\n%s", err, out)
	}
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "redlock_take.js"), strconv.Itoa(srv.Port()), "nr:", strconv.Itoa(n))
	node.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(root, "tools", "foreign", "node_modules"))
	if out, err := node.CombinedOutput(); err != nil {
		t.Fatalf("node-redlock (tools/foreign, scripts/deps.sh): %v\n%s", err, out)
	}

	libs := map[string]string{"rl:": "redislock", "rs:": "redsync", "py:": "redis-py", "nr:": "node-redlock"}
	var values []string
	for prefix, lib := range libs {
		for i := range n {
			key := prefix + strconv.Itoa(i)
			value, err := rdb.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			values = append(values, value)
			redistest.WaitFor(t, waitLimit, key+" held", func() bool { return lockInfo(agg, key).Held })
			if got, want := lockInfo(agg, key).Owner, lib+" "+lock.Fingerprint(value)[:8]; got != want {
				t.Errorf("%s (value of %d bytes) held by %q, want %q", key, len(value), got, want)
			}
		}
	}
	// The Python client names every holder as Go does.
	script := `
import sys
from lockscope import value
for line in sys.stdin.read().split("\n"):
    if line:
        print(value.holder_name(line.encode()))
`
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script)
	cmd.Dir = filepath.Join(root, "clients", "python")
	cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 lockscope.value.holder_name: %v", err)
	}
	names := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(names) != len(values) {
		t.Fatalf("Python named %d holders, want %d", len(names), len(values))
	}
	for i, v := range values {
		if names[i] != lock.ForeignOwner(v) {
			t.Errorf("Python names the holder of a %d-byte value %q, Go %q", len(v), names[i], lock.ForeignOwner(v))
		}
	}
}
