package state

import (
	"slices"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event/class"
)

// A class's state and how a key finds its class: user rules first, then
// the default derivation (classes.go), with the newest key prefixes
// remembered, and at most Config.MaxClasses derived classes.

// classState is one lock class: its metric children and mirrored gauges.
// Guarded by Aggregator.mu except name, stuckAfter and stuckRule, which
// never change.
type classState struct {
	name       string
	stuckAfter time.Duration
	stuckRule  string       // the StuckRule pattern that set stuckAfter; "" for Config.StuckAfter
	m          ClassMetrics // counted, or nopClass while muted
	counted    ClassMetrics // Metrics.Class(name)
	held       int
	stuck      int          // set by Tick
	noExpiry   int          // held without a TTL, set by Tick
	oldest     int64        // since of the oldest hold, unix ns (refreshed by Tick)
	win        *classWindow // its figures over time (class_window.go)
}

// classOfLocked returns the class of key, creating it if needed.
func (a *Aggregator) classOfLocked(key string) *classState {
	if c, ok := a.rules.Match(key); ok {
		a.buf = append(a.buf[:0], c...)
		return a.namedClassLocked(a.buf, true)
	}
	// A stream of distinct keys (order ids, job ids) brings a new key with
	// each acquisition, and deriving its class was a twentieth of applying
	// such a stream. Its keys differ in a last segment that derives to '*'
	// whole, after a prefix they share; the derivation goes segment by
	// segment, so keys with the same prefix before such a segment have the
	// same class: the last few such prefixes are remembered with it.
	prefix, ok := class.SharedPrefix(key)
	if !ok {
		return a.derivedClassLocked(key)
	}
	for j := range a.prefixes {
		if m := &a.prefixes[j]; m.class != nil && m.prefix == prefix {
			return m.class
		}
	}
	c := a.derivedClassLocked(key)
	a.prefixes[a.prefixNext] = prefixClass{prefix: strings.Clone(prefix), class: c}
	a.prefixNext = (a.prefixNext + 1) % len(a.prefixes)
	return c
}

// derivedClassLocked returns the class of key by the default derivation.
func (a *Aggregator) derivedClassLocked(key string) *classState {
	a.buf = class.AppendDefault(a.buf[:0], key)
	return a.namedClassLocked(a.buf, false)
}

// prefixClass is the class of the keys that are prefix followed by a
// segment that derives to '*' whole (see classOfLocked).
type prefixClass struct {
	prefix string // up to the key's last ':' or '/', included
	class  *classState
}

// namedClassLocked returns the class named name, creating it if needed;
// user reports whether a rule named it, else it comes from the default
// derivation and counts against Config.MaxClasses.
func (a *Aggregator) namedClassLocked(name []byte, user bool) *classState {
	if c, ok := a.classes[string(name)]; ok {
		return c
	}
	if string(name) == otherClass || (!user && a.derived >= a.cfg.MaxClasses) {
		return a.classLocked(otherClass)
	}
	if !user {
		a.derived++
	}
	return a.classLocked(string(name))
}

func (a *Aggregator) classLocked(name string) *classState {
	if c, ok := a.classes[name]; ok {
		return c
	}
	born := a.nowNS()
	if a.replaying > 0 && a.replayAt > 0 {
		born = min(born, a.replayAt) // the replay's clock: its windows are those of the replayed events
	}
	c := &classState{name: name, stuckAfter: a.cfg.StuckAfter, counted: a.met.Class(name), win: newClassWindow(born)}
	c.m = c.metricsFor(a.muted)
	for _, r := range a.cfg.StuckRules {
		if r.After > 0 && class.Match(r.Pattern, name) {
			c.stuckAfter, c.stuckRule = r.After, r.Pattern
			break
		}
	}
	a.classes[name] = c
	names := append(slices.Clone(*a.classNames.Load()), name)
	slices.Sort(names)
	a.classNames.Store(&names)
	return c
}
