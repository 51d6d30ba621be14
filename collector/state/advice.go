package state

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
)

// Advice: what to change, from what was measured. Each kind is a rule
// stated in one sentence with explicit thresholds (its function's doc
// comment, and docs/operating.md), read off one class's figures within a window
// (ClassStats). A rule that rests on a statistic stays silent below
// adviceMinSamples of it rather than guess; a healthy class gets none.
// Every advice carries the figures it rests on with the thresholds it
// compared them to (Evidence, and Figures by name for scripts) and a
// concrete suggestion. As Linux's lockdep and pganalyze's advisors do,
// the verdict comes with its evidence, and old observations age out with
// the window.

// AdviceKind names an advice rule.
type AdviceKind string

// Advice kinds.
const (
	AdviceTTLShort            AdviceKind = "ttl_short"
	AdviceTTLLong             AdviceKind = "ttl_long"
	AdviceSingleKeyBottleneck AdviceKind = "single_key_bottleneck"
	AdviceWaitBudgetShort     AdviceKind = "wait_budget_short"
	AdviceRenewLate           AdviceKind = "renew_late"
	AdviceNoExpiry            AdviceKind = "no_expiry"
	AdviceTTLMismatch         AdviceKind = "ttl_mismatch"
)

// AdviceKinds are the kinds in the order advice of one class is listed.
var AdviceKinds = [...]AdviceKind{AdviceNoExpiry, AdviceTTLShort, AdviceRenewLate, AdviceSingleKeyBottleneck,
	AdviceWaitBudgetShort, AdviceTTLLong, AdviceTTLMismatch}

// Advice severities.
const (
	SeverityWarning = "warning" // something will go wrong (concurrent writes, callers failing, a lock nothing frees)
	SeverityInfo    = "info"    // something costs more than it needs to
)

// Advice is one rule's verdict on one class.
type Advice struct {
	Class      string
	Kind       AdviceKind
	Severity   string
	Summary    string   // one line: what is wrong
	Evidence   []string // the figures it rests on, each with the threshold it was held to
	Suggestion string   // what to change
	// Figures are the evidence's figures by name: seconds for durations,
	// 0..1 for shares, counts as they are.
	Figures map[string]float64
}

// The rules' thresholds (those the window buckets count against are in
// class_window.go: nearTTLShare, farTTLShare, longTTL, lateRenewal).
const (
	adviceMinSamples = 20   // the fewest observations a statistical rule judges
	nearTTLFires     = 0.01 // ttl_short: share of holds past nearTTLShare (their p99)
	farTTLFires      = 0.01 // ttl_long: share of long-TTL holds past farTTLShare at most
	busyShare        = 0.8  // single_key_bottleneck: the key's share of the span held
	queueLength      = 1    // single_key_bottleneck: callers waiting on average (their wait over the span), at least
	giveUpShare      = 0.5  // wait_budget_short: share of contended tries that failed, above
	lateFires        = 0.05 // renew_late: share of renewals late, above
	mismatchShare    = 0.1  // ttl_mismatch: the least share of acquisitions each TTL is set by
	mismatchFactor   = 4    // ttl_mismatch: how far apart the TTLs are, at least
)

// Advise returns the advice on classes, warnings first, then by class and
// AdviceKinds. It is a pure function of its input.
func Advise(classes []ClassStats) []Advice {
	var out []Advice
	for _, c := range classes {
		out = append(out, AdviseClass(c)...)
	}
	order := func(k AdviceKind) int { return slices.Index(AdviceKinds[:], k) }
	slices.SortStableFunc(out, func(x, y Advice) int {
		if x.Severity != y.Severity {
			if x.Severity == SeverityWarning {
				return -1
			}
			return 1
		}
		if c := strings.Compare(x.Class, y.Class); c != 0 {
			return c
		}
		return cmp.Compare(order(x.Kind), order(y.Kind))
	})
	return out
}

// AdviseClass returns the advice on one class, in the order of AdviceKinds.
func AdviseClass(c ClassStats) []Advice {
	var out []Advice
	for _, rule := range []func(ClassStats) (Advice, bool){noExpiry, ttlShort, renewLate, singleKeyBottleneck,
		waitBudgetShort, ttlLong, ttlMismatch} {
		if a, ok := rule(c); ok {
			a.Class = c.Class
			if !c.WaitsKnown {
				a.Evidence = append(a.Evidence, "waits unknown: every acquisition in the window was a watched lock's "+
					"(another library's, seen through keyspace notifications), whose callers' waits Redis does not show; "+
					"wait_budget_short and single_key_bottleneck are not judged")
			}
			out = append(out, a)
		}
	}
	return out
}

