package state

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockscope/lockscope/event"
)

// refOrder is the documented order of q over infos, by sorting everything:
// the figure of q.Sort (then total hold for SortHold) descending, or
// ascending with q.Asc, ties by key ascending; SortKey is by key ascending.
// clock is the event clock the aggregator measures current holds against.
func refOrder(infos []LockInfo, q LockQuery, clock time.Time) []string {
	type row struct {
		key  string
		a, b int64
	}
	var rows []row
	for _, l := range infos {
		if q.Class != "" && l.Class != q.Class || q.HeldOnly && !l.Held {
			continue
		}
		if q.Owner != "" && l.Owner != q.Owner {
			continue
		}
		if q.Search != "" && !strings.Contains(l.Key, q.Search) && !strings.Contains(l.Owner, q.Search) {
			continue
		}
		r := row{key: l.Key}
		switch q.Sort {
		case SortWait:
			r.a = int64(l.WaitTotal)
		case SortHold:
			r.a, r.b = int64(l.HeldFor(clock)), int64(l.HoldTotal)
		case SortKey:
		default:
			r.a = l.Contentions
		}
		rows = append(rows, r)
	}
	dir := -1
	if q.Asc {
		dir = 1
	}
	slices.SortFunc(rows, func(x, y row) int {
		if q.Sort != SortKey {
			if c := cmp.Compare(x.a, y.a); c != 0 {
				return dir * c
			}
			if c := cmp.Compare(x.b, y.b); c != 0 {
				return dir * c
			}
		}
		return strings.Compare(x.key, y.key)
	})
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.key
	}
	return out
}

// allInfos returns every tracked key's LockInfo, through Lock.
func allInfos(t *testing.T, a *Aggregator, keys []string) []LockInfo {
	t.Helper()
	var out []LockInfo
	for _, k := range keys {
		d, ok := a.Lock(k)
		if !ok {
			t.Fatalf("Lock(%q) unknown", k)
		}
		out = append(out, d.LockInfo)
	}
	return out
}

func pageKeys(p LockPage) []string {
	out := make([]string, len(p.Locks))
	for i, l := range p.Locks {
		out[i] = l.Key
	}
	return out
}

var allSorts = []LockQuery{
	{Sort: SortContentions}, {Sort: SortContentions, Asc: true},
	{Sort: SortWait}, {Sort: SortWait, Asc: true},
	{Sort: SortHold}, {Sort: SortHold, Asc: true},
	{Sort: SortKey}, {Sort: SortKey, Asc: true},
}

// TestLocksTiesByKey gives every key the same figures, so the order is the
// key order alone: keys that share their first 8 bytes (the prefix the
// scan compares first), shorter keys, NUL and 0xff bytes, the empty key.
func TestLocksTiesByKey(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	keys := []string{"", "a", "ab", "ab\x00", "ab\x00\x00", "ab\x01", "abcdefgh", "abcdefgh\x00", "abcdefgha",
		"abcdefghb", "abcdefgg\xff", "abcdefgi", "\xff", "\xff\xff\xff\xff\xff\xff\xff\xff\xff", "<script>", "a/b?c%d"}
	var evs []event.Event
	for i, k := range keys {
		lease := fmt.Sprint("l", i)
		evs = append(evs, acquired(k, "o", lease, 0, time.Millisecond, 2, time.Minute),
			ended(event.Released, k, "o", lease, time.Second, time.Second, ""))
	}
	a.Apply(evs)
	want := slices.Clone(keys)
	slices.Sort(want)
	for _, q := range allSorts {
		if got := pageKeys(a.Locks(q)); !slices.Equal(got, want) {
			t.Errorf("Locks(%+v) = %q, want %q (all tied: by key)", q, got, want)
		}
		// Every page size and offset gives the same order, page by page.
		for limit := 1; limit <= len(keys)+1; limit++ {
			var got []string
			for off := 0; off < len(keys)+2; off += limit {
				q := q
				q.Offset, q.Limit = off, limit
				p := a.Locks(q)
				if p.Total != len(keys) {
					t.Fatalf("Locks(%+v).Total = %d, want %d", q, p.Total, len(keys))
				}
				got = append(got, pageKeys(p)...)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Locks(%+v) paged by %d = %q, want %q", q, limit, got, want)
			}
		}
	}
}

