package state

import (
	"fmt"
	"slices"
	"sync"
)

// A collector of --partitions N runs one follower per partition stream into
// one state. Each reports its own ingest health and its group's lag and
// pending entries; the state keeps them per partition, so that no follower's
// report overwrites another's (the last to report won, and the lag alert
// read one partition at a time): Health is nil only while every partition
// reads, and the exported lag and pending are the sums over the
// partitions. At most event.MaxPartitions (1 024) entries.
type partitions struct {
	mu    sync.Mutex
	parts map[int]*partitionState
}

type partitionState struct {
	health       error
	lag, pending int64
}

func (p *partitions) get(i int) *partitionState {
	if p.parts == nil {
		p.parts = make(map[int]*partitionState)
	}
	s := p.parts[i]
	if s == nil {
		s = &partitionState{}
		p.parts[i] = s
	}
	return s
}

// SetHealth records the ingest state of a collector of one stream
// (partition 0): see SetPartitionHealth.
func (a *Aggregator) SetHealth(err error) { a.SetPartitionHealth(0, err) }

// SetPartitionHealth records the ingest state of partition i's follower:
// nil while its consumer group reads.
func (a *Aggregator) SetPartitionHealth(i int, err error) {
	a.parts.mu.Lock()
	a.parts.get(i).health = err
	a.parts.mu.Unlock()
}

// Health reports the ingest state: nil while every partition's consumer
// group reads, else the first failing partition's error (named by its
// number when there are several).
func (a *Aggregator) Health() error {
	a.parts.mu.Lock()
	defer a.parts.mu.Unlock()
	ids := make([]int, 0, len(a.parts.parts))
	for i := range a.parts.parts {
		ids = append(ids, i)
	}
	slices.Sort(ids)
	for _, i := range ids {
		if err := a.parts.parts[i].health; err != nil {
			if len(ids) > 1 {
				return fmt.Errorf("partition %d: %w", i, err)
			}
			return err
		}
	}
	return nil
}

// SetStreamStats records the consumer group's lag and pending entries of
// a collector of one stream (partition 0): see SetPartitionStreamStats.
func (a *Aggregator) SetStreamStats(lag, pending int64) { a.SetPartitionStreamStats(0, lag, pending) }

// SetPartitionStreamStats records partition i's consumer group lag
// (entries not yet delivered) and pending entries (delivered, not
// acknowledged); the exported figures are the sums over the partitions.
func (a *Aggregator) SetPartitionStreamStats(i int, lag, pending int64) {
	a.parts.mu.Lock()
	s := a.parts.get(i)
	s.lag, s.pending = lag, pending
	var sumLag, sumPending int64
	for _, s := range a.parts.parts {
		sumLag += s.lag
		sumPending += s.pending
	}
	a.tot.Lag.Set(float64(sumLag)) // under the lock: a sum never overwrites a newer one
	a.tot.Pending.Set(float64(sumPending))
	a.parts.mu.Unlock()
}
