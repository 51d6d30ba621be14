package state

import (
	"errors"
	"strings"
	"testing"
)

// TestPartitionsReportEachTheirOwn: with two partitions' followers in one
// state, one partition's report never overwrites the other's: Health stays
// failing while partition 1 fails, whatever partition 0 reports, and names
// it; lag and pending are the sums over the partitions, whichever reported
// last (before, the last to report won: 0 pending after partition 1's 5).
// One stream (partition 0 alone) reports as before.
func TestPartitionsReportEachTheirOwn(t *testing.T) {
	a := New(Config{Metrics: newTally()})
	tl := tallyOf(a)
	get := func(name string) float64 { tl.mu.Lock(); defer tl.mu.Unlock(); return tl.vals[series(name, "")] }

	a.SetPartitionHealth(0, nil)
	if err := a.Health(); err != nil {
		t.Fatalf("Health with partition 0 reading = %v, want nil", err)
	}
	a.SetPartitionHealth(1, errors.New("WRONGTYPE"))
	a.SetPartitionHealth(0, nil)
	if err := a.Health(); err == nil || !strings.Contains(err.Error(), "partition 1: WRONGTYPE") {
		t.Errorf("Health with partition 1 failing, partition 0 reporting after it = %v, want partition 1's error", err)
	}
	a.SetPartitionHealth(1, nil)
	if err := a.Health(); err != nil {
		t.Errorf("Health once both read = %v, want nil", err)
	}

	a.SetPartitionStreamStats(1, 40, 5)
	a.SetPartitionStreamStats(0, 2, 0)
	if lag, pending := get("lag"), get("pending"); lag != 42 || pending != 5 {
		t.Errorf("lag, pending = %v, %v after partition 1's 40, 5 and partition 0's 2, 0; want the sums 42, 5", lag, pending)
	}
	a.SetPartitionStreamStats(1, 0, 0)
	if lag, pending := get("lag"), get("pending"); lag != 2 || pending != 0 {
		t.Errorf("lag, pending = %v, %v once partition 1 caught up; want 2, 0", lag, pending)
	}

	one := New(Config{Metrics: newTally()})
	one.SetStreamStats(7, 3)
	one.SetHealth(errors.New("redis: connection refused"))
	if err := one.Health(); err == nil || err.Error() != "redis: connection refused" {
		t.Errorf("one stream's Health = %v, want its error as it is", err)
	}
	if v := tallyOf(one).vals[series("lag", "")]; v != 7 {
		t.Errorf("one stream's lag = %v, want 7", v)
	}
}
