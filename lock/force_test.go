package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestForceRelease(t *testing.T) {
	c, rdb, rec, p := newClient(t, "holder")
	ctx := context.Background()

	t.Run("matching fingerprint deletes", func(t *testing.T) {
		key := p + "a"
		l := mustObtain(t, c, key, 10*time.Second, &ObtainOptions{Fencing: true})
		seen, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops@example", "stuck job")
		if err != nil {
			t.Fatalf("ForceRelease = %v, want nil", err)
		}
		if h.Lease != l.ID() || h.Owner != "holder" || h.Fence != l.Fence() {
			t.Errorf("released holder = %+v, want lease %s of holder", h, l.ID())
		}
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("key exists after ForceRelease")
		}
		f := rec.Of(event.Forced)
		if len(f) != 1 || f[0].Owner != "holder" || f[0].By != "ops@example" || f[0].Reason != "stuck job" ||
			f[0].Lease != l.ID() || f[0].Key != key || f[0].Fence != l.Fence() || f[0].Hold <= 0 {
			t.Errorf("forced events = %+v, want one naming holder, operator, reason, lease, hold", f)
		}
	})

	t.Run("stale fingerprint touches nothing", func(t *testing.T) {
		key := p + "b"
		first := mustObtain(t, c, key, 10*time.Second, nil)
		seen, _ := c.Inspect(ctx, key)
		first.Release(ctx)
		second := mustObtain(t, New(rdb, &Options{Owner: "newcomer"}), key, 10*time.Second, nil)
		v0, pttl0 := keyState(t, rdb, key)
		n := len(rec.Of(event.Forced))

		h, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", "stale view")
		if !errors.Is(err, ErrOwnerChanged) {
			t.Fatalf("ForceRelease(stale) = %v, want ErrOwnerChanged", err)
		}
		if h == nil || h.Owner != "newcomer" || h.Lease != second.ID() {
			t.Errorf("holder = %+v, want the current holder newcomer", h)
		}
		v1, pttl1 := keyState(t, rdb, key)
		if v1 != v0 || pttl1 > pttl0 || pttl1 <= 0 {
			t.Errorf("key after stale ForceRelease = %q (PTTL %v), want unchanged %q (PTTL <= %v)", v1, pttl1, v0, pttl0)
		}
		if len(rec.Of(event.Forced)) != n {
			t.Errorf("a refused ForceRelease recorded a forced event")
		}
	})

	t.Run("missing key", func(t *testing.T) {
		if _, err := c.ForceRelease(ctx, p+"none", Fingerprint("x"), "ops", ""); !errors.Is(err, ErrNotHeld) {
			t.Errorf("ForceRelease(missing) = %v, want ErrNotHeld", err)
		}
		if _, err := c.Inspect(ctx, p+"none"); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Inspect(missing) = %v, want ErrNotHeld", err)
		}
	})

	t.Run("foreign value", func(t *testing.T) {
		key := p + "redsync"
		const tok = "abc123token-7f3e9d2c"
		rdb.Set(ctx, key, tok, 5*time.Second)
		h, err := c.Inspect(ctx, key)
		if err != nil || !h.Foreign || h.Owner != "foreign "+Fingerprint(tok)[:8] || h.Value != tok || h.Since != (time.Time{}) {
			t.Fatalf("Inspect(foreign) = %+v, %v, want Foreign named by its fingerprint, the raw value apart", h, err)
		}
		// Not a known library's random token: the expiry tells holder from successor.
		if !h.Ambiguous || h.Fingerprint != Fingerprint(tok)+"@"+strconv.FormatInt(h.ExpireAt, 10) {
			t.Fatalf("Inspect(foreign) = %+v, want ambiguous, its fingerprint with the expiry", h)
		}
		if _, err := c.ForceRelease(ctx, key, h.Fingerprint, "ops", "other library"); err != nil {
			t.Errorf("ForceRelease(foreign) = %v", err)
		}
	})

	t.Run("renewing holder sees it within one interval", func(t *testing.T) {
		key := p + "c"
		// Long enough that the lease's own clock never ends it first: the
		// lost event's reason (not_owner, not error) says the next renewal
		// found the key gone.
		const ttl = 3 * time.Second
		l := mustObtain(t, c, key, ttl, &ObtainOptions{AutoRenew: true})
		seen, _ := c.Inspect(ctx, key)
		if _, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", "test"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if !waitClosed(l.Context().Done(), 30*time.Second) {
			t.Fatalf("lease context not cancelled 30s after the forced release, want at the next renewal (every %v)", ttl/3)
		}
		t.Logf("lease saw the forced release after %v (renewal interval %v)", time.Since(start).Round(time.Millisecond), ttl/3)
		if !errors.Is(l.Err(), ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", l.Err())
		}
		var lost []event.Event
		for _, e := range rec.Of(event.Lost) {
			if e.Lease == l.ID() {
				lost = append(lost, e)
			}
		}
		if len(lost) != 1 || lost[0].Reason != event.ReasonNotOwner {
			t.Errorf("lost events = %+v, want one with reason not_owner: the renewal saw the release", lost)
		}
	})
}

