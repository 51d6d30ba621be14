package reliability

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestBinaryOnRedisCluster runs every command against a real 3-master
// Cluster, given the URL forms users write for go-redis: one node (found to
// be a Cluster node), or seeds with addr=. load must make no MOVED error,
// serve must see every event and every master's keys, locks must list holders
// of all masters, and release must reach a key on any master.
func TestBinaryOnRedisCluster(t *testing.T) {
	bin := redistest.Lockscope(t)
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()
	oneNode := "redis://" + addrs[0]
	seeds := "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	rdb := cl.Client(t)
	ctx := testCtx(t, 2*time.Minute)

	serve := startServe(t, bin, oneNode, nil, "--watch", "py:*")
	out, err := exec.CommandContext(ctx, bin, "load", "--redis", seeds, "--key-prefix", "cl:", "--scenarios", "payments,inventory,cron",
		"--rate", "200", "--speed", "10", "--duration", "4s", "--report-every", "0", "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("load on the Cluster: %v\n%s", err, out)
	}
	if s := string(out); strings.Contains(s, "MOVED") || !strings.Contains(s, " errors=0 ") || !strings.Contains(s, " dropped=0") {
		t.Errorf("load on the Cluster reported errors:\n%s", s)
	}
	written := func() int64 {
		var n int64
		for _, e := range rdb.XRange(ctx, event.DefaultStream, "-", "+").Val() {
			evs, err := event.Decode(e.Values)
			if err == nil {
				n += int64(len(evs))
			}
		}
		return n
	}()
	if written < 100 {
		t.Fatalf("load wrote %d events to the stream, want hundreds", written)
	}
	if !redistest.Poll(ctx, func() bool {
		v, err := viewOf(ctx, serve)
		return err == nil && v.Ingesting && serve.metrics(ctx, t).sum("lockscope_events_total") >= float64(written)
	}) {
		t.Fatalf("serve on the Cluster applied %v of %d events", serve.metrics(ctx, t).sum("lockscope_events_total"), written)
	}

	// One lock on each master, plus a redis-py style foreign lock watched
	// through keyspace notifications of its master.
	lc := lock.New(rdb, nil)
	var keys []string
	masters := map[string]bool{}
	for i := 0; len(masters) < 3 && i < 1000; i++ {
		k := "held:" + strconv.Itoa(i)
		m, err := rdb.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		owner := m.Options().Addr
		if masters[owner] {
			continue
		}
		masters[owner] = true
		if _, err := lc.Obtain(ctx, k, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 3 {
		t.Fatalf("found keys on %d masters, want 3", len(keys))
	}
	py := "py:job:1"
	if err := rdb.Set(ctx, py, "5f0c6e1aa7e211ef9c2b0242ac120002", time.Minute).Err(); err != nil { // redis-py's uuid1 token
		t.Fatal(err)
	}

	out, err = exec.CommandContext(ctx, bin, "locks", "--redis", seeds, "--json", "held:*").CombinedOutput()
	if err != nil {
		t.Fatalf("locks: %v\n%s", err, out)
	}
	var listed []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &listed); err != nil {
		t.Fatalf("locks --json: %v\n%s", err, out)
	}
	var got []string
	for _, l := range listed {
		got = append(got, l.Key)
	}
	slices.Sort(got)
	if !slices.Equal(got, keys) {
		t.Errorf("locks on the Cluster listed %q, want the holders on all three masters %q", got, keys)
	}

	for _, k := range keys {
		out, err := exec.CommandContext(ctx, bin, "release", "--redis", oneNode, "--reason", "cluster test", "--yes", k).CombinedOutput()
		if err != nil {
			t.Errorf("release %s: %v\n%s", k, err, out)
		}
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s still exists after release", k)
		}
	}
	if !redistest.Poll(ctx, func() bool {
		m := serve.metrics(ctx, t)
		return m.sum("lockscope_forced_releases_total") == 3 && m.sum("lockscope_held_locks", "class", "py:job:*") == 1
	}) {
		m := serve.metrics(ctx, t)
		t.Errorf("serve on the Cluster: forced releases %v, want 3; watched py lock held %v, want 1",
			m.sum("lockscope_forced_releases_total"), m.sum("lockscope_held_locks", "class", "py:job:*"))
	}
}

// TestPartitionedStreamsOnRedisCluster: with --partitions 3, load spreads its
// events over three stream keys that the Cluster puts on three masters, and
// serve (given the same flag) reads all three: every event applied.
func TestPartitionedStreamsOnRedisCluster(t *testing.T) {
	bin := redistest.Lockscope(t)
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()
	url := "redis://" + addrs[1]
	rdb := cl.Client(t)
	ctx := testCtx(t, 2*time.Minute)

	serve := startServe(t, bin, url, nil, "--partitions", "3")
	out, err := exec.CommandContext(ctx, bin, "load", "--redis", url, "--partitions", "3", "--key-prefix", "pt:", "--scenarios", "payments,inventory",
		"--rate", "300", "--duration", "3s", "--report-every", "0", "--log-level", "warn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " dropped=0") {
		t.Fatalf("load --partitions 3: %v\n%s", err, out)
	}
	var written int64
	nodes := map[string]bool{}
	for _, st := range event.Streams(event.DefaultStream, 3) {
		var n int64
		for _, e := range rdb.XRange(ctx, st, "-", "+").Val() {
			if evs, err := event.Decode(e.Values); err == nil {
				n += int64(len(evs))
			}
		}
		if n == 0 {
			t.Errorf("partition %s holds no events", st)
		}
		written += n
		m, err := rdb.MasterForKey(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		nodes[m.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Errorf("the 3 partitions live on %d masters, want 3", len(nodes))
	}
	if !redistest.Poll(ctx, func() bool { return serve.metrics(ctx, t).sum("lockscope_events_total") >= float64(written) }) {
		t.Fatalf("serve --partitions 3 applied %v of %d events", serve.metrics(ctx, t).sum("lockscope_events_total"), written)
	}
	if got := serve.metrics(ctx, t).sum("lockscope_events_total"); got != float64(written) {
		t.Errorf("serve applied %v events, want exactly the %d written", got, written)
	}
}