// ttlShort: at least 20 holds ended without a renewal under a TTL within
// the window, and more than 1% of them (their p99) ran past 80% of their
// TTL, an expiry counting as running past it.
func ttlShort(c ClassStats) (Advice, bool) {
	if c.Bare < adviceMinSamples || float64(c.BareNear) <= nearTTLFires*float64(c.Bare) {
		return Advice{}, false
	}
	share := float64(c.BareNear) / float64(c.Bare)
	ttl := c.mostSetTTL()
	longest := c.BareHold.Max
	return Advice{
		Kind: AdviceTTLShort, Severity: SeverityWarning,
		Summary: fmt.Sprintf("Holds without renewal use most of their TTL: %s of them ran past %s of it, so a slower one expires while its holder still works and another caller takes the lock (concurrent writes)",
			pct(share), pct(nearTTLShare)),
		Evidence: []string{
			fmt.Sprintf("%d of %d holds that ended without a renewal (%s) ran past %s of their TTL or expired (fires above %s of at least %d)",
				c.BareNear, c.Bare, pct(share), pct(nearTTLShare), pct(nearTTLFires), adviceMinSamples),
			fmt.Sprintf("hold p99 without renewal %s, longest %s; TTL set: %s", dur(c.BareHold.P99), dur(longest), c.ttlText()),
			fmt.Sprintf("expirations while held in the window: %d", c.Expirations),
		},
		Suggestion: fmt.Sprintf("Renew the lease while the work runs (lock: ObtainOptions.AutoRenew or Client.Do; redis-py: Lock.extend; redsync: Mutex.Extend), or set the TTL above the longest hold with margin: at least %s (twice the longest, %s), instead of %s.",
			dur(roundUp(2*longest)), dur(longest), dur(ttl)),
		Figures: map[string]float64{"holds_without_renewal": float64(c.Bare), "near_ttl_holds": float64(c.BareNear),
			"near_ttl_share": share, "hold_p99_seconds": c.BareHold.P99.Seconds(), "hold_max_seconds": longest.Seconds(),
			"ttl_seconds": ttl.Seconds(), "expirations": float64(c.Expirations)},
	}, true
}

// ttlLong: at least 20 holds ended without a renewal under a TTL of 60 s or
// more within the window, and 99% of them held the lock for less than a
// tenth of that TTL: a holder that crashes blocks the key for the TTL.
func ttlLong(c ClassStats) (Advice, bool) {
	if c.LongTTLBare < adviceMinSamples || float64(c.LongTTLOver) > farTTLFires*float64(c.LongTTLBare) {
		return Advice{}, false
	}
	ttl := c.longestTTL()
	p99 := c.BareHold.P99
	suggested := max(roundUp(3*c.BareHold.Max), 5*time.Second)
	return Advice{
		Kind: AdviceTTLLong, Severity: SeverityInfo,
		Summary: fmt.Sprintf("The TTL (%s) is far above the holds (p99 %s) and nothing renews them: a holder that crashes blocks the key for up to %s",
			dur(ttl), dur(p99), dur(ttl)),
		Evidence: []string{
			fmt.Sprintf("%d holds ended without a renewal under a TTL of %s or more; %d of them (%s) ran past %s of it (fires at %s or less of at least %d)",
				c.LongTTLBare, dur(longTTL), c.LongTTLOver, pct(ratio(c.LongTTLOver, c.LongTTLBare)), pct(farTTLShare), pct(farTTLFires), adviceMinSamples),
			fmt.Sprintf("hold p99 without renewal %s, longest %s; TTL set: %s", dur(p99), dur(c.BareHold.Max), c.ttlText()),
			fmt.Sprintf("a crash now costs up to %s of the key being unusable (its TTL, less what the holder had held)", dur(ttl)),
		},
		Suggestion: fmt.Sprintf("Use a short TTL renewed while the work runs: for example %s with auto-renew every TTL/3 (lock: ObtainOptions.AutoRenew or Client.Do); a crash then costs at most %s instead of %s.",
			dur(suggested), dur(suggested), dur(ttl)),
		Figures: map[string]float64{"holds_without_renewal": float64(c.LongTTLBare), "over_tenth_holds": float64(c.LongTTLOver),
			"hold_p99_seconds": p99.Seconds(), "hold_max_seconds": c.BareHold.Max.Seconds(), "ttl_seconds": ttl.Seconds(),
			"crash_cost_seconds": ttl.Seconds(), "suggested_ttl_seconds": suggested.Seconds()},
	}, true
}

