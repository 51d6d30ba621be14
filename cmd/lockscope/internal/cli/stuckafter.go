package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockscope/lockscope/collector/state"
)

// stuckAfter is the --stuck-after flag: a default threshold and any number
// of CLASS_GLOB=DURATION entries, from repeated flags or comma-separated
// (LOCKSCOPE_STUCK_AFTER alike). The globs are matched against class names
// by the state, in the grammar of --class and --watch; the first entry
// matching a class sets its threshold.
type stuckAfter struct {
	def   time.Duration
	rules []state.StuckRule
	set   bool // given in the source being parsed (environment, then command line)
}

// StuckAfter defines the --stuck-after flag with the default def and the
// default entries rules.
func (f *flagSet) StuckAfter(p *stuckAfter, name, env string, def time.Duration, rules []state.StuckRule, usage string) {
	*p = stuckAfter{def: def, rules: rules}
	f.fs.Var(p, name, usage)
	f.add(name, env, "[CLASS_GLOB=]duration")
}

func (s *stuckAfter) String() string {
	if s == nil {
		return ""
	}
	parts := []string{s.def.String()}
	for _, r := range s.rules {
		parts = append(parts, r.Pattern+"="+r.After.String())
	}
	return strings.Join(parts, ",")
}

// Set takes one or more comma-separated entries. The first explicit value
// of a source replaces the defaults' entries (not the default threshold, so
// --stuck-after 'edit:*=2h' keeps the command's default for the rest);
// later ones append, and a later plain duration replaces the default.
func (s *stuckAfter) Set(v string) error {
	if !s.set {
		s.rules, s.set = nil, true
	}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pattern, dur, ok := cut(part)
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		switch {
		case err != nil && ok:
			return fmt.Errorf("entry %q: want CLASS_GLOB=DURATION with a duration such as 30s, 5m or 2h", part)
		case err != nil:
			return fmt.Errorf("entry %q: want a duration such as 30s, 5m or 2h, or CLASS_GLOB=DURATION", part)
		case d <= 0:
			return fmt.Errorf("entry %q: the duration must be positive", part)
		case ok && pattern == "":
			return fmt.Errorf("entry %q: the class glob is empty", part)
		case !ok:
			s.def = d
		default:
			s.rules = append(s.rules, state.StuckRule{Pattern: pattern, After: d})
		}
	}
	return nil
}

// cut splits a CLASS_GLOB=DURATION entry at its last "=": a duration has
// none, a glob may.
func cut(entry string) (pattern, dur string, ok bool) {
	i := strings.LastIndex(entry, "=")
	if i < 0 {
		return "", entry, false
	}
	return strings.TrimSpace(entry[:i]), entry[i+1:], true
}

// resetSource lets the command line replace the environment's entries
// instead of extending them.
func (s *stuckAfter) resetSource() { s.set = false }