// TestLocksMatchesFullSort checks pages against a full sort on 3 000 keys
// with many ties, at offsets and limits that take both selection paths
// (bounded heap near the front, quickselect further in), with filters.
func TestLocksMatchesFullSort(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3000
	keys := make([]string, n)
	var evs []event.Event
	for i := range keys {
		// Shared prefixes on purpose: many keys tie on their first 8 bytes.
		keys[i] = fmt.Sprintf("%s:%d", []string{"orders:eu", "orders:us", "cart", "x"}[i%4], rng.IntN(n*10))
		keys[i] += fmt.Sprint("/", i)
		owner := fmt.Sprint("owner-", rng.IntN(7))
		lease := fmt.Sprint("l", i)
		at := time.Duration(rng.IntN(50)) * time.Second
		evs = append(evs, acquired(keys[i], owner, lease, at, time.Duration(rng.IntN(4))*time.Millisecond, 1+rng.IntN(3), time.Hour))
		if rng.IntN(3) > 0 {
			evs = append(evs, ended(event.Released, keys[i], owner, lease, at+time.Second, time.Duration(rng.IntN(3))*time.Second, ""))
		}
	}
	clk.Set(aggT0.Add(time.Minute))
	a.Apply(evs)
	var newestTS int64
	for _, e := range evs {
		newestTS = max(newestTS, e.TS)
	}
	newest := time.Unix(0, newestTS) // the event clock holds are measured against
	infos := allInfos(t, a, keys)
	filters := []LockQuery{{}, {HeldOnly: true}, {Class: "orders:eu:*"}, {Search: "owner-3"}, {Search: "7/"},
		{Class: "cart:*", HeldOnly: true, Search: "1"}, {Owner: "owner-3", HeldOnly: true}, {Owner: "owner-"}}
	for _, f := range filters {
		for _, s := range allSorts {
			q := f
			q.Sort, q.Asc = s.Sort, s.Asc
			want := refOrder(infos, q, newest)
			for _, off := range []int{0, 1, 7, 49, 100, 333, 1499, len(want) - 1, len(want), len(want) + 5, 5000} {
				for _, limit := range []int{1, 50, 500} {
					q.Offset, q.Limit = off, limit
					p := a.Locks(q)
					if p.Total != len(want) {
						t.Fatalf("Locks(%+v).Total = %d, want %d", q, p.Total, len(want))
					}
					w := want[min(max(off, 0), len(want)):min(off+limit, len(want))]
					if got := pageKeys(p); !slices.Equal(got, w) && !(len(got) == 0 && len(w) == 0) {
						t.Fatalf("Locks(%+v) = %q, want %q", q, got, w)
					}
				}
			}
		}
	}
}

// TestLocksEdges covers empty and out-of-range queries.
func TestLocksEdges(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	if p := a.Locks(LockQuery{}); p.Total != 0 || len(p.Locks) != 0 {
		t.Errorf("Locks on an empty aggregator = %+v, want nothing", p)
	}
	a.Apply([]event.Event{acquired("e:1", "A", "L", 0, 0, 1, time.Minute), acquired("e:2", "B", "M", 0, 0, 2, time.Minute)})
	for _, tc := range []struct {
		q     LockQuery
		total int
		keys  []string
	}{
		{LockQuery{Offset: 2}, 2, nil},
		{LockQuery{Offset: 1 << 40}, 2, nil},
		{LockQuery{Offset: -5, Limit: -1}, 2, []string{"e:2", "e:1"}},
		{LockQuery{Class: "nope:*"}, 0, nil},
		{LockQuery{Class: "e:*", Search: "B"}, 1, []string{"e:2"}},
		{LockQuery{Search: "e:1", HeldOnly: true}, 1, []string{"e:1"}},
		{LockQuery{Search: "zzz"}, 0, nil},
	} {
		p := a.Locks(tc.q)
		if got := pageKeys(p); p.Total != tc.total || !slices.Equal(got, tc.keys) && len(got)+len(tc.keys) > 0 {
			t.Errorf("Locks(%+v) = %q of %d, want %q of %d", tc.q, got, p.Total, tc.keys, tc.total)
		}
	}
}