// singleKeyBottleneck: the class's busiest key was held for at least 80%
// of the window (its holds that ended in it), with at least 20
// acquisitions, and its callers' waits add up to at least the window (on
// average one caller or more waiting, by Little's law): a queue behind one
// key.
func singleKeyBottleneck(c ClassStats) (Advice, bool) {
	b := c.Busiest
	if !c.WaitsKnown || b.Key == "" || c.Span <= 0 || b.Acquisitions < adviceMinSamples {
		return Advice{}, false
	}
	busy := min(float64(b.Hold)/float64(c.Span), 1)
	queue := float64(b.Wait) / float64(c.Span)
	if busy < busyShare || queue < queueLength {
		return Advice{}, false
	}
	return Advice{
		Kind: AdviceSingleKeyBottleneck, Severity: SeverityWarning,
		Summary: fmt.Sprintf("One key, %s, was held %s of the time with %.1f callers waiting for it on average: the class's work runs one at a time",
			quoteKey(b.Key), pct(busy), queue),
		Evidence: []string{
			fmt.Sprintf("%s was held %s of the last %s (%s of holds; fires at %s, with at least %d acquisitions: %d)",
				quoteKey(b.Key), pct(busy), dur(c.Span), dur(b.Hold), pct(busyShare), adviceMinSamples, b.Acquisitions),
			fmt.Sprintf("its callers waited %s in all: %.1f waiting on average (fires at %d); %d of its %d acquisitions waited",
				dur(b.Wait), queue, queueLength, b.Contentions, b.Acquisitions),
			fmt.Sprintf("waiting now: %d; wait p99 %s, avg %s; hold avg %s", c.Waiters, dur(c.Wait.P99), dur(c.Wait.Avg), dur(c.Hold.Avg)),
		},
		Suggestion: fmt.Sprintf("Lock finer keys: one per resource the work touches (for example %s<id> instead of %s), so that unrelated work stops queueing behind one lock; or shorten the work done under it (hold avg %s).",
			quoteKey(b.Key+":"), quoteKey(b.Key), dur(c.Hold.Avg)),
		Figures: map[string]float64{"utilisation": busy, "held_seconds": b.Hold.Seconds(), "span_seconds": c.Span.Seconds(),
			"queue": queue, "wait_seconds": b.Wait.Seconds(), "acquisitions": float64(b.Acquisitions),
			"contentions": float64(b.Contentions), "waiters": float64(c.Waiters), "wait_p99_seconds": c.Wait.P99.Seconds()},
	}, true
}

// waitBudgetShort: at least 20 contended tries within the window
// (acquisitions that waited, refused tries, timeouts), more than half of
// them failed (timeout, or refused), and those that failed had waited less,
// on average, than the median hold: callers give up sooner than holds end.
func waitBudgetShort(c ClassStats) (Advice, bool) {
	if !c.WaitsKnown || c.Hold.Count == 0 {
		return Advice{}, false
	}
	timeouts, refused := c.Failures[reasonTimeout], c.Failures[reasonHeld]
	failed := timeouts + refused
	tries := c.Contentions + timeouts
	if tries < adviceMinSamples || float64(failed) <= giveUpShare*float64(tries) {
		return Advice{}, false
	}
	gaveUp := c.GiveUpWait / time.Duration(failed)
	if gaveUp >= c.Hold.P50 {
		return Advice{}, false
	}
	share := ratio(failed, tries)
	return Advice{
		Kind: AdviceWaitBudgetShort, Severity: SeverityWarning,
		Summary: fmt.Sprintf("Callers give up sooner than holds end: %s of the contended tries failed, after waiting %s on average while holds last %s",
			pct(share), dur(gaveUp), dur(c.Hold.P50)),
		Evidence: []string{
			fmt.Sprintf("%d of %d contended tries failed (%s; fires above %s of at least %d): %d timed out, %d refused at once",
				failed, tries, pct(share), pct(giveUpShare), adviceMinSamples, timeouts, refused),
			fmt.Sprintf("the failed tries waited %s on average; holds last p50 %s, p99 %s (fires when the wait is under the p50)",
				dur(gaveUp), dur(c.Hold.P50), dur(c.Hold.P99)),
		},
		Suggestion: fmt.Sprintf("Give callers a wait budget of at least one hold: a context deadline or retry limit above the hold p99 (%s); or, where callers must not wait that long, shorten the holds or skip work another holder is already doing.",
			dur(c.Hold.P99)),
		Figures: map[string]float64{"contended_tries": float64(tries), "failed": float64(failed), "timeouts": float64(timeouts),
			"refused": float64(refused), "failed_share": share, "gave_up_after_seconds": gaveUp.Seconds(),
			"hold_p50_seconds": c.Hold.P50.Seconds(), "hold_p99_seconds": c.Hold.P99.Seconds()},
	}, true
}

