package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// unreachable reports whether err means Redis could not be reached (as
// opposed to Redis answering with an error, or the caller's context ending).
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// localLocks is the degraded-mode fallback: locks held in this process only,
// with the same TTL semantics as Redis.
type localLocks struct {
	mu      sync.Mutex
	m       map[string]*localEntry
	sweepAt int // sweep expired entries when the map grows past this
}

type localEntry struct {
	v       Value
	expires time.Time
}

func newLocalLocks() *localLocks { return &localLocks{m: make(map[string]*localEntry), sweepAt: 64} }

// obtain takes key for v unless a live entry holds it; then it returns that
// holder.
func (l *localLocks) obtain(key string, v Value, ttl time.Duration) *Holder {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok && now.Before(e.expires) {
		return e.holder(key, now)
	}
	if len(l.m) >= l.sweepAt {
		// Entries that expired without a Release would otherwise pile up.
		for k, e := range l.m {
			if !now.Before(e.expires) {
				delete(l.m, k)
			}
		}
		l.sweepAt = max(64, 2*len(l.m))
	}
	l.m[key] = &localEntry{v: v, expires: now.Add(ttl)}
	return nil
}

func (l *localLocks) refresh(key, token string, ttl time.Duration) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[key]
	if !ok || e.v.Token != token || !now.Before(e.expires) {
		return false
	}
	e.expires = now.Add(ttl)
	return true
}

func (l *localLocks) pttl(key, token string) time.Duration {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[key]
	if !ok || e.v.Token != token || !now.Before(e.expires) {
		return -1
	}
	return e.expires.Sub(now)
}

func (l *localLocks) release(key, token string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[key]
	if !ok || e.v.Token != token {
		return false
	}
	delete(l.m, key)
	return now.Before(e.expires)
}

// holder returns the live local holder of key, or nil (always nil when
// degraded mode is off).
func (l *localLocks) holder(key string) *Holder {
	if l == nil {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok && now.Before(e.expires) {
		return e.holder(key, now)
	}
	return nil
}

func (e *localEntry) holder(key string, now time.Time) *Holder {
	s := e.v.String()
	return &Holder{Key: key, Owner: e.v.Owner, Lease: e.v.Lease, Fence: e.v.Fence,
		TTL: e.expires.Sub(now), Since: e.v.Since, Fingerprint: Fingerprint(s), Degraded: true}
}
