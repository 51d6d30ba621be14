// Package collector is the Redis side of collecting: it feeds the
// aggregation state (collector/state) from Redis.
//
// A Follower (follower.go) reads the event stream through a consumer group
// (ingest.go: read, decode, apply, acknowledge; ingest_stats.go: lag,
// pending entries and entries trimmed before they were read), rebuilds the
// picture of a restarted replica from the checkpoint and the stream
// (rebuild.go), keeps the checkpoint (checkpoint.go) and the replica's
// presence key (presence.go) fresh, and follows keyspace notifications:
// expirations (watch.go), and the passive watch of other libraries' locks,
// which the replica holding the watcher lease (watch_lease.go) follows
// (watch_passive.go) and writes to the stream (watch_write.go).
//
// Everything read is handed to a *state.Aggregator, which keeps the state,
// answers the queries and counts through its Metrics (the Prometheus export,
// collector/promexport). Redis errors never end Run: they are reported
// through the state's Health and retried with backoff.
//
// Data flows one way: collector → state ← promexport, and the dashboard
// reads the state; nothing in state imports go-redis or client_golang.
package collector
