package lock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
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
		f := rec.of(event.Forced)
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
		n := len(rec.of(event.Forced))

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
		if len(rec.of(event.Forced)) != n {
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
		const ttl = 600 * time.Millisecond
		l := mustObtain(t, c, key, ttl, &ObtainOptions{AutoRenew: true})
		seen, _ := c.Inspect(ctx, key)
		if _, err := c.ForceRelease(ctx, key, seen.Fingerprint, "ops", "test"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if !waitClosed(l.Context().Done(), ttl/3+200*time.Millisecond) {
			t.Fatalf("lease context not cancelled within one renewal interval (%v) of the forced release", ttl/3)
		}
		t.Logf("lease saw the forced release after %v", time.Since(start))
		if !errors.Is(l.Err(), ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", l.Err())
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
		// The holder dies, its lock expires, a successor takes it with the same value.
		time.Sleep(5 * time.Millisecond)
		rdb.Del(ctx, key)
		rdb.SetNX(ctx, key, "1", 10*time.Second)
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
		time.Sleep(5 * time.Millisecond)
		rdb.Del(ctx, key)
		rdb.SetNX(ctx, key, v, 10*time.Second)
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
