package collector

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// long returns a string of n bytes that begins with tag and i.
func long(tag string, i, n int) string {
	s := fmt.Sprintf("%s%06d", tag, i)
	return s + strings.Repeat("x", n-len(s))
}

// TestIncidentStoreRecordBudget: the forced release of 50 keys of 512
// bytes by an owner and operator of 256 bytes with a 512-byte reason, as
// two replicas derive it (each half of the keys, other owners), is stored
// within incidentRecordMax: the keys and owners that fit, in order, the
// count of all. A small record is stored whole.
func TestIncidentStoreRecordBudget(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	a, b := NewIncidentStore(rdb, stream, nil), NewIncidentStore(rdb, stream, nil)
	start := time.Now().Truncate(time.Millisecond)
	big := func(from, to int, owner string) state.Incident {
		in := state.Incident{ID: "forced:big", Kind: state.IncidentForced, Owners: []string{owner}, Start: start, End: start,
			EndedBy: "forced", Detail: "by " + long("op", 0, 256) + ": " + long("reason", 0, 512), Count: to}
		for i := from; i < to; i++ {
			in.Keys = append(in.Keys, long("key", i, 512))
		}
		return in
	}
	for i := range 25 {
		a.Incident(big(0, 25, long("ownerA", i, 256)))
		b.Incident(big(25, 50, long("ownerB", i, 256)))
	}
	small := state.Incident{ID: "stuck:small", Kind: state.IncidentStuck, Keys: []string{"job:1"}, Owners: []string{"worker-1"},
		Start: start, Detail: "held past 5m", Count: 1}
	a.Incident(small)
	for _, s := range []*IncidentStore{a, b, a} {
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush = %v", err)
		}
	}
	for _, id := range []string{"forced:big", "stuck:small"} {
		if n := rdb.HStrLen(ctx, IncidentsKey(stream), id).Val(); n > incidentRecordMax || n == 0 {
			t.Errorf("HSTRLEN %s = %d, want 1..%d", id, n, incidentRecordMax)
		}
	}
	got, err := b.List(ctx, 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("List = %d incidents, %v; want 2", len(got), err)
	}
	byID := map[string]state.Incident{got[0].ID: got[0], got[1].ID: got[1]}
	f := byID["forced:big"]
	// 512 bytes are 684 in base64, 687 with quotes and comma: 2 fit in the
	// keys' 2 KiB; an owner of 256 bytes costs 347: 2 fit in 1 KiB.
	if len(f.Keys) != 2 || f.Keys[0] != long("key", 0, 512) || f.Keys[1] != long("key", 1, 512) {
		t.Errorf("keys kept = %d (%.12q…), want the first 2", len(f.Keys), f.Keys)
	}
	if len(f.Owners) != 2 || f.Owners[0] != long("ownerA", 0, 256) {
		t.Errorf("owners kept = %d, want 2, the first ownerA000000…", len(f.Owners))
	}
	if f.Count != 50 || len(f.Detail) != incidentDetailMax || !strings.HasPrefix(f.Detail, "by op000000") {
		t.Errorf("count = %d, detail %d bytes; want 50 and %d bytes", f.Count, len(f.Detail), incidentDetailMax)
	}
	if s := byID["stuck:small"]; s.Detail != small.Detail || len(s.Keys) != 1 || len(s.Owners) != 1 || !s.Start.Equal(start) {
		t.Errorf("small record = %+v, want it whole", s)
	}
}

