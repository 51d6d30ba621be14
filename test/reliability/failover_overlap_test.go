package reliability

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// overlapJSON is an overlap as /api/v1/incidents gives it.
type overlapJSON struct {
	incidentJSON
	Cause         string   `json:"cause"`
	Leases        []string `json:"leases"`
	WritesRefused int      `json:"writes_refused"`
	Fencing       string   `json:"fencing"`
}

// TestFailoverThatLostTheLockIsAVanishedOverlap: a real primary, replica
// and Sentinels on loopback. The replica is kept from receiving the lock's
// write (SIGSTOPped, its link dropped), the first holder takes the lock on
// the primary through Sentinel, the primary is killed and Sentinel promotes
// the replica, which never had the lock: the second holder acquires it at
// once on the new primary while the first renews on and finds it gone.
// lockscope, reading through Sentinel too, reports one overlap with cause
// vanished, from the second holder's acquisition to the first holder's
// lost, naming both; it follows the new primary without a false "events
// lost" warning and says plainly that the failover lost writes (the
// stream entry of the first acquisition, which it had read).
func TestFailoverThatLostTheLockIsAVanishedOverlap(t *testing.T) {
	bin := redistest.Lockscope(t)
	sn := redistest.StartSentinel(t)
	ctx := testCtx(t, 2*time.Minute)
	serve := startServe(t, bin, sn.URL(), nil)

	client := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: sn.Addrs()})
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder := func(owner string) (*lock.Client, *lock.Emitter) {
		rdb := client()
		em := lock.NewEmitter(rdb, nil)
		t.Cleanup(func() { em.Close(context.Background()) })
		return lock.New(rdb, &lock.Options{Owner: owner, Recorder: em}), em
	}
	first, firstEm := holder("billing/pod-1")
	second, secondEm := holder("billing/pod-2")
	const key = "fo:invoice:42"
	mc := client()

	// The replica has everything so far, then stops hearing from the
	// primary: the lock's write reaches the primary alone.
	if n, err := mc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %v, %v, want the replica in sync", n, err)
	}
	if err := sn.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			sn.Replica.Resume()
		}
	}()
	if err := mc.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	l1, err := first.Obtain(ctx, key, 30*time.Second, &lock.ObtainOptions{Fencing: true})
	if err != nil {
		t.Fatalf("Obtain(first holder) = %v", err)
	}
	if err := firstEm.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	lockURL := serve.url("/api/v1/locks/" + url.PathEscape(key))
	if !redistest.Poll(ctx, func() bool {
		var v struct {
			Held  bool   `json:"held"`
			Owner string `json:"owner"`
		}
		return getJSONCtx(ctx, lockURL, &v) == nil && v.Held && v.Owner == "billing/pod-1"
	}) {
		t.Fatalf("serve never showed the first holder of %s", key)
	}

	// The primary dies; the replica, which never had the lock, is promoted.
	oldPort := sn.Master.Port()
	sn.Master.Stop()
	if err := sn.Replica.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addrs()[0]})
	defer sc.Close()
	if !redistest.Poll(ctx, func() bool {
		m, err := sc.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
		return err == nil && m[1] != strconv.Itoa(oldPort)
	}) {
		t.Fatalf("Sentinel did not promote the replica")
	}

	// The second holder acquires at once on the new primary.
	var l2 *lock.Lease
	if !redistest.Poll(ctx, func() bool {
		l2, err = second.Obtain(ctx, key, 30*time.Second, &lock.ObtainOptions{Fencing: true})
		return err == nil
	}) {
		t.Fatalf("Obtain(second holder) on the new primary: %v", err)
	}
	acquired := l2.Since()
	// The first holder renews on: the lock is gone from under it.
	if err := l1.Refresh(ctx, 30*time.Second); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Refresh(first holder) after the failover = %v, want ErrLost", err)
	}
	noticed := time.Now()
	for _, em := range []*lock.Emitter{firstEm, secondEm} {
		if err := em.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var ov overlapJSON
	if !redistest.Poll(ctx, func() bool {
		var v struct {
			Incidents []overlapJSON `json:"incidents"`
		}
		if getJSONCtx(ctx, serve.url("/api/v1/incidents?limit=1000"), &v) != nil {
			return false
		}
		for _, in := range v.Incidents {
			if in.Kind == "overlap" && slices.Contains(in.Keys, key) {
				ov = in
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no overlap incident of %s:\n%s", key, tail(serve.out.String(), 3000))
	}
	t.Logf("overlap: %+v", ov)
	if ov.Cause != "vanished" || !slices.Equal(ov.Owners, []string{"billing/pod-1", "billing/pod-2"}) ||
		!slices.Equal(ov.Leases, []string{l1.ID(), l2.ID()}) || ov.EndedBy != "lost" || ov.End == nil {
		t.Errorf("overlap = %+v, want cause vanished, owners pod-1 then pod-2, leases %s %s, ended by lost", ov, l1.ID(), l2.ID())
	}
	// Its window: from the second acquisition (the lease's Since is taken
	// when the obtain returned, its event a moment before) to the first
	// holder's lost, noticed by the end of Refresh.
	if d := ov.Start.Sub(acquired); d > 0 || d < -time.Second {
		t.Errorf("overlap start %v, want the second acquisition, just before %v", ov.Start, acquired)
	}
	if ov.End != nil && (ov.End.Before(acquired) || ov.End.After(noticed.Add(time.Millisecond))) {
		t.Errorf("overlap end %v, want the first holder's lost, between %v and %v", ov.End, acquired, noticed)
	}
	if ov.Fencing != "no fencing seen: check what both holders wrote" {
		t.Errorf("overlap fencing = %q, want no fencing seen", ov.Fencing)
	}

	said := func() bool { return strings.Contains(serve.out.String(), "Redis lost writes (a failover") }
	if !redistest.Poll(ctx, said) {
		t.Errorf("serve did not say that the failover lost writes:\n%s", tail(serve.out.String(), 3000))
	}
	if out := serve.out.String(); strings.Contains(out, "events lost") {
		t.Errorf("serve warned of lost events after a failover whose lost entries it had read:\n%s", tail(out, 3000))
	}
}
