package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
)

// Each advice rule on a workload whose right answer is known: the case it
// must report, the same work made healthy (no advice), and the same work
// with one sample too few (silent rather than guessing).

// feed applies evs one by one, each at its own time on the collector's
// clock, as a collector reading them live would.
func feed(a *Aggregator, clk *aggClock, evs []event.Event) {
	slices.SortStableFunc(evs, func(x, y event.Event) int { return int(min(max(x.TS-y.TS, -1), 1)) })
	for _, e := range evs {
		if t := time.Unix(0, e.TS); t.After(clk.Now()) {
			clk.Set(t)
		}
		a.Apply([]event.Event{e})
	}
}

// holds returns n holds of key(i), each acquired at start(i) after wait
// (over attempts) with ttl, and released after hold.
func holds(n int, key func(i int) string, start func(i int) time.Duration, wait time.Duration, attempts int, ttl, hold time.Duration) []event.Event {
	var evs []event.Event
	for i := range n {
		lease := fmt.Sprintf("h%d-%s", i, key(i))
		evs = append(evs, acquired(key(i), "svc", lease, start(i), wait, attempts, ttl),
			ended(event.Released, key(i), "svc", lease, start(i)+hold, hold, ""))
	}
	return evs
}

func keyN(prefix string) func(int) string {
	return func(i int) string { return fmt.Sprintf("%s:%d", prefix, i) }
}
func startAt(d time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return time.Second + d }
}
func every(d time.Duration) func(int) time.Duration {
	return func(i int) time.Duration { return time.Second + time.Duration(i)*d }
}

// adviceOf runs evs (and then more, if set) through a fresh aggregator and
// returns the advice on class within 5 m.
func adviceOf(t *testing.T, class string, evs []event.Event, more func(a *Aggregator, clk *aggClock)) ([]Advice, ClassStats) {
	t.Helper()
	a, clk := newTestAggregator(t, Config{})
	feed(a, clk, evs)
	if more != nil {
		more(a, clk)
	}
	c := classByName(t, a, 5*time.Minute, class)
	return AdviseClass(c), c
}

func kinds(as []Advice) []AdviceKind {
	out := []AdviceKind{}
	for _, a := range as {
		out = append(out, a.Kind)
	}
	return out
}

// checkAdvice fails unless as are exactly the kinds want, each carrying
// evidence, a suggestion and the rule's thresholds in its evidence.
func checkAdvice(t *testing.T, what string, as []Advice, want ...AdviceKind) {
	t.Helper()
	if want == nil {
		want = []AdviceKind{}
	}
	if got := kinds(as); !slices.Equal(got, want) {
		for _, a := range as {
			t.Logf("%s: %s", a.Kind, strings.Join(a.Evidence, "; "))
		}
		t.Fatalf("%s: advice %v, want %v", what, got, want)
	}
	for _, a := range as {
		if a.Summary == "" || a.Suggestion == "" || len(a.Evidence) == 0 || !strings.Contains(strings.Join(a.Evidence, " "), "fires") {
			t.Errorf("%s: %s advice lacks a summary, suggestion, or evidence with its threshold: %+v", what, a.Kind, a)
		}
	}
}

func TestAdviceTTLShort(t *testing.T) {
	// The seed's 5 s case: work takes 4.5 s under a 5 s TTL, no renewal.
	as, _ := adviceOf(t, "job:*", holds(20, keyN("job"), startAt(0), 0, 1, 5*time.Second, 4500*time.Millisecond), nil)
	checkAdvice(t, "20 holds of 4.5s under 5s", as, AdviceTTLShort)
	f := as[0].Figures
	if f["near_ttl_share"] != 1 || f["holds_without_renewal"] != 20 || f["ttl_seconds"] != 5 || f["hold_max_seconds"] != 4.5 ||
		f["hold_p99_seconds"] != 4.5 {
		t.Errorf("ttl_short figures = %v; want share 1 of 20 holds, TTL 5, p99 and longest 4.5 (every hold lasts 4.5 s)", f)
	}
	if !strings.Contains(as[0].Suggestion, "at least 9s") {
		t.Errorf("ttl_short suggestion = %q; want a TTL of at least twice the longest hold (9s)", as[0].Suggestion)
	}
	// Healthy: the same work takes 1 s.
	as, _ = adviceOf(t, "job:*", holds(20, keyN("job"), startAt(0), 0, 1, 5*time.Second, time.Second), nil)
	checkAdvice(t, "20 holds of 1s under 5s", as)
	// Renewed holds use none of their first TTL: the same work with auto-renew.
	var evs []event.Event
	for _, e := range holds(20, keyN("job"), startAt(0), 0, 1, 5*time.Second, 4500*time.Millisecond) {
		evs = append(evs, e)
		if e.Type == event.Acquired {
			r := renewed(e.Key, e.Owner, e.Lease, time.Second+1700*time.Millisecond, 5*time.Second)
			r.Headroom = 3300 * time.Millisecond
			evs = append(evs, r)
		}
	}
	as, _ = adviceOf(t, "job:*", evs, nil)
	checkAdvice(t, "20 renewed holds of 4.5s under 5s", as)
	// Too few: 19 holds.
	as, _ = adviceOf(t, "job:*", holds(19, keyN("job"), startAt(0), 0, 1, 5*time.Second, 4500*time.Millisecond), nil)
	checkAdvice(t, "19 holds of 4.5s under 5s", as)
}

