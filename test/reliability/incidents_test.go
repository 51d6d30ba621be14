package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// incidentJSON is what replicas must agree on from /api/v1/incidents.
type incidentJSON struct {
	ID      string     `json:"id"`
	Kind    string     `json:"kind"`
	Keys    []string   `json:"keys"`
	Owners  []string   `json:"owners"`
	Start   time.Time  `json:"start"`
	End     *time.Time `json:"end"`
	EndedBy string     `json:"ended_by"`
}

func incidentsOf(ctx context.Context, p *proc) ([]incidentJSON, error) {
	var v struct {
		Incidents []incidentJSON `json:"incidents"`
	}
	err := getJSONCtx(ctx, p.url("/api/v1/incidents?limit=1000"), &v)
	return v.Incidents, err
}

// missingIncidents reports what of want (kind → key) the list lacks.
func missingIncidents(got []incidentJSON, want map[string]string) []string {
	var out []string
	for kind, key := range want {
		if !slices.ContainsFunc(got, func(in incidentJSON) bool {
			return in.Kind == kind && slices.Contains(in.Keys, key) && in.End != nil
		}) {
			out = append(out, kind+" of "+key)
		}
	}
	slices.Sort(out)
	return out
}

// TestReplicasShareIncidents: two serve replicas derive the incidents of the
// same events and write them into one history in Redis: both list the same
// incidents, each once. One replica is SIGKILLed after the incidents and an
// incident happens while it is down; restarted, it lists every one of them,
// the same as the replica that stayed up.
func TestReplicasShareIncidents(t *testing.T) {
	bin := redistest.Lockscope(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := testCtx(t, 3*time.Minute)

	a := startServe(t, bin, srv.URL(), nil)
	b := startServe(t, bin, srv.URL(), nil)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	t.Cleanup(func() { em.Close(context.Background()) })
	app := lock.New(rdb, &lock.Options{Owner: "pod-7", Recorder: em})

	// A holder that dies: its lock expires with nobody renewing it.
	if _, err := app.Obtain(ctx, "inc:dead", 300*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	// A holder that keeps working while its lock is taken from under it:
	// it learns of the loss when it refreshes.
	worker, err := app.Obtain(ctx, "inc:slow", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "inc:slow", "someone else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// An operator releases a lock by force.
	if _, err := app.Obtain(ctx, "inc:hung", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	release := func(key string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, "release", "--redis", srv.URL(), "--reason", "hung export", "--yes", key).CombinedOutput()
		if err != nil {
			t.Fatalf("lockscope release %s: %v\n%s", key, err, out)
		}
	}
	release("inc:hung")
	// The dead holder's lock lapses before the slow worker learns of its loss.
	redistest.WaitFor(t, 30*time.Second, "inc:dead expired", func() bool { return rdb.Exists(ctx, "inc:dead").Val() == 0 })
	if err := worker.Refresh(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Refresh of a lease whose lock was taken = %v, want ErrLost", err)
	}
	if err := em.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{"holder_expired": "inc:dead", "lease_lost": "inc:slow", "forced": "inc:hung"}
	agree := func(what string, want map[string]string, a, b *proc) []incidentJSON {
		t.Helper()
		var la, lb []incidentJSON
		var errA, errB error
		if !redistest.Poll(ctx, func() bool {
			la, errA = incidentsOf(ctx, a)
			lb, errB = incidentsOf(ctx, b)
			return errA == nil && errB == nil && len(missingIncidents(la, want)) == 0 && equalJSON(la, lb)
		}) {
			t.Fatalf("%s: replica a lists %+v (%v; missing %v), b %+v (%v); want both every incident, the same\nlog of b:\n%s",
				what, la, errA, missingIncidents(la, want), lb, errB, tail(b.out.String(), 2000))
		}
		return la
	}
	before := agree("both replicas up", want, a, b)
	seen := map[string]bool{}
	for _, in := range before {
		if seen[in.ID] {
			t.Errorf("incident %s listed twice: %+v", in.ID, before)
		}
		seen[in.ID] = true
	}

	b.kill(t)
	// While b is down, another forced release.
	if _, err := app.Obtain(ctx, "inc:while-down", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := em.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	release("inc:while-down")
	b = startServeOn(t, bin, srv.URL(), b.listen, nil)
	want["forced"] = "inc:while-down"
	after := agree("after b was killed and restarted", want, a, b)
	for _, in := range before {
		if !slices.ContainsFunc(after, func(x incidentJSON) bool { return x.ID == in.ID }) {
			t.Errorf("incident %+v listed before the restart is gone after it", in)
		}
	}
	t.Logf("%d incidents, the same on both replicas", len(after))
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