// A foreign lock whose value is a constant (SETNX "1" style) cannot be told
// from its successor by value. With a TTL the key's absolute expiry tells
// them apart: a release quoting what the operator saw never removes a newer
// holder that wrote the same value. Without one, the release is refused
// unless the operator accepts the risk ("@any").
func TestForceReleaseOfConstantValues(t *testing.T) {
	c, rdb, _, p := newClient(t, "holder")
	ctx := context.Background()

	t.Run("successor with the same value and a TTL is not released", func(t *testing.T) {
		key := p + "cron"
		rdb.SetNX(ctx, key, "1", 10*time.Second)
		seen, err := c.Inspect(ctx, key)
		if err != nil || !seen.Ambiguous || !strings.HasPrefix(seen.Fingerprint, Fingerprint("1")+"@") {
			t.Fatalf("Inspect = %+v, %v; want ambiguous, fingerprint with the expiry", seen, err)
		}
		// The holder dies, its lock expires, a successor takes it with the
		// same value, and (a millisecond on at least) another expiry.
		successor(t, rdb, key, "1", seen.ExpireAt)
		h, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", "stale view")
		if !errors.Is(err, ErrOwnerChanged) || h == nil || h.Fingerprint == seen.Fingerprint {
			t.Errorf("ForceRelease(stale) = %+v, %v; want ErrOwnerChanged with the new holder", h, err)
		}
		if n, _ := rdb.Exists(ctx, key).Result(); n != 1 {
			t.Fatal("the successor's lock was removed")
		}
		// Quoting what is there now releases it.
		if _, err := c.ForceRelease(ctx, key, h.Fingerprint, "ops", "fresh view"); err != nil {
			t.Errorf("ForceRelease(fresh) = %v", err)
		}
		if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
			t.Error("the lock is still there")
		}
	})

	t.Run("a value naming a process is not told from the same process's next hold", func(t *testing.T) {
		// 30 bytes, 20 distinct: long and varied, and written alike by
		// every acquisition of the process it names.
		key := p + "worker"
		const v = "worker-7.prod.example.com:4242"
		rdb.SetNX(ctx, key, v, 10*time.Second)
		seen, err := c.Inspect(ctx, key)
		if err != nil || !seen.Ambiguous || seen.Fingerprint != Fingerprint(v)+"@"+strconv.FormatInt(seen.ExpireAt, 10) {
			t.Fatalf("Inspect = %+v, %v; want ambiguous, fingerprint with the expiry", seen, err)
		}
		// The holder releases; the same process takes the lock again.
		successor(t, rdb, key, v, seen.ExpireAt)
		h, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", "stale view")
		if !errors.Is(err, ErrOwnerChanged) || h == nil || h.Fingerprint == seen.Fingerprint {
			t.Errorf("ForceRelease(stale) = %+v, %v; want ErrOwnerChanged with the new holder", h, err)
		}
		if n, _ := rdb.Exists(ctx, key).Result(); n != 1 {
			t.Fatal("the successor's lock was removed by the fingerprint of its predecessor")
		}
		// Nor can its plain fingerprint release it.
		if _, err := c.ForceRelease(ctx, key, Fingerprint(v), "ops", ""); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("ForceRelease(sha1 only) = %v, want ErrAmbiguous", err)
		}
	})

	t.Run("plain fingerprint of a constant value is refused", func(t *testing.T) {
		key := p + "setnx"
		rdb.SetNX(ctx, key, "locked", 10*time.Second)
		if _, err := c.ForceRelease(ctx, key, Fingerprint("locked"), "ops", ""); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("ForceRelease(sha1 only) = %v, want ErrAmbiguous", err)
		}
		if n, _ := rdb.Exists(ctx, key).Result(); n != 1 {
			t.Fatal("released without telling holder from successor")
		}
	})

	t.Run("without expiry only an explicit @any releases", func(t *testing.T) {
		key := p + "forever"
		rdb.SetNX(ctx, key, "1", 0)
		seen, err := c.Inspect(ctx, key)
		if err != nil || !seen.Ambiguous || seen.Fingerprint != Fingerprint("1") || seen.ExpireAt != -1 {
			t.Fatalf("Inspect = %+v, %v; want ambiguous, plain fingerprint, no expiry", seen, err)
		}
		if _, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", ""); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("ForceRelease = %v, want ErrAmbiguous", err)
		}
		if _, err := c.ForceRelease(ctx, key, seen.Fingerprint+"@any", "ops", "accepted the risk"); err != nil {
			t.Errorf("ForceRelease(@any) = %v", err)
		}
		if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
			t.Error("the lock is still there")
		}
	})

	t.Run("a random token needs no expiry", func(t *testing.T) {
		key := p + "token"
		const tok = "5f0c6e1aa7e211ef9c2b0242ac120002"
		rdb.SetNX(ctx, key, tok, 10*time.Second)
		seen, err := c.Inspect(ctx, key)
		if err != nil || seen.Ambiguous || seen.Fingerprint != Fingerprint(tok) {
			t.Fatalf("Inspect = %+v, %v; want unambiguous, plain fingerprint", seen, err)
		}
		rdb.PExpire(ctx, key, 20*time.Second) // the holder renews: still the same holder
		if _, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", ""); err != nil {
			t.Errorf("ForceRelease after a renewal = %v", err)
		}
	})
}

// successor replaces key's value v by the same v with the same 10 s TTL,
// as a successor writes it, once the clock has moved far enough that its
// absolute expiry differs from expireAt (unix ms): what tells the two apart.
func successor(t *testing.T, rdb redis.UniversalClient, key, v string, expireAt int64) {
	t.Helper()
	ctx := context.Background()
	redistest.WaitFor(t, 10*time.Second, "a successor with another expiry", func() error {
		if err := rdb.Del(ctx, key).Err(); err != nil {
			return err
		}
		if err := rdb.SetNX(ctx, key, v, 10*time.Second).Err(); err != nil {
			return err
		}
		if at := rdb.PExpireTime(ctx, key).Val().Milliseconds(); at == expireAt {
			return fmt.Errorf("expiry %d, the predecessor's", at)
		}
		return nil
	})
}