func TestAdviceTTLShortCountsExpiries(t *testing.T) {
	// Holds that outlive their TTL and expire are the extreme of the rule.
	var evs []event.Event
	for i := range 20 {
		evs = append(evs, acquired(fmt.Sprintf("job:%d", i), "svc", fmt.Sprint(i), time.Second, 0, 1, time.Second))
	}
	as, c := adviceOf(t, "job:*", evs, func(a *Aggregator, clk *aggClock) {
		clk.Add(3 * time.Second)
		a.Tick()
	})
	checkAdvice(t, "20 holds that expired", as, AdviceTTLShort)
	if c.Expirations != 20 || c.BareNear != 20 {
		t.Errorf("expirations %d, holds near their TTL %d; want 20 and 20", c.Expirations, c.BareNear)
	}
}

func TestAdviceTTLLong(t *testing.T) {
	// The seed's 5-minute case: 100 ms of work under a 5 min TTL.
	as, _ := adviceOf(t, "mail:*", holds(20, keyN("mail"), every(200*time.Millisecond), 0, 1, 5*time.Minute, 100*time.Millisecond), nil)
	checkAdvice(t, "20 holds of 100ms under 5m", as, AdviceTTLLong)
	f := as[0].Figures
	if f["crash_cost_seconds"] != 300 || f["ttl_seconds"] != 300 || f["suggested_ttl_seconds"] != 5 || as[0].Severity != SeverityInfo {
		t.Errorf("ttl_long = %s %v; want info, crash cost 300 s, TTL 300, suggested 5", as[0].Severity, f)
	}
	// Healthy: the same work under a 5 s TTL.
	as, _ = adviceOf(t, "mail:*", holds(20, keyN("mail"), every(200*time.Millisecond), 0, 1, 5*time.Second, 100*time.Millisecond), nil)
	checkAdvice(t, "20 holds of 100ms under 5s", as)
	// One long hold in twenty (5%, above the 1% the rule allows) needs the TTL.
	evs := holds(19, keyN("mail"), every(200*time.Millisecond), 0, 1, 5*time.Minute, 100*time.Millisecond)
	evs = append(evs, holds(1, func(int) string { return "mail:99" }, startAt(0), 0, 1, 5*time.Minute, 2*time.Minute)...)
	as, _ = adviceOf(t, "mail:*", evs, nil)
	checkAdvice(t, "19 short holds and one of 2m under 5m", as)
}

