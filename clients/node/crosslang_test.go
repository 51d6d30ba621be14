package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// goldenEvents returns the golden events as Go decodes its own encoding of
// them (event/testdata/golden, written by the event package's tests).
func goldenEvents(t *testing.T) []event.Event {
	t.Helper()
	dir := filepath.Join("..", "..", "event", "testdata", "golden")
	b, err := os.ReadFile(filepath.Join(dir, "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Events []json.RawMessage }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	packed, err := os.ReadFile(filepath.Join(dir, "go.packed"))
	if err != nil {
		t.Fatal(err)
	}
	ext, err := os.ReadFile(filepath.Join(dir, "go.ext"))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := event.DecodeBatchExt(nil, string(packed), string(ext), len(doc.Events))
	if err != nil {
		t.Fatalf("go.packed: %v", err)
	}
	return evs
}

// runNode runs a driver to its end and returns its stdout.
func runNode(ctx context.Context, t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := nodeCmd(ctx, t, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

// TestNodeEventsDecodedByGo: what the Node package writes to a real stream,
// packed by its Emitter or one XADD per event, is what Go decodes; its
// locks' values name their holder to Go's lock.Client, and Go's to it.
func TestNodeEventsDecodedByGo(t *testing.T) {
	checkNode(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"

	goLock, err := lock.New(rdb, &lock.Options{Owner: "go/holder"}).Obtain(ctx, prefix+"go-held", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer goLock.Release(ctx)

	out := runNode(ctx, t, "test/drivers/emit_all.js", "--redis", srv.URL(), "--stream", stream, "--prefix", prefix)
	var js struct {
		CycleLease string `json:"cycle_lease"`
		GoHolder   string `json:"go_holder"`
		KeptLease  string `json:"kept_lease"`
	}
	if err := json.Unmarshal(out, &js); err != nil {
		t.Fatalf("emit_all.js printed %q: %v", out, err)
	}

	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	golden := goldenEvents(t)
	if len(msgs) < 1+len(golden) {
		t.Fatalf("%d entries on the stream, want a packed one, %d single ones and the locks'", len(msgs), len(golden))
	}
	packed, err := event.Decode(msgs[0].Values)
	if err != nil {
		t.Fatalf("Decode(the Emitter's packed entry) = %v", err)
	}
	if d := cmp.Diff(golden, packed); d != "" {
		t.Errorf("packed entry written by Node (-want +got):\n%s", d)
	}
	for i, e := range golden {
		m := msgs[1+i]
		got, err := event.Decode(m.Values)
		if err != nil {
			t.Fatalf("Decode(single entry %d, %v) = %v", i, m.Values, err)
		}
		if d := cmp.Diff([]event.Event{e}, got); d != "" {
			t.Errorf("single entry %d written by Node (-want +got):\n%s", i, d)
		}
	}

	var lockEvents []event.Event
	for _, m := range msgs[1+len(golden):] {
		if lockEvents, err = event.DecodeAppend(lockEvents, m.Values); err != nil {
			t.Fatalf("Decode(%s) = %v", m.ID, err)
		}
	}
	type step struct {
		Type              event.Type
		Key, Owner, Lease string
		Holder, Reason    string
		TTL               time.Duration
		Attempts          int
	}
	var got []step
	for _, e := range lockEvents {
		got = append(got, step{e.Type, e.Key, e.Owner, e.Lease, e.Holder, e.Reason, e.TTL, e.Attempts})
	}
	var refusedLease string // the lease the refused call would have held
	if len(got) > 3 {
		refusedLease = got[3].Lease
	}
	if len(refusedLease) != 16 {
		t.Errorf("the refused try's lease %q, want 16 hex digits", refusedLease)
	}
	want := []step{
		{event.Acquired, prefix + "cycle", "node/cycle", js.CycleLease, "", "", 10 * time.Second, 1},
		{Type: event.Renewed, Key: prefix + "cycle", Owner: "node/cycle", Lease: js.CycleLease, TTL: 15 * time.Second},
		{Type: event.Released, Key: prefix + "cycle", Owner: "node/cycle", Lease: js.CycleLease},
		{event.Failed, prefix + "go-held", "node/refused", refusedLease, "go/holder", event.ReasonHeld, 0, 1},
		{event.Acquired, prefix + "node-held", "node/holder", js.KeptLease, "", "", time.Minute, 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("lock events written by Node (-want +got):\n%s", d)
	}
	if len(lockEvents) > 1 {
		if h := lockEvents[1].Headroom; h <= 9*time.Second || h > 10*time.Second {
			t.Errorf("extend renewal headroom = %v, want the 10s TTL less a moment", h)
		}
	}
	if js.GoHolder != "go/holder" {
		t.Errorf("Node named the Go holder %q, want go/holder", js.GoHolder)
	}

	// Go reads the Node holder from its value, as its own.
	h, err := lock.New(rdb, nil).Inspect(ctx, prefix+"node-held")
	if err != nil {
		t.Fatal(err)
	}
	if h.Owner != "node/holder" || h.Lease != js.KeptLease || h.Foreign || h.TTL <= 50*time.Second || time.Since(h.Since) > time.Minute {
		t.Errorf("Inspect(node lock) = %+v, want owner node/holder, lease %s, not foreign, its TTL and since", h, js.KeptLease)
	}
	_, holder, err := lock.New(rdb, nil).Try(ctx, prefix+"node-held", time.Second, nil)
	if !errors.Is(err, lock.ErrNotObtained) || holder == nil || holder.Owner != "node/holder" {
		t.Errorf("Try(node lock) = %v, holder %+v; want refused by node/holder", err, holder)
	}
}

// TestNodeOnCluster: the Emitter given an ioredis Cluster writes each key's
// events to its partition (event.Streams, event.PartitionOf: on the masters
// that own the partitions' slots), every one of them, and Redlock takes and
// releases locks on the Cluster.
func TestNodeOnCluster(t *testing.T) {
	checkNode(t)
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"
	const n, partitions = 300, 3
	locks := []string{prefix + "a", prefix + "b", prefix + "c"}
	out := runNode(ctx, t, "test/drivers/emit_cluster.js", "--seeds", strings.Join(cl.Addrs(), ","), "--stream", stream,
		"--partitions", fmt.Sprint(partitions), "--count", fmt.Sprint(n), "--locks", strings.Join(locks, ","))
	var st struct{ Recorded, Sent, Dropped, Errors int }
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("emit_cluster.js printed %q: %v", out, err)
	}
	if want := n + 2*len(locks); st.Recorded != want || st.Sent != want || st.Dropped != 0 || st.Errors != 0 {
		t.Errorf("emitter stats %+v, want %d recorded and sent, none dropped", st, want)
	}

	seen := map[string]int{} // key -> events
	var lockSteps []string
	for p, s := range event.Streams(stream, partitions) {
		msgs, err := rdb.XRange(ctx, s, "-", "+").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		for _, m := range msgs {
			evs, err := event.Decode(m.Values)
			if err != nil {
				t.Fatalf("%s: Decode(%s) = %v", s, m.ID, err)
			}
			for _, e := range evs {
				if got := event.PartitionOf(e.Key, partitions); got != p {
					t.Errorf("%s's event in partition %d, want %d", e.Key, p, got)
				}
				seen[e.Key]++
				if strings.HasPrefix(e.Key, prefix) {
					lockSteps = append(lockSteps, e.Type.String()+" "+e.Key+" "+e.Owner)
				}
			}
		}
	}
	for i := range n {
		if k := fmt.Sprint("k", i); seen[k] != 1 {
			t.Errorf("%d events of %s on the partitions, want 1", seen[k], k)
		}
	}
	var want []string
	for _, k := range locks {
		want = append(want, "acquired "+k+" node/cluster", "released "+k+" node/cluster")
	}
	slices.Sort(want)
	slices.Sort(lockSteps)
	if d := cmp.Diff(want, lockSteps); d != "" {
		t.Errorf("the Redlock's events on the Cluster, sorted (-want +got):\n%s", d)
	}
}
