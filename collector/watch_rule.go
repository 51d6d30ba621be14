package collector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockscope/lockscope/event/class"
)

// Watch rules. A watched key is a lock when its value has the shape of a
// known library's lock: a redis-py, node-redlock, redsync or redislock
// token (lock.ForeignKind), with or without a TTL (a lock without one never
// expires: it is shown with a warning). Under a pattern of wildcards only
// ("*", "?*"), which matches the sessions, API keys and cache entries too,
// only a shape that says which library wrote it counts: redis-py's uuid1
// (its version, variant and a timestamp of these years); node-redlock's
// 32 hex digits and redsync's and redislock's base64 of 16 bytes are what
// any random token looks like, and are locks only under a pattern that
// names its keys ("lock:*"). Any other value is a plain value (a session,
// a counter, a cache entry), not a lock, unless the pattern says what else
// its keys' locks hold, as "PATTERN=KIND":
//
//	ttl        any string value with a TTL too (SETNX key 1 + EXPIRE, a host name)
//	any        any string value, with or without a TTL
//	semaphore  no lock: an integer counter is a Redisson semaphore (RSemaphore,
//	           RPermitExpirableSemaphore), shown by the dashboard live from
//	           Redis (SemaphoreMatcher); the watcher takes none of its keys
//	           for a lock, whatever they hold
const (
	watchTTL       = "ttl"
	watchAny       = "any"
	watchSemaphore = "semaphore"
)

// watchRule is one parsed Watch entry.
type watchRule struct {
	pattern string
	kind    string // "", watchTTL or watchAny
	named   bool   // the pattern has literal text: it names a family of keys (see above)
}

// selfNamed are the lock.ForeignKind shapes that tell their library under
// any pattern.
var selfNamed = map[string]bool{"redis-py": true}

// namesKeys reports whether a Redis glob pattern has literal text, outside
// its wildcards and [classes].
func namesKeys(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '*', '?':
		case '\\':
			return i+1 < len(pattern)
		case '[':
			for i++; i < len(pattern) && pattern[i] != ']'; i++ {
				if pattern[i] == '\\' {
					i++
				}
			}
		default:
			return true
		}
	}
	return false
}

// ParseWatch splits a Watch entry "PATTERN[=KIND]" into its Redis glob
// pattern and kind ("" when none is given). A '=' inside the pattern stays
// part of it when what follows is no word ("lock:a=*"), or escaped
// ("lock:a\=b", which Redis globs read as "lock:a=b").
func ParseWatch(s string) (pattern, kind string, err error) {
	i := strings.LastIndexByte(s, '=')
	if i < 0 || i > 0 && s[i-1] == '\\' {
		return s, "", nil
	}
	k := s[i+1:]
	switch {
	case k == watchTTL || k == watchAny || k == watchSemaphore:
		if i == 0 {
			return "", "", fmt.Errorf("watch rule %q has no pattern before =%s", s, k)
		}
		return s[:i], k, nil
	case k == "" || isWord(k):
		return "", "", fmt.Errorf("watch rule %q: unknown kind %q after '=' (known: %s for any value with a TTL, %s for any value, %s for Redisson semaphores; none: known libraries' tokens only). A pattern with a '=' of its own writes it \\=", s, k, watchTTL, watchAny, watchSemaphore)
	}
	return s, "", nil
}

func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// watchRules parses Options.Watch, deduplicated by pattern (the first one
// of a pattern wins); noTTL gives the rules without a kind watchAny.
// Entries that do not parse (New has no error to return: the command line
// checks them first) are taken as patterns whole.
func watchRules(entries []string, noTTL bool) []watchRule {
	var out []watchRule
	seen := make(map[string]bool)
	for _, s := range entries {
		p, k, err := ParseWatch(s)
		if err != nil {
			p, k = s, ""
		}
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		if k == "" && noTTL {
			k = watchAny
		}
		out = append(out, watchRule{pattern: p, kind: k, named: namesKeys(p)})
	}
	return out
}

// SemaphoreMatcher reports, for the Watch entries, whether a key is a
// Redisson semaphore's: the first entry whose pattern matches it (as the
// watcher picks one) has the kind watchSemaphore. nil when no entry has.
func SemaphoreMatcher(entries []string) func(key string) bool {
	rules := watchRules(entries, false)
	if !slices.ContainsFunc(rules, func(r watchRule) bool { return r.kind == watchSemaphore }) {
		return nil
	}
	return func(key string) bool {
		for _, r := range rules {
			if class.Match(r.pattern, key) {
				return r.kind == watchSemaphore
			}
		}
		return false
	}
}