// renewLate: at least 20 renewals reported their headroom within the
// window and more than 5% of them landed with less than half of their TTL
// left, before LockLeaseAtRisk (which counts those under a quarter) fires.
func renewLate(c ClassStats) (Advice, bool) {
	if c.Renewals < adviceMinSamples || float64(c.RenewLate) <= lateFires*float64(c.Renewals) {
		return Advice{}, false
	}
	share := ratio(c.RenewLate, c.Renewals)
	return Advice{
		Kind: AdviceRenewLate, Severity: SeverityWarning,
		Summary: fmt.Sprintf("Renewals land late: %s of them left less than half of the TTL, a little later and a lease lapses under a holder that still works",
			pct(share)),
		Evidence: []string{
			fmt.Sprintf("%d of %d renewals (%s) landed with less than %s of their TTL left (fires above %s of at least %d); renewals every TTL/3 leave about two thirds",
				c.RenewLate, c.Renewals, pct(share), pct(lateRenewal), pct(lateFires), adviceMinSamples),
			fmt.Sprintf("%d (%s) left less than %s, the share LockLeaseAtRisk counts (it fires above 5%% for 10 minutes)",
				c.RenewAtRisk, pct(ratio(c.RenewAtRisk, c.Renewals)), pct(riskRenewal)),
			fmt.Sprintf("the least headroom: %s of a TTL of %s", dur(c.MinHeadroom), dur(c.MinHeadroomOf)),
		},
		Suggestion: "Find what delays the renewals (GC pauses, CPU throttling, a slow or distant Redis: see lockscope_renewal_headroom_seconds by class) or give them more slack: a longer TTL, still renewed every TTL/3.",
		Figures: map[string]float64{"renewals": float64(c.Renewals), "late": float64(c.RenewLate), "late_share": share,
			"at_risk": float64(c.RenewAtRisk), "min_headroom_seconds": c.MinHeadroom.Seconds(), "min_headroom_ttl_seconds": c.MinHeadroomOf.Seconds()},
	}, true
}

// noExpiry: a lock of the class is held now without a TTL, or a watched
// acquisition within the window set none; a fact, not a statistic, so one
// is enough.
func noExpiry(c ClassStats) (Advice, bool) {
	if c.NoExpiry == 0 && c.NoTTL == 0 {
		return Advice{}, false
	}
	return Advice{
		Kind: AdviceNoExpiry, Severity: SeverityWarning,
		Summary: "Locks are taken without a TTL: if a holder dies, its lock stays held until someone deletes it",
		Evidence: []string{
			fmt.Sprintf("held now without a TTL: %d; acquisitions without a TTL in the last %s: %d (fires at 1)", c.NoExpiry, dur(c.Window), c.NoTTL),
		},
		Suggestion: "Give the lock a timeout (redis-py: Lock(timeout=...), extended while the work runs; a plain SET: add PX) so that a holder that dies frees it; until then, free a dead holder's lock with 'lockscope release'.",
		Figures:    map[string]float64{"held_without_ttl": float64(c.NoExpiry), "acquisitions_without_ttl": float64(c.NoTTL)},
	}, true
}

