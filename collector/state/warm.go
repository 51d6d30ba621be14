package state

import (
	"github.com/lockscope/lockscope/event"
)

// Warming: loading what applying a chunk of events will read before it is
// applied, so that the cache misses of many keys overlap.

// warmLocked returns the hashes of the keys of evs, and loads what applying
// them will read from memory. Over many distinct keys (or keys arriving in
// a new order) each lookup misses the cache: an index of 200 000 keys spans
// megabytes. Made here for a whole chunk, one after the other without
// waiting for each, the misses overlap; made one per event by
// applyLocked, each costs a full trip to memory. The same goes for the keys
// a full shard will evict (see warmVictimsLocked).
func (a *Aggregator) warmLocked(evs []event.Event) []uint64 {
	hs := a.hashes[:0]
	var sum uint64
	var fresh [maxShards]uint16 // per shard: events whose key is not at its home slot
	var prev uint64
	for i := range evs {
		h := a.keys.hash(evs[i].Key)
		hs = append(hs, h)
		e := a.keys.shardOf(h).peek(h)
		sum += e
		if uint32(e>>32) != uint32(h>>32) && (h != prev || i == 0) {
			fresh[h&a.keys.mask]++
		}
		prev = h
	}
	a.hashes, a.warm = hs, sum+a.warmVictimsLocked(&fresh)
	return hs
}

// warmVictimsLocked loads the keys that full shards will evict for the new
// keys of a chunk: each shard's least recently active idle keys, as many as
// the chunk has events that may bring a new key there (fresh: events whose
// key is not at its home slot in the index, but for the second of adjacent
// events of one key, such as a short hold's acquisition and release; other
// events of a new key count again, and the extra victims loaded are the
// next chunk's). A stream of distinct keys (order ids) evicts one key per
// acquisition, and evicting reads a key that has been idle longest, so is
// cold: its state (four cache lines, all rewritten when its slot is freed
// for the new key), its index slot and its ring buffer, which the new key
// takes over. Read one after the other as keyLocked evicts, these were a
// third of applying such a stream. Here the shards' idle lists are walked
// side by side, a step each per round, so that the misses of different
// shards overlap. Runs under mu alone, like the index loads: every writer
// of the lists holds mu. Returns the sum of the loads.
func (a *Aggregator) warmVictimsLocked(fresh *[maxShards]uint16) uint64 {
	var at [maxShards]*keyState // per shard: the next victim to load, or nil
	var left [maxShards]int
	shards := a.keys.shards
	more := false
	for i := range shards {
		sh := &shards[i]
		if n := sh.count + int(fresh[i]) - sh.cap; n > 0 { // count <= cap: n > 0 needs fresh keys
			at[i], left[i], more = sh.idle.back(), min(n, int(fresh[i])), true
		}
	}
	var sum uint64
	for more {
		more = false
		for i := range shards {
			v := at[i]
			if v == nil || v == &shards[i].idle.root {
				continue
			}
			sum += uint64(len(v.key)) + uint64(v.hash) + uint64(v.expiresAt) + uint64(v.recN)
			sum += shards[i].peek(uint64(v.hash) << 32)
			if cap(v.recent) > 0 && cap(v.recent) <= reusedRingCap {
				sum += uint64(v.recent[:1][0])
			}
			if left[i]--; left[i] > 0 {
				at[i], more = v.prev, true
			}
		}
	}
	return sum
}
