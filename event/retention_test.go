package event

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestRetentionMinID: the MINID follows Redis's clock, not the IDs the
// stream gave: an ID 20 minutes ahead (and the entries Redis numbers after
// it) trims nothing recent; from RetentionAheadKeep entries after a future
// ID on, the MINID keeps the newest RetentionAheadKeep of them. Before
// Redis has told its time the local clock stands in; no age: no MINID.
func TestRetentionMinID(t *testing.T) {
	local := time.Now()
	redisNow := local.Add(-3 * time.Second) // Redis's clock runs 3 s behind this host's
	ms := func(t time.Time) string { return msID(t.UnixMilli()) }
	r := NewRetention(15 * time.Minute)
	if got, want := r.MinID(local), ms(local.Add(-15*time.Minute)); got != want {
		t.Errorf("MinID before TIME = %s, want %s (the local clock)", got, want)
	}
	SyncClock(func() (time.Time, error) { return redisNow, nil }, r)
	// The offset is measured around the call: allow its duration.
	got, _, _ := ParseID(r.MinID(local))
	if want := redisNow.Add(-15 * time.Minute).UnixMilli(); int64(got) < want-50 || int64(got) > want+50 {
		t.Errorf("MinID = %d, want about %d (Redis's clock − 15m)", got, want)
	}
	future := redisNow.Add(20 * time.Minute).UnixMilli()
	r.Written(msID(future) + "-0")
	r.Written(msID(future) + "-7")
	if got, _, _ := ParseID(r.MinID(local)); int64(got) > redisNow.UnixMilli() {
		t.Errorf("MinID after an ID 20m ahead = %d, want Redis's clock − 15m, not the ID's", got)
	}
	r.Written("9999999999999-99999")
	if got, seq, _ := ParseID(r.MinID(local)); got == 9999999999999 || int64(got) > redisNow.UnixMilli() {
		t.Errorf("MinID with 99 999 entries after 9999999999999-0 = %d-%d, want still by age", got, seq)
	}
	r.Written("9999999999999-250000")
	if got, want := r.MinID(local), "9999999999999-150000"; got != want {
		t.Errorf("MinID with 250 000 entries after 9999999999999-0 = %s, want %s (the newest %d kept)", got, want, RetentionAheadKeep)
	}
	if got := NewRetention(0).MinID(local); got != "" {
		t.Errorf("MinID without an age = %q, want none", got)
	}
	var nilRule *Retention
	nilRule.Written("1-1")
	if got := nilRule.MinID(local); got != "" {
		t.Errorf("nil MinID = %q, want none", got)
	}
}

// TestSyncClock: Redis is asked once per RetentionClockEvery for every rule
// given; a refused TIME leaves the local clock and is not retried at once.
func TestSyncClock(t *testing.T) {
	a, b := NewRetention(time.Hour), NewRetention(time.Hour)
	calls := 0
	redisNow := time.Now().Add(time.Hour)
	ask := func() (time.Time, error) { calls++; return redisNow, nil }
	SyncClock(ask, a, b)
	SyncClock(ask, a, b)
	if calls != 1 {
		t.Errorf("TIME asked %d times within a minute, want 1", calls)
	}
	for _, r := range []*Retention{a, b} {
		if got, _, _ := ParseID(r.MinID(time.Now())); int64(got) < time.Now().UnixMilli()-1000 {
			t.Errorf("MinID = %d, want about now (Redis's clock, an hour ahead, − 1h)", got)
		}
	}
	c := NewRetention(time.Hour)
	refused := 0
	SyncClock(func() (time.Time, error) { refused++; return time.Time{}, errors.New("NOPERM") }, c)
	SyncClock(func() (time.Time, error) { refused++; return time.Time{}, errors.New("NOPERM") }, c)
	if got, want := c.MinID(time.Now()), msID(time.Now().Add(-time.Hour).UnixMilli()); refused != 1 || got > want {
		t.Errorf("after a refused TIME: %d calls, MinID %s; want 1 and the local clock's %s", refused, got, want)
	}
}

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		id      string
		ms, seq uint64
		ok      bool
	}{
		{"1700000000000-0", 1700000000000, 0, true},
		{"5-17", 5, 17, true},
		{"9999999999999-18446744073709551615", 9999999999999, 18446744073709551615, true},
		{"42", 42, 0, true},
		{"", 0, 0, false},
		{"x-1", 0, 0, false},
		{"-3-1", 0, 0, false},
		{"3-x", 0, 0, false},
	} {
		ms, seq, ok := ParseID(c.id)
		if ms != c.ms || seq != c.seq || ok != c.ok {
			t.Errorf("ParseID(%q) = %d, %d, %v; want %d, %d, %v", c.id, ms, seq, ok, c.ms, c.seq, c.ok)
		}
	}
}

func msID(n int64) string { return strconv.FormatInt(n, 10) }
