// Package redisson reads and releases the locks of Redisson (Java) and of
// its ports that keep the same layout in Redis (npm node-redisson).
//
// A Redisson lock (RLock) is a hash whose one field "<client id>:<thread>"
// counts how many times that thread holds it (reentrancy), with a TTL the
// holder's watchdog renews: HINCRBY key field 1 and PEXPIRE key 30000 to
// take it, PEXPIRE every 10 s to keep it, HINCRBY -1 and DEL to release it,
// then PUBLISH 0 on "redisson_lock__channel:{key}", where the callers that
// wait for it are subscribed. A fair lock (RFairLock) adds a queue of
// waiting threads, "redisson_lock_queue:{key}" (a list, in order), and their
// timeouts, "redisson_lock_timeout:{key}" (a sorted set, unix ms); its
// unlock wakes only the first waiter, on the channel followed by
// ":<its field>". A read-write lock (RReadWriteLock) keeps a "mode" field,
// "read" (one field per reading thread) or "write" (the writer's field ends
// in ":write"), and publishes on "redisson_rwlock:{key}". Java's client id
// is a UUID and its thread a number; node-redisson's thread is a UUID too.
//
// Parse tells such a hash from any other; AnyLockClient inspects and
// force-releases it as lock.Client does a string lock: only the holder the
// operator saw (the hash's content is its fingerprint), and with the message
// Redisson's own unlock publishes, so that queued Redisson callers wake up.
package redisson

import (
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/lockscope/lockscope/event/class"
)

// Lock is a Redisson lock's hash, parsed.
type Lock struct {
	Mode    string   // "" (RLock, RFairLock), "read" or "write"
	Holders []Holder // sorted by client id and thread
}

// Holder is one thread holding a Redisson lock.
type Holder struct {
	ClientID string // the Redisson client's UUID
	Thread   string // a thread id (Java) or UUID (node-redisson)
	Count    int64  // how many times the thread holds it (reentrancy)
	Write    bool   // a read-write lock's writer
}

// Parse reads a hash's fields as a Redisson lock. It reports false for any
// hash that is not one: a field that is not "<UUID>:<thread>" (or mode),
// a count that is not a positive integer, or no holder at all.
func Parse(fields map[string]string) (Lock, bool) {
	var l Lock
	for f, v := range fields {
		if f == "mode" {
			if v != "read" && v != "write" {
				return Lock{}, false
			}
			l.Mode = v
			continue
		}
		h, ok := parseField(f)
		if !ok {
			return Lock{}, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return Lock{}, false
		}
		h.Count = n
		l.Holders = append(l.Holders, h)
	}
	if len(l.Holders) == 0 {
		return Lock{}, false
	}
	slices.SortFunc(l.Holders, func(a, b Holder) int {
		return strings.Compare(a.ClientID+":"+a.Thread, b.ClientID+":"+b.Thread)
	})
	return l, true
}

// parseField reads "<UUID>:<thread>[:write]".
func parseField(f string) (Holder, bool) {
	var h Holder
	if rest, ok := strings.CutSuffix(f, ":write"); ok {
		f, h.Write = rest, true
	}
	id, thread, ok := strings.Cut(f, ":")
	if !ok || !class.IsUUID(id) || !(isDigits(thread) || class.IsUUID(thread)) {
		return Holder{}, false
	}
	h.ClientID, h.Thread = id, thread
	return h, true
}

func isDigits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Owner names the lock's holder without its full client id: "redisson"
// with the first 8 characters of the client id and the thread ("redisson
// 1b2c3d4e:57"; a UUID thread shortened alike), "(write)" after a
// read-write lock's writer. A read lock's holders share it, as "redisson
// readers": one hold, whichever readers come and go. The reentrancy count
// is not part of the name (one hold, one name, however often it is
// re-entered): Describe shows it.
func (l Lock) Owner() string {
	if l.Mode == "read" {
		return "redisson readers"
	}
	h := l.Holders[0]
	for _, x := range l.Holders {
		if x.Write || l.Mode != "write" {
			h = x
			break
		}
	}
	name := "redisson " + h.short()
	if h.Write {
		name += " (write)"
	}
	return name
}

func (h Holder) short() string {
	t := h.Thread
	if len(t) > 8 {
		t = t[:8]
	}
	return h.ClientID[:8] + ":" + t
}

// Kind names the lock's kind for the pages: "lock", "read lock", "write
// lock" (a fair lock is a lock with a queue: see Queue).
func (l Lock) Kind() string {
	switch l.Mode {
	case "read":
		return "read lock"
	case "write":
		return "write lock"
	}
	return "lock"
}

// Describe is what an operator reads of the lock: its kind and each
// holder's short id, thread and reentrancy count.
func (l Lock) Describe() string {
	var b strings.Builder
	b.WriteString("redisson " + l.Kind() + ":")
	for _, h := range l.Holders {
		b.WriteString(" " + h.short() + " ×" + strconv.FormatInt(h.Count, 10))
	}
	return b.String()
}

// Canonical is a hash's content in one string: its fields sorted, each
// followed by its value, every one ended by a newline. Its SHA-1 (see
// Fingerprint) is what a forced release compares, in Lua, with the hash as
// it is then.
func Canonical(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for f := range fields {
		keys = append(keys, f)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, f := range keys {
		b.WriteString(f)
		b.WriteByte('\n')
		b.WriteString(fields[f])
		b.WriteByte('\n')
	}
	return b.String()
}

// Fingerprint is the hex SHA-1 of the hash's Canonical content.
func Fingerprint(fields map[string]string) string {
	sum := sha1.Sum([]byte(Canonical(fields)))
	return hex.EncodeToString(sum[:])
}

// prefixName is Redisson's name of a lock's companion key or channel: the
// prefix, then the lock's name in a hash tag unless it has one (so that it
// lives in the lock's Redis Cluster slot).
func prefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// QueueKey is a fair lock's queue of waiting threads (a list).
func QueueKey(name string) string { return prefixName("redisson_lock_queue", name) }

// TimeoutKey is a fair lock's waiters' timeouts (a sorted set, unix ms).
func TimeoutKey(name string) string { return prefixName("redisson_lock_timeout", name) }

// Channel is where a lock's (and a fair lock's, followed by ":" and the
// waiter's field) waiters are woken.
func Channel(name string) string { return prefixName("redisson_lock__channel", name) }

// RWChannel is where a read-write lock's waiters are woken.
func RWChannel(name string) string { return prefixName("redisson_rwlock", name) }

// Unlock messages Redisson publishes (LockPubSub).
const (
	UnlockMessage     = "0"
	ReadUnlockMessage = "1"
)