// TestIncidentStoreSurvivesMalformedRecords: values of the hash that are
// not records (not JSON; JSON of other types; a record whose keys are a
// string) neither stop the writes nor keep the hash from its bound: a
// record under a malformed one's id replaces it, a trim drops the others
// first, reads skip them, and each is counted. The healthy records beside
// them are listed as written.
func TestIncidentStoreSurvivesMalformedRecords(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	var bad counter
	s := NewIncidentStore(rdb, stream, &IncidentOptions{Max: 40, Malformed: &bad})
	key := IncidentsKey(stream)
	malformed := map[string]string{
		"stuck:notjson":  "{not json",
		"stuck:array":    `[1,2,3]`,
		"stuck:types":    `{"kind":"stuck","start":"soon","keys":"k"}`,
		"stuck:keysword": `{"kind":"stuck","start":1700000000000,"keys":"abc","owners":{"a":1}}`,
		"stuck:replaced": `{"kind":`,
	}
	for id, v := range malformed {
		rdb.HSet(ctx, key, id, v)
	}
	now := time.Now().Truncate(time.Millisecond)
	s.Incident(state.Incident{ID: "stuck:replaced", Kind: state.IncidentStuck, Keys: []string{"job:r"}, Start: now, Count: 1})
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush over malformed values = %v, want nil", err)
	}
	got, err := s.List(ctx, 0)
	if err != nil || len(got) != 1 || got[0].ID != "stuck:replaced" || got[0].Keys[0] != "job:r" {
		t.Fatalf("List = %+v, %v; want only stuck:replaced, rewritten", got, err)
	}
	// Replaced: 1 (by the write); skipped by the read: the other 4.
	if bad.n.Load() != 5 {
		t.Errorf("malformed counted = %d, want 5", bad.n.Load())
	}
	if _, err := s.List(ctx, 0); err != nil || bad.n.Load() != 5 {
		t.Errorf("after a second read: malformed counted = %d (%v), want still 5 (each once)", bad.n.Load(), err)
	}
	// 60 more records: past 40 + 10 the trim drops the malformed first,
	// then the least recent, down to 40.
	for i := range 60 {
		s.Incident(state.Incident{ID: fmt.Sprintf("lease_lost:%02d", i), Kind: state.IncidentLeaseLost, Keys: []string{fmt.Sprint("k", i)},
			Start: now.Add(time.Duration(i) * time.Second), Count: 1})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if n := rdb.HLen(ctx, key).Val(); n != 40 {
		t.Errorf("HLEN = %d, want 40", n)
	}
	for id := range malformed {
		if id != "stuck:replaced" && rdb.HExists(ctx, key, id).Val() {
			t.Errorf("malformed %s still stored after the trim", id)
		}
	}
	got, _ = s.List(ctx, 0)
	if len(got) != 40 || got[0].ID != "lease_lost:59" || got[39].ID != "lease_lost:20" {
		t.Errorf("List = %d incidents, first %q, want 40 from lease_lost:59 to :20", len(got), got[0].ID)
	}
}

type counter struct{ n atomic.Int64 }

func (c *counter) Inc()          { c.n.Add(1) }
func (c *counter) Add(v float64) { c.n.Add(int64(v)) }

// hgetallCount counts the HGETALL commands a client sends.
type hgetallCount struct{ n atomic.Int64 }

func (h *hgetallCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hgetallCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hgetall" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *hgetallCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestIncidentStoreReadersShareOneRead: 200 concurrent readers cost one
// HGETALL and get the same records; a reader that gives up does not fail
// the others; after the store's own write the next reader reads again, and
// so does the first reader past incidentsFresh.
func TestIncidentStoreReadersShareOneRead(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	var calls hgetallCount
	rdb.AddHook(&calls)
	stream := redistest.KeyPrefix(t) + "events"
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now().Truncate(time.Millisecond)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := NewIncidentStore(rdb, stream, &IncidentOptions{Now: clock})
	for i := range 30 {
		s.Incident(state.Incident{ID: fmt.Sprintf("stuck:%02d", i), Kind: state.IncidentStuck, Keys: []string{fmt.Sprint("k", i)},
			Start: now.Add(time.Duration(i) * time.Second), Count: 1})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.List(canceled, 0); err == nil {
		t.Errorf("List(canceled) = nil error, want the context's")
	}
	var wg sync.WaitGroup
	lens := make([]int, 200)
	for i := range lens {
		wg.Go(func() {
			got, err := s.List(ctx, 10)
			if err != nil {
				t.Errorf("List = %v", err)
			}
			if len(got) > 0 && got[0].ID != "stuck:29" {
				t.Errorf("List()[0] = %q, want stuck:29", got[0].ID)
			}
			lens[i] = len(got)
		})
	}
	wg.Wait()
	for i, n := range lens {
		if n != 10 {
			t.Fatalf("reader %d got %d incidents, want 10", i, n)
		}
	}
	if n := calls.n.Load(); n != 1 {
		t.Errorf("HGETALLs for 201 readers = %d, want 1", n)
	}
	s.Incident(state.Incident{ID: "stuck:30", Kind: state.IncidentStuck, Keys: []string{"k30"}, Start: now.Add(time.Minute), Count: 1})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.List(ctx, 1); len(got) != 1 || got[0].ID != "stuck:30" || calls.n.Load() != 2 {
		t.Errorf("after a write: List = %v with %d HGETALLs, want stuck:30 read anew (2)", got, calls.n.Load())
	}
	s.List(ctx, 1)
	mu.Lock()
	now = now.Add(incidentsFresh)
	mu.Unlock()
	s.List(ctx, 1)
	if n := calls.n.Load(); n != 3 {
		t.Errorf("HGETALLs after incidentsFresh = %d, want 3", n)
	}
}
