// Package state is the collector's aggregation state: everything the
// collector knows about the locks, kept in memory and fed from outside.
//
// An Aggregator applies lock events (Apply, or Replay after a restart with
// BeginReplay and EndReplay) and keyspace expirations (KeyExpired), and on
// each Tick decides expiries and finds stuck holds and deadlocks. It keeps:
//
//   - lock classes (classes.go): user rules, then the default derivation;
//   - the tracked keys in a sharded table of slabs (state.go), each with a
//     ring of its recent events (state_ring.go) and its distributions and
//     series (state_series.go);
//   - the hot keys of the last windows (hotkeys.go);
//   - the live waiters and the wait-for graph (waiters.go);
//   - the holds' expiries (state_expiry.go) and the holders a checkpoint
//     keeps (Holders, replay.go).
//
// It answers the queries the dashboard and the operator command line read
// (Overview, Locks, Lock, Blocking, ...: aggregator_query.go, with their
// result types in query.go) and the figures the Prometheus export mirrors
// (ClassGauges, DeadlockCycles, HotTop). It counts through Metrics, an
// interface it declares (counting.go) and collector/promexport implements,
// resolved once per class so that applying an event costs no label lookup.
//
// The package does no I/O: it imports neither go-redis nor client_golang,
// time comes from Config.Now, and its tests need no Redis. The Redis side
// (stream consumer, replay at start, checkpoint, keyspace watcher) is
// package collector.
package state