// TestLocksByOwner: Owner matches the owner exactly (no substring, no
// prefix), and with HeldOnly lists what one owner holds now: not the keys
// it released, nor those another took from it.
func TestLocksByOwner(t *testing.T) {
	a, _ := newTestAggregator(t, Config{})
	a.Apply([]event.Event{
		acquired("job:1", "pod-7", "L1", 0, 0, 1, time.Minute),
		acquired("job:2", "pod-7", "L2", 0, 0, 1, time.Minute),
		acquired("job:3", "pod-70", "L3", 0, 0, 1, time.Minute),
		acquired("job:4", "pod-7", "L4", 0, 0, 1, time.Minute),
		ended(event.Released, "job:4", "pod-7", "L4", time.Second, time.Second, ""),
		acquired("job:5", "pod-7", "L5", 0, 0, 1, time.Minute),
		ended(event.Released, "job:5", "pod-7", "L5", time.Second, time.Second, ""),
		acquired("job:5", "pod-8", "L6", 2*time.Second, 0, 1, time.Minute),
	})
	for _, tc := range []struct {
		q    LockQuery
		keys []string
	}{
		{LockQuery{Owner: "pod-7", HeldOnly: true, Sort: SortKey}, []string{"job:1", "job:2"}},
		{LockQuery{Owner: "pod-7", Sort: SortKey}, []string{"job:1", "job:2", "job:4"}},
		{LockQuery{Owner: "pod-70", HeldOnly: true}, []string{"job:3"}},
		{LockQuery{Owner: "pod-", HeldOnly: true}, nil},
	} {
		p := a.Locks(tc.q)
		if got := pageKeys(p); p.Total != len(tc.keys) || !slices.Equal(got, tc.keys) && len(got)+len(tc.keys) > 0 {
			t.Errorf("Locks(%+v) = %q of %d, want %q", tc.q, got, p.Total, tc.keys)
		}
	}
}

// TestLocksFresh: what a query shows is the state at the query, not a
// snapshot: a key acquired just now is held, with its owner, on the next
// query; released, it leaves the held-only view at once.
func TestLocksFresh(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	clk.Set(aggT0.Add(time.Second))
	for i := range 1000 {
		a.Apply([]event.Event{acquired(fmt.Sprint("f:", i), "old", "l", 0, 0, 1, time.Minute),
			ended(event.Released, fmt.Sprint("f:", i), "old", "l", 0, 0, "")})
	}
	if p := a.Locks(LockQuery{HeldOnly: true}); p.Total != 0 {
		t.Fatalf("Locks(held) = %d held, want 0", p.Total)
	}
	a.Apply([]event.Event{acquired("f:500", "new-owner", "n", time.Second, 0, 3, time.Minute)})
	p := a.Locks(LockQuery{HeldOnly: true})
	if p.Total != 1 || !p.Locks[0].Held || p.Locks[0].Owner != "new-owner" || p.Locks[0].Key != "f:500" {
		t.Fatalf("Locks(held) right after an acquisition = %+v, want f:500 held by new-owner", p)
	}
	if p := a.Locks(LockQuery{Limit: 1}); p.Locks[0].Key != "f:500" || p.Locks[0].Contentions != 1 {
		t.Errorf("Locks(by contentions) first = %+v, want f:500 with 1 contention", p.Locks[0])
	}
	if p := a.Locks(LockQuery{Search: "new-owner"}); p.Total != 1 {
		t.Errorf("Locks(search new owner) total = %d, want 1", p.Total)
	}
	a.Apply([]event.Event{ended(event.Released, "f:500", "new-owner", "n", time.Second, 0, "")})
	if p := a.Locks(LockQuery{HeldOnly: true}); p.Total != 0 {
		t.Errorf("Locks(held) right after the release = %d held, want 0", p.Total)
	}
}

// TestNth checks quickselect's partition on random data, every k.
func TestNth(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 3, 16, 17, 18, 100, 600} {
		src := make([]lockCand, n)
		for i := range src {
			src[i] = lockCand{a: int64(rng.IntN(5)), key: fmt.Sprint(i)}
			src[i].kp = keyPrefix(src[i].key)
		}
		sorted := slices.Clone(src)
		byFigures.sort(sorted)
		for k := 0; k <= n; k += 1 + n/50 {
			s := slices.Clone(src)
			nth(s, k, byFigures)
			lo := slices.Clone(s[:k])
			byFigures.sort(lo)
			if diff := gocmp.Diff(sorted[:k], lo, gocmp.AllowUnexported(lockCand{}, prefix{}), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("nth(n=%d, k=%d): first k are not the k smallest (-want +got):\n%s", n, k, diff)
			}
		}
	}
}
