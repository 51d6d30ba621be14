package python

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

// TestPythonEventsDecodedByGo: what the Python package writes to a real
// stream, packed by its Emitter or one XADD per event, is what Go decodes;
// its locks' values name their holder to Go's lock.Client, and Go's to it.
func TestPythonEventsDecodedByGo(t *testing.T) {
	checkPython(t)
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

	cmd := pythonCmd(ctx, t, "tests/drivers/emit_all.py", "--redis", srv.URL(), "--stream", stream,
		"--golden", filepath.Join("..", "..", "event", "testdata", "golden", "events.json"), "--prefix", prefix)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("emit_all.py: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var py struct {
		CycleLease string `json:"cycle_lease"`
		GoHolder   string `json:"go_holder"`
		KeptLease  string `json:"kept_lease"`
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatalf("emit_all.py printed %q: %v", out, err)
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
		t.Errorf("packed entry written by Python (-want +got):\n%s", d)
	}
	for i, e := range golden {
		m := msgs[1+i]
		got, err := event.Decode(m.Values)
		if err != nil {
			t.Fatalf("Decode(single entry %d, %v) = %v", i, m.Values, err)
		}
		if d := cmp.Diff([]event.Event{e}, got); d != "" {
			t.Errorf("single entry %d written by Python (-want +got):\n%s", i, d)
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
	want := []step{
		{event.Acquired, prefix + "cycle", "py/cycle", py.CycleLease, "", "", 10 * time.Second, 1},
		{Type: event.Renewed, Key: prefix + "cycle", Owner: "py/cycle", Lease: py.CycleLease, TTL: got[1].TTL},
		{Type: event.Renewed, Key: prefix + "cycle", Owner: "py/cycle", Lease: py.CycleLease, TTL: 10 * time.Second},
		{Type: event.Released, Key: prefix + "cycle", Owner: "py/cycle", Lease: py.CycleLease},
		{event.Failed, prefix + "go-held", "py/refused", got[4].Lease, "go/holder", event.ReasonHeld, 0, 1},
		{event.Acquired, prefix + "py-held", "py/holder", py.KeptLease, "", "", time.Minute, 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("lock events written by Python (-want +got):\n%s", d)
	}
	if got[1].TTL <= 14*time.Second || got[1].TTL > 15*time.Second {
		t.Errorf("extend(5) renewal TTL = %v, want what was left plus 5s", got[1].TTL)
	}
	if h := lockEvents[1].Headroom; h <= 9*time.Second || h > 10*time.Second {
		t.Errorf("extend(5) renewal headroom = %v, want the 10s TTL less a moment", h)
	}
	if h := lockEvents[2].Headroom; h <= 14*time.Second || h > 15*time.Second {
		t.Errorf("reacquire renewal headroom = %v, want the 15s TTL less a moment", h)
	}
	if py.GoHolder != "go/holder" {
		t.Errorf("Python named the Go holder %q, want go/holder", py.GoHolder)
	}

	// Go reads the Python holder from its value, as its own.
	h, err := lock.New(rdb, nil).Inspect(ctx, prefix+"py-held")
	if err != nil {
		t.Fatal(err)
	}
	if h.Owner != "py/holder" || h.Lease != py.KeptLease || h.Foreign || h.TTL <= 50*time.Second || time.Since(h.Since) > time.Minute {
		t.Errorf("Inspect(python lock) = %+v, want owner py/holder, lease %s, not foreign, its TTL and since", h, py.KeptLease)
	}
	_, holder, err := lock.New(rdb, nil).Try(ctx, prefix+"py-held", time.Second, nil)
	if !errors.Is(err, lock.ErrNotObtained) || holder == nil || holder.Owner != "py/holder" {
		t.Errorf("Try(python lock) = %v, holder %+v; want refused by py/holder", err, holder)
	}
}
