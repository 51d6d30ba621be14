package redisson_test

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/internal/testkit/redissontest"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Redisson's semaphores as Java Redisson's own scripts leave them, read
// back: an RSemaphore's permits available (those in use not known: Redis
// keeps no total), and the clients waiting on its channel; an expirable
// semaphore's permits in use, each by its id (hex, as Redisson names it)
// and expiry (none for a permit without a lease), one past its expiry
// counted as available as Redisson counts it; a release gives the permit
// back. A key holding no counter is no semaphore.
func TestReadSemaphoreOfJavaRedisson(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	eval := func(script string, keys []string, args ...any) any {
		t.Helper()
		v, err := rdb.Eval(ctx, script, keys, args...).Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatalf("eval: %v", err)
		}
		return v
	}
	read := func(name string) redisson.Semaphore {
		t.Helper()
		s, err := redisson.ReadSemaphore(ctx, rdb, name, time.Now())
		if err != nil {
			t.Fatalf("ReadSemaphore(%s): %v", name, err)
		}
		return s
	}

	const sem = "sem:exports"
	semKeys := []string{sem, redisson.SemaphoreChannel(sem)}
	if v := eval(redissontest.SemaphoreTrySetPermits, semKeys, 5, "publish"); v != int64(1) {
		t.Fatalf("trySetPermits = %v, want 1", v)
	}
	if v := eval(redissontest.SemaphoreTryAcquire, []string{sem}, 2); v != int64(1) {
		t.Fatalf("tryAcquire(2) = %v, want 1", v)
	}
	if v := eval(redissontest.SemaphoreTryAcquire, []string{sem}, 4); v != int64(0) {
		t.Fatalf("tryAcquire(4) with 3 left = %v, want 0", v)
	}
	// A caller waiting for a permit subscribes to the channel.
	sub := rdb.Subscribe(ctx, redisson.SemaphoreChannel(sem))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	s := read(sem)
	if s.Expirable || s.Available != 3 || s.UsedKnown || s.Waiters != 1 || s.TTL != 0 || s.Kind() != "semaphore" {
		t.Errorf("RSemaphore after 2 of 5 taken = %+v; want 3 available, in use not known, 1 waiter, no TTL", s)
	}
	eval(redissontest.SemaphoreRelease, semKeys, 1, "publish")
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "4" {
		t.Errorf("release published %v, %v; want the count, 4", m, err)
	}
	if s := read(sem); s.Available != 4 {
		t.Errorf("after a release: %d available, want 4", s.Available)
	}

	const exp = "sem:uploads"
	expKeys := []string{exp, redisson.SemaphoreTimeoutKey(exp), redisson.SemaphoreChannel(exp)}
	if v := eval(redissontest.SemaphoreTrySetPermits, []string{exp, redisson.SemaphoreChannel(exp)}, 4, "publish"); v != int64(1) {
		t.Fatalf("trySetPermits = %v, want 1", v)
	}
	id := func(b byte) string {
		return hex.EncodeToString([]byte{b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, b})
	}
	raw := func(h string) string { b, _ := hex.DecodeString(h); return string(b) }
	now := time.Now().UnixMilli()
	leased := now + 60_000
	acquire := func(expires int64, ids ...string) {
		t.Helper()
		args := []any{len(ids), expires, time.Now().UnixMilli(), redissontest.ExpirableNoLease, "publish"}
		for _, x := range ids {
			args = append(args, raw(x))
		}
		if v := eval(redissontest.ExpirableTryAcquire, expKeys, args...); v != "OK" {
			t.Fatalf("tryAcquire(%v) = %v, want OK", ids, v)
		}
	}
	acquire(leased, id(0xa1))
	acquire(redissontest.ExpirableNoLease, id(0xb2))
	acquire(now-1000, id(0xc3)) // its lease already over: the next call that touches the semaphore reclaims it
	s = read(exp)
	if !s.Expirable || !s.UsedKnown || s.Used != 2 || s.Available != 2 || s.Kind() != "permit-expirable semaphore" || len(s.Permits) != 2 {
		t.Fatalf("expirable semaphore = %+v; want 2 in use (one expired, counted available), 2 available", s)
	}
	if p := s.Permits[0]; p.ID != id(0xa1) || p.Expires.UnixMilli() != leased {
		t.Errorf("first permit = %+v, want %s expiring at %d", p, id(0xa1), leased)
	}
	if p := s.Permits[1]; p.ID != id(0xb2) || !p.Expires.IsZero() {
		t.Errorf("second permit = %+v, want %s without a lease", p, id(0xb2))
	}
	if v := eval(redissontest.ExpirableTryRelease, []string{exp, redisson.SemaphoreChannel(exp), redisson.SemaphoreTimeoutKey(exp)}, raw(id(0xa1)), 1, time.Now().UnixMilli(), "publish"); v != int64(1) {
		t.Fatalf("tryRelease = %v, want 1", v)
	}
	if s := read(exp); s.Used != 1 || s.Available != 3 || len(s.Permits) != 1 || s.Permits[0].ID != id(0xb2) {
		t.Errorf("after a release = %+v; want 1 in use (%s), 3 available", s, id(0xb2))
	}

	rdb.Set(ctx, "sem:note", "hello", 0)
	rdb.HSet(ctx, "sem:hash", "a", "1")
	for _, k := range []string{"sem:missing", "sem:note", "sem:hash"} {
		if _, err := redisson.ReadSemaphore(ctx, rdb, k, time.Now()); !errors.Is(err, redisson.ErrNotSemaphore) {
			t.Errorf("ReadSemaphore(%s) = %v, want ErrNotSemaphore", k, err)
		}
	}
}