// ttlMismatch: at least 20 acquisitions set a TTL within the window, and
// two TTLs each set by at least 10% of them differ by a factor of 4 or
// more: the class's holders (two services?) disagree on how long it lasts.
func ttlMismatch(c ClassStats) (Advice, bool) {
	var n int64
	for _, t := range c.TTLs {
		n += t.Count
	}
	n += c.TTLOther
	if n < adviceMinSamples {
		return Advice{}, false
	}
	var common []TTLCount
	for _, t := range c.TTLs {
		if float64(t.Count) >= mismatchShare*float64(n) {
			common = append(common, t)
		}
	}
	if len(common) < 2 {
		return Advice{}, false
	}
	lo := slices.MinFunc(common, func(x, y TTLCount) int { return cmp.Compare(x.TTL, y.TTL) })
	hi := slices.MaxFunc(common, func(x, y TTLCount) int { return cmp.Compare(x.TTL, y.TTL) })
	if hi.TTL < mismatchFactor*lo.TTL {
		return Advice{}, false
	}
	return Advice{
		Kind: AdviceTTLMismatch, Severity: SeverityInfo,
		Summary: fmt.Sprintf("Holders of the class set very different TTLs (%s and %s): they disagree on how long its work takes",
			dur(lo.TTL), dur(hi.TTL)),
		Evidence: []string{
			fmt.Sprintf("of %d acquisitions with a TTL, %d set %s (%s) and %d set %s (%s): %.0f× apart (fires at %d× between TTLs each set by at least %s of at least %d)",
				n, lo.Count, dur(lo.TTL), pct(ratio(lo.Count, n)), hi.Count, dur(hi.TTL), pct(ratio(hi.Count, n)),
				float64(hi.TTL)/float64(lo.TTL), mismatchFactor, pct(mismatchShare), adviceMinSamples),
			"TTL set: " + c.ttlText(),
		},
		Suggestion: fmt.Sprintf("Agree on one TTL for the class (which owners hold its keys with which TTL is on its class page): holds under %s expire where the %s holders' work would not, and crashes under %s cost %s; or give the two kinds of work classes of their own.",
			dur(lo.TTL), dur(hi.TTL), dur(hi.TTL), dur(hi.TTL)),
		Figures: map[string]float64{"acquisitions_with_ttl": float64(n), "short_ttl_seconds": lo.TTL.Seconds(), "short_ttl_acquisitions": float64(lo.Count),
			"long_ttl_seconds": hi.TTL.Seconds(), "long_ttl_acquisitions": float64(hi.Count), "factor": float64(hi.TTL) / float64(lo.TTL)},
	}, true
}

// mostSetTTL is the TTL most acquisitions set (0 if none).
func (c ClassStats) mostSetTTL() time.Duration {
	if len(c.TTLs) == 0 {
		return 0
	}
	return c.TTLs[0].TTL
}

// longestTTL is the longest TTL set (0 if none).
func (c ClassStats) longestTTL() time.Duration {
	var d time.Duration
	for _, t := range c.TTLs {
		d = max(d, t.TTL)
	}
	return d
}

// ttlText lists the TTLs set with their counts.
func (c ClassStats) ttlText() string {
	if len(c.TTLs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(c.TTLs)+1)
	for _, t := range c.TTLs {
		parts = append(parts, fmt.Sprintf("%s ×%d", dur(t.TTL), t.Count))
	}
	if c.TTLOther > 0 {
		parts = append(parts, fmt.Sprintf("others ×%d", c.TTLOther))
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// pct formats a share as a percentage: one decimal under 10% (unless
// whole: the thresholds read "1%", a measure "2.5%").
func pct(x float64) string {
	if p := 100 * x; p < 10 && p != math.Trunc(p) {
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// dur formats d to about three significant digits.
func dur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// roundUp rounds d up to a whole second (to 100 ms under a second).
func roundUp(d time.Duration) time.Duration {
	unit := time.Second
	if d < time.Second {
		unit = 100 * time.Millisecond
	}
	return (d + unit - 1) / unit * unit
}

// quoteKey shows a key in evidence as keys are shown everywhere
// (keytext.Visible: control and invalid bytes escaped), cut, in quotes.
func quoteKey(k string) string {
	v, _ := keytext.Visible(k)
	return "\"" + keytext.Cut(v, 80) + "\""
}
