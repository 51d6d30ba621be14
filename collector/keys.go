package collector

import "strings"

// The Redis keys lockscope keeps, in one place. The collector's own are
// built here, each from the name of the stream its replicas read (the first
// partition's, for those shared by every partition):
//
//	<stream>                      the event stream (event.DefaultStream,
//	                              "lockscope:events"; partitions:
//	                              event.Streams)
//	<stream>:checkpoint           CheckpointKey
//	<stream>:incidents            IncidentsKey
//	<stream>:lockorder            LockOrderKey
//	<stream>:replica:<replica>    PresenceKey
//	<stream>:watcher              watcherKey
//	<stream>:watcher:fence...     watcherFenceKey
//	lockscope:replica:<replica>   replicaGroupPrefix (a consumer group's
//	                              name, not a key)
//
// The library's keys live with the library, since the collector imports it
// and not the other way round: lock.FencePrefix (fence counters),
// lock.GuardPrefix (fence guards of a resource held in Redis) and
// event.RequestChannelPrefix (the Pub/Sub channel of release requests).
// The demo workload's account balances are its own
// (cmd/lockscope/internal/workload, balanceKey).

// replicaGroupPrefix starts the name of every replica's own consumer group.
const replicaGroupPrefix = "lockscope:replica:"

// PresenceKey is the key a live replica of stream keeps fresh.
func PresenceKey(stream, replica string) string { return stream + ":replica:" + replica }

// CheckpointKey is where replicas of stream keep their checkpoint.
func CheckpointKey(stream string) string { return stream + ":checkpoint" }

// IncidentsKey is where the replicas of stream keep the incident history:
// a hash of incident id to record.
func IncidentsKey(stream string) string { return stream + ":incidents" }

// LockOrderKey is where the replicas of stream keep the lock-order graph: a
// hash of edge id to record.
func LockOrderKey(stream string) string { return stream + ":lockorder" }

// watcherKey is the key of the watcher lease of the replicas reading stream
// (the first partition's stream): a lock of lockscope's own library held by
// the replica that follows the Watch patterns.
func watcherKey(stream string) string { return stream + ":watcher" }

// watcherFenceKey keeps the highest watcher fence that wrote to stream. It
// lives in the stream's Redis Cluster hash slot, since one script reads it
// and appends to the stream.
func watcherFenceKey(stream string) string {
	const suffix = ":watcher:fence"
	if strings.ContainsAny(stream, "{}") {
		// A partition stream's hash tag places both; any other stream with
		// braces is on its own in a Cluster (its writes are refused as
		// cross-slot, and logged).
		return stream + suffix
	}
	return stream + suffix + ":{" + stream + "}"
}
