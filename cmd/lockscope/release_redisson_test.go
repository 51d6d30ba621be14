package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestReleaseRedissonOnlyWhatWasSeen: three releases that must touch
// nothing, through the binary, and the healthy release beside each.
//
//   - A Redisson lock's fingerprint read before its thread released it and
//     took it again (the same content) no longer releases the new hold:
//     the hash's expiry is part of the fingerprint (before, it released
//     it). The fresh fingerprint does.
//   - An operator's request naming any hash by the sha1 of its content
//     (a session, no lock) deletes nothing and is answered 404 (before,
//     the script deleted it and then answered 404 "nothing released").
//   - `release --any-holder` of a Redisson semaphore's counter (Redis
//     shows its permits or its waiters) is refused and the counter stays
//     (before, it was deleted); a constant "1" lock without expiry is
//     still released by --any-holder.
func TestReleaseRedissonOnlyWhatWasSeen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}
	fingerprint := func(key string) string {
		t.Helper()
		out, errOut, code := lockscope(t, env, "", "inspect", key)
		for _, line := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(line, "fingerprint:"); ok {
				return strings.TrimSpace(rest)
			}
		}
		t.Fatalf("inspect %s = %d, no fingerprint:\n%s%s", key, code, out, errOut)
		return ""
	}
	const key, field = "rz:report", "6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f:42"
	rdb.HIncrBy(ctx, key, field, 1)
	rdb.PExpire(ctx, key, 5*time.Minute)
	stale := fingerprint(key)
	if !strings.Contains(stale, "@") {
		t.Fatalf("fingerprint of a Redisson lock = %q, want its expiry after @", stale)
	}
	// The thread releases and takes it again: the same content, a later expiry.
	rdb.Del(ctx, key)
	rdb.HIncrBy(ctx, key, field, 1)
	rdb.PExpire(ctx, key, 6*time.Minute)
	out, errOut, code := lockscope(t, env, "", "release", key, "--fingerprint", stale, "--reason", "hung", "--yes")
	if code != 3 || rdb.Exists(ctx, key).Val() != 1 {
		t.Errorf("release with the stale fingerprint = %d (key exists: %d)\n%s%s\nwant 3 (owner changed) and the new hold untouched", code, rdb.Exists(ctx, key).Val(), out, errOut)
	}
	if out, errOut, code := lockscope(t, env, "", "release", key, "--fingerprint", fingerprint(key), "--reason", "hung", "--yes"); code != 0 || rdb.Exists(ctx, key).Val() != 0 {
		t.Errorf("release with the fresh fingerprint = %d\n%s%s\nwant the lock released", code, out, errOut)
	}

	// A session hash named by the sha1 of its content, through the API.
	token := "tok-0123456789abcdef-release"
	base, _ := serveReady(t, append(env, "LOCKSCOPE_OPERATOR_TOKEN="+token))
	rdb.HSet(ctx, "rz:session", "user", "42")
	sum := sha1.Sum([]byte("user\n42\n"))
	if code, body := apiRelease(t, base, "rz:session", hex.EncodeToString(sum[:])+"@any", "test", token); code != 404 || rdb.HGet(ctx, "rz:session", "user").Val() != "42" {
		t.Errorf("release of a session hash by its content's sha1 = %d %s, session %v; want 404 and the hash untouched", code, body, rdb.HGetAll(ctx, "rz:session").Val())
	}

	// Semaphores: an expirable one (its permits' set) and a plain one with
	// a caller waiting on its channel.
	rdb.Set(ctx, "sem:exp", "2", 0)
	rdb.ZAdd(ctx, "{sem:exp}:timeout", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "permit-1"})
	rdb.Set(ctx, "sem:plain", "3", 0)
	sub := rdb.Subscribe(ctx, "redisson_sc:{sem:plain}")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"sem:exp": "2", "sem:plain": "3"} {
		out, errOut, code := lockscope(t, env, "", "release", key, "--any-holder", "--reason", "cleanup", "--yes")
		if code == 0 || rdb.Get(ctx, key).Val() != want || !strings.Contains(errOut, "semaphore") {
			t.Errorf("release --any-holder %s = %d, counter %q\n%s%s\nwant refused (a semaphore) and the counter %s", key, code, rdb.Get(ctx, key).Val(), out, errOut, want)
		}
	}
	rdb.Set(ctx, "rz:flag", "1", 0)
	if out, errOut, code := lockscope(t, env, "", "release", "rz:flag", "--any-holder", "--reason", "cleanup", "--yes"); code != 0 || rdb.Exists(ctx, "rz:flag").Val() != 0 {
		t.Errorf("release --any-holder of a constant lock = %d\n%s%s\nwant it released", code, out, errOut)
	}
}