func TestAdviceSingleKeyBottleneck(t *testing.T) {
	// The lock:global case: one key held back to back for 30 s (1 s holds),
	// each caller having waited 1.5 s for it: 45 s of waits in 30 s, 1.5
	// callers waiting on average.
	global := func(int) string { return "lock:global" }
	as, c := adviceOf(t, "lock:global", holds(30, global, every(time.Second), 1500*time.Millisecond, 3, 10*time.Second, time.Second), nil)
	checkAdvice(t, "30 queued 1s holds of one key in 30s", as, AdviceSingleKeyBottleneck)
	f := as[0].Figures
	if f["utilisation"] != 1 || f["queue"] != 1.5 || f["acquisitions"] != 30 || f["contentions"] != 30 || c.Busiest.Key != "lock:global" {
		t.Errorf("single_key_bottleneck figures %v, busiest %q; want utilisation 1 and a queue of 1.5 over 30 acquisitions all contended, of lock:global", f, c.Busiest.Key)
	}
	// Busy, and a short queue: each caller waited 0.4 s (0.4 waiting on average).
	as, _ = adviceOf(t, "lock:global", holds(30, global, every(time.Second), 400*time.Millisecond, 3, 10*time.Second, time.Second), nil)
	checkAdvice(t, "30 1s holds of one key, callers waiting 0.4s", as)
	// Healthy: the same work on a key per document.
	as, _ = adviceOf(t, "doc:*", holds(30, keyN("doc"), every(time.Second), 0, 1, 10*time.Second, time.Second), nil)
	checkAdvice(t, "30 1s holds of 30 keys", as)
	// Busy but nobody waits: one worker doing the work in turn.
	as, _ = adviceOf(t, "lock:global", holds(30, global, every(time.Second), 0, 1, 10*time.Second, time.Second), nil)
	checkAdvice(t, "30 uncontended 1s holds of one key", as)
	// Queued but mostly idle: 100 ms holds a second.
	as, _ = adviceOf(t, "lock:global", holds(30, global, every(time.Second), 50*time.Millisecond, 2, 10*time.Second, 100*time.Millisecond), nil)
	checkAdvice(t, "30 queued 100ms holds in 30s", as)
}

func TestAdviceWaitBudgetShort(t *testing.T) {
	// Holds of 2 s every 10 s; callers give up after 100 ms.
	held := holds(5, func(int) string { return "pay:1" }, every(10*time.Second), 0, 1, 10*time.Second, 2*time.Second)
	var evs []event.Event
	for i := range 20 {
		evs = append(evs, failed("pay:1", "api", time.Second+time.Duration(i)*2*time.Second+200*time.Millisecond, 100*time.Millisecond, 3, event.ReasonTimeout))
	}
	as, _ := adviceOf(t, "pay:*", append(evs, held...), nil)
	checkAdvice(t, "20 timeouts after 100ms behind 2s holds", as, AdviceWaitBudgetShort)
	f := as[0].Figures
	if f["failed"] != 20 || f["contended_tries"] != 20 || f["gave_up_after_seconds"] != 0.1 || f["hold_p50_seconds"] <= 1 {
		t.Errorf("wait_budget_short figures %v; want 20 of 20 failed after 0.1 s, hold p50 above 1 s", f)
	}
	// Healthy: the same callers wait up to 2 s and get the lock (held 50 ms).
	evs = evs[:0]
	for i := range 20 {
		start := time.Second + time.Duration(i)*2*time.Second + 2200*time.Millisecond
		lease := fmt.Sprint("w", i)
		evs = append(evs, acquired("pay:1", "api", lease, start, 2*time.Second, 10, 10*time.Second),
			ended(event.Released, "pay:1", "api", lease, start+50*time.Millisecond, 50*time.Millisecond, ""))
	}
	as, _ = adviceOf(t, "pay:*", append(evs, held...), nil)
	checkAdvice(t, "20 callers that waited for the lock", as)
	// Refused tries of a try-once caller are giving up too.
	evs = evs[:0]
	for i := range 20 {
		evs = append(evs, failed("pay:1", "api", time.Second+time.Duration(i)*2*time.Second+200*time.Millisecond, 0, 1, event.ReasonHeld))
	}
	as, _ = adviceOf(t, "pay:*", append(evs, held...), nil)
	checkAdvice(t, "20 refused tries behind 2s holds", as, AdviceWaitBudgetShort)
	// Too few: 19 timeouts.
	as, _ = adviceOf(t, "pay:*", append(evs[:19], held...), nil)
	checkAdvice(t, "19 refused tries", as)
}

