package event

import "strconv"

// Partitioned streams: events may be spread by lock key over n stream keys,
// so that a Redis Cluster spreads the writes (and the collector's reads)
// over its masters. Every event of one key goes to the same partition, so a
// key's events stay in order; events of different keys have no order across
// partitions, and none is needed (the collector's state is per key).
//
// Partition p of n is the stream "<base>:{<tag>}". The hash tag makes Redis
// Cluster place the key by <tag> alone; tags are chosen so that the n hash
// slots are spread evenly over the 16384 slots, so a cluster whose masters
// own equal slot ranges (what redis-cli --cluster create makes) puts
// consecutive partitions on different masters. A base that itself contains
// a hash tag ("{app}:events") puts every partition in one slot: don't.
//
// n <= 1 means one stream: the base key itself, as before partitioning.

// MaxPartitions bounds n: more partitions than Cluster masters buys nothing,
// and each costs a stream key and a read.
const MaxPartitions = 1024

// Streams returns the stream keys of n partitions of base ("" means
// DefaultStream), in partition order.
func Streams(base string, n int) []string {
	if base == "" {
		base = DefaultStream
	}
	if n <= 1 {
		return []string{base}
	}
	n = min(n, MaxPartitions)
	out := make([]string, n)
	for p := range out {
		out[p] = base + ":{" + partitionTag(p, n) + "}"
	}
	return out
}

// PartitionOf returns the partition (0 ≤ p < n) of the events of lock key
// key. It does not allocate.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	n = min(n, MaxPartitions)
	// FNV-1a, 32 bits: cheap, stable across processes and releases.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// partitionTag is the first tag "p<p>.<s>" (s = 0, 1, ...) whose hash slot
// lies in partition p's share [p·16384/n, (p+1)·16384/n) of the slots.
// A share holds at least 16 slots, so a tag is found within a few hundred
// tries on average.
func partitionTag(p, n int) string {
	lo, hi := p*slots/n, (p+1)*slots/n
	prefix := "p" + strconv.Itoa(p) + "."
	for s := 0; ; s++ {
		tag := prefix + strconv.Itoa(s)
		if sl := int(Slot(tag)); sl >= lo && sl < hi {
			return tag
		}
	}
}

const slots = 16384

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key, or
// of its hash tag (the part between the first "{" and the next "}" when
// that part is not empty), mod 16384.
func Slot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					return crc16(key) % slots
				}
			}
			break
		}
	}
	return crc16(key) % slots
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
