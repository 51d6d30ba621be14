// Package state is the collector's aggregation state: everything the
// collector knows about the locks, kept in memory and fed from outside.
//
// An Aggregator (aggregator.go) applies lock events (Apply, apply.go; Replay
// after a restart, between BeginReplay and EndReplay, replay.go) and
// keyspace expirations (KeyExpired), and on each Tick (tick.go) decides
// expiries and finds stuck holds and deadlocks. Whatever the events carry,
// what it keeps is bounded: their strings are cut where they enter
// (limits.go), and each part below has its bound. It keeps:
//
//   - lock classes: user rules (Redis globs), then the default derivation
//     (classes.go, class_state.go);
//   - the tracked keys in a sharded table of slabs (keys.go, warm.go), each
//     with a ring of its recent events (ring.go) and its distributions and
//     series (series.go);
//   - each key's holds through their lifecycle (holds.go): superseded and
//     late holds, expiry (expiry.go), passive releases awaiting a forced
//     release (parking.go), the recent expirations and forced releases
//     (history.go);
//   - the hot keys of the last windows (hotkeys.go);
//   - the live waiters and the wait-for graph (waiters.go; LiveWaiters
//     applies the same rule to events read from the stream).
//
// It answers the queries the dashboard and the operator command line read
// (Overview, Locks, Lock, Blocking, ...: query.go, with their result types
// in results.go), the holders a checkpoint keeps (Holders, replay.go) and
// the figures the Prometheus export mirrors (ClassGauges, DeadlockCycles,
// HotTop). It counts through Metrics, an interface it declares (counting.go)
// and collector/promexport implements, resolved once per class so that
// applying an event costs no label lookup.
//
// The package does no I/O: it imports neither go-redis nor client_golang,
// time comes from Config.Now, and its tests need no Redis. The Redis side
// (stream consumer, replay at start, checkpoint, keyspace watcher) is
// package collector.
package state
