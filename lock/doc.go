// Package lock is a Redis distributed lock whose every lifecycle step can be
// recorded as an event (see Recorder and Emitter) for lockscope's collector
// and dashboard.
//
// A lock is one Redis string key. Its value (see Value) carries a secret
// random token, a public lease id, the fencing token, the acquisition time
// and the owner identity, written atomically with the lock, so who holds a
// lock is answerable from Redis alone (Inspect). An obtain without fencing
// is one native "SET key value NX PX ttl" (its retries add GET, which
// returns who holds it: Redis 7.0+, older servers get the obtain script);
// when refused, a first attempt reads the holder atomically. Obtain with
// fencing, Refresh, Release, TTL and ForceRelease are each one Lua script,
// run with EVALSHA (falling back to EVAL when the server does not know the
// script yet); ownership is always checked inside the script, never with
// GET then EXPIRE.
//
// Any redis.UniversalClient works: single node, Sentinel (failover) or
// Cluster. Concurrent callers of one Client share round trips: a Client
// keeps a limited number of round trips in flight; a caller that finds one
// free sends its command directly, and callers that find them all taken
// queue and go out together as one pipeline, so 64 goroutines cost a few
// round trips, not 64. The limit is measured, not set: each Client compares
// limits on its own calls' latency and keeps the faster, so a few callers on
// an idle machine each send on their own connection, while many callers, or
// a busy machine, share deep pipelines.
//
// # Deadlines
//
// Waits between attempts never run past the context's deadline, and a
// caller queued behind another's round trip leaves when its context ends (a
// lock its abandoned request still obtained is released in the background).
// A request already on the wire is bounded by the go-redis client: set
// ContextTimeoutEnabled in its options for the context to bound a hung (not
// down) server too; otherwise its ReadTimeout (default 3 s) does. Renewal
// does not depend on this: a lease whose renewal cannot complete before the
// lock's TTL runs out is lost at that moment, and its context cancelled.
// When Redis is down, how soon a call fails is the client's dial policy
// (go-redis: DialerRetries, default 5 attempts 100 ms apart).
//
// # Lifecycle
//
//	lease, err := client.Obtain(ctx, "invoice:17", 10*time.Second, &lock.ObtainOptions{
//		Retry: lock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond),
//	})
//	if errors.Is(err, lock.ErrNotObtained) {
//		// err is a *NotObtainedError naming the holder and its remaining TTL
//	}
//	defer lease.Release(ctx)
//
// Do(ctx, key, ttl, opt, fn) obtains, renews every ttl/3 while fn runs,
// passes fn the lease's context (cancelled the moment the lock is known lost;
// FromContext returns the lease, for its fence) and releases afterwards.
//
// # Lease headroom
//
// A renewal that lands with little of the TTL left is the warning sign of a
// lease about to lapse under a holder that is still working (GC pauses, CPU
// starvation, a slow Redis). Every renewal measures what was left
// (Lease.Headroom, the renewed event's headroom), and ObtainOptions.AtRisk
// warns the caller while there is still time: when less than AtRiskBelow of
// the TTL is left and no renewal has landed.
//
//	err := client.Do(ctx, key, 30*time.Second, &lock.ObtainOptions{
//		AtRisk: func(l *lock.Lease, left time.Duration) {
//			log.Printf("lock %s: %v left and no renewal yet: finishing up", l.Key(), left)
//		},
//	}, work)
//
// # Fencing
//
// A lock alone cannot protect a resource against a holder that paused (GC,
// swap, a stopped VM) past its TTL: by the time it writes, another owner may
// hold the lock. With ObtainOptions.Fencing each obtain returns a fencing
// token (Lease.Fence) that is strictly larger than every token issued
// before for that key. The holder sends it with each write, and the resource
// remembers the largest token it has accepted and rejects smaller ones.
//
// The counter lives in its own key (FenceKey) in the lock key's cluster hash
// slot and never expires, so neither expiry of the lock nor a quiet week
// resets it. A fence is max(counter+1, Redis server time in microseconds):
// if the counter is lost anyway (a restart of a Redis that persists nothing,
// a failover to a replica that missed the last write), the next fence is
// still larger than every earlier one, as long as the server clock has not
// gone back by more than the outage lasted. Fences are therefore large
// numbers (about 1.7e15 today); they stay below 2^53, exact in JSON.
//
// FenceGuard is the resource's half: Set writes a Redis-held resource only
// with a fence at least the highest it accepted (one script), Updated
// reports the outcome of the SQL form
//
//	UPDATE orders SET total = $2, fence = $1 WHERE id = $3 AND fence <= $1
//
// and each refusal is recorded as a fence_rejected event, so that lockscope
// says of two holders at once whether fencing held.
//
// # Degraded mode
//
// With Options.Degraded, when Redis cannot be reached (connection refused,
// network error; not when it answers with an error) Obtain falls back to a
// process-local lock: mutual exclusion holds between goroutines of this
// process only. Other processes may take the same lock in Redis, or locally,
// at the same time. Use it only where a lost update or a double run is
// cheaper than stopping, and pair it with fencing at the resource. Degraded
// leases are marked in their events, in Lease.Degraded and in Inspect (which
// reports the local lock while Redis is unreachable); they stay process-local
// until released, and while one exists this process does not take the same
// key in Redis. Degraded fences come from the local clock on the same scale
// as Redis fences. Degraded mode is off by default.
//
// # Events
//
// With Options.Recorder set, the client records acquired (wait, attempts,
// ttl, fence), failed (reason timeout, canceled, error or held; holder),
// released (hold; reason not_owner if the key was no longer the lease's),
// renewed (ttl; headroom, the TTL left when the renewal landed: see
// Lease.Headroom), renew_failed, lost (reason not_owner, max_hold or error) and
// forced events. Events carry the public lease id, never the token. With a
// nil Recorder no event is built.
//
// # Traces
//
// With Options.TraceContext set as well, events carry the trace and span
// id the hook reads from the caller's context, so a wait seen in lockscope
// leads to the trace that waited and a hold to the trace that held. The
// package knows nothing of OpenTelemetry: extra/lockotel supplies the hook (and
// spans for waits and holds). An obtain's events carry its context's ids;
// a hold's events (renewed, released, lost) carry the ids of the context it
// was obtained in, whichever context later calls get.
package lock