func TestAdviceRenewLate(t *testing.T) {
	renewals := func(late int) []event.Event {
		evs := []event.Event{acquired("sync:1", "w", "l", time.Second, 0, 1, 3*time.Second)}
		for i := range 20 {
			r := renewed("sync:1", "w", "l", 2*time.Second+time.Duration(i)*time.Second, 3*time.Second)
			r.Headroom = 2 * time.Second // renewed every TTL/3: two thirds left
			if i < late {
				r.Headroom = time.Second // a third left: late, not yet at risk
			}
			evs = append(evs, r)
		}
		return evs
	}
	as, c := adviceOf(t, "sync:*", renewals(4), nil)
	checkAdvice(t, "4 of 20 renewals with a third of the TTL left", as, AdviceRenewLate)
	if c.RenewAtRisk != 0 || as[0].Figures["late_share"] != 0.2 {
		t.Errorf("renew_late: at risk %d, late share %v; want 0 (the alert's quarter is not reached) and 0.2", c.RenewAtRisk, as[0].Figures["late_share"])
	}
	as, _ = adviceOf(t, "sync:*", renewals(0), nil)
	checkAdvice(t, "20 renewals with two thirds left", as)
	as, _ = adviceOf(t, "sync:*", renewals(1), nil) // 5%: not above it
	checkAdvice(t, "1 of 20 renewals late", as)
}

func TestAdviceNoExpiry(t *testing.T) {
	watched := func(ttl time.Duration) []event.Event {
		e := acquired("legacy:report", "redis-py", "p", time.Second, 0, 1, ttl)
		e.Passive = true
		return []event.Event{e}
	}
	as, _ := adviceOf(t, "legacy:report", watched(0), func(a *Aggregator, _ *aggClock) { a.Tick() })
	checkAdvice(t, "a watched lock without a TTL", as, AdviceNoExpiry)
	if f := as[0].Figures; f["held_without_ttl"] != 1 || f["acquisitions_without_ttl"] != 1 {
		t.Errorf("no_expiry figures %v; want 1 held and 1 acquisition without a TTL", f)
	}
	if ev := strings.Join(as[0].Evidence, " "); !strings.Contains(ev, "waits unknown") {
		t.Errorf("advice on a watched class does not say its waits are unknown: %q", ev)
	}
	as, _ = adviceOf(t, "legacy:report", watched(30*time.Second), func(a *Aggregator, _ *aggClock) { a.Tick() })
	checkAdvice(t, "a watched lock with a 30s TTL", as)
}

func TestAdviceTTLMismatch(t *testing.T) {
	two := func(n int, ttl2 time.Duration) []event.Event {
		evs := holds(n/2, keyN("report"), every(100*time.Millisecond), 0, 1, 2*time.Second, 50*time.Millisecond)
		other := func(i int) string { return fmt.Sprintf("report:%d", 100+i) }
		return append(evs, holds(n-n/2, other, every(100*time.Millisecond), 0, 1, ttl2, 50*time.Millisecond)...)
	}
	as, _ := adviceOf(t, "report:*", two(20, 20*time.Second), nil)
	checkAdvice(t, "10 acquisitions with 2s and 10 with 20s", as, AdviceTTLMismatch)
	if f := as[0].Figures; f["short_ttl_seconds"] != 2 || f["long_ttl_seconds"] != 20 || f["factor"] != 10 {
		t.Errorf("ttl_mismatch figures %v; want 2 s and 20 s, 10× apart", f)
	}
	as, _ = adviceOf(t, "report:*", two(20, 2*time.Second), nil)
	checkAdvice(t, "20 acquisitions with 2s", as)
	as, _ = adviceOf(t, "report:*", two(20, 6*time.Second), nil) // 3×: under the factor
	checkAdvice(t, "10 with 2s and 10 with 6s", as)
	as, _ = adviceOf(t, "report:*", two(19, 20*time.Second), nil)
	checkAdvice(t, "19 acquisitions", as)
}

// TestAdviseOrdersWarningsFirst: the advice of several classes is listed
// warnings first, then by class.
func TestAdviseOrdersWarningsFirst(t *testing.T) {
	a, clk := newTestAggregator(t, Config{})
	evs := holds(20, keyN("mail"), every(100*time.Millisecond), 0, 1, 5*time.Minute, 100*time.Millisecond)
	evs = append(evs, holds(20, keyN("job"), startAt(0), 0, 1, 5*time.Second, 4500*time.Millisecond)...)
	feed(a, clk, evs)
	got := Advise(a.ClassStats(5 * time.Minute))
	var list []string
	for _, x := range got {
		list = append(list, x.Severity+" "+x.Class+" "+string(x.Kind))
	}
	want := []string{"warning job:* ttl_short", "info mail:* ttl_long"}
	if !slices.Equal(list, want) {
		t.Errorf("Advise() = %q, want %q", list, want)
	}
}
